/**
 * Leases against the real Docker engine and Redis: release, idempotent create, expiry,
 * reconcile after a restart or beside a second control-plane process, the default policy's
 * isolation.
 */
import { connect, createServer, type Server } from 'node:net';
import { describe, expect, it } from 'vitest';
import { BOOTSTRAP_PRINCIPAL } from '../control-plane/http/auth.js';
import { LeaseStore } from '../control-plane/leases/store.js';
import {
  containersOf,
  docker,
  eventually,
  reassemble,
  runtimeWithAgent,
  startHarness,
  useHarness,
  execIn,
  bridgeHostAddress,
  tarBytes,
  putPolicyVariant,
  apiAs,
} from './fixtures/index.js';

const h = useHarness();

const exec = execIn(() => h.client);

describe('lease lifecycle', () => {
  it('a new lease is ready under the default policy with a manifest whose digest is its content', async () => {
    const lease = await h.client.createSandbox({ env: { FOO: 'bar' }, labels: { team: 'infra' } });
    expect(lease.status).toBe('ready');
    expect(lease.policy.name).toBe('default');
    expect(lease.labels).toEqual({ team: 'infra' });
    const m = lease.manifest!;
    expect(m.policy).toEqual(lease.policy);
    expect(m.env.keys).toEqual(['FOO']);
    expect(JSON.stringify(m)).not.toContain('bar');
    expect(m.toolchain.node).toMatch(/^v20\./);
    expect(m.toolchain.git).toMatch(/git version/);
    expect(m.toolchain.python).toMatch(/Python 3/);
    expect(m.user).toMatchObject({ name: 'sandbox', uid: 1000 });
    const { manifestDigest } = await import('../control-plane/manifest/manifest.js');
    expect(manifestDigest(m)).toBe(m.digest);
    const r = await exec(lease.id, { argv: ['printenv', 'FOO'] });
    expect(r.stdout).toBe('bar\n');
  });

  it('the default policy: read-only root, writable /workspace and /tmp, no capabilities for tools, limits applied', async () => {
    const lease = await h.client.createSandbox();
    const r = await exec(lease.id, {
      cmd: 'touch /etc/x 2>&1; touch /workspace/ok && touch /tmp/ok && echo writable; grep CapEff /proc/self/status; cat /proc/self/status | grep NoNewPrivs',
    });
    expect(r.stdout).toContain('Read-only file system');
    expect(r.stdout).toContain('writable');
    expect(r.stdout).toMatch(/CapEff:\s+0000000000000000/);
    expect(r.stdout).toMatch(/NoNewPrivs:\s+1/);
    const inspect = JSON.parse(await docker('inspect', `sbx-${lease.id}`))[0];
    expect(inspect.HostConfig.ReadonlyRootfs).toBe(true);
    expect(inspect.HostConfig.NetworkMode).toBe('none');
    expect(inspect.HostConfig.CapDrop).toEqual(['ALL']);
    expect(inspect.HostConfig.Memory).toBe(2 * 1024 ** 3);
    expect(inspect.HostConfig.PidsLimit).toBe(512);
    expect(inspect.Config.Labels['sbx.owner']).toBe(h.config.owner);
  });

  it('the sandbox user cannot read the agent credentials nor reach Redis', async () => {
    const lease = await h.client.createSandbox();
    const r = await exec(lease.id, { cmd: 'ls /run/sbx/agent 2>&1; ls -la /run/sbx/redis 2>&1; echo PING > /dev/null' });
    expect(r.stdout).toContain('Permission denied');
    expect(r.stdout).not.toContain('agent.json');
  });

  it('network none: only loopback inside, and a server on the host bridge receives nothing', async () => {
    let connections = 0;
    const server: Server = createServer((socket) => {
      connections += 1;
      socket.destroy();
    });
    await new Promise<void>((resolve) => server.listen(0, '0.0.0.0', resolve));
    const port = (server.address() as { port: number }).port;
    const gateway = await bridgeHostAddress();
    try {
      const lease = await h.client.createSandbox();
      const r = await exec(lease.id, {
        cmd: `ip -o link show | awk -F': ' '{print $2}'; (exec 3<>/dev/tcp/${gateway}/${port}) 2>&1 && echo CONNECTED || echo BLOCKED`,
        timeoutMs: 10_000,
      });
      expect(r.stdout.split('\n')[0]).toBe('lo');
      expect(r.stdout).not.toMatch(/eth0/);
      expect(r.stdout).toContain('BLOCKED');
      expect(r.stdout).not.toContain('CONNECTED');
      expect(connections).toBe(0);
      // The server was reachable all along: the host itself can connect.
      await new Promise<void>((resolve, reject) => {
        const s = connect(port, gateway, () => (s.end(), resolve()));
        s.on('error', reject);
      });
      await expect.poll(() => connections, { timeout: 5_000 }).toBe(1);
    } finally {
      server.close();
    }
  });

  it('each record a transition wrote is read back by its writer as another process parses it from Redis, frozen', async () => {
    // The writer keeps what it wrote as parsed (redis/parsed-texts.ts): it must be what a parse of the text gives.
    const fresh = () => new LeaseStore(h.redis, h.config.redisPrefix);
    const writerView = (id: string) => h.plane.leases.visible(id, BOOTSTRAP_PRINCIPAL);
    const lease = await h.client.createSandbox({ env: { FOO: 'bar' }, labels: { team: 'infra' } });
    const steps: Array<[string, () => Promise<unknown>]> = [
      ['created', async () => undefined],
      ['paused', () => h.client.pauseSandbox(lease.id)],
      ['resumed', () => h.client.resumeSandbox(lease.id)],
      ['renewed', () => h.client.renewSandbox(lease.id, 600)],
      ['released', () => h.client.releaseSandbox(lease.id)],
    ];
    for (const [step, act] of steps) {
      await act();
      const written = await writerView(lease.id);
      expect(Object.isFrozen(written) && Object.isFrozen(written.policySnapshot), step).toBe(true);
      expect(written, step).toEqual(await fresh().getLease(lease.id));
    }
  });

  it('release removes the container and its volumes; the receipt stays readable; calls then get 410', async () => {
    const lease = await h.client.createSandbox();
    const r = await exec(lease.id, { argv: ['echo', 'kept'] });
    const released = await h.client.releaseSandbox(lease.id);
    expect(released.status).toBe('released');
    expect(await docker('ps', '-a', '--filter', `label=sbx.lease=${lease.id}`, '--format', '{{.Names}}')).toBe('');
    expect(await docker('volume', 'ls', '--filter', `label=sbx.lease=${lease.id}`, '--format', '{{.Name}}')).toBe('');
    const call = await h.client.getCall(lease.id, r.callId);
    expect(call.result?.stdout).toBe('kept\n');
    const receipt = await h.client.raw('GET', `/v1/receipts/${r.receipt!.receiptId}`);
    expect(receipt.status).toBe(200);
    await expect(exec(lease.id, { argv: ['true'] })).rejects.toMatchObject({ status: 410, code: 'lease.released' });
    // Releasing again is success, not an error.
    expect((await h.client.releaseSandbox(lease.id)).status).toBe('released');
    // The records are kept for the retention period, then expire.
    const ttl = await h.redis.ttl(`${h.config.redisPrefix}calls:${lease.id}:${r.callId}`);
    expect(ttl).toBeGreaterThan(h.config.ledgerRetentionSeconds - 60);
    expect(await h.redis.ttl(`${h.config.redisPrefix}receipts:${r.receipt!.receiptId}`)).toBeGreaterThan(0);
    // The agent's Redis user is gone with it.
    const users = (await h.redis.call('ACL', 'USERS')) as string[];
    expect(users.some((u) => u.includes(lease.id))).toBe(false);
  });

  it("releasing a sandbox with a running call cancels it through the agent: cancelled, with the agent's receipt", async () => {
    const lease = await h.client.createSandbox();
    const pending = await h.client.submitCall(lease.id, 'exec', { cmd: 'sleep 60' });
    for await (const e of h.client.events(lease.id, pending.callId)) if (e.type === 'call.started') break;
    await h.client.releaseSandbox(lease.id);
    const call = await h.client.getCall(lease.id, pending.callId);
    expect(call.status).toBe('finished');
    expect(call.result?.status).toBe('cancelled');
    expect(call.result?.error?.code).toBe('execution.cancelled');
    expect(call.result?.receipt?.commitState).toBe('unknown');
    expect(call.result?.receipt?.exit?.killedBy).toBe('cancel');
    expect(call.result?.receipt?.attemptId).toMatch(/^att_/);
  });

  it('the same Idempotency-Key twice (even at once) gives one sandbox; another body with it conflicts', async () => {
    const key = `idem-${Date.now()}`;
    const [a, b] = await Promise.all([h.client.createSandbox({ idempotencyKey: key }), h.client.createSandbox({ idempotencyKey: key })]);
    expect(a.id).toBe(b.id);
    const c = await h.client.createSandbox({ idempotencyKey: key });
    expect(c.id).toBe(a.id);
    const containers = await docker('ps', '-a', '--filter', `label=sbx.lease=${a.id}`, '--format', '{{.Names}}');
    expect(containers.trim().split('\n')).toHaveLength(1);
    await expect(h.client.createSandbox({ idempotencyKey: key, ttlSeconds: 60 })).rejects.toMatchObject({
      status: 409,
      code: 'lease.idempotency_conflict',
    });
  });

  it('an expired lease is released by its durable timer and answers 410 lease.expired', async () => {
    const lease = await h.client.createSandbox({ ttlSeconds: 1 });
    // Calls are refused from expiresAt on: wait for that instant (on the server's clock), not a fixed time.
    await expect
      .poll(
        () =>
          exec(lease.id, { argv: ['true'] }).then(
            (r) => r.status,
            (e: { status?: number; code?: string }) => `${e.status} ${e.code}`,
          ),
        { timeout: 10_000, interval: 200 },
      )
      .toBe('410 lease.expired');
    // Calls are refused from expiresAt on; the timer's release follows within moments.
    await eventually(
      () => h.client.getSandbox(lease.id),
      (l) => l.status === 'expired',
      10_000,
    );
    expect(await docker('ps', '-a', '--filter', `label=sbx.lease=${lease.id}`, '--format', '{{.Names}}')).toBe('');
  });

  it('a policy asking for node labels is refused as unenforceable on the one Docker engine, and leaves nothing', async () => {
    await putPolicyVariant(h, 'zoned', (p) => {
      p.runtime.nodeLabels = { 'topology.kubernetes.io/zone': 'b' };
    });
    const owned = async (): Promise<string> =>
      (await docker('ps', '-a', '-q', '--filter', `label=sbx.owner=${h.config.owner}`)) +
      (await docker('volume', 'ls', '-q', '--filter', `label=sbx.owner=${h.config.owner}`));
    try {
      const before = await owned();
      await expect(h.client.createSandbox({ policy: 'zoned' })).rejects.toMatchObject({
        status: 422,
        code: 'policy.unenforceable',
        details: { field: 'runtime.nodeLabels' },
      });
      expect(await owned()).toBe(before);
    } finally {
      await apiAs(() => h.url)(h.apiKey, 'DELETE', '/v1/policies/zoned');
    }
  });

  it('the hardened policy runs the sandbox under gVisor, or is refused as unenforceable where the engine lacks runsc', async () => {
    const runtimes = JSON.parse(await docker('info', '--format', '{{json .Runtimes}}')) as Record<string, unknown>;
    if (!('runsc' in runtimes)) {
      await expect(h.client.createSandbox({ policy: 'hardened' })).rejects.toMatchObject({ status: 422, code: 'policy.unenforceable' });
      return;
    }
    const lease = await h.client.createSandbox({ policy: 'hardened' });
    expect(lease.manifest?.runtime.ociRuntime).toBe('runsc');
    // Started from the spawn server there too: gVisor lets the agent reopen its pipes through /proc.
    const r = await exec(lease.id, { cmd: 'dmesg | head -1; id -u; tr "\\0" " " < /proc/$PPID/cmdline' });
    expect(r.stdout).toContain('gVisor');
    expect(r.stdout).toContain('1000');
    expect(r.stdout).toContain('sbx-exec --serve');
    expect(JSON.parse(await docker('inspect', '--format', '{{json .HostConfig.Runtime}}', `sbx-${lease.id}`))).toBe('runsc');
    // Files travel through the agent's tunnel, a host Unix socket gVisor must let it reach.
    await h.client.uploadTar(lease.id, '/workspace/under-gvisor', await tarBytes([{ name: 'f.txt', content: 'through the tunnel' }]));
    expect((await exec(lease.id, { cmd: 'cat /workspace/under-gvisor/f.txt' })).stdout).toBe('through the tunnel');
    const download = await h.client.raw('GET', `/v1/sandboxes/${lease.id}/files?path=/workspace/under-gvisor/f.txt`);
    expect(download.status).toBe(200);
    expect(Buffer.from(await download.arrayBuffer()).toString('latin1')).toContain('through the tunnel');
  });

  it('an agent that dies before it is ready fails the lease with its last words, also while a root is seeded from the image, and leaves nothing', async () => {
    // The agent comes from the runtime mount, not the image: a control plane whose runtime's
    // agent crashes at once.
    const runtime = await runtimeWithAgent("console.error('agent boom'); process.exit(3);\n");
    try {
      const crashing = await startHarness({ SBX_AGENT_RUNTIME: runtime.dir });
      try {
        const before = await containersOf(crashing.config.owner);
        const error = await crashing.client.createSandbox().catch((e: unknown) => e);
        expect(error).toMatchObject({ status: 503, code: 'lease.create_failed' });
        expect((error as Error).message).toContain('exited (code 3)');
        expect((error as Error).message).toContain('agent boom');
        expect(await containersOf(crashing.config.owner)).toEqual(before);
        // A writable root seeded from the image (18 MB of /usr/local/lib, copied in the sandbox after it
        // started): the agent dies during the copy, and the lease still fails with its last words,
        // not with the copy's failure.
        const seeding = await crashing.client
          .createSandbox({ writableRoots: [{ path: '/usr/local/lib', sizeBytes: 64 * 1024 * 1024 }] })
          .catch((e: unknown) => e);
        expect(seeding).toMatchObject({ status: 503, code: 'lease.create_failed' });
        expect((seeding as Error).message).toContain('exited (code 3)');
        expect((seeding as Error).message).toContain('agent boom');
        expect(await containersOf(crashing.config.owner)).toEqual(before);
      } finally {
        await crashing.close();
      }
    } finally {
      await runtime.remove();
    }
  });

  it('a ttl above the policy maximum is refused before anything is created', async () => {
    const before = await containersOf(h.config.owner);
    await expect(h.client.createSandbox({ ttlSeconds: 10 ** 7 })).rejects.toMatchObject({ status: 400, code: 'lease.ttl_exceeds_policy' });
    await expect(h.client.createSandbox({ policy: 'no-such-policy' })).rejects.toMatchObject({ status: 404, code: 'policy.not_found' });
    await expect(h.client.createSandbox({ image: 'no-such-image:never' })).rejects.toMatchObject({
      status: 404,
      code: 'image.not_found',
    });
    expect(await containersOf(h.config.owner)).toEqual(before);
  });
});

