#!/usr/bin/env node
/**
 * `sbx`: the command-line client.
 *
 *   sbx run [options] -- CMD...      lease, upload, run, stream, print receipt, download, release
 *   sbx lease [options]              lease a sandbox and print its id
 *   sbx exec ID [options] -- CMD...  run a command in a leased sandbox (piped stdin goes to it)
 *   sbx release ID [--grace-ms MS]   release a sandbox (running calls cancelled after the grace)
 *   sbx renew ID --ttl S             move a sandbox's expiry to now + S seconds
 *   sbx pause ID | sbx resume ID     freeze every process of a sandbox (its TTL stops), and thaw it
 *   sbx snapshot ID [--ttl S]        snapshot a running sandbox's filesystem
 *   sbx fork SNAP --count N          start N sandboxes from a snapshot
 *   sbx snapshots ls | rm ID         the tenant's snapshots
 *   sbx events ID                    a sandbox's status transitions
 *   sbx watch ID PATH [--count N]    stream a sandbox's file changes (cli/watch.ts)
 *   sbx changes ID [--since CURSOR]  a sandbox's file changes since a cursor, then the next cursor
 *   sbx ls                           list sandboxes
 *   sbx ps ID | sbx kill ID PID [SIG]  a sandbox's processes; a signal to one of the tool user's
 *   sbx fs ID stat|rm|mv|mkdir PATH...   file operations (each a call with a receipt)
 *   sbx secret put NAME | ls | rm NAME   store (value from stdin), list, delete secrets (admin)
 *   sbx volume create NAME --size 1G [--shared] | ls | rm NAME   persistent volumes
 *   sbx session start ID | exec ID SES CMD | ls ID | rm ID SES   persistent shell sessions
 *   sbx image build DIR | ls | rm ID  build (cli/image.ts), list, delete the tenant's images
 *   sbx mcp [options]                an MCP server on stdio: the sandbox tools for coding agents
 *   sbx down [--data-dir DIR]        stop the control planes and the Redis set-up started for a data dir
 *
 * One CMD argument is a bash script (`sbx run -- 'npm ci && npm test'`); several are an argv
 * run without a shell (`sbx run -- npm test`).
 *
 * Exit status: the command's own exit code; 124 when it timed out; 130 when cancelled;
 * 128+N when killed by signal N; 126 when it could not be started (e.g. no such cwd); 125 when
 * sbx itself failed (API, sandbox or transfer error, a failed --download included).
 *
 * Settings: `SBX_URL` (default http://127.0.0.1:7070), `SBX_API_KEY` (default: the key in
 * `$SBX_DATA_DIR/api-key`, data dir default /var/lib/sbx).
 */
import { mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { TERMINAL_LEASE_STATUSES, type Lease, type ToolResult } from '../contract/objects.js';
import { Sandbox, SbxError, connect, type ConnectionOptions, type ExecOptions } from '../sdk/index.js';
import { EXIT_CANCELLED, exitStatusDelivered, exitStatusOf, exitStatusOfErrorCode } from './exit-status.js';
import { addImageCommands } from './image.js';
import { addShellCommand } from './shell.js';
import { runMcpServer } from './mcp.js';
import { DEFAULT_DATA_DIR } from '../contract/data-dir.js';
import { SBX_VERSION } from '../contract/version.js';
import { describeDown, down, downSucceeded } from './down.js';
import { addVolumeCommands, parseSize, volumeMounts } from './volumes.js';
import { addFileCommands, HintedError } from './files.js';
import { addProcessCommands } from './processes.js';
import { addSessionCommands } from './sessions.js';
import { addWatchCommands } from './watch.js';
import { addPreviewCommands } from './preview.js';
import { addArtifactCommand, liveOutput } from './artifacts.js';

// A reader that stopped reading (`sbx previews ID | head -3`) has all it wanted: exit quietly (0),
// as once the pipe is closed nothing more can be said on stdout anyway.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

/** The connection the global options name (`--url`, `--api-key`), else the environment's (see `connect`). */
function connection(opts: { url?: string; apiKey?: string }): ConnectionOptions {
  return { ...(opts.url ? { url: opts.url } : {}), ...(opts.apiKey ? { apiKey: opts.apiKey } : {}) };
}

class UsageError extends Error {}

/** `K=V` pairs into an object. */
function pairs(list: string[] | undefined, what: string): Record<string, string> | undefined {
  if (!list || list.length === 0) return undefined;
  const out: Record<string, string> = {};
  for (const item of list) {
    const i = item.indexOf('=');
    if (i <= 0) throw new UsageError(`${what} must be KEY=VALUE, got ${JSON.stringify(item)}`);
    out[item.slice(0, i)] = item.slice(i + 1);
  }
  return out;
}

const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

/** `--writable-root PATH[:BYTES]` values as the `writableRoots` of a create, or undefined when none. */
function writableRootsOf(list: string[] | undefined): Array<{ path: string; sizeBytes?: number }> | undefined {
  if (!list || list.length === 0) return undefined;
  return list.map((item) => {
    const m = /^([^:]+)(?::(.+))?$/.exec(item);
    if (!m)
      throw new UsageError(
        `--writable-root must be PATH or PATH:SIZE (bytes, or K, M, G: e.g. /testbed:512M), got ${JSON.stringify(item)}`,
      );
    if (m[2] === undefined) return { path: m[1]! };
    try {
      return { path: m[1]!, sizeBytes: parseSize(m[2]) };
    } catch (err) {
      throw new UsageError(`--writable-root ${JSON.stringify(item)}: SIZE ${(err as Error).message} (at least 1M)`);
    }
  });
}

/**
 * `--secret NAME[=VAR]` (as env VAR, default NAME) and `--secret-file NAME=PATH` (a file in
 * /run/secrets) into the lease's `secrets`; one name given both ways gets both.
 */
function secretRequests(
  asEnv: string[] | undefined,
  asFile: string[] | undefined,
): Array<{ name: string; env?: string; file?: string }> | undefined {
  const byName = new Map<string, { name: string; env?: string; file?: string }>();
  const entry = (name: string): { name: string; env?: string; file?: string } => byName.get(name) ?? byName.set(name, { name }).get(name)!;
  for (const spec of asEnv ?? []) {
    const [name, env] = spec.split('=', 2) as [string, string | undefined];
    entry(name).env = env ?? name;
  }
  for (const [name, file] of Object.entries(pairs(asFile, '--secret-file') ?? {})) entry(name).file = file;
  return byName.size === 0 ? undefined : [...byName.values()];
}

/** A positive whole number option (ms, seconds). */
function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n <= 0) throw new InvalidArgumentError('must be a positive whole number');
  return n;
}

function nonNegativeInt(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError('must be a whole number, 0 or more');
  return n;
}

/** One stderr line saying why a call did not succeed (the receipt says the rest). */
function reportOutcome(result: ToolResult): void {
  if (result.status === 'succeeded' || (result.status === 'failed' && result.error?.code === 'execution.nonzero_exit')) return;
  process.stderr.write(`sbx: ${result.status}${result.error ? `: ${result.error.code}: ${result.error.message}` : ''}\n`);
}

/** A command line as `exec` takes it: one argument is a script, several are an argv. */
function commandOf(command: string[]): string | string[] {
  if (command.length === 0) throw new UsageError('give the command after --');
  return command.length === 1 ? command[0]! : command;
}

/**
 * Runs a command in `sandbox`, its output bytes written as they come to this process's stdout
 * and stderr (unless `quiet`), then the rest of a stream cut at the call's kept limit from its
 * artifact (artifacts.ts). Returns its result, and whether all its output was written (always
 * true when `quiet`).
 */
