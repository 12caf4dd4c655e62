/**
 * Event counters of the sandbox's own cgroup, read from inside the container, that tell why a
 * process failed when its exit status alone cannot: the kernel's OOM kills and the forks the
 * pids limit refused. cgroup v1: memory.oom_control `oom_kill`, pids.events `max`; cgroup v2:
 * memory.events `oom_kill`, pids.events `max` (Linux Documentation/admin-guide/cgroup-v1,
 * cgroup-v2). A counter that cannot be read is null: the classification then says nothing.
 */
import { readFileSync } from 'node:fs';

export interface CgroupCounters {
  oomKills: number | null;
  pidsRefused: number | null;
}

function counter(paths: string[], key: string): number | null {
  for (const path of paths) {
    let text: string | null;
    try {
      text = readFileSync(path, 'utf8');
    } catch {
      text = null;
    }
    const m = text === null ? null : new RegExp(`^${key} (\\d+)$`, 'm').exec(text);
    if (m) return Number(m[1]);
  }
  return null;
}

/**
 * Both counters now. Synchronous: two small reads cost less than a trip through the thread pool,
 * and a read before a spawn must be done before the program starts.
 */
export function readCgroupCounters(): CgroupCounters {
  return {
    oomKills: counter(['/sys/fs/cgroup/memory/memory.oom_control', '/sys/fs/cgroup/memory.events'], 'oom_kill'),
    pidsRefused: counter(['/sys/fs/cgroup/pids/pids.events', '/sys/fs/cgroup/pids.events'], 'max'),
  };
}

/** Whether counter `key` went up between `before` and `after`. */
export function rose(before: CgroupCounters, after: CgroupCounters, key: keyof CgroupCounters): boolean {
  const a = before[key];
  const b = after[key];
  return a !== null && b !== null && b > a;
}
