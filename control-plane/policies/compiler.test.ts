import { describe, expect, it } from 'vitest';
import { AppError } from '../../contract/errors.js';
import { agentEgress, compileSandboxSpec, type CompileInput } from './compiler.js';
import { Policy, policyRef } from './schema.js';

const base = Policy.parse({
  name: 'p',
  version: 3,
  filesystem: {
    writableRoots: [
      { path: '/workspace', sizeBytes: 256 * 1024 ** 2, kind: 'volume' },
      { path: '/tmp', sizeBytes: 64 * 1024 ** 2 },
      { path: '/home/sandbox', sizeBytes: 32 * 1024 ** 2 },
    ],
  },
  network: { mode: 'none' },
  resources: { cpus: 1.5, memoryBytes: 512 * 1024 ** 2, pids: 128, openFiles: 1024, ttlSeconds: 60, maxTtlSeconds: 600 },
  runtime: { toolUser: { name: 'sandbox', uid: 1000, gid: 1000, home: '/home/sandbox' } },
  tools: { exec: { defaultTimeoutMs: 1000, maxTimeoutMs: 2000, maxOutputBytes: 4096 } },
});

function input(policy: Policy, ociRuntimes = ['runc']): CompileInput {
  return {
    leaseId: 'sbx_abc',
    ownership: { owner: 'o', installation: 'inst_1' },
    sbxVersion: '0.1.0',
    image: 'img',
    policy,
    policyRef: policyRef(policy),
    agentConfigHostDir: '/data/leases/sbx_abc',
    agentRuntimeDir: '/opt/sbx-runtime/abc',
    toolUser: policy.runtime.toolUser!,
    agentRedisSocketDir: '/data/redis-socket',
    egressSocketHostDir: '/data/egress/sbx_abc',
    mounts: {
      allowlist: ['/srv/shared'],
      realpaths: new Map([
        ['/srv/shared/data', '/srv/shared/data'],
        ['/srv/shared/link', '/etc'],
        ['/srv/sharedx', '/srv/sharedx'],
        ['/srv/shared', '/srv/shared'],
      ]),
      protectedPaths: ['/srv/shared/sbx-data'],
    },
    ociRuntimes,
    labels: { team: 'a' },
  };
}

function unenforceable(fn: () => unknown): Record<string, unknown> {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe('policy.unenforceable');
    return (err as AppError).details ?? {};
  }
  throw new Error('expected policy.unenforceable');
}

