/**
 * Admission of sandbox boots: at most `slots` sandboxes of this process are between their
 * container's start and their agent's hello at once; the others wait their turn in order,
 * creates of leases before pool fills.
 *
 * Why: a boot is mostly CPU (the engine's create and start, the writable roots' seeding, the
 * agent's Node start), and a burst started all at once shares the machine so thinly that every
 * boot takes as long as the whole burst. On the bench's 2-core machine, 100 cold creates at once
 * took 107 s at p50 and 30 of them failed: their agents, started together, could not say hello
 * within the 30 s they are given. Admitted a few at a time, each boot takes about as long as one
 * alone, the hello timeout measures an agent rather than the queue, and the burst ends no later.
 */

/** Who waits for a boot: a lease's own create, or a warm pool's fill (which yields to creates). */
export type BootKind = 'lease' | 'pool';

interface Waiter {
  admit: () => void;
}

export class BootGate {
  private running = 0;
  private readonly waiting: Record<BootKind, Waiter[]> = { lease: [], pool: [] };

  /**
   * @param slots boots at once; 0 admits every boot at once (a cluster's nodes boot their own pods).
   * @throws RangeError when `slots` is not a non-negative integer.
   */
  constructor(private readonly slots: number) {
    if (!Number.isInteger(slots) || slots < 0) throw new RangeError(`boot slots must be a non-negative integer, got ${slots}`);
  }

  /** Boots waiting for a slot now. */
  get queued(): number {
    return this.waiting.lease.length + this.waiting.pool.length;
  }

  /** Boots holding a slot now. */
  get booting(): number {
    return this.running;
  }

  /**
   * Runs `boot` once a slot is free (at once when one is), and frees the slot when it settles,
   * whether it resolved or threw. Resolves or rejects as `boot` does.
   */
  async run<T>(kind: BootKind, boot: () => Promise<T>): Promise<T> {
    if (this.slots !== 0 && this.running >= this.slots) {
      await new Promise<void>((admit) => this.waiting[kind].push({ admit }));
    } else {
      this.running += 1;
    }
    try {
      return await boot();
    } finally {
      this.release();
    }
  }

  /** Hands the freed slot to the next waiter (a lease's before a pool's), or gives it back. */
  private release(): void {
    const next = this.waiting.lease.shift() ?? this.waiting.pool.shift();
    // The slot passes straight to the next boot: `running` stays, so no boot arriving meanwhile can take it.
    if (next) next.admit();
    else this.running -= 1;
  }
}
