/**
 * `Metrics`: the control plane's Prometheus metrics, on a registry of its own (never
 * prom-client's global one), so several control planes in one process — the tests, a bench —
 * each count only their own work.
 *
 * Label values come only from closed sets sbx defines (lease states, tool names of the registry,
 * result statuses, egress decisions, reconcile actions, pool names set by an admin), never from
 * client input, so no client can grow the series count, and no sandbox id, tenant, label or
 * secret ever appears in a metric.
 *
 * Two kinds of metric: counters and histograms this process moves as things happen (summed
 * across control planes by Prometheus), and gauges read from shared state (the ledger, the
 * queues) at scrape time, so every control plane reports the same installation-wide value.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { LeaseStatus } from '../../contract/objects.js';

/** How a lease was made: `cold` starts a container for it; `warm` hands out one a pool had ready. */
export type LeaseCreatePath = 'cold' | 'warm';

/** What `LeaseService.reconcile` did, by action: lease ids adopted, removed, lost. */
export interface ReconcileOutcome {
  adopted: readonly string[];
  removed: readonly string[];
  lost: readonly string[];
}

/** Jobs on the call queues of the live leases: `waiting` (not taken by the agent yet) and `active` (taken, running). */
export interface QueueDepth {
  waiting: number;
  active: number;
}

export interface MetricsSources {
  /** Number of leases in each state, from the ledger; states it leaves out count 0. */
  leaseStates: () => Promise<Record<string, number>>;
  /** Jobs on the call queues of live leases, summed over leases. */
  queueDepth: () => Promise<QueueDepth>;
  /** The node of each live sandbox, leased or pooled (`OwnedSandbox.node`: null while not scheduled). */
  sandboxNodes: () => Promise<Array<string | null>>;
  /** Sandboxes this process is booting (container start to agent hello) and waiting for a boot slot (leases/boot-gate.ts). */
  sandboxBoots: () => { booting: number; queued: number };
}

/** The part of `Metrics` the lease lifecycle and warm pools report to. */
export type LeaseMetrics = Pick<Metrics, 'leaseCreated' | 'setPoolSize'>;

/** Lease creation takes ~0.3 s cold (README), a warm hand-out far less; a minute is the hello timeout's order. */
const LEASE_CREATE_BUCKETS_SECONDS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60];
/** Calls range from a ~20 ms echo to builds of many minutes. */
const CALL_DURATION_BUCKETS_SECONDS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800];

export class Metrics {
  /** The registry `GET /metrics` renders. */
  readonly registry = new Registry();
  private readonly leaseCreate: Histogram<'path'>;
  private readonly calls: Counter<'tool' | 'status'>;
  private readonly callDuration: Histogram<'tool'>;
  private readonly pools: Gauge<'pool' | 'state'>;
  private readonly reconcileActions: Counter<'action'>;
  private readonly egressDecisions: Counter<'decision'>;

