/** HTTP schemas of the processes domain (`/v1/sandboxes/:id/processes`). */
import { z } from 'zod';
import { MAX_PID, ProcessInfo, SignalName } from '../../contract/tools/processes.js';
import { LeaseParams } from '../leases/schema.js';

export { ProcessInfo };

export const ProcessParams = LeaseParams.extend({
  /** A pid of the sandbox's pid namespace. */
  pid: z.coerce.number().int().min(1).max(MAX_PID),
});

export const SignalBody = z
  .object({
    /** Signal name (signal(7)), default SIGTERM. */
    signal: SignalName.default('SIGTERM'),
  })
  .strict()
  .meta({ examples: [{ signal: 'SIGTERM' }, { signal: 'SIGKILL' }] });
export type SignalBody = z.infer<typeof SignalBody>;

/** `GET /v1/sandboxes/:id/processes`: the process table, and the call (with its receipt) that read it. */
export interface ProcessList {
  processes: ProcessInfo[];
  callId: string;
  receiptId: string | null;
}

/** `POST /v1/sandboxes/:id/processes/:pid/signal`: what was signalled, and the call with its receipt. */
export interface SignalSent {
  pid: number;
  signal: SignalName;
  process: ProcessInfo | null;
  callId: string;
  receiptId: string | null;
}

/** The call is still running after the route's wait: follow it with the calls API. */
export interface StillRunning {
  callId: string;
  status: string;
}