describe('reconcile', () => {
  it('a restarted control plane adopts running sandboxes, removes orphans, and marks leases whose container vanished lost', async () => {
    const adopted = await h.client.createSandbox();
    const orphan = await h.client.createSandbox();
    const vanished = await h.client.createSandbox();
    // The orphan's ledger record disappears (as if Redis lost it); the vanished one's container is removed behind sbx's back.
    await h.redis.del(`${h.config.redisPrefix}leases:${orphan.id}`);
    await docker('rm', '-f', `sbx-${vanished.id}`);
    const before = await exec(adopted.id, { argv: ['echo', 'before restart'] });
    // A restart: the harness points at the new process before anything below can fail.
    const peer = await h.restart();
    const names = await containersOf(h.config.owner);
    expect(names).toContain(`sbx-${adopted.id}`);
    expect(names).not.toContain(`sbx-${orphan.id}`);
    const r = await exec(adopted.id, { argv: ['echo', 'still here'] }, { client: peer.client });
    expect(r.stdout).toBe('still here\n');
    // What the first process ledgered is there for the second: calls by id, their events, receipts.
    const earlier = await peer.client.getCall(adopted.id, before.callId);
    expect(earlier.result?.stdout).toBe('before restart\n');
    expect(earlier.result?.receipt?.receiptId).toBe(before.receipt?.receiptId);
    const replay = [];
    for await (const e of peer.client.events(adopted.id, before.callId)) replay.push(e.type);
    expect(replay.at(-1)).toBe('call.finished');
    const lost = await peer.client.getSandbox(vanished.id);
    expect(lost.status).toBe('lost');
    // `docker rm -f` stops the container before it removes it: a reconcile (of either process)
    // that lists it in between sees it exited, one after sees it gone. Both are the contract's
    // reasons for a lost lease (README, Lease lifecycle); which one depends on that race.
    expect(['container_missing', 'container_exited']).toContain(lost.endReason);
  });

  it('a sandbox whose container dies is lost (container_exited) and its running call ends effect_unknown', async () => {
    const lease = await h.client.createSandbox();
    const pending = await h.client.submitCall(lease.id, 'exec', { cmd: 'sleep 60' });
    for await (const e of h.client.events(lease.id, pending.callId)) if (e.type === 'call.started') break;
    await docker('kill', `sbx-${lease.id}`);
    const after = await eventually(
      () => h.client.getSandbox(lease.id),
      (l) => l.status !== 'ready' && l.status !== 'releasing',
      10_000,
      200,
    );
    expect(after.status).toBe('lost');
    expect(after.endReason).toBe('container_exited');
    const running = await h.client.getCall(lease.id, pending.callId);
    expect(running.result?.status).toBe('effect_unknown');
    expect(running.result?.error?.code).toBe('execution.sandbox_lost');
  });

  it('a second control-plane process beside the first orphans nothing and serves the same sandboxes', async () => {
    const lease = await h.client.createSandbox();
    const second = await h.startPeer();
    expect(await containersOf(h.config.owner)).toContain(`sbx-${lease.id}`);
    const r = await exec(lease.id, { cmd: 'seq 1 20000' }, { client: second.client });
    expect(r.stdout).toBe(`${Array.from({ length: 20000 }, (_, i) => i + 1).join('\n')}\n`);
    // One process consumes the lease's returns (the consumer lock), so every output event is
    // ledgered, in order, before the result that ends the call.
    const events = [];
    for await (const e of second.client.events(lease.id, r.callId)) events.push(e);
    expect(reassemble(events, 'stdout').toString()).toBe(r.stdout);
    expect(events.at(-1)?.type).toBe('call.finished');
    expect(await h.redis.get(`${h.config.redisPrefix}consumer:${lease.id}`)).toBeTruthy();
    await second.close();
    const again = await exec(lease.id, { argv: ['echo', 'via first'] });
    expect(again.stdout).toBe('via first\n');
  });
});
