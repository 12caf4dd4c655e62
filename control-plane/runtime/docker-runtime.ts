/**
 * Docker engine driver (dockerode). The only module that talks to Docker. File transfers run
 * GNU tar (the agent runtime's, not the image's) inside the sandbox as the tool user (docker exec) rather than through the archive
 * API, which writes as root through the daemon and follows symlinks the sandbox planted (into
 * a read-only root, for one). Responses are parsed
 * with zod at this boundary; Docker errors are translated once here into AppErrors, keeping the
 * original as `cause`.
 */
import Docker from 'dockerode';
import { z } from 'zod';
import { AppError } from '../../contract/errors.js';
import { messageOf, statusOf, unavailable } from './docker-errors.js';
import { inspectImage, readImageFiles } from './docker-images.js';
import { checkpointSandbox, checkpointSupport, freezeSandbox, thawSandbox } from './docker-freezer.js';
import { ensureLinkLocalBlocked } from './link-local-guard.js';
import { mountTargetsOf, refuseSymlinkedMountTargets } from './mount-targets.js';
import { ImageSource } from './image-source.js';
import { ImageSurvey } from './image-survey.js';
import { seedWritableRoots } from './seed-roots.js';
import { captureSnapshot, removeSnapshotImage } from './snapshot-image.js';
import { rootsBytesInUse } from './snapshot-roots.js';
import {
  agentExitedError,
  LABEL,
  ownershipLabels,
  ownershipSelectors,
  type CheckpointSupport,
  type OwnedSandbox,
  type ImageConfig,
  type Ownership,
  type RuntimeInfo,
  type SandboxRuntime,
  type CapturedImage,
  type SandboxSpec,
  type SnapshotCapture,
  type Started,
} from './runtime.js';

const InfoResponse = z.object({ ServerVersion: z.string(), Runtimes: z.record(z.string(), z.unknown()).default({}) });
const ContainerSummary = z.object({ Id: z.string(), State: z.string(), Labels: z.record(z.string(), z.string()).nullable().default({}) });
const NetworkList = z.array(z.object({ Id: z.string() }));
const VolumeList = z.object({
  Volumes: z
    .array(z.object({ Name: z.string() }))
    .nullable()
    .default([]),
});
const Labelled = z.object({ Labels: z.record(z.string(), z.string()).nullable().default({}) });
const OwnedVolumeList = z.object({ Volumes: z.array(Labelled).nullable().default([]) });
const OwnedNetworkList = z.array(Labelled);

const NO_COPY = { NoCopy: true } as Docker.MountSettings['VolumeOptions'];

/** How long a removal waits for another remover's removal of the same container to end (ms). */
const REMOVAL_WAIT_MS = 30_000;

/** How long a start that failed after its container started waits to learn whether the agent died (ms). */
const AGENT_DEATH_GRACE_MS = 2000;

export class DockerRuntime implements SandboxRuntime {
  private readonly docker: Docker;
  /** Whether the engine is on this host (a Unix socket path), for `criu check`. */
  private readonly local: boolean;

  /** Where snapshots keep their roots' archives, on the engine's host (snapshot-roots.ts). */
  private readonly snapshotDir: string;
  /** What was read from images before their sandboxes ran, per image ID (image-survey.ts). */
  private readonly survey: ImageSurvey;

  /**
   * `socketPath`: the Docker engine's API socket, e.g. /var/run/docker.sock; `snapshotDir`: a
   * directory on the engine's host for snapshots' roots (`<data dir>/snapshots/<installation id>`);
   * `surveyDir`: a directory of this control plane for image facts (`<data dir>/image-survey`).
   */
  constructor(socketPath: string, options: { snapshotDir: string; surveyDir: string }) {
    this.docker = new Docker({ socketPath });
    this.local = !socketPath.includes('://');
    this.snapshotDir = options.snapshotDir;
    this.survey = new ImageSurvey(options.surveyDir);
  }

  async info(): Promise<RuntimeInfo> {
    const info = InfoResponse.parse(await this.call('info', () => this.docker.info()));
    return { engineVersion: info.ServerVersion, ociRuntimes: Object.keys(info.Runtimes) };
  }

