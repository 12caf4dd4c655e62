/**
 * Any image can be leased: the agent, its runtime and the init come from the read-only runtime
 * mount at /opt/sbx, never from the image. Three images made here, none with an sbx agent:
 * busybox-static alone (no libc, no bash), Debian without Node (with /testbed, PYTHONPATH, a
 * WORKDIR, labels, an entrypoint that must never run, and a NODE_OPTIONS that would break the
 * agent if it reached it), and an image with no shell at all (one static binary, as distroless
 * images are). Each is leased under the default policy; what the image lacks degrades
 * explicitly and is recorded in the manifest.
 */
import { chmod, copyFile, mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Lease, ToolResult } from '../contract/objects.js';
import {
  apiAs,
  buildImage,
  containersOf,
  docker,
  execIn,
  importImage,
  putPolicyVariant,
  removeImages,
  runCli,
  tarBytes,
  useHarness,
} from './fixtures/index.js';

const h = useHarness();
const exec = execIn(() => h.client);
const api = apiAs(() => h.url);
/** A file tool's result (the exec helper is for exec only). */
const call = async (leaseId: string, tool: string, args: Record<string, unknown>): Promise<ToolResult> => {
  const result = await h.client.submitCall(leaseId, tool, args, { waitSeconds: 60 });
  if (!('receipt' in result)) throw new Error(`${tool} did not finish: ${JSON.stringify(result)}`);
  return result;
};

const BUSYBOX_APPLETS = ['sh', 'ls', 'cat', 'echo', 'id', 'env', 'mkdir', 'wc', 'pwd', 'grep'];
let busyboxImage: string;
let debianImage: string;
let shellessImage: string;

beforeAll(async () => {
  busyboxImage = await importImage(
    'busybox',
    async (dir) => {
      await mkdir(join(dir, 'bin'));
      await copyFile('/bin/busybox', join(dir, 'bin/busybox'));
      for (const applet of BUSYBOX_APPLETS) await symlink('busybox', join(dir, 'bin', applet));
    },
    ['ENV PATH=/bin', 'ENTRYPOINT ["/bin/sh", "-c", "exit 3"]'],
  );
  // FROM the local Debian base (no Node in it). The entrypoint would exit at once, and the
  // NODE_OPTIONS would make any node (the agent's included) fail to start.
  debianImage = await buildImage(
    'debian',
    [
      'FROM sbx-base:bookworm',
      'RUN mkdir -p /testbed/src/mymod && echo "VALUE = 42" > /testbed/src/mymod/__init__.py && echo "seed" > /testbed/README',
      'ENV PYTHONPATH=/testbed/src NODE_OPTIONS=--require=/nonexistent/hook.js TEAM_SETTING=from-image',
      'WORKDIR /testbed',
      'LABEL org.example.team=platform',
      'ENTRYPOINT ["/bin/false"]',
      'CMD ["never-run"]',
    ].join('\n'),
  );
  shellessImage = await importImage(
    'shellless',
    async (dir) => {
      await mkdir(join(dir, 'app'));
      await mkdir(join(dir, 'etc'));
      // busybox under another name: a static program, with no /bin/sh beside it.
      await copyFile('/bin/busybox', join(dir, 'app/busybox'));
      await chmod(join(dir, 'app/busybox'), 0o755);
      await writeFile(join(dir, 'etc/os-release'), 'ID=shellless\nNAME="Shellless test image"\nVERSION_ID=1\n');
    },
    ['ENV PATH=/app', 'CMD ["/app/busybox", "true"]'],
  );
}, 180_000);

afterAll(removeImages);

