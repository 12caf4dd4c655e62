/**
 * Call events (docs/DESIGN.md §3). The control plane's ledger gives each event its `seq` (per call,
 * from 1, gap-free); SSE uses `seq` as the event id so `Last-Event-ID` resumes exactly.
 */
import { z } from 'zod';
import { ErrorInfo } from './errors.js';
import { EffectReceipt, ResultStatus, Timestamp } from './objects.js';

export const OutputStream = z.enum(['stdout', 'stderr']);
export type OutputStream = z.infer<typeof OutputStream>;

/** An event body before the ledger numbers it. */
export const EventBody = z.discriminatedUnion('type', [
  z.object({ type: z.literal('call.accepted'), tool: z.string(), fingerprint: z.string() }),
  z.object({ type: z.literal('call.denied'), error: ErrorInfo }),
  z.object({ type: z.literal('call.queued') }),
  /** The policy's tool rules say `ask`: the call waits for an approver, bound to its fingerprint, until `expiresAt`. */
  z.object({ type: z.literal('call.pending_approval'), rule: z.string(), fingerprint: z.string(), expiresAt: z.string() }),
  /** An approver let the call run (`by`: the key id); it is queued next. */
  z.object({ type: z.literal('call.approved'), by: z.string() }),
  z.object({ type: z.literal('call.started'), attemptId: z.string(), pid: z.number().int().nullable() }),
  /** A background task handed back its handle; its output events go on until `call.finished`. */
  z.object({ type: z.literal('call.detached'), attemptId: z.string(), pid: z.number().int().nullable() }),
  /**
   * A chunk of output. `offset` is the byte position of the chunk's first byte within its stream;
   * `dataBase64` carries the bytes exactly (a chunk may split a UTF-8 sequence). `combined: true`
   * (exec `combinedOutput`): the chunk is of the one stream holding stdout and stderr in the order
   * written, carried as `stdout`.
   */
  z.object({
    type: z.literal('output'),
    stream: OutputStream,
    offset: z.number().int().nonnegative(),
    dataBase64: z.string(),
    combined: z.literal(true).optional(),
  }),
  z.object({
    type: z.literal('output.truncated'),
    stream: OutputStream,
    keptBytes: z.number().int(),
    combined: z.literal(true).optional(),
  }),
  z.object({ type: z.literal('call.cancel_requested') }),
  z.object({ type: z.literal('call.cancel_acknowledged'), attemptId: z.string().nullable() }),
  z.object({ type: z.literal('call.timed_out'), timeoutMs: z.number().int() }),
  z.object({ type: z.literal('receipt'), receipt: EffectReceipt }),
  /** An artifact of the call is stored and verified. */
  z.object({ type: z.literal('artifact'), artifactId: z.string(), name: z.string(), size: z.number().int(), sha256: z.string() }),
  z.object({ type: z.literal('call.finished'), status: ResultStatus }),
]);
export type EventBody = z.infer<typeof EventBody>;
export type EventType = EventBody['type'];

/** An event as stored and served: the body plus its number and time. */
export const CallEvent = z.intersection(z.object({ seq: z.number().int().positive(), at: Timestamp, callId: z.string() }), EventBody);
export type CallEvent = z.infer<typeof CallEvent>;
