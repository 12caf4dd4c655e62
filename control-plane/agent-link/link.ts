/**
 * The control plane's side of each sandbox's channel (docs/DESIGN.md §5), one part a file: the
 * agent's ACL user (`acl.ts`), calls out (`calls-out.ts`), returns in with the consumer lock
 * (`returns-in.ts`), the hello and bind handshake (`handshake.ts`), this process's liveness
 * (`liveness.ts`) and the replicas it passes link connections on to (`link-peers.ts`). `AgentLink` builds them and does what spans them: stop and destroy a lease's
 * channel, close everything. Consumers take the part (or the `Pick<>`) they use.
 */
import type { Redis, RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import { leaseKeys } from '../../contract/queue.js';
import { RedisLock } from '../redis/lock.js';
import { AgentAcl } from './acl.js';
import { CallsOut } from './calls-out.js';
import { Handshake } from './handshake.js';
import { InputOut } from './input-out.js';
import { LiveIn } from './live-in.js';
import { LinkPeers } from './link-peers.js';
import { Liveness } from './liveness.js';
import { ReturnsIn, type ReturnHandler } from './returns-in.js';

export class AgentLink {
  readonly liveness: Liveness;
  readonly acl: AgentAcl;
  readonly calls: CallsOut;
  readonly returns: ReturnsIn;
  readonly handshake: Handshake;
  readonly input: InputOut;
  readonly live: LiveIn;
  readonly peers: LinkPeers;

  /** `onReturn` receives every message an agent sends back (the composition root hands it to calls). */
  constructor(
    private readonly redis: Redis,
    options: RedisOptions,
    private readonly rootPrefix: string,
    log: Logger,
    onReturn: ReturnHandler,
  ) {
    this.liveness = new Liveness(redis, rootPrefix, log);
    this.acl = new AgentAcl(redis, rootPrefix, log);
    this.calls = new CallsOut(redis, rootPrefix);
    this.returns = new ReturnsIn(redis, options, rootPrefix, new RedisLock(redis), this.liveness, onReturn, log);
    this.handshake = new Handshake(redis, rootPrefix, this.calls);
    this.input = new InputOut(redis, rootPrefix);
    this.live = new LiveIn(redis, rootPrefix);
    this.peers = new LinkPeers({
      processId: this.liveness.processId,
      consumerOf: (leaseId) => this.returns.consumerOf(leaseId),
      linkAddressOf: (processId) => this.liveness.linkAddressOf(processId),
      log,
    });
  }

  /** Stops consuming the lease's returns, giving up the consumer lock (idempotent). */
  async stop(leaseId: string): Promise<void> {
    await this.returns.stop(leaseId).catch(() => undefined);
  }

  /** Deletes the lease's ACL user and every key of its namespace (idempotent). */
  async destroy(leaseId: string): Promise<void> {
    await this.stop(leaseId);
    await this.acl.remove(leaseId);
    const pattern = leaseKeys(this.rootPrefix, leaseId).aclPattern;
    let cursor = '0';
    do {
      const [next, keys] = await this.redis.scan(cursor, 'MATCH', pattern, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) await this.redis.unlink(...keys);
    } while (cursor !== '0');
  }

  /** Stops consuming, gives up every lock and the liveness key (a clean shutdown: others take over at once). */
  async close(): Promise<void> {
    await this.returns.close().catch(() => undefined);
    await this.live.close();
    await this.liveness.close();
  }
}
