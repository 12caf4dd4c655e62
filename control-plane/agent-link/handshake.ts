/**
 * Getting a sandbox's agent going: its sealed secret values left where only it can take them,
 * its `hello` (it is ready), and for a pooled sandbox the binding to a lease and its ack.
 */
import type { Redis } from 'ioredis';
import { AppError } from '../../contract/errors.js';
import { AgentHello, BindAck, leaseKeys, type LeaseBinding } from '../../contract/queue.js';
import type { SecretDelivery } from '../../contract/secrets.js';
import type { CallsOut } from './calls-out.js';

export class Handshake {
  constructor(
    private readonly redis: Redis,
    private readonly rootPrefix: string,
    private readonly calls: Pick<CallsOut, 'sendBinding'>,
  ) {}

  /**
   * Leaves the lease's sealed secret values where only its agent can take them (its namespace,
   * `LeaseKeys.secrets`), for `ttlMs` at most.
   */
  async leaveSecretDelivery(leaseId: string, delivery: SecretDelivery, ttlMs: number): Promise<void> {
    await this.redis.set(leaseKeys(this.rootPrefix, leaseId).secrets, JSON.stringify(delivery), 'PX', ttlMs);
  }

  /** Waits for the agent's hello, ms. Throws AppError `lease.create_failed` on timeout. */
  async awaitHello(leaseId: string, timeoutMs: number): Promise<AgentHello> {
    const reply = await this.blpop(leaseKeys(this.rootPrefix, leaseId).hello, timeoutMs);
    if (!reply) throw new AppError('lease.create_failed', `the sandbox agent did not report ready within ${timeoutMs} ms`);
    return AgentHello.parse(JSON.parse(reply));
  }

  /**
   * Sends a pooled sandbox its lease's binding and waits up to `timeoutMs` for the agent's
   * `BindAck`; no answer in time is an `ok: false` ack.
   */
  async bind(leaseId: string, binding: LeaseBinding, timeoutMs: number): Promise<BindAck> {
    await this.calls.sendBinding(leaseId, binding);
    const reply = await this.blpop(leaseKeys(this.rootPrefix, leaseId).bound, timeoutMs);
    if (!reply) return { ok: false, error: `no answer within ${timeoutMs} ms` };
    return BindAck.parse(JSON.parse(reply));
  }

  /** BLPOP on a connection of its own (it blocks), ms; the value, or null on timeout. */
  private async blpop(key: string, timeoutMs: number): Promise<string | null> {
    const conn = this.redis.duplicate();
    try {
      const reply = await conn.blpop(key, timeoutMs / 1000);
      return reply ? reply[1] : null;
    } finally {
      conn.disconnect();
    }
  }
}
