/**
 * End to end: a tool inside an `allowlist` sandbox, with nothing but what any sandboxed code has
 * (the agent's 127.0.0.1:3128 listener), opens CONNECTs and hangs up before the answer; the
 * control plane — every lease's API, every other lease's egress proxy — must not notice.
 *
 * The control plane runs as its own process here (`node dist/control-plane/main.js`, its own
 * owner label, Redis prefix and port) so that the crash is observable without taking vitest
 * down. Afterwards a harness with the same owner/prefix adopts and releases what is left.
 *
 * No packet leaves the machine: the CONNECT targets are refused (denied.test) or are this
 * machine's own loopback; the resolver is never asked about a name that has no rule.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { SbxClient } from '../sdk/index.js';
import type { ToolResult } from '../contract/objects.js';
import { REPO_ROOT, startHarness } from './harness.js';

const tag = randomBytes(4).toString('hex');
const owner = `test-crash-${tag}`;
const prefix = `sbxtest:crash-${tag}:`;
const apiKey = `crash-key-${randomBytes(16).toString('hex')}`;
let child: ChildProcess;
let stderr = '';
let client: SbxClient;
let exited: Promise<number | null>;

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

beforeAll(async () => {
  const port = await freePort();
  child = spawn(process.execPath, [join(REPO_ROOT, 'dist/control-plane/main.js')], {
    env: { ...process.env, SBX_OWNER: owner, SBX_REDIS_PREFIX: prefix, SBX_API_KEY: apiKey, SBX_PORT: String(port), SBX_HOST: '127.0.0.1', SBX_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  exited = new Promise((r) => child.once('exit', (code) => r(code)));
  client = new SbxClient(`http://127.0.0.1:${port}`, apiKey);
  for (let i = 0; ; i++) {
    try {
      await fetch(`http://127.0.0.1:${port}/healthz`);
      break;
    } catch {
      if (i > 100) throw new Error(`control plane did not start: ${stderr}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}, 60_000);

afterAll(async () => {
  if (child.exitCode === null) child.kill('SIGTERM');
  // Adopt and release whatever the crashed process left (same owner and prefix).
  const h = await startHarness({ SBX_OWNER: owner, SBX_REDIS_PREFIX: prefix });
  await h.close();
}, 60_000);

it('CONNECT + hang-up from inside an allowlist sandbox does not take the control plane down', { timeout: 120_000 }, async () => {
  const victim = await client.createSandbox({ policy: 'egress-allowlist' });
  const attacker = await client.createSandbox({ policy: 'egress-allowlist' });
  const script = [
    'import socket, time',
    'for i in range(20):',
    "    s = socket.create_connection(('127.0.0.1', 3128))",
    "    s.sendall(b'CONNECT denied.test:443 HTTP/1.1\\r\\nHost: denied.test:443\\r\\n\\r\\n')",
    '    s.close()',
    '    time.sleep(0.05)',
    "print('sent')",
  ].join('\n');
  const r = (await client.submitCall(attacker.id, 'exec', { cmd: `python3 -c "$S"`, env: { S: script }, timeoutMs: 20_000 }, { waitSeconds: 30 }).catch((e: unknown) => e)) as ToolResult | Error;
  // Give a crash time to happen.
  const code = await Promise.race([exited, new Promise<'alive'>((res) => setTimeout(() => res('alive'), 3000))]);
  expect(stderr).not.toMatch(/Unhandled 'error' event/);
  expect(code).toBe('alive');
  // The other tenant's lease is still served.
  expect((await client.getSandbox(victim.id)).status).toBe('ready');
  expect(r).not.toBeInstanceOf(Error);
});
