/**
 * The tools that run a program of the image for the tool user: `search` (ripgrep) and
 * `git_status` / `git_diff` (git). They run inside the tool-user worker, so the programs get
 * the tool user's identity; output is read up to a bound, then the program is stopped.
 */
import { spawn } from 'node:child_process';
import type { GitDiffArgs, GitStatusArgs, SearchArgs } from '../../contract/tools.js';
import { findOnPath } from '../host/image-probe.js';
import { canonicalExisting, MAX_DIFF_BYTES, ToolError, type FileContext, type OpResult } from './file-ops.js';
import { walkerSearch, type WalkerMatch } from './search-walker.js';

interface RunOutput {
  stdout: Buffer;
  stdoutBytes: number;
  stderr: string;
  code: number | null;
  stoppedEarly: boolean;
}

const ENV = {
  LANG: 'C.UTF-8',
  GIT_TERMINAL_PROMPT: '0',
  GIT_PAGER: 'cat',
  NO_COLOR: '1',
  GIT_CONFIG_NOSYSTEM: '1',
};

/**
 * What the program-running operations get: the file context, the tool user's home, the PATH
 * programs are found on (the image's), and the operation's cancel signal.
 */
type RunContext = FileContext & { home: string; path: string; signal?: AbortSignal };

/**
 * Runs `file args`, keeping at most `maxBytes` of stdout (then stops it) and 64 KiB of stderr.
 * The program gets its own process group, and a cancel kills the group, so what it started
 * (git's filters, say) goes with it.
 */
function run(
  file: string,
  args: string[],
  cwd: string,
  maxBytes: number,
  ctx: RunContext,
  stop?: (kept: Buffer) => boolean,
): Promise<RunOutput> {
  return new Promise((resolve, reject) => {
    const program = findOnPath(file, ctx.path);
    if (program === null) {
      reject(
        new ToolError('tool.unavailable', `${file} is not in this sandbox's image (not found on PATH ${ctx.path})`, {
          program: file,
          path: ctx.path,
        }),
      );
      return;
    }
    const child = spawn(program, args, {
      cwd,
      env: { ...ENV, PATH: ctx.path, HOME: ctx.home },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const killGroup = (): void => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    if (ctx.signal?.aborted) killGroup();
    ctx.signal?.addEventListener('abort', killGroup, { once: true });
    child.on('close', () => ctx.signal?.removeEventListener('abort', killGroup));
    const out: Buffer[] = [];
    let kept = 0;
    let total = 0;
    let stoppedEarly = false;
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      total += chunk.length;
      if (kept < maxBytes) {
        const part = chunk.subarray(0, maxBytes - kept);
        out.push(part);
        kept += part.length;
      }
      if ((kept >= maxBytes || stop?.(Buffer.concat(out))) && !stoppedEarly) {
        stoppedEarly = true;
        killGroup();
      }
    });
    child.stderr.on('data', (chunk: Buffer) => {
      if (stderr.length < 65536) stderr += chunk.toString('utf8');
    });
    child.on('error', (err) => reject(new ToolError('execution.spawn_failed', `${file}: ${err.message}`)));
    child.on('close', (code) => resolve({ stdout: Buffer.concat(out), stdoutBytes: total, stderr, code, stoppedEarly }));
  });
}

/**
 * `search`: ripgrep when the image has it (`rg` on its PATH), else the built-in walker
 * (search-walker.ts); `data.engine` says which ran.
 */
export async function searchOp(args: SearchArgs, ctx: RunContext): Promise<OpResult> {
  const root = await canonicalExisting(args.path, ctx);
  if (findOnPath('rg', ctx.path) === null) {
    const { matches, truncated } = await walkerSearch(root, args, ctx.signal);
    return searchResult(root, args, matches, truncated, 'builtin');
  }
  const rgArgs = ['--json', '--no-config', '--max-columns', '2000'];
  if (args.literal) rgArgs.push('--fixed-strings');
  if (args.ignoreCase) rgArgs.push('--ignore-case');
  if (args.glob) rgArgs.push('--glob', args.glob);
  rgArgs.push('--regexp', args.pattern, '--', root);
  const matches: Array<{ path: string; line: number; text: string }> = [];
  // ripgrep writes one JSON object per line (`rg --json`, see rg(1)); stop once `limit` matches are in.
  const result = await run(
    'rg',
    rgArgs,
    root,
    64 * 1024 * 1024,
    ctx,
    (kept) => kept.toString('utf8').split('"type":"match"').length - 1 > args.limit,
  );
  for (const line of result.stdout.toString('utf8').split('\n')) {
    if (!line.startsWith('{"type":"match"')) continue;
    let event: { data?: { path?: { text?: string }; line_number?: number; lines?: { text?: string } } };
    try {
      event = JSON.parse(line) as typeof event;
    } catch {
      continue; // the last line may be cut where rg was stopped
    }
    if (matches.length >= args.limit) break;
    matches.push({
      path: event.data?.path?.text ?? '?',
      line: event.data?.line_number ?? 0,
      text: (event.data?.lines?.text ?? '').replace(/\n$/, ''),
    });
  }
  // rg exits 1 when nothing matched, 2 on a bad pattern or other error.
  if (result.code === 2 && matches.length === 0)
    throw new ToolError('input.invalid', `search failed: ${result.stderr.trim().split('\n')[0] ?? 'rg error'}`, {
      stderr: result.stderr.slice(0, 2000),
    });
  return searchResult(root, args, matches, result.stoppedEarly || matches.length >= args.limit, 'ripgrep');
}

function searchResult(root: string, args: SearchArgs, matches: WalkerMatch[], truncated: boolean, engine: 'ripgrep' | 'builtin'): OpResult {
  return {
    data: { path: root, pattern: args.pattern, matches, truncated, engine },
    versions: [],
    modelText: matches.map((m) => `${m.path}:${m.line}:${m.text}`).join('\n') + (truncated ? `\n[truncated at ${args.limit} matches]` : ''),
  };
}

