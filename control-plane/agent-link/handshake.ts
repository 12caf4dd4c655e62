/**
 * Getting a sandbox's agent going: its sealed secret values left where only it can take them,
 * its `hello` (it is ready), and for a pooled sandbox the binding to a lease and its ack; and the
 * image facts the first agent of an image measured, kept for the next ones (ImageFacts).
 */

/**
 * What decides an image's facts (ImageFacts): the agent runtime that probes (its host directory,
 * content-hashed), the image's id (its PATH and programs) and the tool user the probes run as.
 */
export interface ImageFactsScope {
  agentRuntimeDir: string;
  imageId: string;
  toolUser: { uid: number; gid: number; home: string };
}

/** How long kept image facts live unused, seconds (an image id never changes its content; this only bounds the keys). */
const IMAGE_FACTS_TTL_SECONDS = 24 * 3600;
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { AppError } from '../../contract/errors.js';
import { ImageFacts, type SandboxFacts } from '../../contract/objects.js';
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

  /** The image facts kept for `scope`, or null (none kept, or unreadable). */
  async knownImageFacts(scope: ImageFactsScope): Promise<ImageFacts | null> {
    const text = await this.redis.get(this.imageFactsKey(scope));
    const parsed = text === null ? null : ImageFacts.safeParse(JSON.parse(text));
    return parsed?.success ? parsed.data : null;
  }

  /** Keeps the image's part of `facts`, an agent's hello, for later agents of `scope` (IMAGE_FACTS_TTL_SECONDS). */
  async keepImageFacts(scope: ImageFactsScope, facts: SandboxFacts): Promise<void> {
    const image: ImageFacts = ImageFacts.parse(facts);
    await this.redis.set(this.imageFactsKey(scope), JSON.stringify(image), 'EX', IMAGE_FACTS_TTL_SECONDS);
  }

  private imageFactsKey(scope: ImageFactsScope): string {
    const { agentRuntimeDir, imageId, toolUser } = scope;
    const digest = createHash('sha256')
      .update(JSON.stringify([agentRuntimeDir, imageId, toolUser.uid, toolUser.gid, toolUser.home]))
      .digest('hex');
    return `${this.rootPrefix}image-facts:${digest}`;
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