async function runCommand(
  sandbox: Sandbox,
  command: string[],
  opts: {
    cwd?: string;
    timeoutMs?: number;
    secrets?: string[];
    signal?: AbortSignal;
    combined?: boolean;
    stdin?: AsyncIterable<Uint8Array>;
  },
  quiet: boolean,
): Promise<{ result: ToolResult; outputWhole: boolean }> {
  const output = liveOutput();
  const options: ExecOptions = {
    ...(opts.stdin ? { stdin: opts.stdin } : {}),
    ...(opts.cwd ? { cwd: opts.cwd } : {}),
    ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}),
    ...(opts.secrets && opts.secrets.length > 0 ? { secrets: opts.secrets } : {}),
    ...(opts.signal ? { signal: opts.signal } : {}),
    ...(opts.combined ? { combinedOutput: true } : {}),
    ...(quiet ? {} : { onOutput: output.onOutput }),
    // A call held for an approver says so at once: without it the CLI would wait in silence.
    onEvent: (event) => {
      if (event.type !== 'call.pending_approval') return;
      process.stderr.write(
        `sbx: waiting for approval of call ${event.callId} (policy rule ${event.rule}, until ${event.expiresAt}); Ctrl-C cancels it\n`,
      );
    },
  };
  const result = await sandbox.exec(commandOf(command), options);
  // Not after Ctrl-C: the caller exits 130 at once.
  const outputWhole = quiet || opts.signal?.aborted === true || (await output.printRest(sandbox.client, sandbox.id, result, opts.signal));
  return { result, outputWhole };
}

function printReceipt(lease: Lease, result: ToolResult): void {
  const r = result.receipt;
  const m = lease.manifest;
  const lines = [
    '',
    `── sbx receipt ─────────────────────────────────────────────`,
    `status        ${result.status}${result.error ? ` (${result.error.code}: ${result.error.message})` : ''}`,
    `exit          ${result.exitCode ?? '-'}${result.signal ? ` signal ${result.signal}` : ''}`,
  ];
  if (r) {
    lines.push(
      `receipt       ${r.receiptId}`,
      `commit state  ${r.commitState}`,
      `duration      ${r.durationMs} ms`,
      `stdout        ${r.outputs?.stdout.bytes ?? 0} bytes sha256:${r.outputs?.stdout.sha256 ?? '-'}`,
      `stderr        ${r.outputs?.stderr.bytes ?? 0} bytes sha256:${r.outputs?.stderr.sha256 ?? '-'}`,
      `fingerprint   ${r.fingerprint}`,
    );
  }
  lines.push(`sandbox       ${lease.id} (policy ${lease.policy.name}@${lease.policy.version})`);
  if (m) {
    lines.push(
      `manifest      ${m.digest}`,
      `image         ${m.image.ref} ${m.image.id}`,
      `platform      ${m.os.name} ${m.arch} kernel ${m.kernel}`,
      `toolchain     node ${m.toolchain.node ?? '-'}, npm ${m.toolchain.npm ?? '-'}, ${m.toolchain.git ?? 'no git'}, ${m.toolchain.python ?? 'no python'}, ${m.toolchain.pip ?? 'no pip'}`,
    );
  }
  process.stderr.write(`${lines.join('\n')}\n`);
}

const program = new Command('sbx')
  .description('Lease ephemeral sandboxes and run tools in them, with receipts.')
  .option('--url <url>', 'control plane URL (env SBX_URL)')
  .option('--api-key <key>', 'API key (env SBX_API_KEY)')
  .option('--json', 'machine-readable output on stdout')
  .version(SBX_VERSION, '--version', "print sbx's version")
  // A bad argument or flag fails like anything else (below): with --json as one JSON document,
  // with 125 as `docker run` does; commander would print its own line and exit 1. Help exits 0.
  .exitOverride()
  .configureOutput({ outputError: () => undefined });

const leaseOptions = (cmd: Command): Command =>
  cmd
    .option('--policy <name>', 'policy name', 'default')
    .addOption(new Option('--ttl <seconds>', 'lease TTL in seconds').argParser(positiveInt))
    .option('--env <KEY=VALUE>', 'environment for every call (repeatable)', collect)
    .option(
      '--secret <NAME[=VAR]>',
      'a stored secret the policy allows, as env VAR (default NAME) of the calls that ask (repeatable)',
      collect,
    )
    .option('--secret-file <NAME=PATH>', 'a stored secret as a file PATH in /run/secrets while a call that asks runs (repeatable)', collect)
    .option('--image <ref>', 'sandbox image: an engine image, a registry image on SBX_IMAGE_REGISTRIES, or a built image (id or name)')
    .option('--volume <NAME:PATH[:ro]>', 'mount a persistent volume (sbx volume create) at PATH, read-only with :ro (repeatable)', collect)
    .option('--snapshot <id>', 'start from this snapshot (its image, policy and writable roots)')
    .option(
      '--writable-root <PATH[:BYTES]>',
      "a writable root of the lease's own, starting with the image's content there, where the policy allows (repeatable)",
      collect,
    );