describe('busybox-static only (no libc, no bash, no Node)', () => {
  let lease: Lease;
  beforeAll(async () => {
    lease = await h.client.createSandbox({ image: busyboxImage });
  }, 60_000);

  it('becomes ready: the agent comes from the runtime mount, and the manifest records what the image is', () => {
    expect(lease.status).toBe('ready');
    const m = lease.manifest!;
    expect(m.libc).toEqual({ family: 'none', version: null });
    expect(m.shell).toEqual({ path: '/bin/sh', source: 'image' });
    expect(m.toolchain).toMatchObject({ node: null, git: null, python: null });
    expect(m.programs?.rg).toBeNull();
    // Recorded, never run: the sandbox is ready although this entrypoint exits 3 at once.
    expect(m.image.config?.entrypoint).toEqual(['/bin/sh', '-c', 'exit 3']);
    expect(m.image.config?.envKeys).toEqual(['PATH']);
  });

  it('the container is created from the image id the manifest names, not by its tag (a tag moved meanwhile cannot change what runs)', async () => {
    const m = lease.manifest!;
    expect(m.image.ref).toBe(busyboxImage);
    const [created, running] = (await docker('inspect', '-f', '{{.Config.Image}} {{.Image}}', `sbx-${lease.id}`)).trim().split(' ');
    expect([created, running]).toEqual([m.image.id, m.image.id]);
  });

  it('exec runs a cmd in the image sh (no bash) with the image PATH, as the tool user', async () => {
    const r = await exec(lease.id, 'echo "$0|$PATH|$(id -u)"; ls /bin | wc -l');
    expect(r.status).toBe('succeeded');
    const [first, count] = r.stdout.trim().split('\n');
    expect(first).toBe(`/bin/sh|/bin|1000`);
    expect(Number(count)).toBe(BUSYBOX_APPLETS.length + 1);
  });

  it('the agent is not in the image: /opt/sbx is a read-only mount, and nothing of it is in the image layers', async () => {
    const r = await exec(lease.id, 'touch /opt/sbx/x 2>&1; echo rc=$?');
    expect(r.stdout).toMatch(/Read-only file system[\s\S]*rc=1/);
    const layers = await docker('image', 'inspect', '-f', '{{len .RootFS.Layers}}', busyboxImage);
    expect(Number(layers)).toBe(1);
    const diff = await docker('diff', `sbx-${lease.id}`);
    expect(diff).not.toMatch(/^A \/opt\/sbx\/(bin|lib|agent)/m);
  });

  it('search without ripgrep uses the built-in walker; git tools answer tool.unavailable naming git', async () => {
    await exec(lease.id, 'mkdir -p /workspace/src && echo "needle here" > /workspace/src/a.txt && echo "hay" > /workspace/src/b.txt');
    const found = await call(lease.id, 'search', { path: '/workspace', pattern: 'needle' });
    expect(found.status).toBe('succeeded');
    expect(found.data).toMatchObject({ engine: 'builtin', matches: [{ path: '/workspace/src/a.txt', line: 1, text: 'needle here' }] });
    const git = await call(lease.id, 'git_status', { path: '/workspace' });
    expect(git.status).toBe('failed');
    expect(git.error).toMatchObject({ code: 'tool.unavailable', details: { program: 'git' } });
  });

  it('uploads and downloads work without GNU tar in the image (the runtime tar runs them)', async () => {
    await h.client.uploadTar(lease.id, '/workspace/up', await tarBytes([{ name: 'hello.txt', content: 'hi from the host' }]));
    const r = await exec(lease.id, 'cat /workspace/up/hello.txt');
    expect(r.stdout).toBe('hi from the host');
  });
});

