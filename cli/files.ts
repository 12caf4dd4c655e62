/**
 * `sbx fs ID stat|rm|mv|mkdir ...`: the file operation tools from the command line (each a call
 * with a receipt). `--json` prints the tool's data.
 */
import type { Command } from 'commander';
import { Sandbox, SbxError, type ConnectionOptions } from '../sdk/index.js';

/**
 * A refusal's message names the tool's argument (`pass recursive`, as the API and SDK take it);
 * a CLI user types a flag. The hint, printed on stderr under the message (never in --json, which
 * carries the platform's error as sent), says which.
 */
export class HintedError extends SbxError {
  constructor(
    error: SbxError,
    readonly hint: string,
  ) {
    super(error.info, { status: error.status, result: error.result, cause: error });
  }
}

/** Runs `op`; a refusal with code `code` comes back as a HintedError carrying `hint`. */
async function hinting<T>(op: () => Promise<T>, code: string, hint: string): Promise<T> {
  try {
    return await op();
  } catch (err) {
    throw err instanceof SbxError && err.info.code === code ? new HintedError(err, hint) : err;
  }
}

/** Adds `sbx fs` to `program`; `connection()` reads the global options when a command runs. */
export function addFileCommands(program: Command, connection: () => ConnectionOptions & { json?: boolean }): void {
  const fs = program.command('fs').description("file operations in a sandbox's writable roots: stat, rm, mv, mkdir");
  const print = (json: boolean | undefined, data: unknown, text: string): void => {
    process.stdout.write(json ? `${JSON.stringify(data, null, 2)}\n` : `${text}\n`);
  };
  fs.command('stat')
    .description('type, size, mode, owner:group, mtime and symlink target of a path (not followed)')
    .argument('<id>')
    .argument('<path>')
    .action(async (id: string, path: string) => {
      const { json, ...conn } = connection();
      const s = await (await Sandbox.connect(id, conn)).files.stat(path);
      const mode = s.mode.toString(8).padStart(4, '0');
      print(
        json,
        s,
        `${s.path} ${s.type} ${s.sizeBytes} ${mode} ${s.owner}:${s.group} ${s.mtime}${s.symlinkTarget !== null ? ` -> ${s.symlinkTarget}` : ''}`,
      );
    });
  fs.command('rm')
    .description('remove a file, symlink or directory (-r for one with entries); a missing path is not an error')
    .argument('<id>')
    .argument('<path>')
    .option('-r, --recursive', 'remove a directory with everything under it')
    .action(async (id: string, path: string, opts: { recursive?: boolean }) => {
      const { json, ...conn } = connection();
      const sandbox = await Sandbox.connect(id, conn);
      const r = await hinting(
        () => sandbox.files.remove(path, { recursive: Boolean(opts.recursive) }),
        'files.not_empty',
        `add -r to remove it with everything under it: sbx fs rm -r ${id} ${path}`,
      );
      print(json, r, r.existed ? `removed ${r.type} ${r.path}` : `${r.path} did not exist`);
    });
  fs.command('mv')
    .description('move or rename a path; an existing destination is refused unless --overwrite')
    .argument('<id>')
    .argument('<path>')
    .argument('<destination>')
    .option('--overwrite', 'replace an existing destination (a file or an empty directory)')
    .action(async (id: string, path: string, destination: string, opts: { overwrite?: boolean }) => {
      const { json, ...conn } = connection();
      const sandbox = await Sandbox.connect(id, conn);
      const m = await hinting(
        () => sandbox.files.move(path, destination, { overwrite: Boolean(opts.overwrite) }),
        'files.exists',
        'add --overwrite to replace the destination (a file or an empty directory)',
      );
      print(json, m, `moved ${m.type} ${m.path} to ${m.destination}`);
    });
  fs.command('mkdir')
    .description('create a directory with its missing parents (--no-parents: only the last)')
    .argument('<id>')
    .argument('<path>')
    .option('--no-parents', 'fail when the parent directory is missing')
    .action(async (id: string, path: string, opts: { parents: boolean }) => {
      const { json, ...conn } = connection();
      const sandbox = await Sandbox.connect(id, conn);
      const make = () => sandbox.files.makeDir(path, { parents: opts.parents });
      const d = opts.parents ? await make() : await hinting(make, 'files.not_found', 'without --no-parents, missing parents are made');
      print(json, d, d.created ? `created ${d.createdDirs.join(' ')}` : `${d.path} exists`);
    });
}
