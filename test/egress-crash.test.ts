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
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { SbxClient } from '../sdk/index.js';
import type { ToolResult } from '../contract/objects.js';
import { planeIdentity, startChildPlane, type ChildPlane, startHarness, eventually } from './fixtures/index.js';

const identity = planeIdentity('crash');
let plane: ChildPlane;
let client: SbxClient;

beforeAll(async () => {
  plane = await startChildPlane(identity);
  client = plane.client;
}, 60_000);

afterAll(async () => {
  if (plane.child.exitCode === null) plane.child.kill('SIGTERM');
  await plane.exited;
  // Adopt and release whatever the crashed process left (same owner and prefix).
  const h = await startHarness({ SBX_OWNER: identity.owner, SBX_REDIS_PREFIX: identity.prefix });
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
  const r = (await client
    .submitCall(attacker.id, 'exec', { cmd: `python3 -c "$S"`, env: { S: script }, timeoutMs: 20_000 }, { waitSeconds: 30 })
    .catch((e: unknown) => e)) as ToolResult | Error;
  // Every hang-up has been handled once the proxy has logged each CONNECT as denied; a crash in
  // handling one would have ended the process by then.
  await eventually(
    () => client.egress(attacker.id, { decision: 'denied' }).catch(() => []),
    (events) => events.length >= 20 || plane.child.exitCode !== null,
    20_000,
  );
  const code = plane.child.exitCode === null && plane.child.signalCode === null ? 'alive' : plane.child.exitCode;
  expect(plane.stderr()).not.toMatch(/Unhandled 'error' event/);
  expect(code).toBe('alive');
  // The other tenant's lease is still served.
  expect((await client.getSandbox(victim.id)).status).toBe('ready');
  expect(r).not.toBeInstanceOf(Error);
});