describe('Debian without Node, with /testbed, PYTHONPATH, WORKDIR, labels and a hostile NODE_OPTIONS', () => {
  let lease: Lease;
  beforeAll(async () => {
    lease = await h.client.createSandbox({ image: debianImage });
  }, 60_000);

  it('becomes ready although the image NODE_OPTIONS would break any node: the agent never sees the image env', () => {
    expect(lease.status).toBe('ready');
    const m = lease.manifest!;
    expect(m.toolchain.node).toBeNull();
    expect(m.toolchain.python).toMatch(/^Python 3\./);
    expect(m.libc?.family).toBe('glibc');
    expect(m.libc?.version).toMatch(/^2\.\d+$/);
    expect(m.shell).toEqual({ path: '/bin/bash', source: 'image' });
    expect(m.os).toMatchObject({ id: 'debian' });
    expect(m.workdir).toBe('/testbed');
    expect(m.image.config).toMatchObject({
      workingDir: '/testbed',
      labels: { 'org.example.team': 'platform' },
      entrypoint: ['/bin/false'],
      cmd: ['never-run'],
    });
    expect(m.image.config?.envKeys).toEqual(expect.arrayContaining(['NODE_OPTIONS', 'PATH', 'PYTHONPATH', 'TEAM_SETTING']));
  });

  it('the image WorkingDir is the default cwd and its Env reaches the tools (PYTHONPATH imports the baked module)', async () => {
    const r = await exec(lease.id, 'pwd; echo "$TEAM_SETTING"; python3 -c "import mymod; print(mymod.VALUE)"; cat README');
    expect(r.stderr).toBe('');
    expect(r.status).toBe('succeeded');
    expect(r.stdout.trim().split('\n')).toEqual(['/testbed', 'from-image', '42', 'seed']);
  });

  it('the CLI too runs in the image WorkingDir unless --cwd says otherwise, and `sbx snapshot` prints the id alone on stdout', async () => {
    const pwd = await runCli(h, ['exec', lease.id, '--', 'pwd']);
    expect(pwd).toMatchObject({ code: 0, stdout: '/testbed\n' });
    expect((await runCli(h, ['exec', lease.id, '--cwd', '/tmp', '--', 'pwd'])).stdout).toBe('/tmp\n');
    const snap = await runCli(h, ['snapshot', lease.id]);
    expect(snap.code).toBe(0);
    expect(snap.stdout).toMatch(/^snap_[a-z0-9]+\n$/);
    const listed = await runCli(h, ['snapshots', 'ls']);
    expect(listed.stdout).toContain(snap.stdout.trim());
    expect(await runCli(h, ['snapshots', 'rm', snap.stdout.trim()])).toMatchObject({ code: 0 });
    expect((await runCli(h, ['snapshots', 'ls'])).stdout).not.toContain(snap.stdout.trim());
  });

  it('the lease env wins over the image env of the same name', async () => {
    const r = await exec(lease.id, { cmd: 'echo "$TEAM_SETTING"', env: { TEAM_SETTING: 'from-call' } });
    expect(r.stdout.trim()).toBe('from-call');
  });
});

describe('no shell at all (one static program, as in distroless images)', () => {
  let lease: Lease;
  beforeAll(async () => {
    lease = await h.client.createSandbox({ image: shellessImage });
  }, 60_000);

  it('becomes ready; the manifest says exec falls back to the runtime sh and reads the image os-release', () => {
    expect(lease.status).toBe('ready');
    expect(lease.manifest!.shell).toEqual({ path: '/opt/sbx/tools/sh', source: 'sbx-runtime' });
    expect(lease.manifest!.os).toMatchObject({ id: 'shellless', version: '1' });
    expect(lease.manifest!.image.config?.cmd).toEqual(['/app/busybox', 'true']);
  });

  it('exec argv runs the image program directly; a cmd runs in the runtime sh with the image PATH (nothing added to it)', async () => {
    const argv = await exec(lease.id, { argv: ['busybox', 'echo', 'argv works'] });
    expect(argv.stdout).toBe('argv works\n');
    // The runtime sh is busybox's: its applets (ls here) work as builtins; PATH stays the image's.
    const cmd = await exec(lease.id, 'echo "$PATH"; ls /');
    expect(cmd.stdout.split('\n')).toEqual(expect.arrayContaining(['/app', 'app', 'etc', 'workspace']));
    const missing = await exec(lease.id, 'python3 --version');
    expect(missing.exitCode).toBe(127);
  });
});

