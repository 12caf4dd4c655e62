/**
 * The control plane's side of each sandbox's queues (docs/DESIGN.md §5): the per-lease Redis ACL
 * user the agent logs in as, the `calls` queue it produces into, the `returns` queue it
 * consumes (one BullMQ worker per lease, concurrency 1 so events are ledgered in the order the
 * agent sent them), the `hello` handshake and the `control` channel for cancels. Also this
 * process's liveness key, by which other processes tell that work it started (a create, a
 * release, a consumer lock) has no one left to finish it.
 */
import { randomBytes } from 'node:crypto';
import { Queue, Worker } from 'bullmq';
import type { Logger } from 'pino';
import { AppError } from '../../contract/errors.js';
import { AgentHello, BIND_JOB, BindAck, CALL_QUEUE, RETURN_QUEUE, ReturnMessage, leaseKeys, type CallJob, type ControlMessage, type LeaseBinding } from '../../contract/queue.js';
import type { SecretDelivery } from '../../contract/secrets.js';
import type { Redis, RedisOptions } from './redis.js';

export interface AgentCredentials {
  username: string;
  password: string;
}

export type ReturnHandler = (leaseId: string, message: ReturnMessage) => Promise<void>;

/** A consumer lock lives this long without renewal, ms. */
const LOCK_MS = 15_000;
/** Renewal period of consumer locks, ms. */
const RENEW_MS = 5_000;
/**
 * A process's liveness key lives this long without renewal, ms: how soon after a crash
 * (kill -9) others take over its creates, releases and consumer locks.
 */
