/**
 * `sbx fs ID stat|rm|mv|mkdir ...`: the file operation tools from the command line (each a call
 * with a receipt). `--json` prints the tool's data.
 */
import type { Command } from 'commander';
import { Sandbox, type ConnectionOptions } from '../sdk/index.js';

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
      const r = await (await Sandbox.connect(id, conn)).files.remove(path, { recursive: Boolean(opts.recursive) });
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
      const m = await (await Sandbox.connect(id, conn)).files.move(path, destination, { overwrite: Boolean(opts.overwrite) });
      print(json, m, `moved ${m.type} ${m.path} to ${m.destination}`);
    });
  fs.command('mkdir')
    .description('create a directory with its missing parents (--no-parents: only the last)')
    .argument('<id>')
    .argument('<path>')
    .option('--no-parents', 'fail when the parent directory is missing')
    .action(async (id: string, path: string, opts: { parents: boolean }) => {
      const { json, ...conn } = connection();
      const d = await (await Sandbox.connect(id, conn)).files.makeDir(path, { parents: opts.parents });
      print(json, d, d.created ? `created ${d.createdDirs.join(' ')}` : `${d.path} exists`);
    });
}
