/**
 * Replays a recorded coding-agent trajectory (the step format of shared/trajectories: exec,
 * write_file and edit steps) through the API on an image built here, and compares every exit
 * code with the recording:
 *
 *   node dist/demo/replay.js TRAJECTORY.json CONTEXT_DIR [--root /testbed] [--policy default]
 *
 * CONTEXT_DIR is a build context (a Dockerfile and what it copies) that puts the repository at
 * `--root` (default: the trajectory's `environment.recordedRepoRoot`, else `/testbed`); it is
 * built with `POST /v1/images` (Image.build), leased with the root as a writable root of the
 * lease's own (`writableRoots`, seeded from the image), and each step runs in a fresh shell
 * with the trajectory's env and timeout, as the recording did. Prints one line per step and a
 * summary; exits 0 when every recorded exit code matched, 1 otherwise. Needs `SBX_URL` and
 * `SBX_API_KEY` (or the data dir's key file) like the CLI.
 */
import { readFile } from 'node:fs/promises';
import { posix } from 'node:path';
import { Image, Sandbox } from '../sdk/index.js';

interface Step {
  kind: 'exec' | 'write_file' | 'edit';
  cmd?: string;
  path?: string;
  content?: string;
  old?: string;
  new?: string;
  meta?: { returncode?: number | null };
}

interface Trajectory {
  repo: string;
  baseCommit: string;
  steps: Step[];
  environment?: { recordedRepoRoot?: string; repoRoot?: string; env?: Record<string, string>; timeoutSec?: number };
}

async function main(): Promise<void> {
  const [file, context, ...rest] = process.argv.slice(2);
  if (!file || !context) throw new Error('usage: replay.js TRAJECTORY.json CONTEXT_DIR [--root PATH] [--policy NAME]');
  const option = (name: string): string | undefined => {
    const at = rest.indexOf(name);
    return at >= 0 ? rest[at + 1] : undefined;
  };
  const trajectory = JSON.parse(await readFile(file, 'utf8')) as Trajectory;
  const root = option('--root') ?? trajectory.environment?.recordedRepoRoot ?? trajectory.environment?.repoRoot ?? '/testbed';
  const env = trajectory.environment?.env ?? {};
  const timeoutMs = (trajectory.environment?.timeoutSec ?? 60) * 1000;

  const t0 = Date.now();
  const image = await Image.build(context, { name: `replay-${posix.basename(file, '.json')}` });
  process.stdout.write(`image ${image.id} (${image.status}) built in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  const policy = option('--policy');
  await using sandbox = await Sandbox.create({ image: image.id, writableRoots: [{ path: root }], ...(policy ? { policy } : {}) });
  const manifest = sandbox.lease.manifest!;
  process.stdout.write(
    `sandbox ${sandbox.id}: ${manifest.os.name}, ${manifest.toolchain.python ?? 'no python'}, shell ${manifest.shell?.path ?? '?'}, ` +
      `user ${manifest.user.name} (${manifest.user.uid}), workdir ${manifest.workdir}\n`,
  );

  let compared = 0;
  let matched = 0;
  for (const [i, step] of trajectory.steps.entries()) {
    const recorded = step.meta?.returncode ?? null;
    let got: number | null;
    let what: string;
    if (step.kind === 'exec') {
      const result = await sandbox.call('exec', { cmd: step.cmd, cwd: root, env, timeoutMs });
      got = result.exitCode ?? null;
      what = step.cmd!.split('\n')[0]!.slice(0, 70);
    } else if (step.kind === 'write_file') {
      const result = await sandbox.call('write_file', { path: posix.join(root, step.path!), content: step.content });
      got = result.status === 'succeeded' ? 0 : 1;
      what = `write_file ${step.path}`;
    } else {
      const result = await sandbox.call('edit_file', { path: posix.join(root, step.path!), oldString: step.old, newString: step.new });
      got = result.status === 'succeeded' ? 0 : 1;
      what = `edit ${step.path}`;
    }
    const verdict = recorded === null ? 'not recorded' : got === recorded ? 'match' : 'MISMATCH';
    if (recorded !== null) {
      compared += 1;
      if (got === recorded) matched += 1;
    }
    process.stdout.write(
      `${String(i + 1).padStart(3)}  recorded ${String(recorded).padStart(4)}  got ${String(got).padStart(4)}  ${verdict.padEnd(12)} ${what}\n`,
    );
  }
  process.stdout.write(
    `${matched} of ${compared} recorded exit codes matched (${trajectory.steps.length} steps, ${trajectory.repo} @ ${trajectory.baseCommit})\n`,
  );
  process.exitCode = matched === compared ? 0 : 1;
}

main().catch((err: unknown) => {
  process.stderr.write(`replay: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 2;
});
