/**
 * A control plane as its own process (`node dist/control-plane/main.js`), for tests that crash
 * it (SIGKILL) or run it beside an in-process harness: its own port, and the owner label, Redis
 * prefix and API key the test gives it, so a harness started afterwards with the same owner and
 * prefix adopts what it leaves.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { join } from 'node:path';
import { SbxClient } from '../sdk/index.js';
import { REPO_ROOT } from './harness.js';

export interface ChildPlane {
  child: ChildProcess;
  client: SbxClient;
  /** Resolves with the exit code (null when killed by a signal). */
  exited: Promise<number | null>;
  /** What it wrote to stderr so far. */
  stderr(): string;
  /** SIGKILL, and waits until it is gone. */
  kill9(): Promise<void>;
}

/** Identity of one test's control planes: owner label, Redis prefix, API key, secrets key. */
export function planeIdentity(name: string): { owner: string; prefix: string; apiKey: string; secretsKey: string } {
  const tag = randomBytes(4).toString('hex');
  return {
    owner: `test-${name}-${tag}`,
    prefix: `sbxtest:${name}-${tag}:`,
    apiKey: `${name}-key-${randomBytes(16).toString('hex')}`,
    secretsKey: randomBytes(32).toString('base64'),
  };
}

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** Starts `main.js` with `identity` (and `env` on top) and waits until `/healthz` answers. */
export async function startChildPlane(identity: ReturnType<typeof planeIdentity>, env: Record<string, string> = {}): Promise<ChildPlane> {
  const port = await freePort();
  const child = spawn(process.execPath, [join(REPO_ROOT, 'dist/control-plane/main.js')], {
    env: {
      ...process.env,
      SBX_OWNER: identity.owner,
      SBX_REDIS_PREFIX: identity.prefix,
      SBX_API_KEY: identity.apiKey,
      SBX_SECRETS_KEY: identity.secretsKey,
      SBX_PORT: String(port),
      SBX_HOST: '127.0.0.1',
      SBX_LOG_LEVEL: 'warn',
      ...env,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  for (let i = 0; ; i++) {
    try {
      await fetch(`http://127.0.0.1:${port}/healthz`);
      break;
    } catch {
      if (i > 150 || child.exitCode !== null) throw new Error(`control plane did not start: ${stderr}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  return {
    child,
    client: new SbxClient(`http://127.0.0.1:${port}`, identity.apiKey),
    exited,
    stderr: () => stderr,
    async kill9() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}
