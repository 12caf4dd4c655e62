/** The policy's `terminals` section (issue 13: terminals on a pseudo-terminal). */
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
