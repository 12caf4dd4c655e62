/**
 * Filesystem policy against real containers: which host files a sandbox can reach at all, and
 * read-only mounts from the control plane's mount allowlist.
 */
import { existsSync } from 'node:fs';
import { chmod, copyFile, mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { REPO_ROOT, containersOf, startHarness, type Harness, execIn, useScratchDirs } from './fixtures/index.js';

/** Temporary directories of this file, removed after its tests. */
const scratch = useScratchDirs();

let h: Harness;
let allowedDir: string;
let outsideDir: string;

/** Writes a policy `name` = default + `readOnlyMounts` into `dir`. */
async function mountPolicy(dir: string, name: string, mounts: Array<{ hostPath: string; containerPath: string }>): Promise<void> {
  const defaults = parseYaml(await readFile(join(REPO_ROOT, 'policies', 'default.yaml'), 'utf8'));
  const policy = { ...defaults, name, filesystem: { ...defaults.filesystem, readOnlyMounts: mounts } };
  await writeFile(join(dir, `${name}.yaml`), JSON.stringify(policy));
}

beforeAll(async () => {
  const root = await scratch('sbx-mounts-');
  allowedDir = join(root, 'allowed');
  outsideDir = join(root, 'outside');
  await mkdir(join(allowedDir, 'dataset'), { recursive: true });
  await mkdir(outsideDir);
  await writeFile(join(allowedDir, 'dataset', 'rows.csv'), 'id,name\n1,ada\n');
  // World-writable on the host, so only the read-only mount can stop the tool user writing.
  await chmod(join(allowedDir, 'dataset'), 0o777);
  await chmod(join(allowedDir, 'dataset', 'rows.csv'), 0o666);
  await writeFile(join(outsideDir, 'private.txt'), 'not for sandboxes\n');
  // A symlink inside the allowed directory that leads out of it.
  await symlink(outsideDir, join(allowedDir, 'escape'));

  const policyDir = await scratch('sbx-mount-policies-');
  await copyFile(join(REPO_ROOT, 'policies', 'default.yaml'), join(policyDir, 'default.yaml'));
  await mountPolicy(policyDir, 'with-dataset', [{ hostPath: join(allowedDir, 'dataset'), containerPath: '/data' }]);
  await mountPolicy(policyDir, 'via-symlink', [{ hostPath: join(allowedDir, 'escape'), containerPath: '/data' }]);
  await mountPolicy(policyDir, 'outside', [{ hostPath: outsideDir, containerPath: '/data' }]);
  h = await startHarness({ SBX_POLICY_DIR: policyDir, SBX_MOUNT_ALLOWLIST: allowedDir });
});
afterAll(async () => h?.close());

const exec = execIn(() => h.client);

describe('host files a sandbox can reach', () => {
  it('only its own directories are mounted from the host: no Docker socket, Redis data, control-plane state or other leases', async () => {
    const lease = await h.client.createSandbox();
    // proc(5) mountinfo: field 5 is the mount point; the source follows the fstype after "-".
    // Mounts of the host's disk have a block-device source.
    const r = await exec(
      lease.id,
      `awk '{for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i+2) ~ /^\\/dev\\/[a-z]/) print $5; break }}' /proc/self/mountinfo | sort; ls /var/run/docker.sock /run/docker.sock ${h.config.dataDir} 2>&1 | wc -l; ls /run/sbx/agent 2>&1`,
    );
    const [mounts, rest] = r.stdout.split(/\n(?=\d+\n)/);
    // /opt/sbx: the agent runtime, read-only (test/any-image.test.ts); /run/sbx/previews: this
    // lease's own preview tunnel directory, read-only, the agent's alone (test/previews.test.ts).
    expect(mounts!.split('\n').sort()).toEqual(
      ['/etc/hostname', '/opt/sbx', '/run/sbx/agent', '/run/sbx/previews', '/run/sbx/redis', '/run/sbx/spool'].sort(),
    );
    expect(rest).toMatch(/^3\n/);
    expect(r.stdout).toContain("ls: cannot open directory '/run/sbx/agent': Permission denied");
    const previews = await exec(
      lease.id,
      'ls /run/sbx/previews 2>&1; touch /run/sbx/previews/x 2>&1 | grep -c "Permission denied\\|Read-only"',
    );
    expect(previews.stdout).toContain("ls: cannot open directory '/run/sbx/previews': Permission denied");
    const hostView = await exec(lease.id, `cat /proc/1/environ >/dev/null 2>&1 && echo can-read-agent-env || echo agent-env-closed`);
    expect(hostView.stdout).toBe('agent-env-closed\n');
  });
});

describe('read-only mounts from the mount allowlist', () => {
  it('a host path inside the allowlist is mounted read-only: readable by tools, not writable', async () => {
    const lease = await h.client.createSandbox({ policy: 'with-dataset' });
    const r = await exec(lease.id, 'exec 2>&1; cat /data/rows.csv; echo x > /data/new; touch /data/rows.csv; echo done');
    expect(r.stdout).toContain('id,name\n1,ada\n');
    expect(r.stdout.match(/Read-only file system/g)?.length).toBe(2);
    expect(existsSync(join(allowedDir, 'dataset', 'new'))).toBe(false);
  });

  it.each([
    ['outside', 'a path outside the allowlist'],
    ['via-symlink', 'a symlink inside the allowlist that leads out'],
  ])('policy %s (%s) is refused with 422 policy.mount_not_allowed and starts nothing', async (policy) => {
    // (A path with `..` does not get this far: the policy schema takes normal-form paths only.)
    const before = await containersOf(h.config.owner);
    await expect(h.client.createSandbox({ policy })).rejects.toMatchObject({ status: 422, code: 'policy.mount_not_allowed' });
    expect(await containersOf(h.config.owner)).toEqual(before);
  });

  it('a policy whose mount climbs out with .. is refused when it is written (400 policy.invalid naming the field)', async () => {
    const defaults = parseYaml(await readFile(join(REPO_ROOT, 'policies', 'default.yaml'), 'utf8'));
    const policy = {
      ...defaults,
      name: 'dot-dot',
      filesystem: { ...defaults.filesystem, readOnlyMounts: [{ hostPath: `${allowedDir}/../outside`, containerPath: '/data' }] },
    };
    const response = await fetch(`${h.url}/v1/policies/dot-dot`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${h.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(policy),
    });
    const body = (await response.json()) as { error: { code: string; details: { issues: Array<{ path: string }> } } };
    expect(response.status).toBe(400);
    expect(body.error.code).toBe('policy.invalid');
    expect(body.error.details.issues.map((i) => i.path)).toContain('filesystem.readOnlyMounts.0.hostPath');
  });
});
