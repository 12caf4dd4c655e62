/**
 * Tool approvals (issue 16 part 6), the pure half: a policy's `tools.approvals.rules` decide
 * `allow`, `ask` or `deny` for a resolved call — by tool, by effect class, by pattern on the
 * normalized argv (or a script's text), by pattern on the paths it declares — the first rule
 * that matches deciding, `allow` when none does. `ask` holds the call for an approver
 * (service.ts); `deny` ends it `denied` (`policy.tool_denied`).
 *
 * `exec` in a rule's `tools` stands for every tool that runs programs (effect class `process`:
 * exec, terminal, session_start, git_status, git_diff). Patterns: in `argv`, `*` stands for any
 * characters, matched against the argv joined by single spaces (`git push*`), or against the
 * text of a `cmd` script — advisory only: `/usr/bin/git push`, a script, or input piped in later
 * do what the text does not show, so ask for every such call where that matters (a rule of
 * `tools: [exec]` and no argv). In `paths`, `*` is any characters but `/` and `**` any, matched
 * against the call's declared paths, normalized (`..` and `.` resolved, not symlinks); a
 * declared path that contains the pattern's fixed part (moving or removing a parent) matches
 * too. `exec` declares no paths: path rules cover the file tools.
 */
import { z } from 'zod';
import { EffectClass, type Access, type ToolSpec } from '../../contract/tools.js';

/** One rule of `tools.approvals.rules`: what it matches (all given parts must) and its decision. */
export const ApprovalRuleSchema = z
  .object({
    decision: z.enum(['allow', 'ask', 'deny']),
    tools: z
      .array(z.string().regex(/^[a-z_]{1,64}$/))
      .min(1)
      .max(32)
      .optional(),
    effects: z.array(EffectClass).min(1).optional(),
    argv: z.array(z.string().min(1).max(512)).min(1).max(32).optional(),
    paths: z
      .array(
        z
          .string()
          .max(512)
          .regex(/^\/[^\0]*$/, 'an absolute path pattern'),
      )
      .min(1)
      .max(64)
      .optional(),
  })
  .strict();
export type ApprovalRule = z.infer<typeof ApprovalRuleSchema>;

/** The policy section: the rules, and how long a call waits for an approver before it ends denied. */
export const ApprovalsSchema = z
  .object({
    rules: z.array(ApprovalRuleSchema).max(64).default([]),
    /** Seconds a call waits for approval; then it ends `denied` (`approval.expired`). */
    timeoutSeconds: z
      .number()
      .int()
      .min(10)
      .max(7 * 24 * 3600)
      .default(3600),
  })
  .strict();
export type Approvals = z.infer<typeof ApprovalsSchema>;

/** A call as the rules see it: its tool's spec, its normalized args and its declared accesses. */
export interface RuledCall {
  spec: Pick<ToolSpec, 'name' | 'effectClasses'>;
  args: Record<string, unknown>;
  accesses: readonly Access[];
}

/** The decision on a call, and the rule that made it (`tools.approvals.rules[2]`, or `default`). */
export interface ApprovalDecision {
  decision: 'allow' | 'ask' | 'deny';
  rule: string;
}

const regexOf = (pattern: string, any: string, all: string | null): RegExp => {
  const parts = all === null ? [pattern] : pattern.split('**');
  const body = parts
    .map((p) =>
      p
        .split('*')
        .map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
        .join(any),
    )
    .join(all ?? '');
  return new RegExp(`^${body}$`, 's');
};

/** The text an argv rule is matched against: the argv joined by spaces, or a script's text; null for other tools. */
function commandLine(args: Record<string, unknown>): string | null {
  if (Array.isArray(args.argv)) return args.argv.map(String).join(' ');
  return typeof args.cmd === 'string' ? args.cmd : null;
}

/** Every tool that runs programs (exec, terminals, shell sessions, git, which runs what a repository configures): `exec` in a rule's `tools` stands for them all. */
const runsPrograms = (spec: Pick<ToolSpec, 'effectClasses'>): boolean => spec.effectClasses.includes('process');

/** Whether `path` contains what `pattern` names: moving or removing a parent moves or removes what lies below it. */
function holds(path: string, pattern: string): boolean {
  const fixed = pattern.split('*')[0]!.replace(/\/+$/, '');
  return fixed !== '' && (fixed === path || fixed.startsWith(`${path.replace(/\/+$/, '')}/`));
}

/** Decides `call` by `approvals` (absent: allow). Pure. */
export function decideApproval(approvals: Approvals | undefined, call: RuledCall): ApprovalDecision {
  for (const [index, rule] of (approvals?.rules ?? []).entries()) {
    if (rule.tools && !rule.tools.includes(call.spec.name) && !(rule.tools.includes('exec') && runsPrograms(call.spec))) continue;
    if (rule.effects && !rule.effects.some((e) => call.spec.effectClasses.includes(e))) continue;
    if (rule.argv) {
      const line = commandLine(call.args);
      if (line === null || !rule.argv.some((p) => regexOf(p, '.*', null).test(line))) continue;
    }
    if (rule.paths) {
      const paths = call.accesses.flatMap((a) => (a.kind === 'path' ? [a.path] : []));
      if (!paths.some((path) => rule.paths!.some((p) => regexOf(p, '[^/]*', '.*').test(path) || holds(path, p)))) continue;
    }
    return { decision: rule.decision, rule: `tools.approvals.rules[${index}]` };
  }
  return { decision: 'allow', rule: 'default' };
}
