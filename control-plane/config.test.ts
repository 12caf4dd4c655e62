import { describe, expect, it } from 'vitest';
import { loadConfig } from './config.js';

const repoRoot = new URL('..', import.meta.url).pathname;
const base = { SBX_REDIS_URL: 'unix:///tmp/none.sock' };

describe('SBX_DEFAULT_TENANT_QUOTA', () => {
  it('defaults to no limits and takes a JSON object of limits', () => {
    expect(loadConfig(base, repoRoot).defaultTenantQuota).toEqual({});
    expect(
      loadConfig({ ...base, SBX_DEFAULT_TENANT_QUOTA: '{"maxSandboxes": 5, "maxCpus": 2.5, "maxMemoryBytes": null}' }, repoRoot)
        .defaultTenantQuota,
    ).toEqual({
      maxSandboxes: 5,
      maxCpus: 2.5,
      maxMemoryBytes: null,
    });
  });

  it('refuses what is not JSON, unknown fields and negative limits, naming the variable', () => {
    for (const bad of ['maxSandboxes=5', '{"maxPids": 3}', '{"maxSandboxes": -1}', '{"maxSandboxes": 1.5}']) {
      expect(() => loadConfig({ ...base, SBX_DEFAULT_TENANT_QUOTA: bad }, repoRoot), bad).toThrow(/SBX_DEFAULT_TENANT_QUOTA/);
    }
  });
});

describe('comma-separated list settings', () => {
  it('trim items and drop empty ones; registries are lower-cased; each list is then checked', () => {
    const config = loadConfig(
      {
        ...base,
        SBX_EGRESS_DNS_SERVERS: ' 10.0.0.53 ,,1.1.1.1:53',
        SBX_MOUNT_ALLOWLIST: '/srv/data, /opt/tools ,',
        SBX_IMAGE_REGISTRIES: 'Docker.IO, 127.0.0.1:5000',
      },
      repoRoot,
    );
    expect(config.egressDnsServers).toEqual(['10.0.0.53', '1.1.1.1:53']);
    expect(config.mountAllowlist).toEqual(['/srv/data', '/opt/tools']);
    expect(config.imageRegistries).toEqual(['docker.io', '127.0.0.1:5000']);
    expect(loadConfig(base, repoRoot).mountAllowlist).toEqual([]);
    expect(() => loadConfig({ ...base, SBX_MOUNT_ALLOWLIST: 'relative/path' }, repoRoot)).toThrow(/absolute paths/);
  });
});

describe('the link address other replicas reach', () => {
  it('is SBX_LINK_ADVERTISE, else SBX_LINK_LISTEN; listening on 0.0.0.0 without it is refused, naming both', () => {
    expect(loadConfig(base, repoRoot).linkAdvertise).toBeNull();
    expect(loadConfig({ ...base, SBX_LINK_LISTEN: '10.0.0.5:7071' }, repoRoot).linkAdvertise).toBe('10.0.0.5:7071');
    expect(loadConfig({ ...base, SBX_LINK_LISTEN: '0.0.0.0:7071', SBX_LINK_ADVERTISE: 'cp-0.sbx:7071' }, repoRoot).linkAdvertise).toBe(
      'cp-0.sbx:7071',
    );
    expect(() => loadConfig({ ...base, SBX_LINK_LISTEN: '0.0.0.0:7071' }, repoRoot)).toThrow(/SBX_LINK_LISTEN.*SBX_LINK_ADVERTISE/);
    expect(() => loadConfig({ ...base, SBX_LINK_ADVERTISE: 'no-port' }, repoRoot)).toThrow(/SBX_LINK_ADVERTISE/);
    // Node binds these to every address too.
    for (const listen of ['0:7071', '0.0.0.00:7071'])
      expect(() => loadConfig({ ...base, SBX_LINK_LISTEN: listen }, repoRoot), listen).toThrow(/SBX_LINK_ADVERTISE/);
    expect(() => loadConfig({ ...base, SBX_LINK_LISTEN: '0.0.0.0:7071', SBX_LINK_ADVERTISE: '0.0.0.0:7071' }, repoRoot)).toThrow(
      /names no address/,
    );
    expect(() => loadConfig({ ...base, SBX_LINK_LISTEN: '10.0.0.5:99999' }, repoRoot)).toThrow(/65535/);
    for (const alone of [{ SBX_LINK_ADVERTISE: '10.0.0.5:7071' }, { SBX_LINK_TLS_CERT: '/c', SBX_LINK_TLS_KEY: '/k' }])
      expect(() => loadConfig({ ...base, ...alone }, repoRoot), JSON.stringify(alone)).toThrow(/need SBX_LINK_LISTEN/);
    expect(() => loadConfig({ ...base, SBX_LINK_LISTEN: '10.0.0.5:7071', SBX_LINK_TLS_CERT: '/c' }, repoRoot)).toThrow(/go together/);
  });

  it('artifacts live in SBX_ARTIFACT_DIR, by default under the data dir', () => {
    expect(loadConfig({ ...base, SBX_DATA_DIR: '/srv/sbx' }, repoRoot).artifactDir).toBe('/srv/sbx/artifacts');
    expect(loadConfig({ ...base, SBX_ARTIFACT_DIR: '/shared/artifacts' }, repoRoot).artifactDir).toBe('/shared/artifacts');
  });
});

