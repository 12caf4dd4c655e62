/**
 * What every figure gets: the API client of the control plane under test, a dockerode client of
 * the same engine, the settings, and helpers to lease sandboxes (remembered for cleanup), run
 * calls that must succeed, and read memory of the plane and of agents. Figures that share work
 * (the floor's samples, a fleet of leased sandboxes, the upload tree) hand it over in `carried`.
 */
import { readFile } from 'node:fs/promises';
import Docker from 'dockerode';
import { SbxClient } from '../sdk/index.js';
import { connectRedis, redisOptions, type Redis } from '../control-plane/redis/connections.js';
import type { ToolResult } from '../contract/objects.js';
import { memoryOf, agentPid, cpuTimeMsOf, type Memory } from './procfs.js';
import type { BenchUpstream } from './egress-upstream.js';
import type { RunningPlane } from './plane.js';
import type { Settings } from './settings.js';
import { mapLimit } from './stats.js';
import { treeOf, type Tree } from './tree.js';

/** Leased sandboxes made together, with how long each create took. */
export interface Fleet {
  ids: string[];
  /** Per successful create, ms. */
  latenciesMs: number[];
  /** Messages of the creates that failed. */
  errors: string[];
  /** How they were made, for the figure that reports them (`100 creates at once`). */
  how: string;
  /** The control plane's RSS before the first create. */
  planeRssBeforeBytes: number;
}

/**
 * Work one figure hands to a later one of the same run (bench/run.ts runs them in that order);
 * the taker clears the field. A figure run alone makes its own.
 */
export interface Carried {
  /** exec-rtt's samples of the physical floor, taken between its calls: the `floor` row reports them. */
  floor?: { forkMs: number[]; pingMs: number[] };
  /** Sandboxes the cold burst leased, for `density` to measure and release. */
  fleet?: Fleet;
  /** The throughput figure's sandboxes, for `cp-cpu` to call into and release. */
  callers?: string[];
  /** When the burst pool got its first claim (performance.now(), ms): burst-warm reports the fill time from it. */
  burstPrimedAtMs?: number;
  /** The HTTPS server egress-https fetches from, started with the plane (its proxy resolves and trusts it). */
  egressUpstream?: BenchUpstream;
}

export class BenchContext {
  readonly client: SbxClient;
  readonly docker: Docker;
  /** Leases made through `lease()` and not yet released. */
  private readonly live = new Set<string>();
  private readonly agentPids = new Map<string, number>();
  private readonly deferred: string[] = [];
  private redisConnection: Redis | undefined;
  private tree: Promise<Tree> | undefined;
  readonly carried: Carried = {};

  constructor(
    readonly plane: RunningPlane,
    readonly settings: Settings,
    /** Progress lines go here (stderr), the table to stdout. */
    readonly log: (line: string) => void,
    /** Ids of the figures this run runs (`willRun`); none by default (bench:profile runs no figure). */
    private readonly selected: ReadonlySet<string> = new Set(),
  ) {
    this.client = new SbxClient(plane.url, plane.apiKey);
    this.docker = new Docker({ socketPath: plane.config.dockerSocket });
  }

  get image(): string {
    return this.plane.config.image;
  }

  /** Labels for containers the baselines make: the plane's owner, so one sweep removes all. */
  get labels(): Record<string, string> {
    return { 'sbx.owner': this.plane.config.owner, 'sbx.bench': 'baseline' };
  }

  /** The container of lease `id`. */
  container(id: string): string {
    return `sbx-${id}`;
  }

  /** Leases a sandbox (default policy unless `policy`); it is released by `releaseAll` if not before. */
  /** Leases a sandbox (`secrets`: grants, as `POST /v1/sandboxes` takes them); throws unless it is ready. */
  async lease(policy?: string, image?: string, extra: { secrets?: Array<{ name: string }> } = {}): Promise<string> {
    const lease = await this.client.createSandbox({ ...(policy ? { policy } : {}), ...(image ? { image } : {}), ...extra });
    if (lease.status !== 'ready') throw new Error(`lease ${lease.id} is ${lease.status}, not ready`);
    this.live.add(lease.id);
    return lease.id;
  }

