/**
 * The engine's version and runtimes as the planner uses them (leases/plan.ts): Docker's `/info`
 * gathers every subsystem's state (12–25 ms here, more than a warm lease's own work) and its
 * answer changes only when the engine is restarted or reconfigured, so it is asked again only
 * when the last answer is older than `freshMs`, and an answer up to `staleMs` old serves while
 * the new one is read beside it: the lease that finds it stale does not wait for `/info`
 * (issue 14: that wait was a warm lease's p95).
 */
import { AppError } from '../../contract/errors.js';
import type { RuntimeInfo } from '../runtime/runtime.js';

export interface EngineInfoTiming {
  /** How long an answer is used without asking again, ms. */
  freshMs: number;
  /** How old an answer may be and still serve while a new one is read, ms. */
  staleMs: number;
  /**
   * How long a read may take before it fails with `runtime.unavailable`, ms: neither Docker's
   * client nor Kubernetes' puts a limit on it, and one read that never answers would otherwise
   * hold every plan after the stale limit.
   */
  readTimeoutMs: number;
  /** The clock, ms since the epoch. */
  now: () => number;
}

export class EngineInfoCache {
  /** The last answer and when it was asked for. */
  private known: { askedAt: number; info: RuntimeInfo } | null = null;
  /** The read under way, if any: one at a time, shared by every caller waiting for it. */
  private reading: Promise<RuntimeInfo> | null = null;

  constructor(
    private readonly read: () => Promise<RuntimeInfo>,
    private readonly timing: EngineInfoTiming,
  ) {}

  /**
   * The last answer while fresh; a stale one (up to `staleMs`) while a new one is read; else the
   * new one, awaited (rejects with what `read` throws, or `runtime.unavailable` past
   * `readTimeoutMs`; the next call reads again).
   */
  get(): Promise<RuntimeInfo> {
    const askedAt = this.timing.now();
    const known = this.known;
    const age = known === null ? Infinity : askedAt - known.askedAt;
    if (age > this.timing.freshMs && this.reading === null) {
      const reading = withDeadline(this.read(), this.timing.readTimeoutMs);
      this.reading = reading;
      // In the read's own continuation, so no caller after it can find it done but still `reading`.
      reading.then(
        (info) => {
          this.known = { askedAt, info };
          this.reading = null;
        },
        // Not kept: the callers waiting for this read get its error, the next call reads again.
        () => (this.reading = null),
      );
    }
    if (known !== null && age <= this.timing.staleMs) return Promise.resolve(known.info);
    return this.reading!;
  }
}

/** `read`, or a `runtime.unavailable` rejection once `timeoutMs` passed without its answer. */
function withDeadline(read: Promise<RuntimeInfo>, timeoutMs: number): Promise<RuntimeInfo> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new AppError('runtime.unavailable', `the engine did not answer its info request within ${timeoutMs} ms`)),
      timeoutMs,
    );
    timer.unref();
  });
  return Promise.race([read, deadline]).finally(() => clearTimeout(timer));
}
