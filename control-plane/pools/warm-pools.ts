/**
 * Warm pools: sandboxes started ahead of demand, per (policy version, image), so a lease that
 * matches one takes a started, agent-ready sandbox instead of waiting for a container.
 *
 * State lives in Redis (`store.ts`), shared by every control-plane process of the installation.
 * A claim pops an id and deletes its member record in one Lua script, so no two leases get one
 * sandbox, and a claimed sandbox leaves the pool for good: it is released like any lease and
 * never comes back. Reconcile leaves members alone (`owns`); the pool's own health check
 * replaces members whose container stopped.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { LEASE_ID_PREFIX, type PolicyRef } from '../../contract/objects.js';
import type { Ownership, SandboxRuntime } from '../runtime/runtime.js';
import type { PoolSpec, WarmLauncher, WarmSandbox } from './schema.js';
import type { PoolStore } from './store.js';

/** A claim not settled after this long belongs to a create that died; reconcile may reap it, ms. */
const CLAIM_SETTLE_MS = 60_000;

export interface WarmPoolsDeps {
  store: Pick<
    PoolStore,
    | 'pop'
    | 'markClaimed'
    | 'lastClaimedAt'
    | 'settle'
    | 'claims'
    | 'owns'
    | 'membersOf'
    | 'putStarting'
    | 'putReady'
    | 'takeReady'
    | 'forget'
    | 'holdFiller'
  >;
  /** Whose containers the pools look at (this installation's only). */
  ownership: Ownership;
  defaultImage: string;
  launcher: WarmLauncher;
  runtime: Pick<SandboxRuntime, 'listOwned'>;
  /** The latest version of a policy now (the pools refill when it changes). */
  latestPolicy: (name: string) => Promise<PolicyRef>;
  log: Logger;
  now: () => number;
  /** Reports a pool's sizes after each maintenance round (metrics). */
  onSizes?: (pool: string, sizes: { starting: number; ready: number }) => void;
  /**
   * Sandboxes a round starts at once for a pool below its target (the boot slots a pool may use,
   * SBX_BOOT_CONCURRENCY less the one left to lease creates; a start finding none spare makes
   * nothing and waits for the next round). Default 1.
   */
  startsPerRound?: number;
}

/** A filler lock lives this long without renewal, ms. */
const FILLER_LOCK_MS = 30_000;

/** A member still `starting` after this long was left by a process that died mid-start, ms. */
const STALE_STARTING_MS = 120_000;

export class WarmPools {
  private readonly specs: Array<PoolSpec & { name: string; image: string }>;
  private readonly token = randomBytes(8).toString('hex');

  constructor(
    private readonly deps: WarmPoolsDeps,
    specs: readonly PoolSpec[],
  ) {
    this.specs = specs.map((s) => {
      const image = s.image ?? deps.defaultImage;
      return { ...s, image, name: `${s.policy}@${image}` };
    });
  }

  /**
   * Takes a ready sandbox of the pool for (`ref`, `image`), or undefined when there is none (the
   * lease then starts cold). A popped sandbox of another policy version, or of another image
   * than `imageId` (the engine's id of what `image` names now: its tag moved since), is
   * discarded, not used: the lease's manifest describes what the plan resolved.
   */
  async claim(ref: PolicyRef, image: string, imageId: string): Promise<WarmSandbox | undefined> {
    const spec = this.specs.find((s) => s.policy === ref.name && s.image === image);
    if (!spec) return undefined;
    await this.deps.store.markClaimed(spec.name, this.deps.now());
    for (;;) {
      const member = await this.deps.store.pop(spec.name, this.deps.now());
      if (member === null) return undefined;
      if (member.sandbox && member.sandbox.ref.digest === ref.digest && member.sandbox.imageId === imageId)
        return {
          id: member.sandbox.id,
          containerId: member.sandbox.containerId,
          facts: member.sandbox.facts,
          seededPaths: member.sandbox.seededPaths,
        };
      if (member.sandbox) void this.discard(member.sandbox.id);
    }
  }

  /** The claiming lease's record exists now (or its create failed and tore the sandbox down). */
  async settle(id: string): Promise<void> {
    await this.deps.store.settle(id);
  }

  /**
   * True when `id` is a pooled sandbox (starting, ready, or claimed and not yet settled): not
   * an orphan, though no lease names it.
   */
  owns(id: string): Promise<boolean> {
    return this.deps.store.owns(id);
  }

