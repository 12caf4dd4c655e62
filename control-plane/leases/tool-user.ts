/**
 * Who the tools run as: the policy's `runtime.toolUser` when it names one; else the image's
 * `User` when that is not root (resolved in the image's own /etc/passwd and /etc/group, as the
 * engine would); else `sandbox` (1000:1000). Never root: tools never run as uid 0. Pure.
 */
import { AppError } from '../../contract/errors.js';
import type { ToolUser } from '../../contract/queue.js';

/** The tool user when neither the policy nor the image names one. */
export const DEFAULT_TOOL_USER: ToolUser = { name: 'sandbox', uid: 1000, gid: 1000, home: '/home/sandbox', source: 'default' };

/**
 * The image's `User` as `user[:group]`, or null when it runs as root (unset, `root`, `0`,
 * `0:…`). `user` and `group` are names or numbers, as in docker-run(1) `--user`.
 */
export function parseImageUser(user: string | null): { user: string; group: string | null } | null {
  if (user === null || user === '') return null;
  const [name, group] = user.split(':', 2) as [string, string | undefined];
  if (name === '' || name === 'root' || name === '0') return null;
  return { user: name, group: group === undefined || group === '' ? null : group };
}

/**
 * Resolves `wanted` (from `parseImageUser`) against the image's `passwd` and `group` files
 * (null: absent). A numeric user absent from passwd is that uid with its own number as gid and
 * `/` as home (what the engine does). Throws `image.user_not_found` for a name the image does
 * not define, and for a group (name) it does not define.
 */
export function resolveImageUser(wanted: { user: string; group: string | null }, passwd: string | null, group: string | null): ToolUser {
  const users = parseColonFile(passwd);
  const numeric = /^\d+$/.test(wanted.user);
  const entry = users.find((u) => (numeric ? u[2] === wanted.user : u[0] === wanted.user));
  if (!entry && !numeric)
    throw new AppError('image.user_not_found', `the image's User ${wanted.user} is not in its /etc/passwd`, {
      details: { user: wanted.user },
    });
  const uid = numeric ? Number(wanted.user) : Number(entry![2]);
  let gid = entry ? Number(entry[3]) : uid;
  if (wanted.group !== null) {
    if (/^\d+$/.test(wanted.group)) gid = Number(wanted.group);
    else {
      const g = parseColonFile(group).find((row) => row[0] === wanted.group);
      if (!g)
        throw new AppError('image.user_not_found', `the image's group ${wanted.group} is not in its /etc/group`, {
          details: { group: wanted.group },
        });
      gid = Number(g[2]);
    }
  }
  // A uid or gid that is no id the kernel takes (a malformed passwd field, a number past 2^32-2)
  // is a user the image does not define: refused here, before runc fails on it.
  for (const [kind, id] of [
    ['uid', uid],
    ['gid', gid],
  ] as const) {
    if (!Number.isSafeInteger(id) || id < 0 || id > MAX_ID)
      throw new AppError('image.user_not_found', `the image's User ${wanted.user} has no valid ${kind} (${String(id)})`, {
        details: { user: wanted.user, ...(wanted.group !== null ? { group: wanted.group } : {}), [kind]: String(id) },
      });
  }
  if (uid === 0) return DEFAULT_TOOL_USER;
  return { name: entry?.[0] ?? String(uid), uid, gid, home: entry?.[5] || '/', source: 'image' };
}

/** Largest uid/gid Linux takes (2^32-1 is the invalid id). */
const MAX_ID = 2 ** 32 - 2;

/** passwd(5)/group(5) lines as their colon-separated fields (comments and blank lines left out). */
function parseColonFile(text: string | null): string[][] {
  return (text ?? '')
    .split('\n')
    .filter((line) => line.trim() !== '' && !line.startsWith('#'))
    .map((line) => line.split(':'));
}