leaseOptions(program.command('run'))
  .description('lease a sandbox, upload, run CMD, stream its output, print the receipt, download, release')
  .option(
    '--upload <local[:remote]>',
    "upload a local directory's contents, or a file, into a sandbox directory (default /workspace; repeatable)",
    collect,
  )
  .option('--exclude <name>', 'skip this top-level file or directory of each upload (repeatable)', collect)
  .option('--download <remote>', 'copy this sandbox path back after the command (repeatable)', collect)
  .option('--download-dir <dir>', 'where downloads go', 'sbx-downloads')
  .option('--cwd <dir>', "working directory in the sandbox (default: the sandbox's workdir: the image's WORKDIR, else /workspace)")
  .addOption(new Option('--timeout-ms <ms>', 'command timeout in ms').argParser(positiveInt))
  .argument('<command...>')
  .action(async (command: string[], opts) => {
    const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
    const sandbox = await Sandbox.create({
      ...connection(global),
      policy: opts.policy,
      ...(opts.ttl ? { ttlSeconds: opts.ttl } : {}),
      ...(opts.image ? { image: opts.image } : {}),
      ...(opts.snapshot ? { snapshot: opts.snapshot } : {}),
      ...(pairs(opts.env, '--env') ? { env: pairs(opts.env, '--env') } : {}),
      ...(secretRequests(opts.secret, opts.secretFile) ? { secrets: secretRequests(opts.secret, opts.secretFile) } : {}),
      ...(volumeMounts(opts.volume) ? { volumes: volumeMounts(opts.volume) } : {}),
      ...(writableRootsOf(opts.writableRoot) ? { writableRoots: writableRootsOf(opts.writableRoot) } : {}),
    });
    const interrupted = new AbortController();
    const onSignal = (): void => {
      // Aborting cancels the running call; releasing ends the sandbox with whatever still runs in it.
      interrupted.abort();
      void sandbox
        .release()
        .catch(() => undefined)
        .then(() => process.exit(EXIT_CANCELLED));
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    try {
      const exclude = new Set<string>(opts.exclude ?? []);
      const uploads = [];
      for (const spec of (opts.upload ?? []) as string[]) {
        const i = spec.lastIndexOf(':');
        const [local, remote] = i > 0 ? [spec.slice(0, i), spec.slice(i + 1)] : [spec, '/workspace'];
        const ignore = exclude.size === 0 ? undefined : (rel: string) => exclude.has(rel.split('/')[0]!);
        const summary = await sandbox.files.upload(resolve(local), remote, ignore ? { ignore } : {});
        uploads.push({ local, remote, ...summary });
        if (!global.json) process.stderr.write(`sbx: uploaded ${local} → ${remote} (${summary.entries} entries, ${summary.bytes} bytes)\n`);
      }
      // The one command of `run` receives every secret the lease was given.
      const secrets = (secretRequests(opts.secret, opts.secretFile) ?? []).map((r) => r.name);
      const { result, outputWhole } = await runCommand(
        sandbox,
        command,
        { cwd: opts.cwd, timeoutMs: opts.timeoutMs, secrets, signal: interrupted.signal },
        Boolean(global.json),
      );
      const downloads = [];
      for (const remote of (opts.download ?? []) as string[]) {
        await mkdir(opts.downloadDir, { recursive: true });
        try {
          await sandbox.files.download(remote, opts.downloadDir);
          downloads.push({ remote, dir: opts.downloadDir, ok: true });
          if (!global.json) process.stderr.write(`sbx: downloaded ${remote} → ${opts.downloadDir}\n`);
        } catch (err) {
          downloads.push({ remote, dir: opts.downloadDir, ok: false, error: err instanceof SbxError ? err.info : String(err) });
          if (!global.json) process.stderr.write(`sbx: could not download ${remote}: ${(err as Error).message}\n`);
        }
      }
      const finalLease = await sandbox.refresh();
      if (global.json) process.stdout.write(`${JSON.stringify({ sandbox: finalLease, uploads, result, downloads }, null, 2)}\n`);
      else printReceipt(finalLease, result);
      // A download that failed is sbx's failure; it only overrides a command that succeeded.
      process.exitCode = exitStatusDelivered(result, outputWhole && downloads.every((d) => d.ok));
    } finally {
      await sandbox.release().catch((err: unknown) => process.stderr.write(`sbx: release of ${sandbox.id} failed: ${String(err)}\n`));
    }
  });

leaseOptions(program.command('lease'))
  .description('lease a sandbox and print its id')
  .option('--label <KEY=VALUE>', 'label (repeatable)', collect)
  .action(async (opts) => {
    const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
    const lease = await connect(connection(global)).createSandbox({
      policy: opts.policy,
      ...(opts.ttl ? { ttlSeconds: opts.ttl } : {}),
      ...(opts.image ? { image: opts.image } : {}),
      ...(opts.snapshot ? { snapshot: opts.snapshot } : {}),
      ...(pairs(opts.env, '--env') ? { env: pairs(opts.env, '--env') } : {}),
      ...(pairs(opts.label, '--label') ? { labels: pairs(opts.label, '--label') } : {}),
      ...(secretRequests(opts.secret, opts.secretFile) ? { secrets: secretRequests(opts.secret, opts.secretFile) } : {}),
      ...(volumeMounts(opts.volume) ? { volumes: volumeMounts(opts.volume) } : {}),
      ...(writableRootsOf(opts.writableRoot) ? { writableRoots: writableRootsOf(opts.writableRoot) } : {}),
    });
    process.stdout.write(global.json ? `${JSON.stringify(lease, null, 2)}\n` : `${lease.id}\n`);
  });

program
  .command('exec')
  .description('run a command in a leased sandbox, streaming its output')
  .argument('<id>')
  .argument('<command...>')
  .option('--cwd <dir>', "working directory (default: the sandbox's workdir: the image's WORKDIR, else /workspace)")
  .addOption(new Option('--timeout-ms <ms>', 'command timeout in ms').argParser(positiveInt))
  .option('--secret <NAME>', "one of the sandbox's secrets this command receives (repeatable)", collect)
  .option('--combined', 'stdout and stderr as one stream, in write order (as 2>&1 in a terminal)')
  .option('--no-stdin', "do not send this process's stdin (as ssh -n): the command's stdin is empty")
  .option(
    '--background',
    'start it as a background task (a dev server): prints its callId and pid once it runs and exits 0; it runs on until it ends, times out or is cancelled',
  )
  .action(async (id: string, command: string[], opts) => {
    const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
    const sandbox = await Sandbox.connect(id, connection(global));
    if (opts.background === true) {
      const task = await sandbox.exec(commandOf(command), {
        background: true,
        ...(opts.cwd ? { cwd: opts.cwd } : {}),
        ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}),
        ...(opts.secret ? { secrets: opts.secret } : {}),
        ...(opts.combined ? { combinedOutput: true } : {}),
      });
      if (global.json) process.stdout.write(`${JSON.stringify(task, null, 2)}\n`);
      else if (task.status === 'detached') process.stdout.write(`${task.callId} pid ${String(task.data?.pid ?? '-')}\n`);
      else reportOutcome(task);
      process.exitCode = task.status === 'detached' ? 0 : exitStatusOf(task);
      return;
    }
    // Piped or redirected stdin goes to the command as it comes; a terminal's is not read (use `sbx shell`).
    const stdin = opts.stdin === true && process.stdin.isTTY !== true ? process.stdin : undefined;
    // Ctrl-C (or SIGTERM) cancels the call, running or waiting for approval, and the exit is its result's (130).
    const interrupted = new AbortController();
    const onSignal = (): void => interrupted.abort();
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    const { result, outputWhole } = await runCommand(
      sandbox,
      command,
      { ...opts, stdin, secrets: opts.secret, signal: interrupted.signal },
      Boolean(global.json),
    ).finally(() => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      // A piped stdin whose writer lives on would keep this process alive after the command ended.
      stdin?.destroy();
    });
    if (global.json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
    else reportOutcome(result);
    // Ctrl-C after the command ended stops the rest of its output: 130, as for the command.
    process.exitCode = interrupted.signal.aborted ? EXIT_CANCELLED : exitStatusDelivered(result, outputWhole);
  });

