/**
 * What every figure gets: the API client of the control plane under test, a dockerode client of
 * the same engine, the settings, and helpers to lease sandboxes (remembered for cleanup), run
 * calls that must succeed, and read memory of the plane and of agents.
 */
import Docker from 'dockerode';
import { SbxClient } from '../sdk/index.js';
import { connectRedis, redisOptions, type Redis } from '../control-plane/redis/connections.js';
import type { ToolResult } from '../contract/objects.js';
import { memoryOf, agentPid, type Memory } from './procfs.js';
import type { RunningPlane } from './plane.js';
import type { Settings } from './settings.js';

export class BenchContext {
  readonly client: SbxClient;
  readonly docker: Docker;
  /** Leases made through `lease()` and not yet released. */
  private readonly live = new Set<string>();
  private readonly agentPids = new Map<string, number>();
  private redisConnection: Redis | undefined;

  constructor(
    readonly plane: RunningPlane,
    readonly settings: Settings,
    /** Progress lines go here (stderr), the table to stdout. */
    readonly log: (line: string) => void,
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
  async lease(policy?: string, image?: string): Promise<string> {
    const lease = await this.client.createSandbox({ ...(policy ? { policy } : {}), ...(image ? { image } : {}) });
    if (lease.status !== 'ready') throw new Error(`lease ${lease.id} is ${lease.status}, not ready`);
    this.live.add(lease.id);
    return lease.id;
  }

  async release(id: string): Promise<void> {
    await this.client.releaseSandbox(id);
    this.live.delete(id);
    this.agentPids.delete(id);
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

  /** Memory of the agent of lease `id` (from the host's /proc). */
  async agentMemory(id: string): Promise<Memory> {
    let pid = this.agentPids.get(id);
    if (pid === undefined) {
      pid = await agentPid(this.docker, this.container(id));
      this.agentPids.set(id, pid);
    }
    return memoryOf(pid);
  }

  /** A Redis connection to the plane's server (opened on first use, closed by `close`). */
  redis(): Redis {
    this.redisConnection ??= connectRedis(redisOptions(this.plane.config.redis));
    return this.redisConnection;
  }

  /** Releases what is left and closes the Redis connection. */
  async close(): Promise<void> {
    await this.releaseAll();
    this.redisConnection?.disconnect();
    this.redisConnection = undefined;
  }

  /** Memory of the control-plane process. */
  planeMemory(): Promise<Memory> {
    return memoryOf(this.plane.pid);
  }
}
