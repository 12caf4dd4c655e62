/**
 * `sbx shell ID [--cmd SCRIPT]`: a terminal in a sandbox (its login shell by default) on this
 * terminal. With a TTY, stdin goes raw (every key, Ctrl-C included, reaches the sandbox) and the
 * window size follows this terminal's (SIGWINCH). Without one (piped stdin), the bytes are sent
 * as they come and the end of stdin ends the input as a typist would: a newline when the last line
 * has none (a terminal's line discipline, and readline, take ^D on a non-empty line as no end),
 * then ^D. Exits with the program's exit code (128 + the signal's number when it was killed; 125
 * for a platform error). Ended by SIGINT, SIGTERM or SIGHUP (Ctrl-C in raw mode is a byte for the
 * sandbox, not a signal), it deletes its terminal first, so nothing it started keeps running.
 */
import { constants } from 'node:os';
import type { Command } from 'commander';
import { MAX_TERMINAL_CELLS } from '../contract/tools/terminal.js';
import { Sandbox, type ConnectionOptions } from '../sdk/index.js';

/** Registers `sbx shell` on `program`. */
export function addShellCommand(program: Command, connection: (opts: { url?: string; apiKey?: string }) => ConnectionOptions): void {
  program
    .command('shell')
    .description("open a terminal in a sandbox (its login shell, or --cmd) on this terminal; exits with the program's exit code")
    .argument('<id>')
    .option('--cmd <script>', 'a script to run on the terminal instead of the login shell')
    .option('--cwd <dir>', 'working directory')
    .action(async (id: string, opts: { cmd?: string; cwd?: string }) => {
      const sandbox = await Sandbox.connect(id, connection(program.opts()));
      process.exitCode = await runShell(sandbox, opts);
    });
  program
    .command('terminals')
    .description("the sandbox's open terminals: id, status, pid (`sbx ps` shows what runs in them)")
    .argument('<id>')
    .action(async (id: string) => {
      const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
      const list = await (await Sandbox.connect(id, connection(global))).terminals.list();
      if (global.json) process.stdout.write(`${JSON.stringify(list, null, 2)}\n`);
      else for (const t of list) process.stdout.write(`${t.terminalId}\t${t.status}\t${t.pid ?? '-'}\n`);
    });
}

/** How long piped input waits for the program's first output before it is sent anyway, ms. */
const PIPED_INPUT_WAIT_MS = 5000;

async function runShell(sandbox: Sandbox, opts: { cmd?: string; cwd?: string }): Promise<number> {
  const out = process.stdout;
  const tty = process.stdin.isTTY === true;
  // Ended by a signal: the terminal goes too (DELETE hangs it up and kills what it started). The
  // handlers are in place before the create, whose program may start before its answer arrives:
  // a signal meanwhile closes the terminal as soon as there is one.
  const exitFor = (signal: NodeJS.Signals): never => process.exit(128 + ((constants.signals as Record<string, number>)[signal] ?? 0));
  let stoppedBy: NodeJS.Signals | null = null;
  let created: { close(): Promise<unknown> } | null = null;
  // Piped input waits for the program's first output (a shell's prompt: its terminal set up),
  // or PIPED_INPUT_WAIT_MS: bash's readline, starting, set the terminal's modes after piped
  // input had arrived, and its EOF was lost (the shell then waited for input forever).
  let firstOutput: () => void = () => undefined;
  const outputSeen = new Promise<void>((resolve) => (firstOutput = resolve));
  const onSignal = (signal: NodeJS.Signals): void => {
    stoppedBy ??= signal;
    if (created)
      void created
        .close()
        .catch(() => undefined)
        .finally(() => exitFor(signal));
  };
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const signal of signals) process.once(signal, onSignal);
  const terminal = await sandbox.terminals
    .create({
      ...windowSize(),
      ...(opts.cmd ? { cmd: opts.cmd } : {}),
      ...(opts.cwd ? { cwd: opts.cwd } : {}),
      onData: (data) => {
        firstOutput();
        out.write(data);
      },
    })
    .catch((err: unknown) => (stoppedBy ? exitFor(stoppedBy) : Promise.reject(err)));
  created = terminal;
  if (stoppedBy) {
    await terminal.close().catch(() => undefined);
    exitFor(stoppedBy);
  }
  // Bytes typed while a write is in flight go together in the next one, in order.
  let pending: Buffer[] = [];
  let writing: Promise<void> | null = null;
  let ended = false;
  const flush = (): void => {
    if (writing || pending.length === 0 || ended) return;
    const data = Buffer.concat(pending);
    pending = [];
    writing = terminal
      .write(data)
      .catch(() => undefined)
      .then(() => {
        writing = null;
        flush();
      });
  };
  let lastByte = 0x0a;
  const onInput = (chunk: Buffer): void => {
    if (chunk.length > 0) lastByte = chunk[chunk.length - 1]!;
    pending.push(chunk);
    flush();
  };
  const onResize = (): void => {
    const size = windowSize();
    void terminal.resize(size.cols, size.rows).catch(() => undefined);
  };
  if (tty) process.stdin.setRawMode(true);
  else await Promise.race([outputSeen, new Promise((resolve) => setTimeout(resolve, PIPED_INPUT_WAIT_MS).unref())]);
  process.stdin.on('data', onInput);
  // Piped stdin: its end is the terminal's EOF, after a newline ending an unfinished last line.
  if (!tty) process.stdin.once('end', () => onInput(Buffer.from(lastByte === 0x0a ? '\x04' : '\n\x04')));
  if (out.isTTY) out.on('resize', onResize);
  try {
    const end = await terminal.exited;
    if (end.signal) return 128 + ((constants.signals as Record<string, number>)[end.signal] ?? 0);
    return end.exitCode ?? 1;
  } finally {
    ended = true;
    process.stdin.off('data', onInput);
    if (tty) process.stdin.setRawMode(false);
    process.stdin.pause();
    out.off('resize', onResize);
    for (const signal of signals) process.off(signal, onSignal);
  }
}

/**
 * This terminal's window, each side clamped to 1..MAX_TERMINAL_CELLS; 80×24 when there is none
 * or it reports 0×0 (a pty nobody sized, a serial console).
 */
function windowSize(): { cols: number; rows: number } {
  const { columns, rows } = process.stdout;
  if (!columns || !rows) return { cols: 80, rows: 24 };
  const clamp = (n: number): number => Math.min(Math.max(n, 1), MAX_TERMINAL_CELLS);
  return { cols: clamp(columns), rows: clamp(rows) };
}
