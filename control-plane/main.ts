/**
 * `npm start`: runs the control plane in the foreground. Reads `SBX_*` settings (README), makes
 * or reads the API key, reconciles with Docker, listens, and shuts down cleanly on SIGTERM/SIGINT.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { controlPlanePidfile, formatPidfile, processIdentity } from '../contract/data-dir.js';
import { loadConfig } from './config.js';
import { createControlPlane } from './control-plane.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The configured key, or the one in `<data dir>/api-key`, generated (and printed) the first time. */
function apiKeyFor(dataDir: string, configured: string | undefined): string {
  if (configured) return configured;
  const file = join(dataDir, 'api-key');
  if (existsSync(file)) {
    process.stderr.write(`sbx: using the API key in ${file}\n`);
    return readFileSync(file, 'utf8').trim();
  }
  const key = `sbx_dev_${randomBytes(24).toString('hex')}`;
  mkdirSync(dataDir, { recursive: true });
  writeFileSync(file, `${key}\n`, { mode: 0o600 });
  process.stderr.write(`sbx: generated a development API key in ${file}:\n  ${key}\n`);
  return key;
}

/**
 * The configured key, or the one in `<data dir>/<name>` (base64 of 32 bytes: `secrets-key`,
 * `preview-key`), generated with mode 0600 the first time. Throws Error when the file holds
 * anything else: what was sealed or signed under a key fails under another, so a bad file is
 * not replaced.
 */
function keyFileFor(dataDir: string, name: string, configured: Buffer | undefined): Buffer {
  if (configured) return configured;
  const file = join(dataDir, name);
  if (!existsSync(file)) {
    mkdirSync(dataDir, { recursive: true });
    // `wx`: of two first starts at once, one writes and the other reads what it wrote.
    try {
      writeFileSync(file, `${randomBytes(32).toString('base64')}\n`, { mode: 0o600, flag: 'wx' });
      process.stderr.write(
        `sbx: generated ${name} in ${file}; keep it with the data: what was sealed or signed under it is unreadable without it\n`,
      );
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
  const key = Buffer.from(readFileSync(file, 'utf8').trim(), 'base64');
  if (key.length !== 32) throw new Error(`${file} must hold base64 of exactly 32 bytes`);
  return key;
}

/**
 * `<data dir>/run/control-plane.<pid>.pid`, for `sbx down` (npm run stop) to find and stop this
 * process; removed when it exits. Several control planes may share a data dir, each with its own.
 */
function writePidfile(dataDir: string): void {
  const identity = processIdentity(process.pid);
  // Without /proc (not Linux) there is no start time to tell a reused pid apart: no pidfile.
  if (!identity) return;
  const file = controlPlanePidfile(dataDir, process.pid);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, formatPidfile(identity));
  process.once('exit', () => rmSync(file, { force: true }));
}

/** Longest a SIGTERM shutdown may take before the process exits anyway, ms (below `sbx down`'s wait). */
const SHUTDOWN_TIMEOUT_MS = 8000;

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig(process.env, repoRoot);
  } catch (err) {
    process.stderr.write(`sbx: invalid settings: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(2);
  }
  const log = pino({ level: config.logLevel });
  const apiKey = apiKeyFor(config.dataDir, config.apiKey);
  const plane = await createControlPlane(
    {
      ...config,
      secretsKey: keyFileFor(config.dataDir, 'secrets-key', config.secretsKey),
      previewKey: keyFileFor(config.dataDir, 'preview-key', config.previewKey),
    },
    apiKey,
    log,
  );
  log.info(plane.ownership, 'installation');
  const reconciled = await plane.startBackground();
  log.info(reconciled, 'reconciled sandboxes with the container runtime');
  await plane.app.listen({ port: config.port, host: config.host });
  writePidfile(config.dataDir);
  const stop = async (): Promise<void> => {
    log.info('shutting down: sandboxes keep running and are adopted by the next start');
    // What cannot finish in time (a client holding a stream open) must not keep the process, and
    // with it the pidfile `sbx down` waits on, alive: exit as after a crash, which the next start
    // recovers from like any other.
    setTimeout(() => {
      log.error({ timeoutMs: SHUTDOWN_TIMEOUT_MS }, 'shutdown did not finish in time; exiting');
      process.exit(1);
    }, SHUTDOWN_TIMEOUT_MS).unref();
    await plane.close();
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop());
  process.once('SIGINT', () => void stop());
}

main().catch((err: unknown) => {
  process.stderr.write(`sbx: failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
