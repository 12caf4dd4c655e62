/**
 * Which E2B process id names which sbx call, per sandbox: a Redis hash `pid → {callId, config}`
 * written when a command's process started (its `call.started` pid), read by the RPCs that name
 * a pid (Connect, SendInput, SendSignal, CloseStdin, List). It expires 30 days after its last write.
 */
import type { Redis } from 'ioredis';
import { z } from 'zod';

export const E2bProcess = z.object({
  callId: z.string(),
  /** process.proto `ProcessConfig` as the client gave it. */
  config: z.object({ cmd: z.string(), args: z.array(z.string()), envs: z.record(z.string(), z.string()), cwd: z.string().optional() }),
  tag: z.string().optional(),
  /** A PTY (an sbx terminal): its output is `pty` data, its input terminal input. */
  pty: z.boolean().optional(),
});
export type E2bProcess = z.infer<typeof E2bProcess>;

/** How long a sandbox's pids are kept after the last one was written, s: past the longest lease. */
const RETENTION_SECONDS = 30 * 24 * 3600;

export class E2bProcessStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private key(leaseId: string): string {
    return `${this.prefix}e2b-pids:${leaseId}`;
  }

  /** Records that `pid` in lease `leaseId` is `process`. */
  async remember(leaseId: string, pid: number, process: E2bProcess): Promise<void> {
    await this.redis
      .multi()
      .hset(this.key(leaseId), String(pid), JSON.stringify(process))
      .expire(this.key(leaseId), RETENTION_SECONDS)
      .exec();
  }

  /** The process `pid` names in lease `leaseId`, or null. */
  async get(leaseId: string, pid: number): Promise<E2bProcess | null> {
    const raw = await this.redis.hget(this.key(leaseId), String(pid));
    return raw ? E2bProcess.parse(JSON.parse(raw)) : null;
  }

  /** Every process recorded for lease `leaseId`, by pid. */
  async all(leaseId: string): Promise<Array<{ pid: number } & E2bProcess>> {
    const raw = await this.redis.hgetall(this.key(leaseId));
    return Object.entries(raw).map(([pid, value]) => ({ pid: Number(pid), ...E2bProcess.parse(JSON.parse(value)) }));
  }
}