  async sweepImageSurvey(): Promise<number> {
    return this.survey.sweep(async (imageId) => {
      try {
        await this.docker.getImage(imageId).inspect();
        return true;
      } catch (err) {
        if (statusOf(err) === 404) return false;
        throw unavailable('inspect image', err);
      }
    });
  }

  async inspectImage(ref: string): Promise<ImageConfig> {
    return inspectImage(this.docker, ref);
  }

  async readImageFiles(ref: string, paths: string[], ownership: Ownership): Promise<Array<string | null>> {
    return this.call('read image files', () => readImageFiles(this.docker, ref, paths, ownership));
  }

  async start(spec: SandboxSpec): Promise<Started> {
    // One engine, one machine, no node labels: placement the policy asks for cannot be given.
    if (Object.keys(spec.nodeLabels).length > 0)
      throw new AppError(
        'policy.unenforceable',
        'the Docker driver runs every sandbox on its one engine: the policy asks for node labels',
        {
          details: { field: 'runtime.nodeLabels', runtime: 'docker', nodeLabels: spec.nodeLabels },
        },
      );
    // Made only when the image must be read (its first lease, or a root too large to record).
    const source = new ImageSource(this.docker, spec);
    // What was recorded of the image, read once for the lease; parts not recorded yet are read
    // by one lease of the image at a time (ImageSurvey.once), the others wait only there.
    const recorded = source.imageId === null ? null : await this.survey.record(source.imageId);
    const image = { survey: this.survey, recorded, source };
    const { ownership } = spec;
    let started = false;
    try {
      for (const v of spec.volumes) {
        await this.docker.createVolume({
          Name: v.name,
          Driver: 'local',
          // A tmpfs-backed local volume: size-limited like a container tmpfs, but a named,
          // labelled object that reconcile can find and reap by lease.
          DriverOpts: v.backing.tmpfs
            ? { type: 'tmpfs', device: 'tmpfs', o: `size=${v.backing.sizeBytes},uid=${v.uid},gid=${v.gid},mode=0755,nosuid,nodev` }
            : {},
          Labels: { [LABEL.lease]: spec.leaseId, ...ownershipLabels(ownership) },
        });
      }
      let networkMode = 'none';
      if (spec.network.mode === 'bridge') {
        // Before anything can run on the bridge, the firewall rule that keeps it off link-local
        // addresses is in place (or the lease fails with policy.unenforceable).
        await ensureLinkLocalBlocked();
        networkMode = `sbx-${spec.leaseId}`;
        await this.docker.createNetwork({
          Name: networkMode,
          Driver: 'bridge',
          EnableIPv6: false,
          Options: { 'com.docker.network.bridge.name': spec.network.bridgeInterface, 'com.docker.network.bridge.enable_icc': 'false' },
          Labels: { [LABEL.lease]: spec.leaseId, ...ownershipLabels(ownership) },
        });
      }
      await refuseSymlinkedMountTargets(source, image, mountTargetsOf(spec));
      const container = await this.docker.createContainer({
        name: spec.name,
        Image: spec.pinnedImage ?? spec.image,
        Labels: spec.labels,
        Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
        // The image's entrypoint, command and user are recorded, never run: the agent runs as
        // root from the runtime mount and drops every tool to the tool user.
        Entrypoint: spec.command,
        Cmd: [],
        User: '0:0',
        WorkingDir: '/',
        NetworkDisabled: spec.network.mode === 'none',
        HostConfig: {
          NetworkMode: networkMode,
          ReadonlyRootfs: spec.readOnlyRoot,
          Tmpfs: spec.tmpfs,
          Mounts: [
            // NoCopy: the engine's copy-up of a tmpfs volume is lost anyway (seed-roots.ts copies instead).
            ...spec.volumes.map((v) => ({ Type: 'volume' as const, Source: v.name, Target: v.mountPath, VolumeOptions: NO_COPY })),
            ...spec.readOnlyBinds.map((b) => ({ Type: 'bind' as const, Source: b.hostPath, Target: b.containerPath, ReadOnly: true })),
            ...(spec.volumeBinds ?? []).map((b) => ({
              Type: 'bind' as const,
              Source: b.hostPath,
              Target: b.containerPath,
              ReadOnly: b.readOnly,
            })),
          ],
          Runtime: spec.ociRuntime,
          CapDrop: ['ALL'],
          CapAdd: spec.capAdd,
          SecurityOpt: spec.noNewPrivileges ? ['no-new-privileges:true'] : [],
          NanoCpus: spec.nanoCpus,
          Memory: spec.memoryBytes,
          MemorySwap: spec.memoryBytes,
          PidsLimit: spec.pidsLimit,
          Ulimits: [{ Name: 'nofile', Soft: spec.openFiles, Hard: spec.openFiles }],
          IpcMode: 'private',
          RestartPolicy: { Name: 'no' },
        },
      });
      await container.start();
      started = true;
      const seededPaths = await seedWritableRoots(this.docker, spec, { snapshotDir: this.snapshotDir, ...image });
      await source.remove();
      return { containerId: container.id, seededPaths };
    } catch (err) {
      await source.remove();
      // A step into a sandbox whose agent is dying fails too (an exec exits 126 while the engine
      // still calls the container running): the agent's death, with its last words, is the cause.
      const died =
        started && !(err instanceof AppError && err.code === 'lease.writable_root_full')
          ? await this.diedWithin(spec.leaseId, AGENT_DEATH_GRACE_MS)
          : null;
      await this.remove(spec.leaseId, ownership).catch(() => undefined);
      if (died) throw agentExitedError(died.exitCode, died.logTail);
      if (err instanceof AppError) throw err;
      if (statusOf(err) === 404)
        throw new AppError('image.not_found', `image ${spec.image} is not on this Docker engine`, {
          details: { image: spec.image },
          cause: err,
        });
      throw new AppError('lease.create_failed', `Docker could not start the sandbox: ${messageOf(err)}`, { cause: err });
    }
  }

