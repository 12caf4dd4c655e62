/**
 * The process tools: `list_processes` (every process of the sandbox, with what it belongs to)
 * and `signal_process` (one signal to one of the tool user's processes). They run in the agent,
 * touch no file and declare no access, so the scheduler runs them beside anything, also while a
 * foreground `exec` runs (the case that needs them). Their limits are exec's: a policy without
 * `exec` has none of them.
 */
import { z } from 'zod';
import type { ToolSpec } from './spec.js';

/** Signals `signal_process` sends, by name (signal(7)). */
export const SIGNAL_NAMES = [
  'SIGHUP',
  'SIGINT',
  'SIGQUIT',
  'SIGKILL',
  'SIGUSR1',
  'SIGUSR2',
  'SIGTERM',
  'SIGCONT',
  'SIGSTOP',
  'SIGTSTP',
  'SIGWINCH',
] as const;
export const SignalName = z.enum(SIGNAL_NAMES, { message: `a signal name: ${SIGNAL_NAMES.join(', ')}` });
export type SignalName = z.infer<typeof SignalName>;

export const ListProcessesArgs = z.object({}).strict();
export type ListProcessesArgs = z.infer<typeof ListProcessesArgs>;

/** Largest pid Linux allows (PID_MAX_LIMIT, 2^22). */
export const MAX_PID = 4_194_304;

export const SignalProcessArgs = z
  .object({
    pid: z.number().int().min(1).max(MAX_PID),
    signal: SignalName.default('SIGTERM'),
  })
  .strict();
export type SignalProcessArgs = z.infer<typeof SignalProcessArgs>;

/** One process as `list_processes` reports it. */
export const ProcessInfo = z.object({
  pid: z.number().int(),
  ppid: z.number().int(),
  /** User name (the image's /etc/passwd), else the uid as a string. */
  user: z.string(),
  uid: z.number().int(),
  /** argv joined with spaces; `[comm]` for a process without one (a zombie). */
  command: z.string(),
  /** Session id (setsid(2)): what `owner` is looked up by. */
  sid: z.number().int(),
  /** proc(5) state letter (R, S, D, Z, T, ...). */
  state: z.string(),
  /** The call, session, terminal or file transfer the process's session belongs to; null for none (init, the agent, a stray). */
  owner: z.object({ kind: z.enum(['call', 'session', 'terminal', 'transfer']), id: z.string() }).nullable(),
  /** user + system CPU time, ms. */
  cpuTimeMs: z.number().int(),
  /** Resident set size, bytes (0 for a zombie). */
  rssBytes: z.number().int(),
  /** Whether `signal_process` may signal it: the tool user's, and not the agent's own (init, the agent, its worker). */
  killable: z.boolean(),
});
export type ProcessInfo = z.infer<typeof ProcessInfo>;

export const listProcessesSpec: ToolSpec<ListProcessesArgs, 'list_processes'> = {
  name: 'list_processes',
  version: '1',
  description: 'Lists the processes of the sandbox: pid, ppid, user, command, owner (call, session, terminal), CPU time, RSS, killable.',
  args: ListProcessesArgs,
  effectClasses: ['process.read'],
  limits: 'exec',
  accesses: () => [],
};

export const signalProcessSpec: ToolSpec<SignalProcessArgs, 'signal_process'> = {
  name: 'signal_process',
  version: '1',
  description: "Sends a signal (default SIGTERM) to one of the tool user's processes; init, the agent and its worker are refused.",
  args: SignalProcessArgs,
  effectClasses: ['process.signal'],
  limits: 'exec',
  accesses: () => [],
};