program
  .command('release')
  .description('release a sandbox (idempotent); running calls are cancelled, after --grace-ms')
  .argument('<id>')
  .addOption(new Option('--grace-ms <ms>', 'how long running calls may go on before they are cancelled').argParser(nonNegativeInt))
  .action(async (id: string, opts: { graceMs?: number }) => {
    const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
    const lease = await connect(connection(global)).releaseSandbox(id, opts.graceMs === undefined ? {} : { graceMs: opts.graceMs });
    process.stdout.write(global.json ? `${JSON.stringify(lease, null, 2)}\n` : `${lease.id} ${lease.status}\n`);
  });

program
  .command('renew')
  .description("set a sandbox's expiry to now + --ttl seconds (within its policy's maxTtlSeconds from creation)")
  .argument('<id>')
  .requiredOption('--ttl <seconds>', 'seconds from now', positiveInt)
  .action(async (id: string, opts: { ttl: number }) => {
    const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
    const lease = await connect(connection(global)).renewSandbox(id, opts.ttl);
    process.stdout.write(global.json ? `${JSON.stringify(lease, null, 2)}\n` : `${lease.id} ${lease.status} expires ${lease.expiresAt}\n`);
  });

for (const [name, description] of [
  ['pause', 'freeze every process of a sandbox; its TTL stops, its pause budget (policy pausedTtlSeconds) runs'],
  ['resume', 'thaw a paused sandbox where it was'],
] as const) {
  program
    .command(name)
    .description(description)
    .argument('<id>')
    .action(async (id: string) => {
      const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
      const client = connect(connection(global));
      const lease = name === 'pause' ? await client.pauseSandbox(id) : await client.resumeSandbox(id);
      process.stdout.write(
        global.json ? `${JSON.stringify(lease, null, 2)}\n` : `${lease.id} ${lease.status} expires ${lease.expiresAt}\n`,
      );
    });
}

