/**
 * `npm run demo`: the main job end to end on real input. Starts the control plane with its
 * embedded defaults, then runs, through the `sbx` CLI as a user would:
 *
 *   sbx run --upload <this repository> --upload <its node_modules> --download <test report>
 *       -- 'npm run typecheck && vitest run --project unit (junit report)'
 *
 * in a sandbox under the `default` policy (no network): the repository's source tree goes in
 * without node_modules, dist or .git; its dependencies go in as the host's installed
 * node_modules, uploaded like a CI job restores a dependency cache (the sandbox cannot reach a
 * registry). Output streams live, the receipt and manifest are printed, the JUnit report comes
 * back, the sandbox is released, the control plane stops. Exit status: the command's.
 *
 * Settings: `SBX_DEMO_REPO` (default: this repository), `SBX_DEMO_REPORT_DIR` (default a temp dir).
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const server = createServer();
    server.once('error', rej);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => res(port));
    });
  });
}

async function waitHealthy(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      if ((await fetch(`${url}/healthz`)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`control plane at ${url} not healthy after ${timeoutMs} ms`);
}

function run(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((res) => {
    const child = spawn(command, args, { stdio: 'inherit', env });
    child.on('exit', (code, signal) => res(code ?? (signal ? 128 : 1)));
  });
}

async function main(): Promise<number> {
  const repo = resolve(process.env.SBX_DEMO_REPO ?? repoRoot);
  const reportDir = process.env.SBX_DEMO_REPORT_DIR ?? (await mkdtemp(join(tmpdir(), 'sbx-demo-')));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const env = { ...process.env, SBX_PORT: String(port), SBX_URL: url, SBX_LOG_LEVEL: process.env.SBX_LOG_LEVEL ?? 'warn' };

  process.stderr.write(`demo: starting the control plane on ${url}\n`);
  const plane = spawn(process.execPath, [join(repoRoot, 'dist/control-plane/main.js')], { stdio: ['ignore', 'inherit', 'inherit'], env });
  const planeExited = new Promise<number>((res) => plane.once('exit', (code) => res(code ?? 1)));
  try {
    await Promise.race([
      waitHealthy(url, 30_000),
      planeExited.then((code) => {
        throw new Error(`the control plane exited (code ${code}) before it was healthy`);
      }),
    ]);
    const script = [
      'set -e',
      'echo "node $(node --version) in $(pwd) as $(id -un), network: $(ls /sys/class/net | tr "\\n" " ")"',
      'npm run typecheck',
      'npx vitest run --project unit --reporter=default --reporter=junit --outputFile.junit=report/junit.xml',
    ].join('\n');
    const started = Date.now();
    const status = await run(
      process.execPath,
      [
        join(repoRoot, 'dist/cli/sbx.js'),
        'run',
        '--upload',
        `${repo}:/workspace`,
        '--exclude',
        'node_modules',
        '--exclude',
        'dist',
        '--exclude',
        '.git',
        '--upload',
        `${join(repo, 'node_modules')}:/workspace/node_modules`,
        '--download',
        '/workspace/report/junit.xml',
        '--download-dir',
        reportDir,
        '--timeout-ms',
        '600000',
        '--',
        script,
      ],
      env,
    );
    const report = await readFile(join(reportDir, 'junit.xml'), 'utf8').catch(() => null);
    if (report) {
      const tests = /<testsuites[^>]*\btests="(\d+)"/.exec(report)?.[1];
      const failures = /<testsuites[^>]*\bfailures="(\d+)"/.exec(report)?.[1];
      process.stderr.write(`demo: test report ${join(reportDir, 'junit.xml')}: ${tests ?? '?'} tests, ${failures ?? '?'} failures\n`);
    } else {
      process.stderr.write('demo: no test report came back\n');
    }
    process.stderr.write(`demo: sbx run exited ${status} after ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
    return report ? status : status || 1;
  } finally {
    // A process that already exited emits no second 'exit': wait on the promise made at spawn,
    // or node would find nothing left to run and end this demo with status 0.
    plane.kill('SIGTERM');
    await planeExited;
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`demo: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
