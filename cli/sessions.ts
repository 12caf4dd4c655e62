/**
 * `sbx session start ID [--cwd DIR] [--env K=V] | exec ID SESSION CMD... | ls ID | rm ID SESSION`:
 * persistent shell sessions of a sandbox (cwd, variables, functions, aliases and an activated
 * venv carry over between `sbx session exec` runs). `exec` streams the command's output and
 * exits with its exit status, as `sbx exec` does.
 */
import { type Command, InvalidArgumentError, Option } from 'commander';
import { Sandbox, type ConnectionOptions } from '../sdk/index.js';
import { liveOutput } from './artifacts.js';
import { exitStatusDelivered } from './exit-status.js';

function positive(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('a positive integer');
  return n;
}

function envPairs(list: string[] | undefined): Record<string, string> | undefined {
  if (!list || list.length === 0) return undefined;
  return Object.fromEntries(
    list.map((pair) => {
      const at = pair.indexOf('=');
      if (at < 1) throw new InvalidArgumentError(`--env must be KEY=VALUE, got ${JSON.stringify(pair)}`);
      return [pair.slice(0, at), pair.slice(at + 1)];
    }),
  );
}

/** Adds `sbx session …` to `program`; `connection()` reads the global options when a command runs. */
export function addSessionCommands(program: Command, connection: () => ConnectionOptions & { json?: boolean }): void {
  const session = program.command('session').description('persistent shell sessions of a sandbox: start, exec, ls, rm');
  session
    .command('start')
    .description('start a shell session (bash, else sh) in sandbox ID; prints its id')
    .argument('<id>')
    .option('--cwd <dir>', "the shell's first working directory")
    .option('--env <KEY=VALUE>', 'exported in the shell (repeatable)', (v: string, acc: string[] = []) => [...acc, v])
    .action(async (id: string, opts: { cwd?: string; env?: string[] }) => {
      const { json, ...conn } = connection();
      const sandbox = await Sandbox.connect(id, conn);
      const env = envPairs(opts.env);
      const s = await sandbox.sessions.create({ ...(opts.cwd ? { cwd: opts.cwd } : {}), ...(env ? { env } : {}) });
      process.stdout.write(json ? `${JSON.stringify(s.view, null, 2)}\n` : `${s.id}\n`);
    });
  session
    .command('exec')
    .description("run one command in a session, streaming its output; exits with the command's status")
    .argument('<id>')
    .argument('<session>')
    .argument('<command...>', 'a shell command line (several words are joined with spaces)')
    .addOption(new Option('--timeout-ms <ms>', 'interrupt the command after this long (the session stays)').argParser(positive))
    .option('--combined', 'stdout and stderr as one stream, in write order')
    .action(async (id: string, sessionId: string, words: string[], opts: { timeoutMs?: number; combined?: boolean }) => {
      const { json, ...conn } = connection();
      const sandbox = await Sandbox.connect(id, conn);
      const s = await sandbox.sessions.get(sessionId);
      // Raw bytes, as `sbx exec` prints them (binary output stays binary), and a cut stream whole.
      const output = liveOutput();
      const result = await s.exec(words.join(' '), {
        ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}),
        ...(opts.combined ? { combinedOutput: true } : {}),
        ...(json ? {} : { onOutput: output.onOutput }),
      });
      const outputWhole = json || (await output.printRest(sandbox.client, sandbox.id, result));
      if (json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
      else if (result.status !== 'succeeded' && result.error?.code !== 'execution.nonzero_exit')
        process.stderr.write(`sbx: ${result.status}${result.error ? `: ${result.error.code}: ${result.error.message}` : ''}\n`);
      process.exitCode = exitStatusDelivered(result, outputWhole);
    });
  session
    .command('ls')
    .description("the sandbox's sessions: id, status, pid, created")
    .argument('<id>')
    .action(async (id: string) => {
      const { json, ...conn } = connection();
      const list = await (await Sandbox.connect(id, conn)).sessions.list();
      if (json) process.stdout.write(`${JSON.stringify(list, null, 2)}\n`);
      else
        for (const s of list)
          process.stdout.write(`${s.sessionId}\t${s.status}${s.endedBy ? `(${s.endedBy})` : ''}\t${s.pid ?? '-'}\t${s.createdAt}\n`);
    });
  session
    .command('rm')
    .description('end a session: its shell and everything it started are killed')
    .argument('<id>')
    .argument('<session>')
    .action(async (id: string, sessionId: string) => {
      const { json, ...conn } = connection();
      const view = await (await (await Sandbox.connect(id, conn)).sessions.get(sessionId)).delete();
      if (json) process.stdout.write(`${JSON.stringify(view, null, 2)}\n`);
    });
}