program
  .command('snapshot')
  .description("snapshot a running sandbox's filesystem (changed files and every writable root); prints the snapshot id")
  .argument('<id>')
  .addOption(
    new Option('--ttl <seconds>', 'keep the snapshot this long (default and maximum: SBX_SNAPSHOT_TTL_SECONDS)').argParser(positiveInt),
  )
  .action(async (id: string, opts: { ttl?: number }) => {
    const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
    const snapshot = await connect(connection(global)).snapshotSandbox(id, opts.ttl ? { ttlSeconds: opts.ttl } : {});
    if (global.json) {
      process.stdout.write(`${JSON.stringify(snapshot, null, 2)}\n`);
      return;
    }
    // The id alone on stdout (`SNAP=$(sbx snapshot ID)`), what else it says on stderr.
    process.stderr.write(`${snapshot.sizeBytes} bytes, ${snapshot.inFlightCalls.length} calls in flight not waited for\n`);
    process.stdout.write(`${snapshot.id}\n`);
  });

const snapshots = program.command('snapshots').description("the tenant's snapshots: ls, rm ID");
snapshots
  .command('ls')
  .description("list the tenant's snapshots")
  .action(async () => {
    const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
    const list = await connect(connection(global)).listSnapshots();
    process.stdout.write(
      global.json
        ? `${JSON.stringify(list, null, 2)}\n`
        : list.map((s) => `${s.id}\t${s.sizeBytes}\t${s.parentLeaseId}\t${s.expiresAt}\n`).join(''),
    );
  });
snapshots
  .command('rm')
  .description('delete a snapshot (refused while a sandbox started from it runs)')
  .argument('<id>')
  .action(async (id: string) => {
    await connect(connection(program.opts<{ url?: string; apiKey?: string }>())).deleteSnapshot(id);
  });