/**
 * Settings that keep git from running commands a repository's own config names (the sandbox's
 * code writes `.git/config`): no fsmonitor hook, no hooks, no pager; `-c` on the command line
 * outranks every config file (git-config(1), "FILES").
 */
const GIT_SAFE = ['-c', 'core.fsmonitor=false', '-c', 'core.hooksPath=/dev/null', '-c', 'core.pager=cat', '--no-pager'];

async function git(args: string[], cwd: string, maxBytes: number, ctx: RunContext): Promise<RunOutput> {
  const result = await run('git', [...GIT_SAFE, ...args], cwd, maxBytes, ctx);
  if (result.code !== 0 && !result.stoppedEarly) {
    if (/not a git repository/i.test(result.stderr))
      throw new ToolError('git.not_a_repository', `${cwd} is not inside a git work tree`, { path: cwd });
    throw new ToolError('git.failed', `git ${args[0]} exited ${result.code}: ${result.stderr.trim().split('\n')[0] ?? ''}`, {
      stderr: result.stderr.slice(0, 4000),
    });
  }
  return result;
}

export interface GitStatus {
  branch: { head: string | null; oid: string | null; upstream: string | null; ahead: number; behind: number };
  staged: Array<{ path: string; status: string; from?: string }>;
  unstaged: Array<{ path: string; status: string }>;
  untracked: string[];
  conflicted: Array<{ path: string; status: string }>;
}

/**
 * Parses `git status --porcelain=v2 -z --branch` (git-status(1), "Porcelain Format Version 2"):
 * NUL-terminated records; `# branch.*` headers, `1` ordinary and `2` renamed/copied changes
 * (XY: index and work-tree status, `.` = unchanged; a `2` record is followed by the original
 * path as its own NUL-terminated field), `u` unmerged, `?` untracked, `!` ignored.
 */
export function parsePorcelainV2(output: string): GitStatus {
  const status: GitStatus = {
    branch: { head: null, oid: null, upstream: null, ahead: 0, behind: 0 },
    staged: [],
    unstaged: [],
    untracked: [],
    conflicted: [],
  };
  const fields = output.split('\0');
  for (let i = 0; i < fields.length; i += 1) {
    const record = fields[i]!;
    if (record === '') continue;
    if (record.startsWith('# branch.oid ')) status.branch.oid = record.slice(13) === '(initial)' ? null : record.slice(13);
    else if (record.startsWith('# branch.head ')) status.branch.head = record.slice(14) === '(detached)' ? null : record.slice(14);
    else if (record.startsWith('# branch.upstream ')) status.branch.upstream = record.slice(18);
    else if (record.startsWith('# branch.ab ')) {
      const m = /^\+(\d+) -(\d+)$/.exec(record.slice(12));
      if (m) [status.branch.ahead, status.branch.behind] = [Number(m[1]), Number(m[2])];
    } else if (record.startsWith('1 ') || record.startsWith('2 ')) {
      const parts = record.split(' ');
      const xy = parts[1]!;
      // `1 XY sub mH mI mW hH hI path`; `2 XY sub mH mI mW hH hI Xscore path` + NUL + origPath.
      const path = parts.slice(record.startsWith('1 ') ? 8 : 9).join(' ');
      const from = record.startsWith('2 ') ? fields[++i] : undefined;
      if (xy[0] !== '.') status.staged.push(from === undefined ? { path, status: xy[0]! } : { path, status: xy[0]!, from });
      if (xy[1] !== '.') status.unstaged.push({ path, status: xy[1]! });
    } else if (record.startsWith('u ')) {
      const parts = record.split(' ');
      status.conflicted.push({ path: parts.slice(10).join(' '), status: parts[1]! });
    } else if (record.startsWith('? ')) status.untracked.push(record.slice(2));
  }
  return status;
}

export async function gitStatusOp(args: GitStatusArgs, ctx: RunContext): Promise<OpResult> {
  const root = await canonicalExisting(args.path, ctx);
  const result = await git(['status', '--porcelain=v2', '-z', '--branch', '--untracked-files=all'], root, 16 * 1024 * 1024, ctx);
  const status = parsePorcelainV2(result.stdout.toString('utf8'));
  const lines = [
    `branch ${status.branch.head ?? '(detached)'}${status.branch.upstream ? ` (${status.branch.upstream} +${status.branch.ahead} -${status.branch.behind})` : ''}`,
    ...status.staged.map((e) => `staged ${e.status} ${e.path}`),
    ...status.unstaged.map((e) => `unstaged ${e.status} ${e.path}`),
    ...status.conflicted.map((e) => `conflicted ${e.status} ${e.path}`),
    ...status.untracked.map((p) => `untracked ${p}`),
  ];
  return { data: { path: root, ...status }, versions: [], modelText: lines.join('\n') };
}

export async function gitDiffOp(args: GitDiffArgs, ctx: RunContext): Promise<OpResult> {
  const root = await canonicalExisting(args.path, ctx);
  const diffArgs = ['diff', '--no-color', '--no-ext-diff', '--no-textconv', ...(args.staged ? ['--cached'] : [])];
  // The whole diff (up to MAX_DIFF_BYTES) comes back; the agent keeps `maxBytes` of it in the
  // result and sends the rest as an artifact.
  const result = await git(diffArgs, root, MAX_DIFF_BYTES, ctx);
  const diff = result.stdout.toString('utf8');
  const truncated = result.stoppedEarly;
  return {
    data: { path: root, staged: args.staged, diff, diffTruncated: truncated },
    versions: [],
    modelText: diff,
  };
}
