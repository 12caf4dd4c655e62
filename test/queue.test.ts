/**
 * The queue channel's guarantees against real Redis and a real agent: per-lease ACL isolation,
 * and at-most-once effect per callId when a call is delivered again (docs/DESIGN.md invariant 5).
 */
import { Redis } from 'ioredis';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { leaseKeys } from '../contract/queue.js';
import type { ToolResult } from '../contract/objects.js';
import { AgentLink } from '../control-plane/agent-link/link.js';
import { redisOptions } from '../control-plane/redis/connections.js';
import { useHarness } from './fixtures/index.js';

const h = useHarness();

describe('per-lease Redis ACL', () => {
  it("an agent's credentials reach its own namespace only, and no dangerous command", async () => {
    const channels = new AgentLink(
      h.redis,
      redisOptions(h.config.redis),
      h.config.redisPrefix,
      pino({ level: 'silent' }),
      async () => undefined,
    );
    const a = await channels.acl.provision('sbx_aclaaaaaaaa');
    await channels.acl.provision('sbx_aclbbbbbbbb');
    const asA = new Redis({ ...redisOptions(h.config.redis), username: a.username, password: a.password });
    try {
      const own = leaseKeys(h.config.redisPrefix, 'sbx_aclaaaaaaaa');
      const other = leaseKeys(h.config.redisPrefix, 'sbx_aclbbbbbbbb');
      expect(await asA.set(`${own.namespace}:probe`, '1')).toBe('OK');
      await expect(asA.get(`${other.namespace}:probe`)).rejects.toThrow(/NOPERM/);
      await expect(asA.set(`${h.config.redisPrefix}leases:x`, '1')).rejects.toThrow(/NOPERM/);
      await expect(asA.publish(other.control, 'x')).rejects.toThrow(/NOPERM/);
      await expect(asA.config('GET', '*')).rejects.toThrow(/NOPERM/);
      await expect(asA.keys('*')).rejects.toThrow(/NOPERM/);
      await expect(asA.call('ACL', 'LIST')).rejects.toThrow(/NOPERM/);
      await expect(asA.flushall()).rejects.toThrow(/NOPERM/);
      await expect(asA.select(3)).rejects.toThrow(/NOPERM/);
      await expect(asA.scan('0')).rejects.toThrow(/NOPERM/);
      await expect(asA.dbsize()).rejects.toThrow(/NOPERM/);
      await expect(asA.call('PUBSUB', 'CHANNELS')).rejects.toThrow(/NOPERM/);
      await expect(asA.call('FUNCTION', 'FLUSH')).rejects.toThrow(/NOPERM/);
      await expect(asA.call('SCRIPT', 'FLUSH')).rejects.toThrow(/NOPERM/);
    } finally {
      asA.disconnect();
      await channels.destroy('sbx_aclaaaaaaaa');
      await channels.destroy('sbx_aclbbbbbbbb');
    }
    const users = (await h.redis.call('ACL', 'USERS')) as string[];
    expect(users.filter((u) => u.includes('sbx_acl'))).toEqual([]);
  });
});

describe('redelivery', () => {
  it('a call whose earlier attempt started is reported effect_unknown and not run again', async () => {
    const lease = await h.client.createSandbox();
    const callId = `redelivered-${Date.now()}`;
    // The durable marker an agent writes before it starts an attempt: as if one had started and
    // the agent crashed before reporting.
    await h.redis.set(leaseKeys(h.config.redisPrefix, lease.id).attempt(callId), 'att_lost');
    const result = (await h.client.submitCall(
      lease.id,
      'exec',
      { cmd: 'touch /workspace/ran' },
      { callId, waitSeconds: 30 },
    )) as ToolResult;
    expect(result.status).toBe('effect_unknown');
    expect(result.error?.code).toBe('execution.effect_unknown');
    expect(result.error?.retryability).toBe('reconcile_first');
    expect(result.receipt?.commitState).toBe('unknown');
    const check = (await h.client.submitCall(
      lease.id,
      'exec',
      { cmd: 'ls /workspace/ran 2>&1 || true' },
      { waitSeconds: 30 },
    )) as ToolResult;
    expect(check.stdout).toMatch(/No such file/);
  });
});
