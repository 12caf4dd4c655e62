/**
 * `sbx preview ID PORT [--expires SECONDS]` (a signed URL of a port of the sandbox, for a
 * browser) and `sbx previews ID` (the sandbox's preview log).
 */
import { type Command, InvalidArgumentError } from 'commander';
import { Sandbox, type ConnectionOptions } from '../sdk/index.js';

function intIn(min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max) throw new InvalidArgumentError(`a whole number from ${min} to ${max}`);
    return n;
  };
}

/** Adds `sbx preview` and `sbx previews` to `program`; `connection()` reads the global options when a command runs. */
export function addPreviewCommands(program: Command, connection: () => ConnectionOptions & { json?: boolean }): void {
  program
    .command('preview')
    .description("a signed URL of a server listening on PORT inside the sandbox (the policy's ports.allowed must allow it)")
    .argument('<id>', 'sandbox id')
    .argument('<port>', 'port in the sandbox (1-65535)', intIn(1, 65535))
    .option('--expires <seconds>', 'lifetime of the URL (default 3600, at most 604800)', intIn(1, 604_800))
    .action(async (id: string, port: number, opts: { expires?: number }) => {
      const { json, ...conn } = connection();
      const sandbox = await Sandbox.connect(id, conn);
      const url = await sandbox.ports.url(port, opts.expires === undefined ? {} : { expiresInSeconds: opts.expires });
      process.stdout.write(json ? `${JSON.stringify(url, null, 2)}\n` : `${url.url}\n`);
    });
  program
    .command('previews')
    .description("the sandbox's preview log: every preview connection, oldest first")
    .argument('<id>', 'sandbox id')
    .action(async (id: string) => {
      const { json, ...conn } = connection();
      const log = await (await Sandbox.connect(id, conn)).ports.log();
      if (json) process.stdout.write(`${JSON.stringify(log, null, 2)}\n`);
      else
        for (const e of log.events)
          process.stdout.write(
            `${e.at}  ${e.via}  ${e.keyId}  ${e.kind} ${e.method} :${e.port}${e.path}  ${e.status ?? '-'}  ${e.outcome}  ↑${e.bytesToSandbox} ↓${e.bytesFromSandbox} B  ${e.durationMs} ms\n`,
          );
    });
}
