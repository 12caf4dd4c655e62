/**
 * `sbx watch ID PATH` (stream a sandbox's file changes until Ctrl-C, `--count N` changes, or the
 * sandbox's end) and `sbx changes ID [--since CURSOR]` (what changed since a cursor, then the
 * next cursor): the formatting (pure, `formatWatchEvent`) and the subcommands.
 */
import { type Command, InvalidArgumentError, Option } from 'commander';
import { connect, type ConnectionOptions, type WatchEvent } from '../sdk/index.js';

function cursorArg(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError('a cursor: a whole number ≥ 0');
  return n;
}

function countArg(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n <= 0) throw new InvalidArgumentError('a whole number > 0');
  return n;
}

/**
 * One line for a watch event: `SEQ  TYPE  KIND  SIZE  PATH` (a rename `OLD -> NEW`); an
 * overflow says changes were lost; `watch.ready` and `watch.ended` name the cursor.
 */
export function formatWatchEvent(e: WatchEvent): string {
  switch (e.type) {
    case 'watch.ready':
      return `# watching ${e.path}${e.recursive ? ' (recursive)' : ''} from cursor ${e.cursor}`;
    case 'watch.ended':
      return `# sandbox ended (${e.reason}) at cursor ${e.cursor}`;
    case 'watch.started':
      return `${e.seq}  # the agent's watch started over ${e.roots.join(', ')}`;
    case 'watch.overflow':
      return `${e.seq}  ! overflow (${e.reason}${e.dropped !== undefined ? `, ${e.dropped} dropped` : ''}${e.path ? `, ${e.path}` : ''}): changes were lost; list the tree again`;
    default: {
      const size = e.sizeBytes === null ? '-' : `${e.sizeBytes}B`;
      const path = e.type === 'renamed' ? `${e.oldPath} -> ${e.path}` : e.path;
      return `${e.seq}  ${e.type.padEnd(8)} ${(e.kind ?? '-').padEnd(9)} ${size.padStart(9)}  ${path}`;
    }
  }
}

/** Adds `sbx watch` and `sbx changes` to `program`; `connection()` reads the global options when a command runs. */
export function addWatchCommands(program: Command, connection: () => ConnectionOptions & { json?: boolean }): void {
  program
    .command('watch')
    .description(
      "stream a sandbox's file changes under PATH (one line each; --json: one JSON object a line) until Ctrl-C, --count changes, or the sandbox ends",
    )
    .argument('<id>')
    .argument('<path>')
    .option('--no-recursive', 'PATH and its direct children only')
    .addOption(new Option('--since <cursor>', 'start after this cursor (from `sbx changes` or a seq)').argParser(cursorArg))
    .addOption(new Option('--count <n>', 'exit after N changes (created, modified, deleted, renamed)').argParser(countArg))
    .action(async (id: string, path: string, opts: { recursive: boolean; since?: number; count?: number }) => {
      const global = connection();
      let seen = 0;
      // Aborted from onEvent, which may run before watchFiles resolves.
      const closing = new AbortController();
      const watch = await connect(global).watchFiles(id, path, {
        recursive: opts.recursive,
        signal: closing.signal,
        ...(opts.since !== undefined ? { since: opts.since } : {}),
        // The header comes first, with the cursor the watch starts after (--since, else now).
        onReady: (ready) => {
          if (!global.json) process.stdout.write(`${formatWatchEvent({ type: 'watch.ready', ...ready, recursive: opts.recursive })}\n`);
        },
        onEvent: (e) => {
          // Events already on their way after the count was reached are not printed.
          if (opts.count !== undefined && seen >= opts.count) return;
          process.stdout.write(`${global.json ? JSON.stringify(e) : formatWatchEvent(e)}\n`);
          if (['created', 'modified', 'deleted', 'renamed'].includes(e.type) && opts.count !== undefined && ++seen >= opts.count)
            closing.abort();
        },
      });
      const stop = (): void => closing.abort();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      await watch.done;
    });

  program
    .command('changes')
    .description("a sandbox's file changes after --since CURSOR (without it: the cursor of now), then `cursor N` to ask with next")
    .argument('<id>')
    .addOption(new Option('--since <cursor>', 'the cursor of the previous answer').argParser(cursorArg))
    .option('--path <path>', 'only changes at or under this path')
    .addOption(new Option('--limit <n>', 'log entries looked at, at most').argParser(countArg))
    .action(async (id: string, opts: { since?: number; path?: string; limit?: number }) => {
      const global = connection();
      const page = await connect(global).fileChanges(id, {
        ...(opts.since !== undefined ? { since: opts.since } : {}),
        ...(opts.path !== undefined ? { path: opts.path } : {}),
        ...(opts.limit !== undefined ? { limit: opts.limit } : {}),
      });
      if (global.json) process.stdout.write(`${JSON.stringify(page, null, 2)}\n`);
      else {
        for (const e of page.changes) process.stdout.write(`${formatWatchEvent(e)}\n`);
        process.stdout.write(`cursor ${page.cursor}${page.more ? ' (more)' : ''}\n`);
      }
    });
}
