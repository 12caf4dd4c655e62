/**
 * Warm pools' settings and the port they start sandboxes through (the lease service implements
 * it). A leaf: config.ts reads `SBX_WARM_POOLS` with `PoolSpec`.
 */
import { z } from 'zod';
import type { PolicyRef, SandboxFacts } from '../../contract/objects.js';

/** One configured pool (`SBX_WARM_POOLS`, a JSON array of these). */
export const PoolSpec = z
  .object({
    /** Policy name; the pool follows its latest version (sandboxes of an older one are replaced). */
    policy: z.string().min(1),
    /** Image; default the control plane's default image. */
    image: z.string().min(1).optional(),
    /** Ready sandboxes kept while the pool is idle. */
    min: z.number().int().min(0).max(100),
    /** Ready sandboxes kept while leases claim from it. */
    max: z.number().int().min(1).max(100),
    /** No claim for this long and the pool shrinks back to `min`, seconds. Default 600. */
    idleSeconds: z.number().int().positive().default(600),
  })
  .strict()
  .refine((p) => p.min <= p.max, { message: 'min must be ≤ max', path: ['min'] });
export type PoolSpec = z.infer<typeof PoolSpec>;

/** A started sandbox whose agent said hello. */
export interface Launched {
  containerId: string;
  facts: SandboxFacts;
  /** Writable roots that started with the image's content (`SandboxRuntime.start`); absent: none known. */
  seededPaths?: string[];
}

/** A pooled sandbox a lease claimed: its id (the lease's from now on), container and facts. */
export interface WarmSandbox extends Launched {
  id: string;
}

/** A sandbox started for a pool: the policy version, image name and engine image id it runs. */
export type WarmLaunched = Launched & { ref: PolicyRef; image: string; imageId: string };

/** What the pools need from the lease service: start (null: no boot slot spare, nothing made) and remove unleased sandboxes. */
export interface WarmLauncher {
  launchWarm(id: string, policy: { name: string }, image: string): Promise<WarmLaunched | null>;
  discardWarm(id: string): Promise<void>;
}
