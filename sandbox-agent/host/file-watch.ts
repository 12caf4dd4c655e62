/**
 * The lease's file change log (issue 13 part 7): watches every file root of the lease for the
 * agent's whole life with the runtime's inotify helper (`/opt/sbx/bin/sbx-inotify`,
 * images/runtime/sbx-inotify.c), run as the tool user (it sees what the tool user may read; the
 * agent's root has no CAP_DAC_READ_SEARCH), and appends each change to the log through
 * `ChangeLogWriter` (a Redis stream, `LeaseKeys.changes`) with a gap-free `seq`.
 *
 * Why always on: `changes?since=` then answers without any stream open, and a watch opened later
 * misses nothing between its cursor and now. The cost: one inotify instance and one watch per
 * directory under the roots, charged to the tool user's uid on the host (fs.inotify.
 * max_user_instances, max_user_watches), and one log entry per change (coalesced: consecutive
 * modifications of one file are one entry) even when nobody reads them.
 *
 * A flood of changes (a process renaming files in a loop) costs the agent and Redis a bounded
 * share, so tool calls go on at their speed: past MAX_BUFFERED the agent stops reading the
 * helper (the helper blocks; the kernel's queue overflows, said as `kernel_queue`) until the
 * buffer is half written, and full batches go to the log at most one per FULL_BATCH_INTERVAL_MS.
 *
 * Nothing is lost silently: a kernel queue overflow, more changes buffered than MAX_BUFFERED,
 * a directory that could not be watched, a helper that died, an agent that restarted — each is
 * a `watch.overflow` entry in the log, at the place of the loss.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ChangeEntry, ChangeKind, FileChange, WatchOverflow } from '../../contract/watch.js';

/** Where the change log lives (the agent's main implements it on Redis). */
export interface ChangeLogWriter {
  /** The last `seq` in the log, 0 for an empty one. */
  lastSeq(): Promise<number>;
  /** Appends `entries` (their `seq`s follow the last one without gaps), all or none. */
  append(entries: readonly ChangeEntry[]): Promise<void>;
}

export interface FileWatchOptions {
  /** The inotify helper's path. */
  binary: string;
  /** Canonical roots to watch (the lease's file roots). */
  roots: readonly string[];
  /** The tool user the helper runs as. */
  uid: number;
  gid: number;
  writer: ChangeLogWriter;
  /** Wait before the helper is started again after it ended, ms; default 1000. */
  restartDelayMs?: number;
  log: { warn(obj: object, msg: string): void };
}

type Pending = Omit<FileChange, 'seq'> | Omit<WatchOverflow, 'seq'> | { type: 'watch.started'; roots: string[]; at: string };

const KINDS: Record<string, ChangeKind | null> = { f: 'file', d: 'directory', l: 'symlink', o: 'other', '-': null };
/** Entries written to the log in one transaction. */
const BATCH = 2000;
/** Changes held while the log is written, before `agent_buffer` overflow. */
const MAX_BUFFERED = 10_000;
/** Least time between the starts of two full batches written to the log, ms (8,000 entries/s at most). */
const FULL_BATCH_INTERVAL_MS = 250;
/** Wait before a failed write to the log is tried again, ms. */
const RETRY_MS = 500;
/**
 * How long a new file's `created` waits in the buffer with nothing folded into it before it is
 * written, ms: the writes right after a creation (a few `write(2)`s, the close, a chmod) come from
 * the helper in several reads, and only an entry not yet written can take them in. Each write
 * folded in starts the wait again (a writer slowed by load still folds), up to
 * CREATED_HOLD_MAX_MS in all. Other changes are written at once.
 */
const COALESCE_MS = 25;
/** The longest a new file's `created` is held for the writes after it, ms. */
const CREATED_HOLD_MAX_MS = 250;

