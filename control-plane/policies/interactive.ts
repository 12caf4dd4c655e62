/** The policy's sections for interactive execution (issue 13): `terminals`, `sessions` and `watch`. */
import { z } from 'zod';

const MiB = 1024 * 1024;

/**
 * Terminal limits: `max` open at once per sandbox (one more is `429 terminal.limit_reached`),
 * `idleTimeoutSeconds` with neither input nor output, `maxDurationSeconds` open at all, and
 * `maxOutputBytes` of output kept as events (the backlog a client can resume from; the rest is
 * in the transcript artifact only).
 */
export const TerminalsPolicy = z
  .object({
    max: z.number().int().min(0).max(1000).default(8),
    idleTimeoutSeconds: z
      .number()
      .int()
      .positive()
      .max(7 * 24 * 3600)
      .default(1800),
    maxDurationSeconds: z
      .number()
      .int()
      .positive()
      .max(7 * 24 * 3600)
      .default(24 * 3600),
    maxOutputBytes: z
      .number()
      .int()
      .positive()
      .default(16 * MiB),
  })
  .strict();

/** Shell sessions: `max` running at once in one sandbox (0 disables them; over it `429 session.limit_reached`), `idleTimeoutSeconds` without a command before one ends. */
export const SessionsPolicy = z
  .object({
    max: z.number().int().min(0).max(1000).default(8),
    idleTimeoutSeconds: z
      .number()
      .int()
      .min(1)
      .max(7 * 24 * 3600)
      .default(3600),
  })
  .strict();

/** File watch: `maxConcurrent` SSE watches open at once on one sandbox, across every control-plane process (one more is `429 watch.limit_exceeded`). */
export const WatchPolicy = z.object({ maxConcurrent: z.number().int().min(0).max(256).default(8) }).strict();
