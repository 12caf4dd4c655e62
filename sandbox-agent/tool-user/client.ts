/**
 * The agent's handle on its tool-user worker: starts it (as root; it drops to the tool user
 * itself), sends it operations, and restarts it when it dies or an operation overruns its
 * timeout (the overrunning operation is killed with it).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { ToolError, type OpResult } from './file-ops.js';
import { WorkerReply, type FileOpName, type WorkerConfig } from './protocol.js';

/** How long a worker has to answer after an operation was abandoned, ms. */
const UNRESPONSIVE_MS = 2000;

export class ToolTimeout extends Error {}
export class ToolCancelled extends Error {}

export class ToolUserWorker {
  private child: ChildProcess | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (r: OpResult) => void; reject: (e: Error) => void }>();

  /** `entry`: the agent bundle, started again with `--tool-user-worker <config json>`. */
  constructor(
    private readonly entry: string,
    private readonly config: WorkerConfig,
  ) {}

  /** The worker's pid (the exec sweep must spare it), or null while none runs. */
  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  /**
   * Runs one operation. Rejects with `ToolError` (the operation's own failure), `ToolTimeout`
   * after `timeoutMs` or `ToolCancelled` when `signal` aborts (either way the worker is killed,
   * and with it the operation, and restarts on the next request), or Error when the worker died.
   */
  request(op: FileOpName, args: unknown, timeoutMs: number, signal?: AbortSignal): Promise<OpResult> {
    const child = this.ensure();
    const id = this.nextId++;
    return new Promise<OpResult>((resolve, reject) => {
      // The operation is abandoned, not the worker: other operations go on. The worker stops the
      // operation's programs; a worker that does not answer even that (stopped, hung) is replaced.
      const abandon = (error: Error): void => {
        this.pending.delete(id);
        cleanup();
        reject(error);
        child.send({ cancel: id });
        this.expectAnswer(child);
      };
      const onAbort = (): void => abandon(new ToolCancelled(`${op} was cancelled`));
      const timer = setTimeout(() => abandon(new ToolTimeout(`${op} did not finish within ${timeoutMs} ms`)), timeoutMs);
      const cleanup = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.pending.set(id, {
        resolve: (r) => (cleanup(), resolve(r)),
        reject: (e) => (cleanup(), reject(e)),
      });
      child.send({ id, op, args });
    });
  }

  /** Kills `child` unless it answers anything within `UNRESPONSIVE_MS` (its pending operations then fail). */
  private expectAnswer(child: ChildProcess): void {
    const timer = setTimeout(() => child.kill('SIGKILL'), UNRESPONSIVE_MS);
    const answered = (): void => clearTimeout(timer);
    child.once('message', answered);
    child.once('exit', answered);
  }

  stop(): void {
    this.child?.kill('SIGKILL');
  }

  private ensure(): ChildProcess {
    if (this.child) return this.child;
    const child = fork(this.entry, ['--tool-user-worker', JSON.stringify(this.config)], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: {},
    });
    child.on('message', (raw: unknown) => {
      const parsed = WorkerReply.safeParse(raw);
      if (!parsed.success) return;
      const waiter = this.pending.get(parsed.data.id);
      if (!waiter) return;
      this.pending.delete(parsed.data.id);
      if (parsed.data.ok) waiter.resolve(parsed.data.result);
      else waiter.reject(new ToolError(parsed.data.error.code, parsed.data.error.message, parsed.data.error.details));
    });
    child.on('exit', () => {
      if (this.child === child) this.child = null;
      for (const [id, waiter] of this.pending) {
        this.pending.delete(id);
        waiter.reject(new Error('the tool-user worker exited'));
      }
    });
    this.child = child;
    return child;
  }
}
