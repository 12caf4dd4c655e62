/**
 * Pause, resume and memory checkpoints of sandbox containers on the Docker engine: `pause`
 * freezes every process of the container through the cgroup freezer (`docker pause`), `unpause`
 * thaws them with their memory, open files and sockets as they were. Memory checkpoints
 * (`docker checkpoint`, CRIU) need an engine built with experimental features and a working
 * `criu` on the engine's host; `checkpointSupport` says whether both hold, and why not.
 */
import { execFile } from 'node:child_process';
import type Docker from 'dockerode';
import { z } from 'zod';
import { AppError } from '../../contract/errors.js';
import { messageOf, statusOf, unavailable } from './docker-errors.js';
import type { CheckpointSupport } from './runtime.js';

const ExperimentalInfo = z.object({ ExperimentalBuild: z.boolean().default(false) });

/** How long `criu check` may take before it counts as failed, ms. */
const CRIU_CHECK_TIMEOUT_MS = 10_000;

/**
 * Freezes every process of lease `leaseId`'s container (cgroup freezer). Idempotent: an already
 * paused container is success. Throws AppError `lease.not_ready` (no such container, or it is
 * not running), `runtime.unavailable`.
 */
export async function freezeSandbox(docker: Docker, leaseId: string): Promise<void> {
  try {
    await docker.getContainer(`sbx-${leaseId}`).pause();
  } catch (err) {
    // "already paused" is what we want (409, or 500 on older engines); "not running" is not.
    if (/already paused/i.test(messageOf(err))) return;
    throw translate('pause', leaseId, err);
  }
}

/**
 * Thaws lease `leaseId`'s container. Idempotent: a container that is not paused is success.
 * Throws AppError `lease.not_ready` (no such container), `runtime.unavailable`.
 */
export async function thawSandbox(docker: Docker, leaseId: string): Promise<void> {
  try {
    await docker.getContainer(`sbx-${leaseId}`).unpause();
  } catch (err) {
    // "is not paused" (409, or 500 on Docker 20.10): a racing resume or reconcile thawed it first.
    if (/is not paused/i.test(messageOf(err))) return;
    throw translate('unpause', leaseId, err);
  }
}

/**
 * Whether the engine can checkpoint a container's memory: its `ExperimentalBuild` (`docker
 * info`) and, on this host, `criu check`. `local`: whether the engine runs on this machine
 * (its socket is a local Unix socket), which `criu check` needs to say anything about it.
 */
export async function checkpointSupport(docker: Docker, local: boolean): Promise<CheckpointSupport> {
  const missing: string[] = [];
  let experimental = false;
  try {
    experimental = ExperimentalInfo.parse(await docker.info()).ExperimentalBuild;
  } catch (err) {
    throw unavailable('info', err);
  }
  if (!experimental) missing.push('the Docker engine runs without experimental features (docker info: ExperimentalBuild false)');
  if (!local) missing.push('the engine is not on this host, so criu cannot be checked');
  else {
    const criu = await criuCheck();
    if (criu !== null) missing.push(criu);
  }
  return { supported: missing.length === 0, missing };
}

/** Null when `criu check` passes; else what it said. */
function criuCheck(): Promise<string | null> {
  return new Promise((resolve) => {
    execFile('criu', ['check'], { timeout: CRIU_CHECK_TIMEOUT_MS }, (err, _stdout, stderr) => {
      if (!err) return resolve(null);
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return resolve('criu is not installed on the engine host');
      resolve(`criu check failed: ${(stderr || err.message).trim().split('\n')[0]}`);
    });
  });
}

/**
 * Checkpoints the memory and processes of lease `leaseId`'s container as `checkpointId`, leaving
 * it running (`docker checkpoint create --leave-running`). Only after `checkpointSupport` said
 * yes. Throws AppError `lease.not_ready`, `runtime.unavailable`.
 */
export async function checkpointSandbox(docker: Docker, leaseId: string, checkpointId: string): Promise<void> {
  try {
    // dockerode has the call but not its type.
    const container = docker.getContainer(`sbx-${leaseId}`) as unknown as { createCheckpoint(opts: object): Promise<unknown> };
    await container.createCheckpoint({ CheckpointID: checkpointId, Exit: false });
  } catch (err) {
    throw translate('checkpoint', leaseId, err);
  }
}

function translate(action: string, leaseId: string, err: unknown): AppError {
  const status = statusOf(err);
  if (status === 404 || status === 409)
    return new AppError('lease.not_ready', `sandbox ${leaseId} has no running container to ${action}: ${messageOf(err)}`, {
      cause: err,
    });
  return unavailable(`${action} of sandbox ${leaseId}`, err);
}
