/**
 * Applies the lease machine's events to stored leases: `decide` (machine.ts) on the record as
 * read, written by the store's compare-and-swap with its lease event, retried on a fresh read
 * when another writer came first.
 */
import { decide, type LeaseMachineEvent, type Refusal } from './machine.js';
import type { LeaseRecord, LeaseStore } from './store.js';

/** What applying an event did: `applied`, the lease as it is now (null: no lease), and the refusal when it did not apply. */
export interface Applied {
  applied: boolean;
  lease: LeaseRecord | null;
  refusal: Refusal | null;
}

export class LeaseTransitions {
  constructor(
    private readonly store: Pick<LeaseStore, 'transitionLease'>,
    private readonly processId: string,
    private readonly now: () => Date,
  ) {}

  /** Applies `event` to lease `id` (exactly one of several racing processes applies it). */
  async apply(id: string, event: LeaseMachineEvent): Promise<Applied> {
    let refusal: Refusal | null = null;
    // One time per decision: the record's times (`endedAt`, ...) and its event's `at` agree.
    let decidedAt = this.now();
    const result = await this.store.transitionLease(
      id,
      (lease) => {
        decidedAt = this.now();
        const decision = decide(lease, event, { nowMs: decidedAt.getTime(), processId: this.processId });
        refusal = decision.ok ? null : decision.refusal;
        return decision.ok ? decision.transition : null;
      },
      () => decidedAt,
    );
    return { ...result, refusal: result.applied ? null : refusal };
  }
}
