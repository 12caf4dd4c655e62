/**
 * `sbx` usage errors (a bad argument or flag value, a missing argument, an unknown command) fail
 * as every other failure of the CLI does: `sbx: <message>` on stderr, exit 125 (as `docker run`),
 * and with `--json` one document `{"error": {"code": null, message}}` on stdout. Help exits as
 * commander has it. No control plane is needed: these fail before any request.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from './fixtures/index.js';

/** Runs the built CLI with `args`; its exit status and output (never throws). */
function sbx(args: string[]): Promise<{ status: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    // An unreachable URL: a usage error must be reported before anything is sent.
    const env = { ...process.env, SBX_URL: 'http://127.0.0.1:9', SBX_API_KEY: 'unused' };
    execFile(process.execPath, [join(REPO_ROOT, 'dist/cli/sbx.js'), ...args], { env }, (err, stdout, stderr) =>
      resolve({ status: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }),
    );
  });
}

describe('sbx usage errors', () => {
  it.each([
    [['preview', 'sbx_x', '0'], "argument 'port'"],
    [['preview', 'sbx_x', '8000', '--expires', '1h'], "'--expires <seconds>' argument '1h' is invalid"],
    [['exec'], "missing required argument 'id'"],
    [['nosuch'], "unknown command 'nosuch'"],
    [['exec', 'sbx_x', '--no-such-flag', '--', 'true'], "unknown option '--no-such-flag'"],
  ])('%j is exit 125 with its message; with --json, the error document on stdout', async (args, says) => {
    const plain = await sbx(args);
    expect(plain.status).toBe(125);
    expect(plain.stderr).toContain(`sbx: `);
    expect(plain.stderr).toContain(says);
    expect(plain.stdout).toBe('');
    // --json before the command, and after it where no `--` makes it part of the command.
    for (const withJson of [['--json', ...args], ...(args.includes('--') ? [] : [[...args, '--json']])]) {
      const json = await sbx(withJson);
      expect(json.status).toBe(125);
      const doc = JSON.parse(json.stdout) as { error: { code: unknown; message: string } };
      expect(doc.error.code).toBeNull();
      expect(doc.error.message).toContain(says);
      expect(doc.error.message).not.toMatch(/^error: /);
    }
  });

  it('help is output, not a failure: --help exits 0, a missing command shows help and exits 1', async () => {
    const help = await sbx(['--help']);
    expect(help.status).toBe(0);
    expect(help.stdout).toContain('Usage: sbx');
    const sub = await sbx(['exec', '--help']);
    expect(sub.status).toBe(0);
    expect(sub.stdout).toContain('Usage: sbx exec');
    const none = await sbx([]);
    expect(none.status).toBe(1);
    expect(none.stderr).toContain('Usage: sbx');
    expect(none.stderr).not.toContain('sbx: ');
  });
});
