/**
 * The lines of a mountinfo text (`/proc/<pid>/mountinfo`, proc(5)): `id parent major:minor root
 * mount-point options [optional fields...] - fstype source super-options`, with the paths'
 * octal escapes (`\040` for a space, also tab, newline and backslash) decoded.
 */

/** One mount, in the order of the text (a later one at the same point is mounted over an earlier). */
export interface MountinfoEntry {
  major: number;
  minor: number;
  /** The path within the mounted filesystem that is the mount's root (`/` for the whole of it). */
  root: string;
  mountPoint: string;
  fstype: string;
  /** The filesystem's own options (for a cgroup v1 mount, its controllers among them). */
  superOptions: string[];
}

/** The mounts of a mountinfo text; a line without the fields is skipped. */
export function parseMountinfo(text: string): MountinfoEntry[] {
  const entries: MountinfoEntry[] = [];
  for (const line of text.split('\n')) {
    const [before, after = ''] = line.split(' - ');
    const fields = before?.split(' ') ?? [];
    if (fields.length < 5) continue;
    const [major, minor] = (fields[2] ?? '').split(':').map(Number);
    if (major === undefined || minor === undefined || !Number.isInteger(major) || !Number.isInteger(minor)) continue;
    const [fstype = '', , superOptions = ''] = after.split(' ');
    entries.push({
      major,
      minor,
      root: unescapeMountPath(fields[3]!),
      mountPoint: unescapeMountPath(fields[4]!),
      fstype,
      superOptions: superOptions.split(','),
    });
  }
  return entries;
}

function unescapeMountPath(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_m, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}