export class FileWatch {
  private child: ChildProcess | null = null;
  private seq = 0;
  private buffer: Pending[] = [];
  private flushing = false;
  /** How many entries at the buffer's head are being written now (never changed in place). */
  private inFlight = 0;
  /** When a write was last folded into a buffered entry (ms since the epoch). */
  private foldedAtMs = 0;
  private stopped = false;
  private tokens: string[] = [];
  private partial = '';
  private readyResolve: (() => void) | null = null;
  /** Whether the running helper has its watches in place (its `s` record). */
  private helperStarted = false;
  /** Helper runs in a row that ended before they started (inotify unavailable): the restart delay doubles. */
  private failedStarts = 0;

  constructor(private readonly opts: FileWatchOptions) {}

  /** The helper's pid (the exec sweep must spare it), or null while none runs. */
  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  /**
   * Continues the log after its last entry (an agent that restarted adds `agent_restarted`) and
   * starts the helper. Resolves once the helper has its watches in place, or after `readyTimeoutMs`.
   */
  async start(readyTimeoutMs: number): Promise<void> {
    this.seq = await this.opts.writer.lastSeq();
    if (this.seq > 0) this.push({ type: 'watch.overflow', reason: 'agent_restarted', at: now() });
    const ready = new Promise<void>((resolve) => {
      this.readyResolve = resolve;
      setTimeout(resolve, readyTimeoutMs).unref();
    });
    this.spawnHelper();
    await ready;
  }

  stop(): void {
    this.stopped = true;
    this.child?.kill('SIGKILL');
  }

  private spawnHelper(): void {
    const child = spawn(this.opts.binary, [...this.opts.roots], {
      uid: this.opts.uid,
      gid: this.opts.gid,
      env: {},
      cwd: '/',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child = child;
    this.helperStarted = false;
    this.tokens = [];
    this.partial = '';
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (text: string) => {
      this.parse(text);
      if (this.buffer.length >= MAX_BUFFERED) child.stdout!.pause();
    });
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (text: string) => this.opts.log.warn({ helper: text.trim() }, 'file watch helper'));
    child.on('error', (err) => this.opts.log.warn({ err }, 'file watch helper failed to start'));
    child.on('close', (code, signal) => {
      if (this.child === child) this.child = null;
      if (this.stopped) return;
      // A helper that never started (no inotify instance to be had: the host's
      // max_user_instances) is tried again later and later, without an entry each time.
      this.failedStarts = this.helperStarted ? 0 : this.failedStarts + 1;
      const delayMs = Math.min((this.opts.restartDelayMs ?? 1000) * 2 ** this.failedStarts, 60_000);
      this.opts.log.warn({ code, signal, delayMs }, 'file watch helper ended; starting it again');
      if (this.helperStarted) this.push({ type: 'watch.overflow', reason: 'watcher_restarted', at: now() });
      // Said once: nothing is being watched until a start succeeds.
      else if (this.failedStarts === 1) this.push({ type: 'watch.overflow', reason: 'watch_limit', at: now() });
      setTimeout(() => {
        if (!this.stopped) this.spawnHelper();
      }, delayMs).unref();
    });
  }

  /** Splits the helper's output into NUL-ended fields and its records (images/runtime/sbx-inotify.c). */
  private parse(text: string): void {
    const parts = (this.partial + text).split('\0');
    this.partial = parts.pop()!;
    for (const field of parts) {
      this.tokens.push(field);
      const kind = this.tokens[0];
      if (this.tokens.length < (kind === 'r' ? 5 : 4)) continue;
      const [k, type, size, path, path2] = this.tokens;
      this.tokens = [];
      this.record(k!, type!, Number(size), path!, path2);
    }
  }