  /** `exited`, if the lease's container stops within `graceMs`; else null. */
  private async diedWithin(leaseId: string, graceMs: number): Promise<{ exitCode: number | null; logTail: string } | null> {
    const deadline = AbortSignal.timeout(graceMs);
    const exit = await this.exited(leaseId, deadline);
    return deadline.aborted ? null : exit;
  }

  async exited(leaseId: string, signal?: AbortSignal): Promise<{ exitCode: number | null; logTail: string }> {
    const container = this.docker.getContainer(`sbx-${leaseId}`);
    try {
      const waited = z.object({ StatusCode: z.number() }).parse(await container.wait(signal ? { abortSignal: signal } : {}));
      const logs = (await container.logs({ stdout: true, stderr: true, tail: 20 })) as unknown as Buffer;
      // Non-TTY logs are multiplexed (8-byte frame headers); the readable text survives stripping them.
      const logTail = logs
        .toString('utf8')
        .replace(/[\x00-\x08]/g, '')
        .trim();
      return { exitCode: waited.StatusCode, logTail };
    } catch {
      return { exitCode: null, logTail: '' };
    }
  }

  async remove(leaseId: string, ownership: Ownership): Promise<void> {
    const failures: unknown[] = [];
    const filters = JSON.stringify({ label: [`${LABEL.lease}=${leaseId}`, ...ownershipSelectors(ownership)] });
    const containers = z
      .array(ContainerSummary)
      .parse(await this.call('list containers', () => this.docker.listContainers({ all: true, filters })));
    for (const c of containers) {
      await this.removeContainer(c.Id).catch((err: unknown) => failures.push(err));
    }
    const volumes = VolumeList.parse(await this.call('list volumes', () => this.docker.listVolumes({ filters })));
    for (const v of volumes.Volumes ?? []) {
      await this.docker
        .getVolume(v.Name)
        .remove()
        .catch((err: unknown) => statusOf(err) === 404 || failures.push(err));
    }
    const networks = NetworkList.parse(await this.call('list networks', () => this.docker.listNetworks({ filters })));
    for (const n of networks) {
      await this.docker
        .getNetwork(n.Id)
        .remove()
        .catch((err: unknown) => statusOf(err) === 404 || failures.push(err));
    }
    if (failures.length > 0)
      throw new AppError(
        'runtime.unavailable',
        `could not remove every part of sandbox ${leaseId}: ${failures.map(messageOf).join('; ')}`,
        { cause: failures[0] },
      );
  }

