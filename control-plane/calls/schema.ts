/** HTTP schemas of the calls domain. */
import { z } from 'zod';

/**
 * Client-chosen call ids: safe in Redis keys, BullMQ job ids and URLs. Not all digits: BullMQ
 * refuses integer-like custom job ids.
 */
export const CallId = z
  .string()
  .regex(/^[A-Za-z0-9_-]{1,128}$/, 'letters, digits, _ and -; at most 128')
  .regex(/[^0-9]/, 'must not be all digits');

export const SubmitCallBody = z
  .object({
    tool: z.string().min(1),
    args: z.record(z.string(), z.unknown()),
    /** Dedupe handle: resubmitting the same callId with the same args returns the same call. */
    callId: CallId.optional(),
  })
  .strict()
  .meta({
    examples: [
      { tool: 'exec', args: { cmd: 'npm test', timeoutMs: 600_000 } },
      { tool: 'exec', args: { argv: ['git', 'log', '-1'], cwd: '/workspace' }, callId: 'build-42-log' },
      { tool: 'write_file', args: { path: '/workspace/hello.txt', content: 'hello\n' } },
      { tool: 'read_file', args: { path: '/workspace/hello.txt' } },
    ],
  });
export type SubmitCallBody = z.infer<typeof SubmitCallBody>;

/** `?wait=SECONDS`: how long to hold the response for the result (0–300). */
export const SubmitCallQuery = z.object({ wait: z.coerce.number().min(0).max(300).optional() }).strict();

/** `GET /v1/sandboxes/:id/calls`: how many of the newest calls (default 100). */
export const ListCallsQuery = z.object({ limit: z.coerce.number().int().min(1).max(1000).default(100) }).strict();

export const CallParams = z.object({ id: z.string(), callId: CallId });

export const ReceiptParams = z.object({ receiptId: z.string() });

/**
 * Headers of the event stream: `Last-Event-ID`, the `seq` of the last event received (resume
 * after it). Loose: the other headers pass through unchecked.
 */
export const CallEventsHeaders = z
  .object({
    'last-event-id': z
      .string()
      .regex(/^\d{1,15}$/, 'Last-Event-ID must be a non-negative integer seq')
      .optional(),
  })
  .loose();
