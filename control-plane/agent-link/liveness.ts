/**
 * This control-plane process's liveness key (`<prefix>process:<processId>`), by which other
 * processes tell that work it started (a create, a release, a consumer lock) has no one left to
 * finish it. Its value is the address of the process's agent link listener (`host:port`, where
 * other replicas pass agent connections for this process on: link-peers.ts), or `1` without one.
 */
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';

/**
 * A process's liveness key lives this long without renewal, ms: how soon after a crash
 * (kill -9) others take over its creates, releases and consumer locks.
 */
const LIVENESS_MS = 10_000;
/** Renewal period of the liveness key, ms. */
const HEARTBEAT_MS = 2_500;

export class Liveness {
  /** This process's identity in consumer locks, lease records (`inProgressBy`) and its liveness key. */
  readonly processId = randomBytes(8).toString('hex');
  private heartbeat: NodeJS.Timeout | null = null;

  constructor(
    private readonly redis: Redis,
    private readonly rootPrefix: string,
    private readonly log: Logger,
  ) {}

  /**
   * Starts renewing this process's liveness key (LIVENESS_MS, renewed every HEARTBEAT_MS), holding
   * `linkAddress` (`host:port`) when the process has an agent link listener. Idempotent.
   */
  async start(linkAddress?: string): Promise<void> {
    if (this.heartbeat) return;
    const beat = (): Promise<unknown> => this.redis.set(this.key(this.processId), linkAddress ?? '1', 'PX', LIVENESS_MS);
    await beat();
    this.heartbeat = setInterval(
      () => void beat().catch((err: unknown) => this.log.warn({ err }, 'liveness heartbeat failed')),
      HEARTBEAT_MS,
    ).unref();
  }

  /** Whether the control-plane process `processId` renewed its liveness key within LIVENESS_MS. */
  async isAlive(processId: string): Promise<boolean> {
    return processId === this.processId || (await this.redis.exists(this.key(processId))) === 1;
  }

  /** The link listener address (`host:port`) of the live process `processId`; null when it is gone or has none. */
  async linkAddressOf(processId: string): Promise<string | null> {
    const value = await this.redis.get(this.key(processId));
    return value === null || value === '1' ? null : value;
  }

  /** Stops the heartbeat and deletes the key (a clean shutdown: others take over at once). */
  async close(): Promise<void> {
    if (this.heartbeat) clearInterval(this.heartbeat);
    await this.redis.del(this.key(this.processId)).catch(() => undefined);
  }

  private key(processId: string): string {
    return `${this.rootPrefix}process:${processId}`;
  }
}