  /**
   * Removes container `id` (absence is success). When another remover is at it already (the
   * engine's 409 "removal … already in progress": a pool replacing its member, another process
   * reaping), waits up to REMOVAL_WAIT_MS for it to be gone, so what follows (its volumes)
   * does not find it still in use.
   */
  private async removeContainer(id: string): Promise<void> {
    const container = this.docker.getContainer(id);
    try {
      await container.remove({ force: true, v: true });
    } catch (err) {
      if (statusOf(err) === 404) return;
      if (statusOf(err) !== 409 || !/already in progress/.test(messageOf(err))) throw err;
      try {
        await container.wait({ condition: 'removed', abortSignal: AbortSignal.timeout(REMOVAL_WAIT_MS) });
      } catch (waitErr) {
        if (statusOf(waitErr) !== 404) throw err;
      }
    }
  }

  async listOwned(ownership: Ownership): Promise<OwnedSandbox[]> {
    // Docker ANDs label filters: only what carries both this owner and this installation id.
    const filters = JSON.stringify({ label: ownershipSelectors(ownership) });
    const [containers, volumes, networks] = await Promise.all([
      this.call('list containers', () => this.docker.listContainers({ all: true, filters })).then((r) =>
        z.array(ContainerSummary).parse(r),
      ),
      this.call('list volumes', () => this.docker.listVolumes({ filters })).then((r) => OwnedVolumeList.parse(r).Volumes ?? []),
      this.call('list networks', () => this.docker.listNetworks({ filters })).then((r) => OwnedNetworkList.parse(r)),
    ]);
    const owned = new Map<string, OwnedSandbox>();
    for (const c of containers) {
      const leaseId = c.Labels?.[LABEL.lease];
      // A helper container (a create's seed source, a snapshot's staging; never started) counts like a volume.
      if (leaseId && c.Labels?.[LABEL.role]) {
        if (!owned.has(leaseId)) owned.set(leaseId, { leaseId, containerId: null, running: false, paused: false, node: 'local' });
      } else if (leaseId)
        owned.set(leaseId, {
          leaseId,
          containerId: c.Id,
          running: ['running', 'paused'].includes(c.State),
          paused: c.State === 'paused',
          node: 'local',
        });
    }
    for (const r of [...volumes, ...networks]) {
      const leaseId = r.Labels?.[LABEL.lease];
      if (leaseId && !owned.has(leaseId)) owned.set(leaseId, { leaseId, containerId: null, running: false, paused: false, node: 'local' });
    }
    return [...owned.values()];
  }

  pause = (leaseId: string): Promise<void> => freezeSandbox(this.docker, leaseId);
  unpause = (leaseId: string): Promise<void> => thawSandbox(this.docker, leaseId);
  checkpoint = (leaseId: string, id: string): Promise<void> => checkpointSandbox(this.docker, leaseId, id);
  checkpointSupport = (): Promise<CheckpointSupport> => checkpointSupport(this.docker, this.local);

  snapshot(capture: SnapshotCapture): Promise<CapturedImage> {
    return captureSnapshot(this.docker, this.snapshotDir, capture);
  }

  async snapshotBytesEstimate(leaseId: string, paths: readonly string[]): Promise<number> {
    const info = (await this.call('inspect', () => this.docker.getContainer(`sbx-${leaseId}`).inspect())) as { State?: { Pid?: number } };
    return rootsBytesInUse(info.State?.Pid ?? 0, paths);
  }

  removeSnapshot(ref: string): Promise<void> {
    return removeSnapshotImage(this.docker, this.snapshotDir, ref);
  }

  private async call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw unavailable(what, err);
    }
  }
}