  /**
   * One maintenance round of every pool this process may fill (it holds the pool's filler
   * lock): drops members whose container stopped or whose start was abandoned, replaces
   * sandboxes of an older policy version, grows to `max` while leases claimed within
   * `idleSeconds` (else to `min`), and shrinks past the target.
   */
  async maintain(): Promise<void> {
    const claims = await this.deps.store.claims();
    await this.deps.store.settle(...[...claims].filter(([, at]) => this.deps.now() - at > CLAIM_SETTLE_MS).map(([id]) => id));
    // One listing of the runtime serves every pool of the round.
    let running: Set<string> | undefined;
    for (const spec of this.specs) {
      if (!(await this.lock(spec.name))) continue;
      try {
        running ??= new Set((await this.deps.runtime.listOwned(this.deps.ownership)).filter((c) => c.running).map((c) => c.leaseId));
        await this.maintainPool(spec, running);
      } catch (err) {
        this.deps.log.warn({ pool: spec.name, err }, 'warm pool maintenance failed');
      }
    }
  }

  /** One pool's round; `running` holds the ids of this installation's running containers. */
  private async maintainPool(spec: PoolSpec & { name: string; image: string }, running: ReadonlySet<string>): Promise<void> {
    const { store, now } = this.deps;
    const members = await store.membersOf(spec.name);
    const latest = await this.deps.latestPolicy(spec.policy);
    for (const [id, m] of members) {
      const dead = m.state === 'ready' && !running.has(id);
      const stale = m.state === 'starting' && now() - m.since > STALE_STARTING_MS;
      const outdated = m.state === 'ready' && m.sandbox?.ref.digest !== latest.digest;
      if (!dead && !stale && !outdated) continue;
      // Only a member still in the ready list is this round's to remove (a claim may have taken it).
      if (m.state === 'ready' && !(await store.takeReady(spec.name, id))) continue;
      await store.forget(id);
      members.delete(id);
      this.deps.log.info(
        { pool: spec.name, sandboxId: id, reason: dead ? 'container stopped' : stale ? 'start abandoned' : 'policy changed' },
        'pooled sandbox replaced',
      );
      await this.discard(id);
    }
    const claimedAt = await store.lastClaimedAt(spec.name);
    const target = now() - claimedAt < spec.idleSeconds * 1000 ? spec.max : spec.min;
    const ready = [...members.values()].filter((m) => m.state === 'ready').length;
    const starting = members.size - ready;
    this.deps.onSizes?.(spec.name, { starting, ready });
    if (members.size < target) {
      const starts = Math.min(target - members.size, this.deps.startsPerRound ?? 1);
      await Promise.allSettled(Array.from({ length: starts }, () => this.startOne(spec)));
    } else if (ready > target) {
      const member = await store.pop(spec.name, now());
      if (member?.sandbox) {
        await this.discard(member.sandbox.id);
        await this.settle(member.sandbox.id);
      }
    }
  }

  /** Starts one sandbox for the pool; on failure its member record goes and the error is logged. */
  private async startOne(spec: PoolSpec & { name: string; image: string }): Promise<void> {
    const { store, now } = this.deps;
    const id = `${LEASE_ID_PREFIX}${randomBytes(10).toString('hex')}`;
    await store.putStarting(id, { pool: spec.name, state: 'starting', since: now(), sandbox: null });
    try {
      const launched = await this.deps.launcher.launchWarm(id, { name: spec.policy }, spec.image);
      // No boot slot spare (lease creates first): nothing was made; the next round tries again.
      if (launched === null) {
        await store.forget(id);
        return;
      }
      await store.putReady(id, {
        pool: spec.name,
        state: 'ready',
        since: now(),
        sandbox: {
          id,
          containerId: launched.containerId,
          facts: launched.facts,
          ref: launched.ref,
          image: launched.image,
          imageId: launched.imageId,
          seededPaths: launched.seededPaths,
        },
      });
    } catch (err) {
      await store.forget(id);
      this.deps.log.warn({ pool: spec.name, sandboxId: id, err }, 'warm pool could not start a sandbox');
    }
  }

  private async discard(id: string): Promise<void> {
    await this.deps.launcher
      .discardWarm(id)
      .catch((err: unknown) => this.deps.log.warn({ sandboxId: id, err }, 'pooled sandbox could not be removed'));
  }

  /** Takes or renews this process's filler lock of `pool` (30 s): one process fills a pool at a time. */
  private lock(pool: string): Promise<boolean> {
    return this.deps.store.holdFiller(pool, this.token, FILLER_LOCK_MS);
  }

  /** The pool names with their specs, for `GET` views and metrics. */
  get pools(): ReadonlyArray<PoolSpec & { name: string; image: string }> {
    return this.specs;
  }
}
