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

/**
 * Piped stdin a call may have waiting for its process at once, bytes (8 MiB): accepted by
 * `POST .../stdin` and not yet taken by the process's pipe. A write past it is `429
 * call.stdin_full`, refused whole; nothing accepted is ever dropped.
 */
export const MAX_PENDING_STDIN_BYTES = 8 * MAX_INPUT_BYTES;

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

/** Default and largest lifetime of a signed terminal URL, seconds. */
export const TERMINAL_URL_DEFAULT_SECONDS = 300;
export const TERMINAL_URL_MAX_SECONDS = 24 * 3600;

/** `POST .../terminals/:terminalId/url`. */
export const TerminalUrlBody = z
  .object({
    /** Lifetime of the URL, seconds (at most a day, and never past the sandbox's `expiresAt`). Default 300. */
    expiresInSeconds: z.number().int().min(1).max(TERMINAL_URL_MAX_SECONDS).default(TERMINAL_URL_DEFAULT_SECONDS),
  })
  .strict()
  .meta({ examples: [{ expiresInSeconds: 60 }] });

/** A signed WebSocket URL of one terminal, for browsers (no API key: the token in its path is the credential). */
export interface TerminalUrl {
  /** `ws://` or `wss://` URL of the attach, as the API was reached. */
  url: string;
  /** The same without scheme and host. */
  path: string;
  expiresAt: string;
  terminalId: string;
}

/** Params of the signed attach route `/v1/terminal-ws/:id/:terminalId/:token`. */
export const SignedAttachParams = TerminalParams.extend({ token: z.string().min(1).max(100) });
