/**
 * Docker engine driver (dockerode). The only module that talks to Docker. Responses are parsed
 * with zod at this boundary; Docker errors are translated once here into AppErrors, keeping the
 * original as `cause`.
 */
import type { Readable } from 'node:stream';
import Docker from 'dockerode';
import { z } from 'zod';
import { AppError } from '../../contract/errors.js';
import { LABEL, type OwnedSandbox, type RuntimeInfo, type SandboxRuntime, type SandboxSpec } from './runtime.js';

const InfoResponse = z.object({ ServerVersion: z.string(), Runtimes: z.record(z.string(), z.unknown()).default({}) });
const ImageInspect = z.object({ Id: z.string() });
const ContainerSummary = z.object({ Id: z.string(), State: z.string(), Labels: z.record(z.string(), z.string()).nullable().default({}) });
const VolumeList = z.object({ Volumes: z.array(z.object({ Name: z.string() })).nullable().default([]) });

export class DockerRuntime implements SandboxRuntime {
  private readonly docker: Docker;

  /** `socketPath`: the Docker engine's API socket, e.g. /var/run/docker.sock. */
  constructor(socketPath: string) {
    this.docker = new Docker({ socketPath });
  }

  async info(): Promise<RuntimeInfo> {
    const info = InfoResponse.parse(await this.call('info', () => this.docker.info()));
    return { engineVersion: info.ServerVersion, ociRuntimes: Object.keys(info.Runtimes) };
  }

  async imageId(ref: string): Promise<string> {
    try {
      return ImageInspect.parse(await this.docker.getImage(ref).inspect()).Id;
    } catch (err) {
      if (statusOf(err) === 404) throw new AppError('runtime.image_not_found', `image ${ref} is not on this Docker engine (nothing is pulled)`, { details: { image: ref }, cause: err });
      throw unavailable('inspect image', err);
    }
  }

  async start(spec: SandboxSpec): Promise<{ containerId: string }> {
    try {
      for (const v of spec.volumes) {
        await this.docker.createVolume({
          Name: v.name,
          Driver: 'local',
          // A tmpfs-backed local volume: size-limited, mounted on the host side, so the archive
          // API (which writes through the host path) reaches it, unlike a container tmpfs.
          DriverOpts: { type: 'tmpfs', device: 'tmpfs', o: `size=${v.sizeBytes},uid=${v.uid},gid=${v.gid},mode=0755,nosuid,nodev` },
          Labels: { [LABEL.lease]: spec.leaseId, [LABEL.owner]: spec.labels[LABEL.owner] ?? '' },
        });
      }
      const container = await this.docker.createContainer({
        name: spec.name,
        Image: spec.image,
        Labels: spec.labels,
        Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
        NetworkDisabled: spec.networkMode === 'none',
        HostConfig: {
          NetworkMode: spec.networkMode,
          ReadonlyRootfs: spec.readOnlyRoot,
          Tmpfs: spec.tmpfs,
          Mounts: [
            ...spec.volumes.map((v) => ({ Type: 'volume' as const, Source: v.name, Target: v.mountPath })),
            ...spec.readOnlyBinds.map((b) => ({ Type: 'bind' as const, Source: b.hostPath, Target: b.containerPath, ReadOnly: true })),
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
      return { containerId: container.id };
    } catch (err) {
      await this.remove(spec.leaseId, spec.labels[LABEL.owner] ?? '').catch(() => undefined);
      if (err instanceof AppError) throw err;
      if (statusOf(err) === 404) throw new AppError('runtime.image_not_found', `image ${spec.image} is not on this Docker engine`, { details: { image: spec.image }, cause: err });
      throw new AppError('lease.create_failed', `Docker could not start the sandbox: ${messageOf(err)}`, { cause: err });
    }
  }

  async remove(leaseId: string, _owner: string): Promise<void> {
    const failures: unknown[] = [];
    const filters = JSON.stringify({ label: [`${LABEL.lease}=${leaseId}`] });
    const containers = z.array(ContainerSummary).parse(await this.call('list containers', () => this.docker.listContainers({ all: true, filters })));
    for (const c of containers) {
      await this.docker
        .getContainer(c.Id)
        .remove({ force: true, v: true })
        .catch((err: unknown) => statusOf(err) === 404 || failures.push(err));
    }
    const volumes = VolumeList.parse(await this.call('list volumes', () => this.docker.listVolumes({ filters })));
    for (const v of volumes.Volumes ?? []) {
      await this.docker
        .getVolume(v.Name)
        .remove()
        .catch((err: unknown) => statusOf(err) === 404 || failures.push(err));
    }
    if (failures.length > 0) throw new AppError('runtime.unavailable', `could not remove every part of sandbox ${leaseId}: ${failures.map(messageOf).join('; ')}`, { cause: failures[0] });
  }

  async listOwned(owner: string): Promise<OwnedSandbox[]> {
    const filters = JSON.stringify({ label: [`${LABEL.owner}=${owner}`] });
    const containers = z.array(ContainerSummary).parse(await this.call('list containers', () => this.docker.listContainers({ all: true, filters })));
    return containers.flatMap((c) => {
      const leaseId = c.Labels?.[LABEL.lease];
      return leaseId ? [{ leaseId, containerId: c.Id, running: c.State === 'running' }] : [];
    });
  }

  async putArchive(leaseId: string, dir: string, tar: Readable): Promise<void> {
    try {
      await this.docker.getContainer(`sbx-${leaseId}`).putArchive(tar, { path: dir, noOverwriteDirNonDir: 'true' });
    } catch (err) {
      throw archiveError(err, dir);
    }
  }

  async getArchive(leaseId: string, path: string): Promise<Readable> {
    try {
      return (await this.docker.getContainer(`sbx-${leaseId}`).getArchive({ path })) as unknown as Readable;
    } catch (err) {
      throw archiveError(err, path);
    }
  }

  private async call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw unavailable(what, err);
    }
  }
}

function archiveError(err: unknown, path: string): AppError {
  const status = statusOf(err);
  if (status === 404) return new AppError('files.not_found', `no such path in the sandbox: ${path}`, { details: { path }, cause: err });
  if (status === 400 || status === 403) return new AppError('input.path_outside_workspace', `the sandbox refused ${path}: ${messageOf(err)}`, { details: { path }, cause: err });
  return unavailable('archive', err);
}

function unavailable(what: string, err: unknown): AppError {
  return new AppError('runtime.unavailable', `Docker engine: ${what} failed: ${messageOf(err)}`, { cause: err });
}

function statusOf(err: unknown): number | undefined {
  return typeof err === 'object' && err !== null && 'statusCode' in err ? Number((err as { statusCode: unknown }).statusCode) : undefined;
}

function messageOf(err: unknown): string {
  if (typeof err === 'object' && err !== null && 'json' in err) {
    const json = (err as { json?: { message?: string } }).json;
    if (json?.message) return json.message;
  }
  return err instanceof Error ? err.message : String(err);
}
