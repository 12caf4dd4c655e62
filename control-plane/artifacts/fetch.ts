/**
 * Fetching an artifact the sandbox's agent announced (`artifact_ready`, contract/queue.ts) over
 * a transfer tunnel (contract/transfers.ts, op `artifact`): its bytes go from the agent's file
 * into the store, checked against the announced size and sha256, and never through Redis. The
 * agent lets its file go only once this side wrote ARTIFACT_STORED_LINE, so a fetch cut short
 * is made again from the redelivered announcement; one already stored is only discarded there.
 */
import { AppError } from '../../contract/errors.js';
import type { Artifact } from '../../contract/objects.js';
import { ARTIFACT_STORED_LINE, type TransferOp } from '../../contract/transfers.js';
import { framedData } from '../agent-link/frames.js';
import type { Tunnel } from '../agent-link/tunnels.js';
import type { ArtifactStore } from './store.js';

export interface ArtifactFetcherDeps {
  store: Pick<ArtifactStore, 'receive' | 'recorded'>;
  tunnels: { openTransfer(leaseId: string, op: TransferOp): Promise<Tunnel> };
}

export class ArtifactFetcher {
  constructor(private readonly deps: ArtifactFetcherDeps) {}

  /**
   * The artifact `meta` of lease `leaseId`, fetched from its agent and stored (or, stored
   * before, as it is, the agent told to let its copy go). Throws AppError `artifact.incomplete`
   * (the agent holds no such artifact, or could not read it) and `artifact.corrupt`, which
   * trying again cannot change; a tunnel that did not open or broke is a plain Error (its
   * AppError the cause), so the return path tries the announcement again (returns-in.ts).
   */
  async fetch(leaseId: string, meta: Omit<Artifact, 'createdAt' | 'expiresAt'>): Promise<Artifact> {
    try {
      return await this.fetchOnce(leaseId, meta);
    } catch (err) {
      if (err instanceof AppError && (err.code === 'files.agent_unreachable' || err.code === 'files.transfer_broken'))
        throw new Error(`fetching artifact ${meta.id} from the sandbox's agent failed: ${err.message}`, { cause: err });
      throw err;
    }
  }

  private async fetchOnce(leaseId: string, meta: Omit<Artifact, 'createdAt' | 'expiresAt'>): Promise<Artifact> {
    const recorded = await this.deps.store.recorded(meta.id);
    if (recorded) {
      await this.discard(leaseId, meta.id);
      return recorded;
    }
    const { socket } = await this.deps.tunnels.openTransfer(leaseId, { kind: 'artifact', artifactId: meta.id, discard: false });
    try {
      const { data } = framedData(socket, (end) =>
        end.exitCode === 0
          ? null
          : new AppError('artifact.incomplete', `the sandbox's agent could not send artifact ${meta.id}: ${end.stderr}`, {
              details: { artifactId: meta.id, reason: end.stderr },
            }),
      );
      const artifact = await this.deps.store.receive(meta, data);
      socket.end(ARTIFACT_STORED_LINE);
      return artifact;
    } finally {
      // Ended above when stored (the line flushes first); destroyed on any failure, so the agent keeps its file.
      if (!socket.writableEnded) socket.destroy();
    }
  }

  /** Tells the agent to let its copy of `artifactId` go; a failure only leaves the copy until the sandbox ends. */
  private async discard(leaseId: string, artifactId: string): Promise<void> {
    try {
      const { socket } = await this.deps.tunnels.openTransfer(leaseId, { kind: 'artifact', artifactId, discard: true });
      socket.destroy();
    } catch {
      // The agent or its copy may be gone already: nothing is lost either way.
    }
  }
}