describe("the image's User: the tool user when the policy names none, never root", () => {
  let appImage: string;
  let ghostImage: string;
  beforeAll(async () => {
    appImage = await buildImage('user-app', ['FROM sbx-base:bookworm', 'RUN useradd -u 1500 -m app', 'USER app'].join('\n'));
    ghostImage = await buildImage('user-ghost', ['FROM sbx-base:bookworm', 'USER ghost'].join('\n'));
    // The default policy without its tool user, as an admin would make it.
    await putPolicyVariant(h, 'image-user', (policy) => delete policy.runtime.toolUser);
  }, 120_000);

  it('under a policy without toolUser the image User runs the tools, owns the writable roots, and the manifest says so', async () => {
    const lease = await h.client.createSandbox({ image: appImage, policy: 'image-user' });
    expect(lease.manifest!.user).toEqual({ name: 'app', uid: 1500, gid: 1500, home: '/home/app', source: 'image' });
    const r = await exec(lease.id, 'id -u; id -g; echo "$HOME"; touch /workspace/mine && stat -c %u /workspace/mine');
    expect(r.stdout.trim().split('\n')).toEqual(['1500', '1500', '/home/app', '1500']);
    await h.client.uploadTar(lease.id, '/workspace', await tarBytes([{ name: 'up.txt', content: 'x' }]));
    expect((await exec(lease.id, 'stat -c %u /workspace/up.txt')).stdout.trim()).toBe('1500');
  });

  it("a policy that names the tool user wins over the image's User", async () => {
    const lease = await h.client.createSandbox({ image: appImage });
    expect(lease.manifest!.user).toMatchObject({ uid: 1000, source: 'policy' });
    expect((await exec(lease.id, 'id -u')).stdout.trim()).toBe('1000');
  });

  it('an image running as root gets the default tool user, not root', async () => {
    const lease = await h.client.createSandbox({ image: debianImage, policy: 'image-user' });
    expect(lease.manifest!.user).toEqual({ name: 'sandbox', uid: 1000, gid: 1000, home: '/home/sandbox', source: 'default' });
  });

  it('a User the image does not define is 422 image.user_not_found, and nothing is created', async () => {
    const before = await containersOf(h.config.owner);
    const leasesBefore = (await h.client.listSandboxes()).length;
    const answer = await api(h.apiKey, 'POST', '/v1/sandboxes', { image: ghostImage, policy: 'image-user' });
    expect(answer.status).toBe(422);
    expect(answer.body.error).toMatchObject({ code: 'image.user_not_found', details: { user: 'ghost' } });
    // Refused while planning: no container (the one that read /etc/passwd is gone too), no lease.
    expect(await containersOf(h.config.owner)).toEqual(before);
    expect((await h.client.listSandboxes()).length).toBe(leasesBefore);
  });
});

describe('a hostile image: the programs the agent probes for the manifest', () => {
  it('run as the tool user with no agent env, never as root: a fake git cannot read the agent credentials', async () => {
    const image = await buildImage(
      'hostile-git',
      [
        'FROM sbx-base:bookworm',
        "RUN printf '#!/bin/sh\\nid -u > /tmp/probe-uid\\nenv > /tmp/probe-env\\ncat /run/sbx/agent/* > /tmp/probe-leak 2>/dev/null\\necho git version 9.9.9\\n' > /usr/local/bin/git && chmod 755 /usr/local/bin/git",
      ].join('\n'),
    );
    const lease = await h.client.createSandbox({ image });
    try {
      expect(lease.manifest?.toolchain.git).toBe('git version 9.9.9');
      const r = await exec(lease.id, 'cat /tmp/probe-uid; wc -c < /tmp/probe-leak; grep -c SBX_ /tmp/probe-env || true');
      expect(r.stdout.trim().split('\n')).toEqual(['1000', '0', '0']);
    } finally {
      await h.client.releaseSandbox(lease.id).catch(() => undefined);
    }
  });
});