program
  .command('fork')
  .description('start --count independent sandboxes from a snapshot (all or none); prints their ids')
  .argument('<snapshot>')
  .addOption(new Option('--count <n>', 'how many sandboxes').argParser(positiveInt).default(1))
  .addOption(new Option('--ttl <seconds>', 'lease TTL in seconds').argParser(positiveInt))
  .action(async (snapshot: string, opts: { count: number; ttl?: number }) => {
    const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
    const leases = await connect(connection(global)).fork(snapshot, { count: opts.count, ...(opts.ttl ? { ttlSeconds: opts.ttl } : {}) });
    process.stdout.write(global.json ? `${JSON.stringify(leases, null, 2)}\n` : leases.map((l) => `${l.id}\n`).join(''));
  });

program
  .command('events')
  .description("a sandbox's status transitions, oldest first")
  .argument('<id>')
  .action(async (id: string) => {
    const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
    const events = await connect(connection(global)).leaseEvents(id);
    if (global.json) process.stdout.write(`${JSON.stringify(events, null, 2)}\n`);
    else for (const e of events) process.stdout.write(`${e.at}  ${(e.from ?? '-').padEnd(9)} → ${e.to.padEnd(9)} ${e.reason}\n`);
  });

program
  .command('ls')
  .description('list sandboxes')
  .option('--all', 'include ended ones (released, expired, failed, lost)')
  .action(async (opts: { all?: boolean }) => {
    const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
    const leases = (await connect(connection(global)).listSandboxes()).filter((l) => opts.all || !TERMINAL_LEASE_STATUSES.has(l.status));
    if (global.json) process.stdout.write(`${JSON.stringify(leases, null, 2)}\n`);
    else
      for (const l of leases)
        process.stdout.write(
          `${l.id}  ${l.status.padEnd(9)} ${l.policy.name}@${l.policy.version}  ${l.endedAt ? `ended ${l.endedAt}` : `expires ${l.expiresAt}`}\n`,
        );
  });

const secretCommand = program.command('secret').description('store, list and delete secrets (admin API key)');

secretCommand
  .command('put')
  .description('store the value read from stdin (one trailing newline dropped) as the next version of NAME')
  .argument('<name>')
  .action(async (name: string) => {
    const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
    // From stdin, never an argument: argv shows in `ps` and shell history.
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    const metadata = await connect(connection(global)).putSecret(
      name,
      Buffer.concat(chunks)
        .toString('utf8')
        .replace(/\r?\n$/, ''),
    );
    process.stdout.write(
      global.json
        ? `${JSON.stringify(metadata, null, 2)}\n`
        : `${metadata.name} version ${metadata.version} (${metadata.sizeBytes} bytes)\n`,
    );
  });

secretCommand
  .command('ls')
  .description('list secrets (metadata only)')
  .action(async () => {
    const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
    const secrets = await connect(connection(global)).listSecrets();
    if (global.json) process.stdout.write(`${JSON.stringify(secrets, null, 2)}\n`);
    else
      for (const s of secrets)
        process.stdout.write(`${s.name}  version ${s.version}  ${s.sizeBytes} bytes  updated ${s.updatedAt} by ${s.updatedBy}\n`);
  });

secretCommand
  .command('rm')
  .description('delete a secret (idempotent)')
  .argument('<name>')
  .action(async (name: string) => {
    await connect(connection(program.opts<{ url?: string; apiKey?: string }>())).deleteSecret(name);
  });

addVolumeCommands(program, () => {
  const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
  return { ...connection(global), ...(global.json ? { json: true } : {}) };
});
addWatchCommands(program, () => {
  const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
  return { ...connection(global), ...(global.json ? { json: true } : {}) };
});

addImageCommands(program, connection);
addShellCommand(program, connection);
for (const add of [addProcessCommands, addFileCommands])
  add(program, () => {
    const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
    return { ...connection(global), ...(global.json ? { json: true } : {}) };
  });

addSessionCommands(program, () => {
  const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
  return { ...connection(global), ...(global.json ? { json: true } : {}) };
});

addPreviewCommands(program, () => {
  const global = program.opts<{ url?: string; apiKey?: string; json?: boolean }>();
  return { ...connection(global), ...(global.json ? { json: true } : {}) };
});

addArtifactCommand(program, () => connection(program.opts<{ url?: string; apiKey?: string }>()));

