/**
 * Phases of a policy (issue 16 part 3): a lease starts in the first phase and moves forward
 * only (`POST /v1/sandboxes/:id/phase`). A phase gives the lease its `network` and which of the
 * lease's granted secrets later calls may still use (`secrets.allowed`); e.g. a setup phase with
 * a package registry and a token, then an agent phase with neither. Pure.
 *
 * The policy itself must be `network.mode: allowlist` (the sandbox is made with the egress
 * proxy's plumbing, which every phase uses); a phase's mode `none` is an allowlist with no rules:
 * the proxy denies every connection. A phase's secrets are among the policy's.
 */
import { z } from 'zod';
import { EgressRuleSchema } from '../egress/schema.js';

/** A phase name: lower case, digits and `-`, 1–32 characters. */
export const PhaseName = z.string().regex(/^[a-z][a-z0-9-]{0,31}$/, 'a phase name: lower case, digits and -, starting with a letter');

/** One phase: its name, its network, the secret names its calls may use. */
export const PhaseSchema = z
  .object({
    name: PhaseName,
    network: z.object({ mode: z.enum(['none', 'allowlist']), allow: z.array(EgressRuleSchema).max(1000).default([]) }).strict(),
    secrets: z
      .object({ allowed: z.array(z.string()).default([]) })
      .strict()
      .default({ allowed: [] }),
  })
  .strict();
export type Phase = z.infer<typeof PhaseSchema>;

/** What phase functions read of a policy. */
interface Phased {
  network: { mode: string; allow: readonly object[] };
  secrets: { allowed: readonly string[] };
  phases?: readonly Phase[];
}

/** Cross-field rules of `phases` on the raw policy: distinct names, mode `allowlist`, secrets among `secrets.allowed`. */
export function phaseIssues(p: unknown): Array<{ path: string; message: string }> {
  const policy = p as Partial<Phased> | null;
  const phases = policy?.phases;
  if (!Array.isArray(phases) || phases.length === 0) return [];
  const issues: Array<{ path: string; message: string }> = [];
  if (policy?.network?.mode !== 'allowlist') issues.push({ path: 'phases', message: 'phases need network.mode "allowlist"' });
  const names = phases.map((phase) => (phase as { name?: unknown })?.name);
  if (new Set(names).size !== names.length) issues.push({ path: 'phases', message: 'phase names must be distinct' });
  const allowed = Array.isArray(policy?.secrets?.allowed) ? policy.secrets.allowed : [];
  phases.forEach((phase, i) => {
    const secrets = (phase as { secrets?: { allowed?: unknown } })?.secrets?.allowed;
    if (Array.isArray(secrets))
      secrets.forEach((name, j) => {
        if (!allowed.includes(name as string))
          issues.push({ path: `phases.${i}.secrets.allowed.${j}`, message: `${String(name)} is not in secrets.allowed` });
      });
  });
  return issues;
}

/**
 * `policy` as it holds in phase `name`: its network and secrets sections those of the phase (mode
 * `none` as an allowlist with no rules; the policy's injection rules kept). Throws Error when the
 * policy has no such phase (callers check first: `phaseIndex`).
 */
export function inPhase<P extends Phased>(policy: P, name: string): P {
  const phase = (policy.phases ?? []).find((p) => p.name === name);
  if (phase === undefined) throw new Error(`no phase ${name}`);
  return {
    ...policy,
    network: { ...policy.network, mode: 'allowlist', allow: phase.network.mode === 'none' ? [] : phase.network.allow },
    secrets: { ...policy.secrets, allowed: phase.secrets.allowed },
  };
}

/** The index of phase `name` in `policy`, or -1. */
export function phaseIndex(policy: Pick<Phased, 'phases'>, name: string): number {
  return (policy.phases ?? []).findIndex((p) => p.name === name);
}

/** `policy` in its first phase, or as it is when it has none. */
export function firstPhase<P extends Phased>(policy: P): P {
  const first = policy.phases?.[0];
  return first === undefined ? policy : inPhase(policy, first.name);
}
