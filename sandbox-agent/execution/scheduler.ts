/**
 * Access-aware scheduling of the calls of one sandbox. Each call declares what it touches;
 * calls whose accesses do not conflict run at the same time, and a call never overtakes an
 * earlier call it conflicts with (whether that one is running or still waiting), so
 * conflicting calls take effect in the order they were queued.
 *
 * Conflicts: `all` (e.g. `exec`, which may touch anything) conflicts with every access; two
 * reads never conflict; a write conflicts with any access to the same path or to a path above
 * or below it. Paths are canonical absolute paths (the resolve step makes them so).
 *
 * Resolution in the flow: the control plane only sees lexical paths, so a call may be queued with a
 * resolver that turns its declared accesses into canonical ones. Until resolved, the entry blocks
 * every later entry (its accesses are unknown); it is resolved only once no earlier `all` entry
 * waits or runs, because only code (`all`) can create symlinks or rename directories — file tools
 * create regular files and directories, which change no other path's canonical form. So nothing
 * that could change a canonical form runs between a call's resolution and its start.
 *
 * Pure: no I/O, no clock; the resolver is injected (sandbox-agent/execution/accesses.ts does the
 * I/O). Unit-tested with barriers.
 */

export type Access = { kind: 'all' } | { kind: 'path'; path: string; mode: 'read' | 'write' };

/** Turns declared (lexical) accesses into canonical ones; must not reject (fall back to `all`). */
export type AccessResolver = () => Promise<readonly Access[]>;

interface Entry {
  /** Null while unresolved. */
  accesses: readonly Access[] | null;
  /** Set while the entry waits for its accesses to be resolved; cleared once resolving began. */
  resolver: AccessResolver | null;
  running: boolean;
  start: () => void;
}

/** Whether two accesses may not run at the same time. */
export function conflicts(a: Access, b: Access): boolean {
  if (a.kind === 'all' || b.kind === 'all') return true;
  if (a.mode === 'read' && b.mode === 'read') return false;
  return overlaps(a.path, b.path);
}

function overlaps(a: string, b: string): boolean {
  const under = (inner: string, outer: string): boolean => outer === '/' || inner === outer || inner.startsWith(`${outer}/`);
  return under(a, b) || under(b, a);
}

/** Unresolved (null) accesses conflict with everything: they are not known yet. No accesses conflict with nothing. */
function entriesConflict(a: readonly Access[] | null, b: readonly Access[] | null): boolean {
  if (a?.length === 0 || b?.length === 0) return false;
  if (a === null || b === null) return true;
  return a.some((x) => b.some((y) => conflicts(x, y)));
}

const touchesAll = (entry: Entry): boolean => entry.accesses !== null && entry.accesses.some((a) => a.kind === 'all');

export class AccessScheduler {
  private readonly entries: Entry[] = [];

  /** Calls waiting or running. */
  get size(): number {
    return this.entries.length;
  }

  /**
   * Queues a call with its accesses (an empty list touches nothing). Resolves, once the call
   * may run, with its `release` function; calling it more than once has no further effect.
   * With `resolver`, `accesses` are ignored until the resolver, called once no earlier `all`
   * entry is waiting or running (nor an earlier unresolved one), returns the canonical accesses.
   */
  acquire(accesses: readonly Access[], resolver?: AccessResolver): Promise<() => void> {
    return new Promise((resolve) => {
      const entry: Entry = {
        accesses: resolver ? null : accesses,
        resolver: resolver ?? null,
        running: false,
        start: () => {
          let released = false;
          resolve(() => {
            if (released) return;
            released = true;
            this.entries.splice(this.entries.indexOf(entry), 1);
            this.startReady();
          });
        },
      };
      this.entries.push(entry);
      this.startReady();
    });
  }

  private startReady(): void {
    this.entries.forEach((entry, index) => {
      if (entry.running) return;
      if (entry.accesses === null) {
        const resolver = entry.resolver;
        const mayResolve = resolver && !this.entries.slice(0, index).some((earlier) => earlier.accesses === null || touchesAll(earlier));
        if (!mayResolve) return;
        entry.resolver = null;
        void resolver().then((resolved) => {
          entry.accesses = resolved;
          this.startReady();
        });
        return;
      }
      const blocked = this.entries.slice(0, index).some((earlier) => entriesConflict(earlier.accesses, entry.accesses));
      if (!blocked) {
        entry.running = true;
        entry.start();
      }
    });
  }
}
