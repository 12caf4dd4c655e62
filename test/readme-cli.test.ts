/**
 * The README's table of `sbx` commands is what `sbx --help` lists: every top-level command in
 * exactly one row, and no row for a command that does not exist.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from './fixtures/index.js';

const run = promisify(execFile);

/** The top-level commands `sbx --help` lists (`help` aside). */
async function helpCommands(): Promise<string[]> {
  const { stdout } = await run(process.execPath, [join(REPO_ROOT, 'dist/cli/sbx.js'), '--help'], {
    env: { ...process.env, COLUMNS: '200' },
  });
  const section = stdout.slice(stdout.indexOf('Commands:'));
  return [...section.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!).filter((c) => c !== 'help');
}

/** For each row of the README's command table, the commands its first cell names (`sbx NAME ...`). */
async function readmeRows(): Promise<string[][]> {
  const readme = await readFile(join(REPO_ROOT, 'README.md'), 'utf8');
  const table = readme.slice(readme.indexOf('| command | does |'), readme.indexOf('Every command takes `--json`'));
  return table
    .split('\n')
    .filter((line) => line.startsWith('| `sbx '))
    .map((line) => [...new Set([...line.split(' | ')[0]!.matchAll(/`sbx ([a-z][a-z-]*)/g)].map((m) => m[1]!))]);
}

describe('README command table', () => {
  it('names every command of sbx --help in exactly one row, and nothing else', async () => {
    const commands = await helpCommands();
    const rows = await readmeRows();
    const named = rows.flat();
    expect(commands.length).toBeGreaterThan(20);
    expect([...named].sort()).toEqual([...commands].sort());
    // No command in two rows.
    expect(new Set(named).size).toBe(named.length);
  });
});