  private record(k: string, type: string, size: number, path: string, path2: string | undefined): void {
    const at = now();
    const kind = KINDS[type] ?? null;
    const sizeBytes = size >= 0 && type !== 'd' ? size : null;
    switch (k) {
      case 's':
        this.helperStarted = true;
        this.push({ type: 'watch.started', roots: [...this.opts.roots], at });
        this.readyResolve?.();
        this.readyResolve = null;
        return;
      case 'o':
        return this.push({ type: 'watch.overflow', reason: 'kernel_queue', at });
      case 'l':
        return this.push({ type: 'watch.overflow', reason: 'watch_limit', path, at });
      case 'c':
        return this.push({ type: 'created', path, kind, sizeBytes, at });
      case 'd':
        return this.push({ type: 'deleted', path, kind, sizeBytes: null, at });
      case 'r':
        return this.push({ type: 'renamed', oldPath: path, path: path2!, kind, sizeBytes, at });
      case 'm': {
        // Consecutive modifications of one file (and the writes right after its creation) are one entry.
        const last = this.lastMutable();
        if (last && (last.type === 'created' || last.type === 'modified') && last.path === path) {
          // A file gone (renamed, deleted) by the time the helper looked keeps the size and kind last seen.
          if (kind !== null) {
            last.sizeBytes = sizeBytes;
            last.kind = kind;
          }
          this.foldedAtMs = Date.now();
          return;
        }
        return this.push({ type: 'modified', path, kind, sizeBytes, at });
      }
    }
  }

  /**
   * Buffers one entry; past MAX_BUFFERED (the rest of a chunk read before the helper's output
   * was paused) the entry is counted into an `agent_buffer` overflow instead.
   */
  private push(entry: Pending): void {
    // Overflow and start entries are always kept (at most a few past the bound): a loss is never lost.
    if (this.buffer.length >= MAX_BUFFERED && entry.type !== 'watch.started' && entry.type !== 'watch.overflow') {
      const last = this.lastMutable();
      if (last?.type === 'watch.overflow' && last.reason === 'agent_buffer') last.dropped = (last.dropped ?? 0) + 1;
      else this.buffer.push({ type: 'watch.overflow', reason: 'agent_buffer', dropped: 1, at: now() });
    } else {
      this.buffer.push(entry);
    }
    void this.flush();
  }

  /**
   * Waits while the buffer ends in a new file and writes keep folding into it: until COALESCE_MS
   * pass with none, or CREATED_HOLD_MAX_MS in all.
   */
  private async holdNewFile(): Promise<void> {
    const startMs = Date.now();
    do {
      const foldedBefore = this.foldedAtMs;
      await sleep(COALESCE_MS);
      if (this.foldedAtMs === foldedBefore) return;
    } while (this.endsInNewFile() && Date.now() - startMs < CREATED_HOLD_MAX_MS);
  }

  /** Whether the buffer (less than a full batch) ends in a `created` regular file. */
  private endsInNewFile(): boolean {
    const last = this.buffer.at(-1);
    return this.buffer.length < BATCH && last?.type === 'created' && last.kind === 'file';
  }

  /** The buffer's last entry while it is not being written. */
  private lastMutable(): Pending | undefined {
    return this.buffer.length > this.inFlight ? this.buffer.at(-1) : undefined;
  }

  /** Writes the buffer to the log in order, a batch at a time; a failed write is tried again. */
  private async flush(): Promise<void> {
    if (this.flushing) return;
    this.flushing = true;
    let fullBatchAt = 0;
    try {
      while (this.buffer.length > 0) {
        // A flood is written at a bounded rate: Redis serves the tool calls too. A batch that
        // ends in a new file waits COALESCE_MS, so that the writes right after it fold into it.
        const waitMs = fullBatchAt + FULL_BATCH_INTERVAL_MS - Date.now();
        if (waitMs > 0) await sleep(waitMs);
        else if (this.endsInNewFile()) await this.holdNewFile();
        // Taken out only once written: a failed write keeps them (and their seqs) for the next try.
        const batch = this.buffer.slice(0, BATCH).map((e, i) => ({ ...e, seq: this.seq + 1 + i }) as ChangeEntry);
        this.inFlight = batch.length;
        fullBatchAt = batch.length === BATCH ? Date.now() : 0;
        try {
          await this.opts.writer.append(batch);
        } catch (err) {
          this.inFlight = 0;
          this.opts.log.warn({ err }, 'file change log write failed; trying again');
          await sleep(RETRY_MS);
          continue;
        }
        this.seq += batch.length;
        this.buffer.splice(0, batch.length);
        this.inFlight = 0;
        if (this.buffer.length <= MAX_BUFFERED / 2) this.child?.stdout?.resume();
      }
    } finally {
      this.flushing = false;
    }
  }
}

function now(): string {
  return new Date().toISOString();
}