const LIVENESS_MS = 10_000;
/** Renewal period of the liveness key, ms. */
const HEARTBEAT_MS = 2_500;
const RENEW_LOCK = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`;
const RELEASE_LOCK = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;
/** Takes a lock from a holder known to be dead: only if it is still the holder read. */
const STEAL_LOCK = `if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end return 0`;

export class LeaseChannels {
  private readonly callQueues = new Map<string, Queue>();
  private readonly returnWorkers = new Map<string, Worker>();
  /** This process's identity in consumer locks, lease records (`inProgressBy`) and its liveness key. */
  readonly processId = randomBytes(8).toString('hex');
  private renewer: NodeJS.Timeout | null = null;
  private heartbeat: NodeJS.Timeout | null = null;
  /** Whether Redis persists ACL users in an ACL file (`aclfile`): then each change is saved to it. */
  private aclFile: Promise<boolean> | null = null;

  constructor(
    private readonly redis: Redis,
    private readonly options: RedisOptions,
    private readonly rootPrefix: string,
    private readonly log: Logger,
  ) {}

  /**
   * Creates the lease's ACL user: it may touch only keys and channels of its own namespace, and
   * no dangerous command (CONFIG, ACL, KEYS, FLUSHALL, ...); INFO and CLIENT SETNAME stay
   * because BullMQ uses them. Also denied, because they reach past the namespace: SELECT
   * (other databases), SCAN/RANDOMKEY/DBSIZE (other leases' key names), PUBSUB (their
   * channels), FUNCTION and SCRIPT FLUSH/KILL (server-wide). Redis ACL rules apply in order
   * (https://redis.io/docs/latest/operate/oss_and_stack/management/security/acl/).
   */
  async provisionAgentUser(leaseId: string): Promise<AgentCredentials> {
    const keys = leaseKeys(this.rootPrefix, leaseId);
    const username = this.agentUsername(leaseId);
    const password = randomBytes(32).toString('hex');
    await this.redis.call(
      'ACL',
      'SETUSER',
      username,
      'reset',
      'on',
      `>${password}`,
      `~${keys.aclPattern}`,
      `&${keys.aclPattern}`,
      '+@all',
      '-@dangerous',
      '-select',
      '-scan',
      '-randomkey',
      '-dbsize',
      '-pubsub',
      '-function',
      '-script|flush',
      '-script|kill',
      '+info',
      '+client|setname',
      '+client|getname',
    );
    await this.saveAcl();
    return { username, password };
  }

  /**
   * ACL users are server configuration, not data: AOF does not keep them, so after a Redis
   * restart every agent would fail to log in again. Where Redis has an ACL file
   * (deploy/local/setup.sh configures one) each change is written to it (ACL SAVE), and a
   * restarted Redis loads the agents' users before it accepts connections.
   */
  private async saveAcl(): Promise<void> {
    this.aclFile ??= (this.redis.call('CONFIG', 'GET', 'aclfile') as Promise<string[]>).then((reply) => {
      const configured = Boolean(reply[1]);
      if (!configured) this.log.warn('Redis has no aclfile: sandbox agents cannot log in again after a Redis restart');
      return configured;
    });
    if (await this.aclFile) await this.redis.call('ACL', 'SAVE');
  }

  /**
   * Starts renewing this process's liveness key (`<prefix>process:<processId>`, LIVENESS_MS,
   * renewed every HEARTBEAT_MS). Idempotent.
   */
  async startHeartbeat(): Promise<void> {
    if (this.heartbeat) return;
    const beat = (): Promise<unknown> => this.redis.set(this.livenessKey(this.processId), '1', 'PX', LIVENESS_MS);
    await beat();
    this.heartbeat = setInterval(() => void beat().catch((err: unknown) => this.log.warn({ err }, 'liveness heartbeat failed')), HEARTBEAT_MS).unref();
  }

  /** Whether the control-plane process `processId` renewed its liveness key within LIVENESS_MS. */
  async isAlive(processId: string): Promise<boolean> {
    return processId === this.processId || (await this.redis.exists(this.livenessKey(processId))) === 1;
  }

  private livenessKey(processId: string): string {
    return `${this.rootPrefix}process:${processId}`;
  }

  /**
   * Leaves the lease's sealed secret values where only its agent can take them (its namespace,
   * `LeaseKeys.secrets`), for `ttlMs` at most.
   */
  async leaveSecretDelivery(leaseId: string, delivery: SecretDelivery, ttlMs: number): Promise<void> {
    await this.redis.set(leaseKeys(this.rootPrefix, leaseId).secrets, JSON.stringify(delivery), 'PX', ttlMs);
  }

  /** Waits for the agent's hello, ms. Throws AppError `lease.create_failed` on timeout. */
  async awaitHello(leaseId: string, timeoutMs: number): Promise<AgentHello> {
    const conn = this.redis.duplicate();
    try {
      const reply = await conn.blpop(leaseKeys(this.rootPrefix, leaseId).hello, timeoutMs / 1000);
      if (!reply) throw new AppError('lease.create_failed', `the sandbox agent did not report ready within ${timeoutMs} ms`);
      return AgentHello.parse(JSON.parse(reply[1]));
    } finally {
      conn.disconnect();
    }
  }

  /**
   * Sends a pooled sandbox its lease's binding (job `BIND_JOB`, removed once taken so no call id
   * can ever collide with it) and waits up to `timeoutMs` for the agent's `BindAck`; no answer
   * in time is an `ok: false` ack.
   */
  async bind(leaseId: string, binding: LeaseBinding, timeoutMs: number): Promise<BindAck> {
    const keys = leaseKeys(this.rootPrefix, leaseId);
    await this.callQueue(leaseId).add(BIND_JOB, binding, { jobId: BIND_JOB, removeOnComplete: true, removeOnFail: true });
    const conn = this.redis.duplicate();
    try {
      const reply = await conn.blpop(keys.bound, timeoutMs / 1000);
      if (!reply) return { ok: false, error: `no answer within ${timeoutMs} ms` };
      return BindAck.parse(JSON.parse(reply[1]));
    } finally {
      conn.disconnect();
    }
  }

  /** Adds a call to the lease's queue; the job id is the callId, so a second add is a no-op. */
  async enqueueCall(leaseId: string, job: CallJob): Promise<void> {
    await this.callQueue(leaseId).add(job.tool, job, { jobId: job.callId });
  }

  /** Removes a call that no agent has taken yet. True when it was removed before it started. */
  async removeQueued(leaseId: string, callId: string): Promise<boolean> {
    const job = await this.callQueue(leaseId).getJob(callId);
    if (!job) return false;
    const state = await job.getState();
    if (state !== 'waiting' && state !== 'delayed' && state !== 'prioritized') return false;
    try {
      await job.remove();
      return true;
    } catch {
      // The agent took it between getState and remove (the job is locked): it is running now.
      return false;
    }
  }

  /**
   * Tells the agent to cancel a call: a durable marker the agent checks before it starts the
   * call (so a cancel that races the start is not lost), then a message for a running one.
   */
  async requestCancel(leaseId: string, callId: string): Promise<void> {
    const keys = leaseKeys(this.rootPrefix, leaseId);
    const message: ControlMessage = { type: 'cancel', callId };
    await this.redis.multi().set(keys.cancel(callId), '1', 'EX', 24 * 3600).publish(keys.control, JSON.stringify(message)).exec();
  }

  /**
   * Starts consuming the lease's return queue, unless another control-plane process does:
   * exactly one process holds a lease's consumer lock (`<prefix>consumer:<leaseId>`, renewed
   * every RENEW_MS, lost after LOCK_MS), so messages are ledgered one at a time in the order the
   * agent sent them — with two consumers, a result could overtake the output events before it.
   * A lock whose holder's liveness key is gone (it crashed) is taken over at once.
   * Idempotent; returns whether this process consumes. Messages that fail the schema are
   * dropped and logged.
   */
  async startReturns(leaseId: string, handler: ReturnHandler): Promise<boolean> {
    if (this.returnWorkers.has(leaseId)) return true;
    const key = this.consumerKey(leaseId);
    const won = await this.redis.set(key, this.processId, 'PX', LOCK_MS, 'NX');
    if (won !== 'OK') {
      const holder = await this.redis.get(key);
      // A lock still held by this very process (a stop whose release failed) is this process's.
      const mine = holder === this.processId;
      const orphaned = holder !== null && !mine && !(await this.isAlive(holder)) && (await this.redis.eval(STEAL_LOCK, 1, key, holder, this.processId, LOCK_MS)) === 1;
      if (!mine && !orphaned) return false;
    }
    const worker = new Worker(
      RETURN_QUEUE,
      async (job) => {
        const parsed = ReturnMessage.safeParse(job.data);
        if (!parsed.success) {
          this.log.warn({ sandboxId: leaseId, jobId: job.id, issues: parsed.error.issues }, 'dropped malformed message from sandbox agent');
          return;
        }
        await handler(leaseId, parsed.data);
      },
      // Ledgering is idempotent, so a message whose consumer died mid-way is simply taken
      // again: soon (a 10 s lock, checked every 5 s) rather than BullMQ's default 30 s.
      { connection: this.options, prefix: leaseKeys(this.rootPrefix, leaseId).namespace, concurrency: 1, lockDuration: 10_000, stalledInterval: 5_000 },
    );
    worker.on('error', (err) => this.log.warn({ sandboxId: leaseId, err }, 'return worker error'));
    this.returnWorkers.set(leaseId, worker);
    this.renewer ??= setInterval(() => void this.renewLocks(), RENEW_MS).unref();
    return true;
  }

  /** Extends this process's consumer locks; a lock found lost (this process was too slow) stops its worker. */
  private async renewLocks(): Promise<void> {
    for (const leaseId of [...this.returnWorkers.keys()]) {
      // A Redis error is not a lost lock: try again next round (the lock outlives three of them).
      const held = (await this.redis.eval(RENEW_LOCK, 1, this.consumerKey(leaseId), this.processId, LOCK_MS).catch(() => null)) as number | null;
      if (held === 0) {
        this.log.warn({ sandboxId: leaseId }, 'lost the consumer lock of a lease; another process consumes its returns now');
        await this.stop(leaseId);
      }
    }
  }

  private consumerKey(leaseId: string): string {
    return `${this.rootPrefix}consumer:${leaseId}`;
  }

  /** Stops consuming (giving up the consumer lock) and forgets the lease's queue objects (idempotent). */
  async stop(leaseId: string): Promise<void> {
    const worker = this.returnWorkers.get(leaseId);
    this.returnWorkers.delete(leaseId);
    const queue = this.callQueues.get(leaseId);
    this.callQueues.delete(leaseId);
    await Promise.allSettled([worker?.close(), queue?.close()]);
    if (worker) await this.redis.eval(RELEASE_LOCK, 1, this.consumerKey(leaseId), this.processId).catch(() => undefined);
  }

  /** Deletes the lease's ACL user and every key of its namespace (idempotent). */
  async destroy(leaseId: string): Promise<void> {
    await this.stop(leaseId);
    if (((await this.redis.call('ACL', 'DELUSER', this.agentUsername(leaseId))) as number) > 0) await this.saveAcl();
    const pattern = leaseKeys(this.rootPrefix, leaseId).aclPattern;
    let cursor = '0';
    do {
      const [next, keys] = await this.redis.scan(cursor, 'MATCH', pattern, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) await this.redis.unlink(...keys);
    } while (cursor !== '0');
  }

  /**
   * Waits until the lease's return queue has nothing waiting or in progress (so what the agent
   * sent before it stopped is ledgered, by this process or the one holding the consumer lock),
   * at most `timeoutMs`. No-op when no process consumes the lease's returns.
   */
  async drainReturns(leaseId: string, timeoutMs: number): Promise<void> {
    // Whichever process consumes the returns (the consumer lock's holder), wait for it.
    if (!this.returnWorkers.has(leaseId) && (await this.redis.exists(this.consumerKey(leaseId))) === 0) return;
    const queue = new Queue(RETURN_QUEUE, { connection: this.redis, prefix: leaseKeys(this.rootPrefix, leaseId).namespace });
    try {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const counts = await queue.getJobCounts('waiting', 'active', 'prioritized', 'delayed');
        if (Object.values(counts).every((n) => n === 0)) return;
        await new Promise((r) => setTimeout(r, 25));
      }
    } finally {
      await queue.close();
    }
  }

  /**
   * Jobs on the call queues of `leaseIds`, summed: `waiting` (waiting, prioritized, delayed:
   * not taken by the agent yet) and `active` (taken by the agent). Reads the queues in Redis,
   * so it counts every lease's, whichever process produced its calls.
   */
  async callQueueDepth(leaseIds: readonly string[]): Promise<{ waiting: number; active: number }> {
    const depth = { waiting: 0, active: 0 };
    for (const leaseId of leaseIds) {
      // A throwaway handle, not callQueue()'s cache: most of these leases are not this process's to keep queues for.
      const queue = new Queue(CALL_QUEUE, { connection: this.redis, prefix: leaseKeys(this.rootPrefix, leaseId).namespace });
      try {
        const counts = await queue.getJobCounts('waiting', 'prioritized', 'delayed', 'active');
        depth.waiting += (counts.waiting ?? 0) + (counts.prioritized ?? 0) + (counts.delayed ?? 0);
        depth.active += counts.active ?? 0;
      } finally {
        await queue.close();
      }
    }
    return depth;
  }

  /** The id of the call's attempt the agent recorded as started (its durable marker), or null. */
  async attemptOf(leaseId: string, callId: string): Promise<string | null> {
    return this.redis.get(leaseKeys(this.rootPrefix, leaseId).attempt(callId));
  }

  /** Lease ids this process consumes returns for. */
  activeLeases(): string[] {
    return [...this.returnWorkers.keys()];
  }

  /** Lease ids that have an agent ACL user under this prefix (reconcile removes those of ended leases). */
  async agentUserLeases(): Promise<string[]> {
    const prefix = this.agentUsername('');
    return ((await this.redis.call('ACL', 'USERS')) as string[]).filter((u) => u.startsWith(prefix)).map((u) => u.slice(prefix.length));
  }

  /** Stops consuming, gives up every lock and the liveness key (a clean shutdown: others take over at once). */
  async close(): Promise<void> {
    if (this.renewer) clearInterval(this.renewer);
    if (this.heartbeat) clearInterval(this.heartbeat);
    await Promise.allSettled([...new Set([...this.returnWorkers.keys(), ...this.callQueues.keys()])].map((id) => this.stop(id)));
    await this.redis.del(this.livenessKey(this.processId)).catch(() => undefined);
  }

  private agentUsername(leaseId: string): string {
    return `${this.rootPrefix}agent:${leaseId}`;
  }

  private callQueue(leaseId: string): Queue {
    let queue = this.callQueues.get(leaseId);
    if (!queue) {
      queue = new Queue(CALL_QUEUE, {
        connection: this.redis,
        prefix: leaseKeys(this.rootPrefix, leaseId).namespace,
        defaultJobOptions: { removeOnComplete: { age: 24 * 3600 }, removeOnFail: { age: 24 * 3600 } },
      });
      this.callQueues.set(leaseId, queue);
    }
    return queue;
  }
}
