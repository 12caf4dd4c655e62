/**
 * The deploy manifests against the control plane's own settings: they parse, set only settings
 * `loadConfig` knows, point the control plane and Redis at the same socket (the one loadConfig
 * would derive for the data dir), keep Redis persistent (AOF, noeviction, a password), and mount
 * the data dir at the same path on the host as inside (the Docker engine resolves the bind mounts
 * the control plane asks for on the host).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { loadConfig, SETTING_NAMES } from '../control-plane/config.js';

const here = import.meta.dirname;
const repoRoot = join(here, '..');
const DATA_DIR = '/var/lib/sbx';
/** The socket loadConfig derives for the data dir the manifests use. */
const DEFAULT_SOCKET = loadConfig({ SBX_DATA_DIR: DATA_DIR }, repoRoot).redis.path;

/** `KEY value` lines of a redis.conf. */
function redisSettings(text: string): Map<string, string> {
  return new Map(
    text
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line !== '' && !line.startsWith('#'))
      .map((line) => [line.split(/\s+/)[0]!, line.split(/\s+/).slice(1).join(' ')] as [string, string]),
  );
}

function expectPersistentRedis(conf: Map<string, string>): void {
  expect(conf.get('appendonly')).toBe('yes');
  expect(conf.get('maxmemory-policy')).toBe('noeviction');
  expect(conf.get('unixsocket')).toBe(DEFAULT_SOCKET);
  expect(conf.get('unixsocketperm')).toBe('700');
}

describe('deploy/compose', () => {
  const compose = parse(readFileSync(join(here, 'compose', 'compose.yaml'), 'utf8'));
  const controlPlane = compose.services['control-plane'];
  const env = controlPlane.environment as Record<string, string>;

  it('sets only settings the control plane reads, and the socket loadConfig derives for its data dir', () => {
    expect(Object.keys(env).filter((name) => !SETTING_NAMES.includes(name))).toEqual([]);
    expect(env.SBX_DATA_DIR).toBe(DATA_DIR);
    expect(env.SBX_REDIS_URL).toBe(`unix://${DEFAULT_SOCKET}`);
    expect(env.SBX_HOST).toBe('0.0.0.0');
  });

  it('mounts the Docker socket and the data dir at the same path as on the host, in the control plane and Redis', () => {
    expect(controlPlane.volumes).toEqual(
      expect.arrayContaining([`${env.SBX_DOCKER_SOCKET}:${env.SBX_DOCKER_SOCKET}`, `${DATA_DIR}:${DATA_DIR}`]),
    );
    expect(compose.services.redis.volumes).toContain(`${DATA_DIR}:${DATA_DIR}`);
  });

  it('runs Redis with AOF, noeviction, the socket and the password file the control plane reads', () => {
    expectPersistentRedis(redisSettings(readFileSync(join(here, 'compose', 'redis.conf'), 'utf8')));
    const passwordFile = join(DATA_DIR, 'redis', 'password');
    expect(compose.services.redis.entrypoint.join(' ')).toContain(`--requirepass "$$(cat ${passwordFile})"`);
    expect(compose.services.init.command.join('\n')).toContain(passwordFile);
  });

  it('builds an image that carries what the control plane needs at run time: the build, the console, the policies', () => {
    const dockerfile = readFileSync(join(here, 'compose', 'Dockerfile'), 'utf8');
    expect(controlPlane.build.dockerfile).toBe('deploy/compose/Dockerfile');
    for (const step of [
      'npx tsc -p tsconfig.json',
      'node images/agent-bundle.mjs',
      'node console/build.mjs',
      'COPY policies ./policies',
      'COPY node-relay node-relay',
      'CMD ["node", "dist/control-plane/main.js"]',
    ]) {
      expect(dockerfile).toContain(step);
    }
  });
});

