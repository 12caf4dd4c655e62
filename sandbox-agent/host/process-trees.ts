/**
 * The process trees that outlive the call that started them: background tasks today, and
 * whatever else keeps tool-user processes running between calls (shell sessions, terminals,
 * the scripts of file transfers).
 * Each is registered under its session id (setsid(2): the leader's pid), so every process it
 * starts — also one that moved to a process group of its own, as a job of an interactive shell
 * does — is recognised by the session id in /proc/<pid>/stat.
 *
 * Used by the sweep after a call (it spares these sessions) and by whatever reports which
 * process belongs to what.
 */

/**
 * What a kept process tree belongs to: a background call, a shell session, a terminal, or a file
 * transfer of the files API (host/transfer-runner.ts, by its connection id), by id.
 */
export interface ProcessTreeOwner {
  readonly kind: 'call' | 'session' | 'terminal' | 'transfer';
  readonly id: string;
}

/** The registry of kept process trees, keyed by session id (the leader's pid). */
export class ProcessTrees {
  private readonly owners = new Map<number, ProcessTreeOwner>();

  /** Keeps the tree whose session id is `sid` from the sweep, as `owner`'s. */
  keep(sid: number, owner: ProcessTreeOwner): void {
    this.owners.set(sid, owner);
  }

  /** Stops keeping session `sid` (its leader ended, or its owner was closed). */
  release(sid: number): void {
    this.owners.delete(sid);
  }

  /** The session ids kept now. */
  sessionIds(): ReadonlySet<number> {
    return new Set(this.owners.keys());
  }

  /** The owner of session `sid`, or undefined when it is not kept. */
  ownerOf(sid: number): ProcessTreeOwner | undefined {
    return this.owners.get(sid);
  }

  /**
   * Attributes session `sid` to a foreground call while it runs, for reports only (the process
   * list): unlike `keep`, the sweep does not spare it. Returns the function that ends the
   * attribution; call it before the call's own sweep.
   */
  attribute(sid: number, owner: ProcessTreeOwner): () => void {
    this.running.set(sid, owner);
    return () => {
      if (this.running.get(sid) === owner) this.running.delete(sid);
    };
  }

  /** What session `sid` belongs to: a kept tree's owner, else a running foreground call's, else undefined. */
  belongsTo(sid: number): ProcessTreeOwner | undefined {
    return this.owners.get(sid) ?? this.running.get(sid);
  }

  /** Foreground calls running now, by session id (`attribute`). */
  private readonly running = new Map<number, ProcessTreeOwner>();
}
