/**
 * Periodic background work of a control plane (reconcile, pool rounds, sweeps): each task runs
 * every `ms`, never two runs of one task at once; a failed run is logged, and `stop()` waits
 * for the runs in progress.
 */
import type { Logger } from 'pino';

export class BackgroundTasks {
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly inFlight = new Set<Promise<unknown>>();

  constructor(private readonly log: Pick<Logger, 'warn'>) {}

  /** Runs `task` every `ms` (the timer does not keep the process alive); `what` names it in logs. */
  every(ms: number, what: string, task: () => Promise<unknown>): void {
    let running = false;
    const timer = setInterval(() => {
      if (running) return;
      running = true;
      const run = task()
        .catch((err: unknown) => this.log.warn({ err }, `${what} failed`))
        .finally(() => {
          running = false;
          this.inFlight.delete(run);
        });
      this.inFlight.add(run);
    }, ms);
    timer.unref();
    this.timers.push(timer);
  }

  /** Starts no more runs and resolves once those in progress ended. */
  async stop(): Promise<void> {
    for (const timer of this.timers) clearInterval(timer);
    await Promise.allSettled([...this.inFlight]);
  }
}