describe('deploy/kubernetes', () => {
  const files = (dir: string): string[] =>
    readdirSync(dir)
      .filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml')
      .map((f) => join(dir, f));
  type Doc = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string }; [key: string]: any };
  const read = (file: string): Doc[] =>
    parseAllDocuments(readFileSync(file, 'utf8')).map((doc) => {
      expect(doc.errors, file).toEqual([]);
      return doc.toJS() as Doc;
    });
  const dockerDocs = files(join(here, 'kubernetes')).flatMap(read);
  const driverDocs = files(join(here, 'kubernetes', 'kubernetes-driver')).flatMap(read);
  const docs = [...dockerDocs, ...driverDocs];
  /** The one `kind` named `name`: of the Docker driver's manifests, or with `driver`, of kubernetes-driver/. */
  const find = (kind: string, name: string, driver = false) => {
    const doc = (driver ? driverDocs : dockerDocs.concat(driverDocs)).find((d) => d.kind === kind && d.metadata.name === name);
    if (!doc) throw new Error(`no ${kind} ${name}`);
    return doc;
  };

  it('every manifest has an apiVersion, a kind and a name; the kustomization lists the files beside it', () => {
    for (const doc of docs)
      expect([typeof doc.apiVersion, typeof doc.kind, typeof doc.metadata?.name]).toEqual(['string', 'string', 'string']);
    const kustomization = parse(readFileSync(join(here, 'kubernetes', 'kustomization.yaml'), 'utf8'));
    expect([...kustomization.resources].sort()).toEqual(
      files(join(here, 'kubernetes'))
        .map((f) => f.slice(join(here, 'kubernetes').length + 1))
        .sort(),
    );
  });

  it("the control plane sets only settings it reads, gets its keys from Secrets, and shares the node's socket and data dir", () => {
    const deployment = find('Deployment', 'sbx-control-plane');
    const container = deployment.spec.template.spec.containers[0];
    const env = container.env as Array<{ name: string; value?: string; valueFrom?: { secretKeyRef: { name: string; key: string } } }>;
    expect(env.map((e) => e.name).filter((name) => !SETTING_NAMES.includes(name))).toEqual([]);
    const value = (name: string) => env.find((e) => e.name === name);
    expect(value('SBX_REDIS_URL')?.value).toBe(`unix://${DEFAULT_SOCKET}`);
    for (const secret of ['SBX_API_KEY', 'SBX_SECRETS_KEY', 'SBX_REDIS_PASSWORD'])
      expect(value(secret)?.valueFrom?.secretKeyRef, secret).toBeDefined();
    const volumes = deployment.spec.template.spec.volumes as Array<{ name: string; hostPath?: { path: string } }>;
    for (const mount of container.volumeMounts as Array<{ name: string; mountPath: string }>) {
      expect(volumes.find((v) => v.name === mount.name)?.hostPath?.path, mount.name).toBe(mount.mountPath);
    }
    expect((container.volumeMounts as Array<{ mountPath: string }>).map((m) => m.mountPath).sort()).toEqual(
      [DATA_DIR, value('SBX_DOCKER_SOCKET')?.value].sort(),
    );
  });

  it('Redis persists (AOF, noeviction), needs the password the control plane is given, and puts its socket where the control plane looks', () => {
    const conf = redisSettings(find('ConfigMap', 'sbx-redis-config').data['redis.conf']);
    expectPersistentRedis(conf);
    const redis = find('StatefulSet', 'sbx-redis');
    const pod = redis.spec.template.spec;
    expect(pod.containers[0].command.join(' ')).toContain('--requirepass');
    expect(pod.volumes.find((v: any) => v.name === 'password').secret.secretName).toBe('sbx-redis');
    expect(pod.volumes.find((v: any) => v.name === 'socket').hostPath.path).toBe(join(DATA_DIR, 'redis-socket'));
    expect(redis.spec.volumeClaimTemplates[0].metadata.name).toBe('data');
    // Both land on the node whose Docker engine runs the sandboxes.
    expect(pod.nodeSelector).toEqual(find('Deployment', 'sbx-control-plane').spec.template.spec.nodeSelector);
  });

  it("prepares the Kubernetes driver: a namespaced Role for what the driver calls (Pods, their logs, Secrets), node reads cluster-wide, bound to the control plane's account, a deny-all NetworkPolicy, a gVisor RuntimeClass", () => {
    const rules = find('Role', 'sbx-sandbox-driver').rules as Array<{ resources: string[]; verbs: string[] }>;
    expect(Object.fromEntries(rules.map((r) => [r.resources.join(','), r.verbs]))).toEqual({
      pods: ['create', 'delete', 'list', 'watch'],
      'pods/log': ['get'],
      secrets: ['create', 'deletecollection'],
    });
    expect(find('ClusterRole', 'sbx-sandbox-nodes').rules).toEqual([{ apiGroups: [''], resources: ['nodes'], verbs: ['list'] }]);
    expect(find('ClusterRoleBinding', 'sbx-sandbox-nodes').subjects).toEqual([
      { kind: 'ServiceAccount', name: 'sbx-control-plane', namespace: 'sbx-system' },
    ]);
    expect(find('RoleBinding', 'sbx-sandbox-driver').subjects).toEqual([
      { kind: 'ServiceAccount', name: 'sbx-control-plane', namespace: 'sbx-system' },
    ]);
    expect(find('ServiceAccount', 'sbx-control-plane').metadata.namespace).toBe('sbx-system');
    const baseline = find('NetworkPolicy', 'sbx-sandbox-baseline').spec;
    expect(baseline.podSelector).toEqual({});
    expect(baseline.policyTypes).toEqual(['Ingress', 'Egress']);
    expect(baseline.ingress).toEqual([]);
    expect(baseline.egress).toEqual([]);
    expect(find('RuntimeClass', 'gvisor').handler).toBe('runsc');
  });

  it("runs the Kubernetes driver's control plane as replicas whose settings load: keys from Secrets, the link with TLS at each Pod's address, one Service each for the API and the link", () => {
    const deployment = find('Deployment', 'sbx-control-plane-cluster');
    expect(deployment.spec.replicas).toBeGreaterThanOrEqual(2);
    const pod = deployment.spec.template.spec;
    expect(pod.serviceAccountName).toBe('sbx-control-plane');
    const env = pod.containers[0].env as Array<{ name: string; value?: string; valueFrom?: any }>;
    // Besides sbx's settings: the Pod's address (for SBX_LINK_ADVERTISE) and Node's trust of a private CA.
    expect(env.map((e) => e.name).filter((name) => !SETTING_NAMES.includes(name))).toEqual(['POD_IP', 'NODE_EXTRA_CA_CERTS']);
    for (const secret of ['SBX_API_KEY', 'SBX_SECRETS_KEY', 'SBX_PREVIEW_KEY', 'SBX_REDIS_PASSWORD'])
      expect(env.find((e) => e.name === secret)?.valueFrom?.secretKeyRef, secret).toBeDefined();
    const values = Object.fromEntries(env.map((e) => [e.name, e.value ?? 'a-value-from-a-secret']));
    const config = loadConfig(
      { ...values, SBX_LINK_ADVERTISE: '10.0.0.7:7071', SBX_SECRETS_KEY: undefined, SBX_PREVIEW_KEY: undefined },
      here,
    );
    expect(config.runtime.kind).toBe('kubernetes');
    expect(config.linkTls).not.toBeNull();
    expect(values.SBX_LINK_ADVERTISE).toBe('$(POD_IP):7071');
    const mounted = (pod.containers[0].volumeMounts as Array<{ mountPath: string }>).map((m) => m.mountPath);
    for (const path of [
      config.artifactDir,
      config.linkTls!.certFile.slice(0, config.linkTls!.certFile.lastIndexOf('/')),
      config.agentRuntimeDir,
    ])
      expect(mounted, path).toContain(path);
    expect(find('Service', 'sbx-api').spec.ports[0].port).toBe(config.port);
    expect(find('Service', 'sbx-link').spec.ports[0].port).toBe(config.linkListen!.port);
    // The node relay serves its sockets where the driver mounts them from, and dials the link Service and Redis's TLS port.
    const relay = find('DaemonSet', 'sbx-node-relay').spec.template.spec;
    const forwards = (relay.containers[0].command as string[]).filter((_, i, all) => all[i - 1] === '--forward');
    const redisUrl = new URL(values.SBX_REDIS_URL!);
    expect(forwards).toEqual([
      `unix:${config.agentRelayDir}/redis.sock=tls:${redisUrl.hostname}:${redisUrl.port}`,
      `unix:${config.agentRelayDir}/link.sock=tls:sbx-link.sbx-system.svc:${config.linkListen!.port}`,
    ]);
    expect(relay.volumes.find((v: any) => v.name === 'relay').hostPath.path).toBe(config.agentRelayDir);
    // Its init container installs the agent runtime where the control plane names it: the runtime root, the version.
    const installer = relay.initContainers[0];
    const version = installer.env.find((e: { name: string }) => e.name === 'RUNTIME_VERSION').value;
    const root = relay.volumes.find((v: any) => v.name === 'runtime').hostPath.path;
    expect(installer.volumeMounts).toEqual([{ name: 'runtime', mountPath: '/host' }]);
    expect(config.agentRuntimeDir).toBe(`${root}/${version}`);
    expect(installer.image.endsWith(`:${version}`)).toBe(true);
    // Redis serves TLS only, at the port the control plane and the relays dial, and keeps the agents' users in an ACL file on its volume.
    const conf = redisSettings(find('ConfigMap', 'sbx-redis-config', true).data['redis.conf']);
    expect([conf.get('port'), conf.get('tls-port'), conf.get('appendonly'), conf.get('maxmemory-policy')]).toEqual([
      '0',
      redisUrl.port,
      'yes',
      'noeviction',
    ]);
    expect(redisUrl.protocol).toBe('rediss:');
    expect(conf.get('aclfile')?.startsWith('/data/')).toBe(true);
    const redis = find('StatefulSet', 'sbx-redis', true);
    expect(redis.spec.volumeClaimTemplates[0].metadata.name).toBe('data');
    expect(redis.spec.template.spec.volumes.find((v: any) => v.name === 'tls').secret.secretName).toBe('sbx-redis-tls');
    expect(find('Service', 'sbx-redis', true).spec.ports[0].port).toBe(Number(redisUrl.port));
    expect(`${find('Service', 'sbx-redis', true).metadata.name}.sbx-system.svc`).toBe(redisUrl.hostname);
  });
});
