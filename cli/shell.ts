/**
 * `sbx shell ID [--cmd SCRIPT]`: a terminal in a sandbox (its login shell by default) on this
 * terminal. With a TTY, stdin goes raw (every key, Ctrl-C included, reaches the sandbox) and the
 * window size follows this terminal's (SIGWINCH). Without one (piped stdin), the bytes are sent
 * as they come and the end of stdin is a ^D. Exits with the program's exit code (128 + the
 * signal's number when it was killed; 125 for a platform error).
 */
import { constants } from 'node:os';
import type { Command } from 'commander';
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
}

async function runShell(sandbox: Sandbox, opts: { cmd?: string; cwd?: string }): Promise<number> {
  const out = process.stdout;
  const tty = process.stdin.isTTY === true;
  const terminal = await sandbox.terminals.create({
    cols: out.columns ?? 80,
    rows: out.rows ?? 24,
    ...(opts.cmd ? { cmd: opts.cmd } : {}),
    ...(opts.cwd ? { cwd: opts.cwd } : {}),
    onData: (data) => out.write(data),
  });
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
  const onInput = (chunk: Buffer): void => {
    pending.push(chunk);
    flush();
  };
  const onResize = (): void => void terminal.resize(out.columns, out.rows).catch(() => undefined);
  if (tty) process.stdin.setRawMode(true);
  process.stdin.on('data', onInput);
  // Piped stdin: its end is the terminal's EOF.
  if (!tty) process.stdin.once('end', () => onInput(Buffer.from('\x04')));
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
  }
}