describe('SBX_K8S_RUNTIME_CLASSES', () => {
  const k8s = { ...base, SBX_RUNTIME: 'kubernetes', SBX_OWNER: 'sbx' };
  it('maps an OCI runtime to the RuntimeClass a sandbox of it names; none by default', () => {
    const runtimeOf = (env: Record<string, string>) => loadConfig(env, repoRoot).runtime as { runtimeClasses: Record<string, string> };
    expect(runtimeOf(k8s).runtimeClasses).toEqual({});
    expect(runtimeOf({ ...k8s, SBX_K8S_RUNTIME_CLASSES: 'runsc=gvisor, runc=runc-hardened' }).runtimeClasses).toEqual({
      runsc: 'gvisor',
      runc: 'runc-hardened',
    });
  });

  it('refuses a runtime sbx does not know and a name Kubernetes would not take, naming the variable', () => {
    for (const bad of ['kata=kata', 'runsc=GVisor', 'runsc=', 'runsc'])
      expect(() => loadConfig({ ...k8s, SBX_K8S_RUNTIME_CLASSES: bad }, repoRoot), bad).toThrow(/SBX_K8S_RUNTIME_CLASSES/);
  });
});

describe('SBX_BOOT_CONCURRENCY', () => {
  it('defaults to twice the CPUs (at least 2) on Docker and no limit on Kubernetes; empty is unset; a number is taken', () => {
    const docker = loadConfig(base, repoRoot).bootConcurrency;
    expect(docker).toBeGreaterThanOrEqual(2);
    expect(docker % 2).toBe(0);
    expect(loadConfig({ ...base, SBX_BOOT_CONCURRENCY: '' }, repoRoot).bootConcurrency).toBe(docker);
    expect(loadConfig({ ...base, SBX_RUNTIME: 'kubernetes', SBX_OWNER: 'sbx' }, repoRoot).bootConcurrency).toBe(0);
    expect(loadConfig({ ...base, SBX_BOOT_CONCURRENCY: '0' }, repoRoot).bootConcurrency).toBe(0);
    expect(loadConfig({ ...base, SBX_BOOT_CONCURRENCY: '3' }, repoRoot).bootConcurrency).toBe(3);
  });

  it('refuses what is not a non-negative integer, naming the variable', () => {
    for (const bad of ['-1', '1.5', 'four']) {
      expect(() => loadConfig({ ...base, SBX_BOOT_CONCURRENCY: bad }, repoRoot), bad).toThrow(/SBX_BOOT_CONCURRENCY/);
    }
  });
});
