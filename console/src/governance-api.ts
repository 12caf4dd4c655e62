/**
 * Schemas of the answers the approvals and proposals pages show (the fields they show; the
 * server's shapes are `PendingApproval` in control-plane/calls/approval-service.ts and
 * `ProposalView` in control-plane/policies/proposal-service.ts).
 */
import * as z from 'zod/mini';

/** One call waiting for approval (`GET /v1/approvals`). */
export const PendingApproval = z.object({
  sandboxId: z.string(),
  callId: z.string(),
  tool: z.string(),
  args: z.record(z.string(), z.unknown()),
  truncatedArgs: z.array(z.string()),
  fingerprint: z.string(),
  rule: z.string(),
  createdAt: z.string(),
  expiresAt: z.string(),
});
export type PendingApproval = z.infer<typeof PendingApproval>;
export const PendingApprovalList = z.object({ approvals: z.array(PendingApproval) });

/** A call as approve/deny answer it (contract `CallView`: the fields the page reports). */
export const CallOutcome = z.object({
  callId: z.string(),
  status: z.string(),
  result: z.nullable(z.object({ status: z.string(), error: z.optional(z.nullable(z.object({ code: z.string() }))) })),
});

/** A call's resolved arguments, whole (`GET /v1/sandboxes/:id/calls/:callId`). */
export const CallArgs = z.object({ args: z.record(z.string(), z.unknown()) });

/** Where a proposed change comes from: one denied request. */
export const Evidence = z.object({
  leaseId: z.string(),
  callId: z.optional(z.nullable(z.string())),
  at: z.string(),
  host: z.string(),
  port: z.number(),
  method: z.string(),
  path: z.nullable(z.string()),
});
export type Evidence = z.infer<typeof Evidence>;

/** One change of the allowlist (`kind`: add_host, add_ports, add_http_allow). */
export const ProposalChange = z.object({
  kind: z.string(),
  host: z.string(),
  ruleIndex: z.optional(z.number()),
  ports: z.optional(z.array(z.number())),
  methods: z.optional(z.array(z.string())),
  paths: z.optional(z.array(z.string())),
  evidence: z.array(Evidence),
  denials: z.number(),
});
export type ProposalChange = z.infer<typeof ProposalChange>;

/** `GET /v1/policies/:name/proposals`. */
export const ProposalView = z.object({
  policy: z.object({ name: z.string(), version: z.number(), digest: z.string() }),
  digest: z.string(),
  leasesRead: z.number(),
  changes: z.array(ProposalChange),
  notProposed: z.array(z.object({ reason: z.string(), evidence: z.array(Evidence), denials: z.number() })),
  proposed: z.record(z.string(), z.unknown()),
});
export type ProposalView = z.infer<typeof ProposalView>;