program
  .command('mcp')
  .description('serve the sandbox tools over MCP on stdio; a sandbox is leased at the first tool call and released at exit')
  .option('--policy <name>', 'policy of the sandbox', 'default')
  .addOption(new Option('--ttl <seconds>', 'lease TTL in seconds').argParser(positiveInt))
  .option('--env <KEY=VALUE>', 'environment for every call (repeatable)', collect)
  .option('--image <ref>', 'sandbox image')
  .option(
    '--snapshot <id>',
    'start the sandbox from this snapshot (its image, policy unless --policy, and files); the `snapshot` tool makes one',
  )
  .option(
    '--writable-root <PATH[:SIZE]>',
    "a writable root of the lease's own, starting with the image's content there, where the policy allows (repeatable)",
    collect,
  )
  .action(async (opts, command: Command) => {
    const global = program.opts<{ url?: string; apiKey?: string }>();
    // From a snapshot, its own policy version holds unless --policy is given.
    const policyGiven = !opts.snapshot || command.getOptionValueSource('policy') === 'cli';
    await runMcpServer({
      connection: connection(global),
      lease: {
        ...(policyGiven ? { policy: opts.policy } : {}),
        ...(opts.ttl ? { ttlSeconds: opts.ttl } : {}),
        ...(opts.image ? { image: opts.image } : {}),
        ...(opts.snapshot ? { snapshot: opts.snapshot } : {}),
        ...(writableRootsOf(opts.writableRoot) ? { writableRoots: writableRootsOf(opts.writableRoot) } : {}),
        ...(pairs(opts.env, '--env') ? { env: pairs(opts.env, '--env') } : {}),
      },
    });
  });

program
  .command('down')
  .description(
    'stop what set-up and `npm start` left running for a data directory: its control planes, then its Redis (never dockerd, never sandboxes)',
  )
  .option('--data-dir <dir>', 'data directory (env SBX_DATA_DIR)', process.env.SBX_DATA_DIR ?? DEFAULT_DATA_DIR)
  .addOption(new Option('--timeout-ms <ms>', 'how long each process may take to exit after SIGTERM').argParser(positiveInt).default(30_000))
  .action(async (opts: { dataDir: string; timeoutMs: number }) => {
    const report = await down(opts.dataDir, opts.timeoutMs);
    if (program.opts<{ json?: boolean }>().json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    else for (const line of describeDown(report)) process.stdout.write(`sbx down: ${line}\n`);
    process.exitCode = downSucceeded(report) ? 0 : 1;
  });

program.parseAsync(process.argv).catch((err: unknown) => {
  // Help, asked for or shown for a missing command, ends through here too (exitOverride): it was the output.
  if (err instanceof CommanderError && (err.exitCode === 0 || err.code === 'commander.help')) process.exit(err.exitCode);
  const message = err instanceof CommanderError ? err.message.replace(/^error: /, '') : err instanceof Error ? err.message : String(err);
  process.stderr.write(`sbx: ${message}\n`);
  if (err instanceof HintedError) process.stderr.write(`sbx: ${err.hint}\n`);
  // A key nobody gave was read from a data dir's file, maybe another control plane's: say which.
  if (
    err instanceof SbxError &&
    err.info.code === 'auth.invalid_api_key' &&
    !program.opts<{ apiKey?: string }>().apiKey &&
    !process.env.SBX_API_KEY
  ) {
    const keyFile = join(process.env.SBX_DATA_DIR ?? DEFAULT_DATA_DIR, 'api-key');
    process.stderr.write(
      `sbx: the key was read from ${keyFile}; for a control plane with another data dir set SBX_DATA_DIR to it, or give SBX_API_KEY / --api-key\n`,
    );
  }
  // With --json a script reads the failure as it reads a success: one JSON document on stdout,
  // the platform's error in its wire shape (docs/errors.md) and the HTTP status that carried it.
  if (program.opts<{ json?: boolean }>().json) {
    const error = err instanceof SbxError ? { ...err.info, status: err.status } : { code: null, message };
    process.stdout.write(`${JSON.stringify({ error }, null, 2)}\n`);
  }
  process.exit(exitStatusOfErrorCode(err instanceof SbxError ? err.info.code : undefined));
});
