/**
 * Measures what the sandbox is, from inside, for the EnvironmentManifest: OS release, arch,
 * kernel, toolchain versions (as each binary on the tools' PATH prints its own), and the tool user.
 */
import { execFile } from 'node:child_process';
import { readFile, realpath } from 'node:fs/promises';
import { machine, release } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import type { ImageFacts, SandboxFacts } from '../../contract/objects.js';
import type { AgentConfig } from '../../contract/queue.js';
import { toolsPath } from '../tools/exec.js';
import { detectShell, findOnPath, probeLibc, probePrograms, type ProbeUser } from './image-probe.js';

const run = promisify(execFile);

/** Version of the agent; bumped when its behaviour on the wire changes. */
export const AGENT_VERSION = '0.1.0';

/**
 * The facts of this sandbox. Never rejects: what cannot be read is `null` (or `unknown`). Toolchain
 * versions are those of the binaries a tool finds on its PATH (not the agent's own
 * `process.version`: an image may put another node first), read at run time — unless the config
 * brings `imageFacts`, what an earlier agent of the same image measured so (no probe runs then).
 */
export async function measureFacts(config: AgentConfig): Promise<SandboxFacts> {
  const image = config.imageFacts ?? (await measureImageFacts(config));
  return {
    ...image,
    arch: machine(),
    kernel: release(),
    user: config.toolUser,
    workdir: config.workdir,
    agentVersion: AGENT_VERSION,
    // Always looked at here (a few access(2) calls): exec runs the shell this finds.
    shell: detectShell(),
  };
}

/** The image's part of the facts (ImageFacts), by reading and running what the image holds. */
async function measureImageFacts(config: AgentConfig): Promise<ImageFacts> {
  const path = toolsPath(config);
  // The image's programs run as the tool user with nothing of the agent's env (see ProbeUser).
  const as: ProbeUser & { home: string } = config.toolUser;
  const [osRelease, node, npm, git, python, pip, libc, programs] = await Promise.all([
    // os-release(5): /etc/os-release, else /usr/lib/os-release.
    readFile('/etc/os-release', 'utf8').catch(() => readFile('/usr/lib/os-release', 'utf8').catch(() => '')),
    versionOf('node', ['--version'], path, as),
    npmVersion(path, as),
    versionOf('git', ['--version'], path, as),
    versionOf('python3', ['--version'], path, as).then((v) => v ?? versionOf('python', ['--version'], path, as)),
    pipVersion(path, as),
    probeLibc(as),
    probePrograms(path, as),
  ]);
  const fields = parseOsRelease(osRelease);
  return {
    os: { id: fields.ID ?? 'unknown', name: fields.PRETTY_NAME ?? fields.NAME ?? 'unknown', version: fields.VERSION_ID ?? null },
    toolchain: { node, npm, git, python, pip },
    libc,
    programs,
  };
}

/** What `file args` prints (stdout, else stderr), trimmed; `null` when it is absent or fails. */
async function versionOf(file: string, args: string[], path: string, as: ProbeUser & { home: string }): Promise<string | null> {
  try {
    const { stdout, stderr } = await run(file, args, { timeout: 5000, env: { PATH: path, HOME: as.home }, uid: as.uid, gid: as.gid });
    return (stdout || stderr).trim() || null;
  } catch {
    return null;
  }
}

/**
 * What `npm --version` prints, without starting npm (about half a second of CPU per lease): the
 * version in the package.json of the npm CLI that `npm` on the PATH links to; running it only
 * when that is not an npm package's CLI.
 */
async function npmVersion(path: string, as: ProbeUser & { home: string }): Promise<string | null> {
  const npm = findOnPath('npm', path);
  if (npm === null) return null;
  try {
    const cli = await realpath(npm);
    const pkg = JSON.parse(await readFile(join(dirname(cli), '..', 'package.json'), 'utf8')) as { name?: unknown; version?: unknown };
    if (pkg.name === 'npm' && typeof pkg.version === 'string') return pkg.version;
  } catch {
    // Not an npm package layout (a wrapper script, say): ask the binary.
  }
  return versionOf(npm, ['--version'], path, as);
}

/**
 * What `pip3 --version` prints (`pip 23.0.1 from /usr/lib/python3/dist-packages/pip (python
 * 3.11)`), formatted as pip formats it from the pip module python3 imports, because starting pip
 * itself costs about half a second of CPU per lease; `pip3 --version` when python3 has no pip module.
 */
async function pipVersion(path: string, as: ProbeUser & { home: string }): Promise<string | null> {
  const line = await versionOf('python3', ['-c', PIP_VERSION_PY], path, as);
  return line ?? versionOf('pip3', ['--version'], path, as);
}

const PIP_VERSION_PY =
  'import os, sys, pip; print("pip %s from %s (python %d.%d)" % (pip.__version__, os.path.dirname(pip.__file__), *sys.version_info[:2]))';

/** os-release(5): KEY=value lines, values optionally quoted. */
export function parseOsRelease(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = /^([A-Z0-9_]+)=(.*)$/.exec(line.trim());
    if (m) out[m[1]!] = m[2]!.replace(/^(["'])(.*)\1$/, '$2');
  }
  return out;
}
