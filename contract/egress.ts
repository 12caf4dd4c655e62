/**
 * The egress proxy's records on the wire: one connection of a sandbox (`EgressEvent`, the egress
 * log) and the secrets the proxy injected (`CredentialsInjected`, also in a call's receipt).
 */
import { z } from 'zod';
import { Timestamp } from './scalars.js';

/** Secrets the proxy put into requests (policy `secrets.inject`): by name and host (never values), and how often. */
export const CredentialsInjected = z.array(z.object({ secret: z.string(), host: z.string(), count: z.number().int().positive() }));
export type CredentialsInjected = z.infer<typeof CredentialsInjected>;

/**
 * One connection a sandbox asked its egress proxy for (network mode `allowlist`), recorded when
 * it ends or is refused: `GET /v1/sandboxes/:id/egress`.
 */
export const EgressEvent = z.object({
  /** When the proxy received the request. */
  at: Timestamp,
  /** Host as the sandbox asked for it (name or IP literal), and the port. */
  host: z.string(),
  port: z.number().int(),
  /** `CONNECT` (a tunnel, e.g. HTTPS) or the method of a plain-HTTP request. */
  method: z.string(),
  decision: z.enum(['allowed', 'denied']),
  /** The allowlist rule that allowed it, or why it was denied. */
  rule: z.string(),
  /** The address the proxy resolved and dialled (null when denied before resolution). */
  address: z.string().nullable(),
  /** Bytes sent from the sandbox to the destination and back (payload, not headers of a tunnel). */
  bytesOut: z.number().int().nonnegative(),
  bytesIn: z.number().int().nonnegative(),
  durationMs: z.number().nonnegative(),
  /** For an allowed connection that failed: the reason (`ECONNREFUSED`, `no address` …). */
  error: z.string().nullable(),
  /** An HTTPS request the proxy opened (credential injection): its path, without the query. */
  path: z.string().optional(),
  /** The call whose processes asked for it (their proxy credential, control-plane/egress/attribution.ts); null: none named. */
  callId: z.string().nullable().optional(),
  /** Secrets whose values the proxy put into this request, by name (never values), and how often. */
  credentialsInjected: CredentialsInjected.optional(),
  /** Secrets whose placeholder this request carried where no rule puts the value: left as it was. */
  strayPlaceholders: z.array(z.string()).optional(),
});
export type EgressEvent = z.infer<typeof EgressEvent>;
