/**
 * Admission of sandbox boots: at most `slots` sandboxes of this process boot at once, from their
 * agent's credentials and secrets' delivery to their agent's hello. Lease creates beyond that
 * wait their turn in order; a warm pool's fill never waits: it boots only when a slot is spare
 * and no create waits, and leaves one slot to creates (`tryRun`).
 *
 * Why: a boot is mostly CPU (the engine's create and start, the writable roots' seeding, the
 * agent's Node start), and a burst started all at once shares the machine so thinly that every
 * boot takes as long as the whole burst. On the bench's 2-core machine, 100 cold creates at once
 * took 107 s at p50 and 30 of them failed: their agents, started together, could not say hello
 * within the 30 s they are given. Admitted a few at a time, each boot takes about as long as one
 * alone, the hello timeout measures an agent rather than the queue, and the burst ends no later.
 */

export class BootGate {
  private running = 0;
  private readonly waiting: Array<() => void> = [];

  /**
   * @param slots boots at once; 0 admits every boot at once (a cluster's nodes boot their own pods).
   * @throws RangeError when `slots` is not a non-negative integer.
   */
  constructor(private readonly slots: number) {
    if (!Number.isInteger(slots) || slots < 0) throw new RangeError(`boot slots must be a non-negative integer, got ${slots}`);
  }

  /** Boots waiting for a slot now. */
  get queued(): number {
    return this.waiting.length;
  }

  /** Boots holding a slot now. */
  get booting(): number {
    return this.running;
  }

  /**
   * Pool fills that may boot at once (`tryRun`'s bound): one slot fewer than `slots`, at least
   * one, so a create never waits behind pools alone; `unboundedDefault` when `slots` is 0.
   */
  poolSlots(unboundedDefault: number): number {
    return this.slots === 0 ? unboundedDefault : Math.max(1, this.slots - 1);
  }

  /**
   * Runs a lease create's `boot` once a slot is free (at once when one is), and frees the slot
   * when it settles, whether it resolved or threw. Resolves or rejects as `boot` does.
   */
  async run<T>(boot: () => Promise<T>): Promise<T> {
    if (this.slots !== 0 && this.running >= this.slots) await new Promise<void>((admit) => this.waiting.push(admit));
    else this.running += 1;
    return this.hold(boot);
  }

  /**
   * Runs a pool fill's `boot` now if a slot is spare — no create waits, and one slot stays free
   * for creates where there are two or more — else returns null without running it.
   */
  async tryRun<T>(boot: () => Promise<T>): Promise<T | null> {
    const spare = this.slots === 0 || (this.waiting.length === 0 && this.running < this.poolSlots(Infinity));
    if (!spare) return null;
    this.running += 1;
    return this.hold(boot);
  }

  private async hold<T>(boot: () => Promise<T>): Promise<T> {
    try {
      return await boot();
    } finally {
      const next = this.waiting.shift();
      // The slot passes straight to the next boot: `running` stays, so no boot arriving meanwhile can take it.
      if (next) next();
      else this.running -= 1;
    }
  }
}
