/**
 * The commands E2B clients started in a sandbox, per sandbox in Redis: `e2b-calls:<id>` (callId →
 * the process as the client gave it) written when the command is submitted, and `e2b-pids:<id>`
 * (pid → callId) once its process is known. The RPCs that name a pid (Connect, SendInput,
 * SendSignal, CloseStdin, Update) and List read them; a command whose client left before it
 * started is found by its call's `call.started` event (processes.ts). Both expire 30 days after
 * their last write.
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

/** How long a sandbox's records are kept after the last write, s: past the longest lease. */
const RETENTION_SECONDS = 30 * 24 * 3600;

export class E2bProcessStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private k = {
    calls: (leaseId: string) => `${this.prefix}e2b-calls:${leaseId}`,
    pids: (leaseId: string) => `${this.prefix}e2b-pids:${leaseId}`,
  };

  /** Records a command an E2B client started (before its process exists). */
  async remember(leaseId: string, process: E2bProcess): Promise<void> {
    const key = this.k.calls(leaseId);
    await this.redis.multi().hset(key, process.callId, JSON.stringify(process)).expire(key, RETENTION_SECONDS).exec();
  }

  /** Records that `pid` is the process of call `callId`. */
  async rememberPid(leaseId: string, pid: number, callId: string): Promise<void> {
    const key = this.k.pids(leaseId);
    await this.redis.multi().hset(key, String(pid), callId).expire(key, RETENTION_SECONDS).exec();
  }

  /** The command call `callId` is, or null. */
  async get(leaseId: string, callId: string): Promise<E2bProcess | null> {
    const raw = await this.redis.hget(this.k.calls(leaseId), callId);
    return raw ? E2bProcess.parse(JSON.parse(raw)) : null;
  }

  /** The call of `pid`, when known. */
  async callOf(leaseId: string, pid: number): Promise<string | null> {
    return this.redis.hget(this.k.pids(leaseId), String(pid));
  }

  /** Every command recorded for lease `leaseId`, and the pids known of them (callId → pid). */
  async all(leaseId: string): Promise<{ processes: E2bProcess[]; pids: Map<string, number> }> {
    const [calls, pids] = await Promise.all([this.redis.hgetall(this.k.calls(leaseId)), this.redis.hgetall(this.k.pids(leaseId))]);
    return {
      processes: Object.values(calls).map((v) => E2bProcess.parse(JSON.parse(v))),
      pids: new Map(Object.entries(pids).map(([pid, callId]) => [callId, Number(pid)])),
    };
  }
}