  async release(id: string): Promise<void> {
    await this.client.releaseSandbox(id);
    this.live.delete(id);
    this.agentPids.delete(id);
  }

  /**
   * Marks a sandbox to be released by `releaseDeferred` at the end of the figure: a figure that
   * leases one a sample keeps the releases (a container stop and removal each) out of its loop
   * and then releases them together, several at a time. The idle sandboxes meanwhile load both
   * sides of an alternating comparison alike.
   */
  deferRelease(id: string): void {
    this.deferred.push(id);
  }

  /** Releases the sandboxes `deferRelease` marked, `concurrency` at a time; a failure is left to the final sweep. */
  async releaseDeferred(concurrency = 8): Promise<void> {
    const ids = this.deferred.splice(0);
    await mapLimit(ids.length, concurrency, (i) => this.release(ids[i]!).catch(() => undefined));
  }

  async releaseAll(concurrency = 4): Promise<void> {
    const ids = [...this.live];
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < ids.length) await this.release(ids[next++]!).catch(() => undefined);
      }),
    );
  }

  /** Submits a call, waits for its result, throws unless it `succeeded`. */
  async call(id: string, tool: string, args: Record<string, unknown>, waitSeconds = 120): Promise<ToolResult> {
    const r = await this.client.submitCall(id, tool, args, { waitSeconds });
    if (!('status' in r) || !('receipt' in r)) throw new Error(`${tool} did not finish within ${waitSeconds} s`);
    if (r.status !== 'succeeded') throw new Error(`${tool} ${r.status}: ${r.error?.code ?? ''} ${r.error?.message ?? ''}`);
    return r;
  }

  /** Host pid of the agent of lease `id` (looked up once). */
  async agentPidOf(id: string): Promise<number> {
    let pid = this.agentPids.get(id);
    if (pid === undefined) {
      pid = await agentPid(this.docker, this.container(id));
      this.agentPids.set(id, pid);
    }
    return pid;
  }

  /** Memory of the agent of lease `id` (from the host's /proc). */
  async agentMemory(id: string): Promise<Memory> {
    return memoryOf(await this.agentPidOf(id));
  }

  /** A Redis connection to the plane's server (opened on first use, closed by `close`). */
  redis(): Redis {
    this.redisConnection ??= connectRedis(redisOptions(this.plane.config.redis));
    return this.redisConnection;
  }

  /** True when figure `id` runs in this run (a figure hands work over only to one that will take it). */
  willRun(id: string): boolean {
    return this.selected.has(id);
  }

  /** The upload tree (`SBX_BENCH_UPLOAD_BYTES` of random files, as one tar), made once per run. */
  uploadTree(): Promise<Tree> {
    this.tree ??= treeOf(this.settings.upload.bytes);
    return this.tree;
  }

  /** Releases what is left and closes the Redis connection. */
  async close(): Promise<void> {
    await this.releaseDeferred();
    await this.releaseAll(8);
    this.redisConnection?.disconnect();
    this.redisConnection = undefined;
  }

  /** Memory of the control-plane process. */
  planeMemory(): Promise<Memory> {
    return memoryOf(this.plane.pid);
  }

  /** CPU time the control-plane process has used so far, ms (one clock tick resolution). */
  planeCpuMs(): Promise<number> {
    return cpuTimeMsOf(this.plane.pid);
  }

  /**
   * Host pid of the Redis server the plane uses (its `INFO server` process_id), or null when it
   * cannot be told: `INFO` refused (a managed Redis), no pid in the answer, or that pid on this
   * machine not a redis-server (the server runs elsewhere).
   */
  async redisPid(): Promise<number | null> {
    const info = await this.redis()
      .info('server')
      .catch(() => '');
    const pid = Number(/^process_id:(\d+)/m.exec(info)?.[1]);
    if (!Number.isInteger(pid)) return null;
    const comm = await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => '');
    return comm.startsWith('redis-server') ? pid : null;
  }
}