  constructor(sources: MetricsSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, prefix: 'sbx_' });
    new Gauge({
      name: 'sbx_leases',
      help: 'Leases in the ledger by state (read from the ledger at scrape time).',
      labelNames: ['state'],
      registers,
      async collect() {
        const counts = await sources.leaseStates();
        this.reset();
        // Every known state is reported, 0 included, so a state that empties is seen to.
        for (const state of new Set([...LeaseStatus.options, ...Object.keys(counts)])) this.set({ state }, counts[state] ?? 0);
      },
    });
    new Gauge({
      name: 'sbx_sandboxes',
      help: 'Live sandboxes, leased or pooled, by the node they run on (`local`: the one Docker engine; `unscheduled`: a Pod no node took yet; listed from the runtime at scrape time).',
      labelNames: ['node'],
      registers,
      async collect() {
        const counts = new Map<string, number>();
        for (const node of (await sources.sandboxNodes()).map((n) => n ?? 'unscheduled')) counts.set(node, (counts.get(node) ?? 0) + 1);
        this.reset();
        for (const [node, count] of counts) this.set({ node }, count);
      },
    });
    new Gauge({
      name: 'sbx_call_queue_jobs',
      help: 'Jobs on the call queues of live leases, by state: waiting (not taken by the agent yet), active (taken). Read at scrape time.',
      labelNames: ['state'],
      registers,
      async collect() {
        const depth = await sources.queueDepth();
        this.set({ state: 'waiting' }, depth.waiting);
        this.set({ state: 'active' }, depth.active);
      },
    });
    new Gauge({
      name: 'sbx_sandbox_boots',
      help: 'Sandboxes this process is booting (`booting`: container start to agent hello) and waiting for a boot slot (`queued`; SBX_BOOT_CONCURRENCY).',
      labelNames: ['state'],
      registers,
      collect() {
        const boots = sources.sandboxBoots();
        this.set({ state: 'booting' }, boots.booting);
        this.set({ state: 'queued' }, boots.queued);
      },
    });
    this.leaseCreate = new Histogram({
      name: 'sbx_lease_create_seconds',
      help: 'Time from a create request to a ready lease, seconds, by path: cold (a container started for it) or warm (taken from a pool).',
      labelNames: ['path'],
      buckets: LEASE_CREATE_BUCKETS_SECONDS,
      registers,
    });
    this.calls = new Counter({
      name: 'sbx_calls_total',
      help: 'Tool calls that reached a terminal result, by tool and result status.',
      labelNames: ['tool', 'status'],
      registers,
    });
    this.callDuration = new Histogram({
      name: 'sbx_call_duration_seconds',
      help: "Time from a call's submission to its terminal result, seconds, by tool.",
      labelNames: ['tool'],
      buckets: CALL_DURATION_BUCKETS_SECONDS,
      registers,
    });
    this.pools = new Gauge({
      name: 'sbx_pool_sandboxes',
      help: 'Sandboxes in warm pools, by pool and state, as the pool code last set them.',
      labelNames: ['pool', 'state'],
      registers,
    });
    this.reconcileActions = new Counter({
      name: 'sbx_reconcile_actions_total',
      help: 'What reconciling with the container runtime did to leases: adopted, removed (container without a live lease), lost (live lease without a container).',
      labelNames: ['action'],
      registers,
    });
    this.egressDecisions = new Counter({
      name: 'sbx_egress_decisions_total',
      help: 'Connections sandboxes asked the egress proxy for, by decision (allowed, denied).',
      labelNames: ['decision'],
      registers,
    });
    // Counters that have not moved yet are shown at 0, so a rate() over them starts at once.
    for (const action of ['adopted', 'removed', 'lost']) this.reconcileActions.inc({ action }, 0);
    for (const decision of ['allowed', 'denied']) this.egressDecisions.inc({ decision }, 0);
  }

  /** A lease became ready `seconds` after its create request came in, by `path`. */
  leaseCreated(path: LeaseCreatePath, seconds: number): void {
    this.leaseCreate.observe({ path }, seconds);
  }

  /**
   * A call of `tool` reached terminal result `status` (`succeeded`, `failed`, `denied`,
   * `cancelled`, `timed_out`, `effect_unknown`) `seconds` after it was submitted.
   */
  callFinished(tool: string, status: string, seconds: number): void {
    this.calls.inc({ tool, status });
    this.callDuration.observe({ tool }, seconds);
  }

  /**
   * Sets how many sandboxes pool `pool` holds in `state` (e.g. `starting`, `ready`). The pool
   * code calls it on every change; set 0 for a state that empties rather than leaving it stale.
   */
  setPoolSize(pool: string, state: string, count: number): void {
    this.pools.set({ pool, state }, count);
  }

  /** Sets every state's size of pool `pool` at once (`sizes`: state → count), as the warm pools report them. */
  setPoolSizes(pool: string, sizes: Readonly<Record<string, number>>): void {
    for (const [state, count] of Object.entries(sizes)) this.setPoolSize(pool, state, count);
  }

  /** Counts one reconcile run's actions. */
  reconciled(outcome: ReconcileOutcome): void {
    this.reconcileActions.inc({ action: 'adopted' }, outcome.adopted.length);
    this.reconcileActions.inc({ action: 'removed' }, outcome.removed.length);
    this.reconcileActions.inc({ action: 'lost' }, outcome.lost.length);
  }

  /** Counts one egress proxy decision. */
  egressDecided(decision: 'allowed' | 'denied'): void {
    this.egressDecisions.inc({ decision });
  }

  /** The Prometheus text exposition of every metric; rejects when a scrape-time source fails. */
  async render(): Promise<{ contentType: string; text: string }> {
    return { contentType: this.registry.contentType, text: await this.registry.metrics() };
  }
}
