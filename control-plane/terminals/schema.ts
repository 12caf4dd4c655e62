/** HTTP schemas of terminals (and of stdin to a running call). */
import { z } from 'zod';
import { EnvMap, SandboxPath } from '../../contract/tools.js';
import { TerminalCmd, TerminalSize } from '../../contract/tools/terminal.js';
import { CallId } from '../calls/schema.js';

export { TerminalSize };

/** `POST /v1/sandboxes/:id/terminals`. */
export const CreateTerminalBody = z
  .object({
    /** A script for the sandbox's shell (`-c`); default: the shell as a login shell. */
    cmd: TerminalCmd.optional(),
    cols: TerminalSize.shape.cols,
    rows: TerminalSize.shape.rows,
    cwd: SandboxPath.optional(),
    env: EnvMap.optional(),
  })
  .strict()
  .meta({
    examples: [
      { cols: 120, rows: 40 },
      { cmd: 'python3', cols: 80, rows: 24, cwd: '/workspace' },
    ],
  });
export type CreateTerminalBody = z.infer<typeof CreateTerminalBody>;

export const TerminalParams = z.object({ id: z.string(), terminalId: CallId });

/** Largest input of one request, bytes (decoded). */
export const MAX_INPUT_BYTES = 1024 * 1024;

/** Bytes for a terminal or a piped stdin: `data` (UTF-8 text) or `dataBase64` (any bytes), not both. */
const InputBytes = {
  data: z.string().max(MAX_INPUT_BYTES).optional(),
  dataBase64: z
    .string()
    .max(Math.ceil(MAX_INPUT_BYTES / 3) * 4)
    .regex(/^[A-Za-z0-9+/]*={0,2}$/, 'must be base64')
    .optional(),
};

/** `POST .../terminals/:terminalId/input`. */
export const TerminalInputBody = z
  .object(InputBytes)
  .strict()
  .refine((b) => (b.data === undefined) !== (b.dataBase64 === undefined), {
    message: 'give exactly one of data or dataBase64',
    path: ['data'],
  })
  .meta({ examples: [{ data: 'ls -la\r' }, { dataBase64: 'Aw==' }] });
export type TerminalInputBody = z.infer<typeof TerminalInputBody>;

/** `POST /v1/sandboxes/:id/calls/:callId/stdin`: bytes, and/or `eof` (close stdin after them). */
export const StdinBody = z
  .object({ ...InputBytes, eof: z.boolean().default(false) })
  .strict()
  .refine((b) => b.data === undefined || b.dataBase64 === undefined, { message: 'give at most one of data or dataBase64', path: ['data'] })
  .refine((b) => b.data !== undefined || b.dataBase64 !== undefined || b.eof, { message: 'give data, dataBase64 or eof', path: ['data'] })
  .meta({ examples: [{ data: 'yes\n' }, { dataBase64: 'AAEC', eof: true }, { eof: true }] });
export type StdinBody = z.infer<typeof StdinBody>;

export const StdinParams = z.object({ id: z.string(), callId: CallId });

/** `?offset=BYTES` of the WebSocket attach: the output bytes the client has already (0: send the whole backlog). */
export const AttachQuery = z.object({ offset: z.coerce.number().int().min(0).optional() }).strict();

/**
 * A terminal as the API shows it. `status`: `starting` (queued), `running`, `exited` (its
 * program ended, it was deleted, or timed out: `result` says which, with `exitCode`, `signal`,
 * the receipt and the transcript artifact).
 */
export interface TerminalView {
  terminalId: string;
  status: 'starting' | 'running' | 'exited';
  pid: number | null;
  exitCode: number | null;
  signal: string | null;
  /** The call's final result (receipt, `data.transcript`), once exited. */
  result: unknown;
}