describe('policy compiler', () => {
  it('compiles isolation: no network, read-only root, caps dropped but the agent minimum, limits, labels', () => {
    const spec = compileSandboxSpec(input(base));
    expect(spec.network).toEqual({ mode: 'none' });
    expect(spec.readOnlyRoot).toBe(true);
    expect(spec.capAdd).toEqual(['SETUID', 'SETGID', 'KILL']);
    expect(spec.noNewPrivileges).toBe(true);
    expect(spec.nanoCpus).toBe(1_500_000_000);
    expect(spec.memoryBytes).toBe(512 * 1024 ** 2);
    expect(spec.pidsLimit).toBe(128);
    expect(spec.openFiles).toBe(1024);
    expect(spec.labels).toMatchObject({ team: 'a', 'sbx.lease': 'sbx_abc', 'sbx.owner': 'o', 'sbx.version': '0.1.0', 'sbx.policy': 'p@3' });
    expect(spec.labels['sbx.installation']).toBe('inst_1');
  });

  it('puts volume roots on per-lease tmpfs volumes owned by the tool user, the agent spool on a disk volume, the rest on tmpfs; /tmp is sticky', () => {
    const spec = compileSandboxSpec(input(base));
    expect(spec.volumes).toEqual([
      {
        name: 'sbx-sbx_abc-workspace',
        mountPath: '/workspace',
        backing: { tmpfs: true, sizeBytes: 256 * 1024 ** 2 },
        uid: 1000,
        gid: 1000,
      },
      { name: 'sbx-sbx_abc-agent-spool', mountPath: '/run/sbx/spool', backing: { tmpfs: false }, uid: 0, gid: 0 },
    ]);
    expect(spec.tmpfs['/tmp']).toBe(`rw,exec,nosuid,nodev,size=${64 * 1024 ** 2},mode=1777`);
    expect(spec.tmpfs['/home/sandbox']).toBe(`rw,exec,nosuid,nodev,size=${32 * 1024 ** 2},uid=1000,gid=1000,mode=0755`);
  });

  it('mounts only the agent runtime, the credentials directory and the Redis socket directory, read-only', () => {
    expect(compileSandboxSpec(input(base)).readOnlyBinds).toEqual([
      { hostPath: '/opt/sbx-runtime/abc', containerPath: '/opt/sbx' },
      { hostPath: '/data/leases/sbx_abc', containerPath: '/run/sbx/agent' },
      { hostPath: '/data/redis-socket', containerPath: '/run/sbx/redis' },
    ]);
  });

  it('mounts read-only only host paths that resolve inside the mount allowlist', () => {
    const withMount = (hostPath: string): Policy => ({
      ...base,
      filesystem: { ...base.filesystem, readOnlyMounts: [{ hostPath, containerPath: '/data' }] },
    });
    expect(compileSandboxSpec(input(withMount('/srv/shared/data'))).readOnlyBinds).toContainEqual({
      hostPath: '/srv/shared/data',
      containerPath: '/data',
    });
    for (const outside of ['/srv/shared/link', '/srv/sharedx', '/srv/missing', '/srv/shared']) {
      try {
        compileSandboxSpec(input(withMount(outside)));
        expect.unreachable(outside);
      } catch (err) {
        expect((err as AppError).code).toBe('policy.mount_not_allowed');
        expect((err as AppError).details).toMatchObject({ field: 'filesystem.readOnlyMounts.0.hostPath' });
      }
    }
  });

  it('refuses paths that are not in normal form, so no check can be walked around with // or ..', () => {
    for (const [containerPath, hostPath] of [
      ['//run/sbx', '/srv/shared/data'],
      ['/run//sbx/egress', '/srv/shared/data'],
      ['/data/', '/srv/shared/data'],
      ['/data', '/srv/shared/../etc'],
    ]) {
      const parsed = Policy.safeParse({ ...base, filesystem: { ...base.filesystem, readOnlyMounts: [{ hostPath, containerPath }] } });
      expect(parsed.success, `${containerPath} ${hostPath}`).toBe(false);
    }
    expect(
      Policy.safeParse({ ...base, filesystem: { ...base.filesystem, writableRoots: [{ path: '/tmp/', sizeBytes: 1024 ** 2 }] } }).success,
    ).toBe(false);
  });

  it('puts an open-network sandbox on a bridge of its own, named for the firewall rule that matches sbx bridges', () => {
    const spec = compileSandboxSpec(input({ ...base, network: { mode: 'open', allow: [] } }));
    expect(spec.network).toEqual({ mode: 'bridge', bridgeInterface: 'sbxbrabc' });
    expect(agentEgress({ ...base, network: { mode: 'open', allow: [] } })).toBeNull();
  });

  it('gives an allowlist sandbox no network either, only the egress proxy socket directory and the agent listener for it', () => {
    const allowlist = { ...base, network: { mode: 'allowlist' as const, allow: [{ host: 'api.example.com', ports: [443] }] } };
    const spec = compileSandboxSpec(input(allowlist));
    expect(spec.network).toEqual({ mode: 'none' });
    expect(spec.readOnlyBinds).toContainEqual({ hostPath: '/data/egress/sbx_abc', containerPath: '/run/sbx/egress' });
    expect(agentEgress(allowlist)).toEqual({ port: 3128, socketPath: '/run/sbx/egress/proxy.sock' });
    expect(agentEgress(base)).toBeNull();
    expect(compileSandboxSpec(input(base)).readOnlyBinds.map((b) => b.containerPath)).not.toContain('/run/sbx/egress');
  });

  it('refuses allow rules outside mode allowlist, and malformed hosts and CIDRs, naming each', () => {
    const parsed = Policy.safeParse({
      ...base,
      network: {
        mode: 'none',
        allow: [
          { host: 'Bad_Host', ports: [443] },
          { cidr: '10.0.0.0/33', ports: [80] },
          { host: 'ok.test', ports: [] },
        ],
      },
    });
    expect(parsed.success).toBe(false);
    const paths = parsed.error!.issues.map((i) => i.path.join('.'));
    expect(paths).toEqual(expect.arrayContaining(['network.allow.0.host', 'network.allow.1.cidr', 'network.allow.2.ports']));
  });

  it('fails closed when gVisor is asked for and the engine lacks it, and uses it when present', () => {
    const gvisor = { ...base, runtime: { ...base.runtime, oci: 'runsc' as const } };
    expect(unenforceable(() => compileSandboxSpec(input(gvisor, ['runc']))).field).toBe('runtime.oci');
    expect(compileSandboxSpec(input(gvisor, ['runc', 'runsc'])).ociRuntime).toBe('runsc');
  });

  it('a policy allowing secrets gets the secrets tmpfs: memory only, root-owned, setgid to the tool group, no exec; without secrets there is none', () => {
    const spec = compileSandboxSpec(input({ ...base, secrets: { allowed: ['NPM_TOKEN', 'GH_TOKEN'] } }));
    expect(spec.tmpfs['/run/secrets']).toBe(`rw,noexec,nosuid,nodev,size=${2 * (64 * 1024 + 4096)},uid=0,gid=1000,mode=2750`);
    expect(JSON.stringify(spec)).not.toContain('NPM_TOKEN');
    expect(compileSandboxSpec(input(base)).tmpfs['/run/secrets']).toBeUndefined();
  });

  it('a policy that intercepts TLS mounts the lease CA trust files (over the system bundle too), and is unenforceable where a node relay runs the sandbox', () => {
    const intercepting = {
      ...base,
      network: { mode: 'allowlist' as const, allow: [{ host: 'api.test', ports: [443], http: { allow: [{ methods: ['GET'] }] } }] },
    };
    const spec = compileSandboxSpec({ ...input(intercepting), trustHostDir: '/data/trust/sbx_abc' });
    expect(spec.readOnlyBinds.filter((b) => b.hostPath.startsWith('/data/trust'))).toEqual([
      { hostPath: '/data/trust/sbx_abc', containerPath: '/etc/sbx/trust' },
      { hostPath: '/data/trust/sbx_abc/ca-bundle.pem', containerPath: '/etc/ssl/certs/ca-certificates.crt' },
    ]);
    expect(
      unenforceable(() =>
        compileSandboxSpec({ ...input(intercepting), trustHostDir: '/data/trust/sbx_abc', agentRelayDir: '/var/lib/sbx-relay' }),
      ).field,
    ).toBe('network.allow');
    expect(compileSandboxSpec(input(base)).readOnlyBinds.some((b) => b.containerPath === '/etc/sbx/trust')).toBe(false);
  });
});
