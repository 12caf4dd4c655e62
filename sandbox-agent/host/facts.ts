/**
 * Measures what the sandbox is, from inside, for the EnvironmentManifest: OS release, arch,
 * kernel, toolchain versions (as each binary on the tools' PATH prints its own), and the tool user.
 */
import { execFile } from 'node:child_process';
import { constants } from 'node:fs';
import { access, readFile, realpath } from 'node:fs/promises';
import { machine, release } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import type { SandboxFacts } from '../../contract/objects.js';
import type { AgentConfig } from '../../contract/queue.js';
import { EXEC_ENV_DEFAULTS } from '../tools/exec.js';

const run = promisify(execFile);

/** Version of the agent; bumped when its behaviour on the wire changes. */
export const AGENT_VERSION = '0.1.0';

/**
 * The facts of this sandbox. Never rejects: what cannot be read is `null` (or `unknown`). Toolchain
 * versions are those of the binaries a tool finds on its PATH (not the agent's own
 * `process.version`: an image may put another node first), read at run time.
 */
export async function measureFacts(config: AgentConfig): Promise<SandboxFacts> {
  const [osRelease, node, npm, git, python, pip] = await Promise.all([
    readFile('/etc/os-release', 'utf8').catch(() => ''),
    versionOf('node', ['--version']),
    npmVersion(),
    versionOf('git', ['--version']),
    versionOf('python3', ['--version']),
    pipVersion(),
  ]);
  const fields = parseOsRelease(osRelease);
  return {
    os: { id: fields.ID ?? 'unknown', name: fields.PRETTY_NAME ?? fields.NAME ?? 'unknown', version: fields.VERSION_ID ?? null },
    arch: machine(),
    kernel: release(),
    toolchain: { node, npm, git, python, pip },
    user: config.toolUser,
    workdir: config.workdir,
    agentVersion: AGENT_VERSION,
  };
}

/** What `file args` prints (stdout, else stderr), trimmed; `null` when it is absent or fails. */
async function versionOf(file: string, args: string[]): Promise<string | null> {
  try {
    const { stdout, stderr } = await run(file, args, { timeout: 5000, env: { ...process.env, PATH: EXEC_ENV_DEFAULTS.PATH } });
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
async function npmVersion(): Promise<string | null> {
  const npm = await onPath('npm');
  if (npm === null) return null;
  try {
    const cli = await realpath(npm);
    const pkg = JSON.parse(await readFile(join(dirname(cli), '..', 'package.json'), 'utf8')) as { name?: unknown; version?: unknown };
    if (pkg.name === 'npm' && typeof pkg.version === 'string') return pkg.version;
  } catch {
    // Not an npm package layout (a wrapper script, say): ask the binary.
  }
  return versionOf(npm, ['--version']);
}

/**
 * What `pip3 --version` prints (`pip 23.0.1 from /usr/lib/python3/dist-packages/pip (python
 * 3.11)`), formatted as pip formats it from the pip module python3 imports, because starting pip
 * itself costs about half a second of CPU per lease; `pip3 --version` when python3 has no pip module.
 */
async function pipVersion(): Promise<string | null> {
  const line = await versionOf('python3', ['-c', PIP_VERSION_PY]);
  return line ?? versionOf('pip3', ['--version']);
}

const PIP_VERSION_PY =
  'import os, sys, pip; print("pip %s from %s (python %d.%d)" % (pip.__version__, os.path.dirname(pip.__file__), *sys.version_info[:2]))';

/** The first executable `name` in the tools' PATH, as a path; `null` when there is none. */
async function onPath(name: string): Promise<string | null> {
  for (const dir of (EXEC_ENV_DEFAULTS.PATH ?? '').split(':')) {
    const candidate = join(dir, name);
    if (
      await access(candidate, constants.X_OK).then(
        () => true,
        () => false,
      )
    )
      return candidate;
  }
  return null;
}

/** os-release(5): KEY=value lines, values optionally quoted. */
export function parseOsRelease(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = /^([A-Z0-9_]+)=(.*)$/.exec(line.trim());
    if (m) out[m[1]!] = m[2]!.replace(/^(["'])(.*)\1$/, '$2');
  }
  return out;
}
