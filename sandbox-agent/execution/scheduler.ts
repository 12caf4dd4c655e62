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
 * Pure: no I/O, no clock. Unit-tested with barriers.
 */

export type Access = { kind: 'all' } | { kind: 'path'; path: string; mode: 'read' | 'write' };

interface Entry {
  readonly accesses: readonly Access[];
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

function entriesConflict(a: readonly Access[], b: readonly Access[]): boolean {
  return a.some((x) => b.some((y) => conflicts(x, y)));
}

export class AccessScheduler {
  private readonly entries: Entry[] = [];

  /** Calls waiting or running. */
  get size(): number {
    return this.entries.length;
  }

  /**
   * Queues a call with its accesses (an empty list touches nothing). Resolves, once the call
   * may run, with its `release` function; calling it more than once has no further effect.
   */
  acquire(accesses: readonly Access[]): Promise<() => void> {
    return new Promise((resolve) => {
      const entry: Entry = {
        accesses,
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
      const blocked = this.entries.slice(0, index).some((earlier) => entriesConflict(earlier.accesses, entry.accesses));
      if (!blocked) {
        entry.running = true;
        entry.start();
      }
    });
  }
}
