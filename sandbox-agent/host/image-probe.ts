/**
 * What the image gives the tools, probed from inside the sandbox at agent start: the shell
 * `exec` runs `cmd` with, the C library, and programs beyond the toolchain. An image may lack
 * any of them (busybox-only, distroless, `FROM scratch`); what it lacks is recorded, and the
 * tools degrade explicitly (the runtime's sh, the built-in search walker, `tool.unavailable`).
 */
import { execFile } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { AGENT_RUNTIME_SHELL } from '../../contract/agent-runtime.js';
import type { SandboxFacts } from '../../contract/objects.js';

const run = promisify(execFile);

/** The shell exec uses: the image's `/bin/bash`, else its `/bin/sh`, else the runtime's busybox sh. */
export function detectShell(): NonNullable<SandboxFacts['shell']> {
  for (const path of ['/bin/bash', '/bin/sh']) {
    if (isExecutable(path)) return { path, source: 'image' };
  }
  return { path: AGENT_RUNTIME_SHELL, source: 'sbx-runtime' };
}

/** The first executable `name` on `path` (a PATH value), or null. */
export function findOnPath(name: string, path: string): string | null {
  for (const dir of path.split(':')) {
    if (dir === '') continue;
    const candidate = join(dir, name);
    if (isExecutable(candidate)) return candidate;
  }
  return null;
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * Who runs the image's programs that probes start: the tool user, never the agent's root. The
 * image is untrusted: a `git`, `python3` or loader of a hostile image run as root would read the
 * agent's credentials under /run/sbx.
 */
export interface ProbeUser {
  uid: number;
  gid: number;
}

/**
 * The image's C library, by its dynamic loader: musl's is `ld-musl-<arch>.so.1` in /lib (it
 * prints its version when run), glibc's `ld-linux*.so.2` (its `--version` says which). No
 * loader: `none` (static binaries only).
 */
export async function probeLibc(as: ProbeUser): Promise<NonNullable<SandboxFacts['libc']>> {
  const libDirs = ['/lib', '/lib64', '/lib/x86_64-linux-gnu', '/lib/aarch64-linux-gnu', '/usr/lib'];
  const names = (await Promise.all(libDirs.map(async (d) => (await readdir(d).catch(() => [])).map((n) => join(d, n))))).flat();
  const musl = names.find((n) => /\/ld-musl-[^/]+\.so\.1$/.test(n));
  if (musl) {
    // musl's loader run by itself prints its usage and `Version x.y.z` on stderr and exits 1.
    const out = await run(musl, [], { timeout: 5000, env: {}, uid: as.uid, gid: as.gid }).then(
      (r) => r.stderr,
      (err: { stderr?: string }) => err.stderr ?? '',
    );
    return { family: 'musl', version: /Version ([\d.]+)/.exec(out)?.[1] ?? null };
  }
  const glibc = names.find((n) => /\/ld-linux[^/]*\.so\.2$/.test(n));
  if (glibc) {
    const out = await run(glibc, ['--version'], { timeout: 5000, env: {}, uid: as.uid, gid: as.gid }).then(
      (r) => r.stdout,
      () => '',
    );
    return { family: 'glibc', version: /(?:release version|version) (\d+\.\d+)/i.exec(out)?.[1] ?? null };
  }
  return { family: 'none', version: null };
}

/** Programs recorded besides the toolchain, with the arguments that make each print its version. */
const PROGRAMS: ReadonlyArray<[name: string, args: string[]]> = [
  ['rg', ['--version']],
  ['bash', ['--version']],
  ['go', ['version']],
  ['java', ['-version']],
  ['rustc', ['--version']],
  ['gcc', ['--version']],
  ['make', ['--version']],
  ['conda', ['--version']],
];

/** Each of PROGRAMS found on `path`, with the first line it prints of its version (`null`: absent or failing). */
export async function probePrograms(path: string, as: ProbeUser): Promise<Record<string, string | null>> {
  const entries = await Promise.all(
    PROGRAMS.map(async ([name, args]): Promise<[string, string | null]> => {
      const file = findOnPath(name, path);
      if (file === null) return [name, null];
      try {
        const { stdout, stderr } = await run(file, args, { timeout: 5000, env: { PATH: path }, uid: as.uid, gid: as.gid });
        return [name, (stdout || stderr).trim().split('\n')[0] || null];
      } catch {
        return [name, null];
      }
    }),
  );
  return Object.fromEntries(entries);
}
