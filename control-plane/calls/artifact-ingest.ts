/**
 * An artifact a call's attempt sends back (contract/queue.ts return messages): chunks stored as
 * they come and completed on `artifact_end`, or, on `artifact_ready`, fetched over a transfer
 * tunnel (artifacts/fetch.ts); then the call's `artifact` event, once per artifact.
 */
import type { ReturnMessage } from '../../contract/queue.js';
import type { ArtifactFetcher } from '../artifacts/fetch.js';
import type { ArtifactStore } from '../artifacts/store.js';
import type { CallStore } from './store.js';

type ArtifactMessage = Extract<ReturnMessage, { kind: 'artifact_chunk' | 'artifact_end' | 'artifact_ready' }>;

export interface ArtifactIngestDeps {
  artifacts: Pick<ArtifactStore, 'writeChunk' | 'complete'>;
  fetchArtifact: ArtifactFetcher['fetch'];
  store: Pick<CallStore, 'appendEvent'>;
}

/** Stores one artifact message of `leaseId` received at `at`; idempotent per chunk and per artifact. */
export async function ingestArtifact(deps: ArtifactIngestDeps, leaseId: string, message: ArtifactMessage, at: Date): Promise<void> {
  if (message.kind === 'artifact_chunk') {
    await deps.artifacts.writeChunk(message.artifactId, message.index, message.data, message.sha256);
    return;
  }
  const meta = {
    id: message.artifactId,
    leaseId,
    callId: message.callId,
    name: message.name,
    mediaType: message.mediaType,
    size: message.size,
    sha256: message.sha256,
  };
  const artifact =
    message.kind === 'artifact_ready'
      ? await deps.fetchArtifact(leaseId, meta)
      : await deps.artifacts.complete({ ...meta, chunks: message.chunks });
  await deps.store.appendEvent(
    leaseId,
    message.callId,
    { type: 'artifact', artifactId: artifact.id, name: artifact.name, size: artifact.size, sha256: artifact.sha256 },
    at,
    `artifact:${artifact.id}`,
    { unlessFinished: true },
  );
}
