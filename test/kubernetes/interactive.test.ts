/**
 * Port previews, terminals and file watch on Kubernetes: a server in the sandbox (network `none`)
 * answers through the control plane, its bytes carried by the agent's byte tunnel over the node
 * relay; a terminal's program runs on a pseudo-terminal; the agent's change log answers a watch,
 * whose path the agent resolves in the sandbox.
 */
import { describe, expect, it } from 'vitest';
import { apiAs, eventually, execIn, putPolicyVariant, useHarness } from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';

const lab = useKubernetesLab('interactive');
const h = useHarness(() => lab.settings());
const exec = execIn(() => h.client);

describe('interactive execution on Kubernetes', () => {
  it('serves a port preview through the relay, and runs a terminal on a pseudo-terminal', async () => {
    await putPolicyVariant(h, 'k8s-preview', (p) => {
      p.ports = { allowed: [8000] };
    });
    const api = apiAs(() => h.url);
    try {
      const lease = await h.client.createSandbox({ policy: 'k8s-preview' });
      const server = `/opt/sbx/bin/node -e 'require("http").createServer((q,r)=>r.end("hello from the pod "+q.url)).listen(8000,"127.0.0.1",()=>console.log("listening"))'`;
      const task = await h.client.submitCall(lease.id, 'exec', { cmd: server, background: true, timeoutMs: 600_000 }, { waitSeconds: 30 });
      expect(task.status).toBe('detached');
      const answer = await eventually(
        () => fetch(`${h.url}/v1/sandboxes/${lease.id}/ports/8000/some/path?q=1`, { headers: { authorization: `Bearer ${h.apiKey}` } }),
        (r) => r.status === 200,
      );
      expect(await answer.text()).toBe('hello from the pod /some/path?q=1');

      const terminal = await api(h.apiKey, 'POST', `/v1/sandboxes/${lease.id}/terminals`, {
        cmd: 'tty > /workspace/tty.out; stty size >> /workspace/tty.out',
        cols: 100,
        rows: 30,
      });
      expect(terminal.status).toBe(201);
      const written = await eventually(
        async () => (await exec(lease.id, 'cat /workspace/tty.out 2>/dev/null || true')).stdout,
        (out) => out.split('\n').length >= 3,
      );
      expect(written.split('\n').slice(0, 2)).toEqual([expect.stringMatching(/^\/dev\/pts\/\d+$/), '30 100']);
      await h.client.releaseSandbox(lease.id);
    } finally {
      await api(h.apiKey, 'DELETE', '/v1/policies/k8s-preview');
    }
  });

  it('watches files: a change made in the sandbox is read after a cursor, and a path whose symlink leaves the roots is refused', async () => {
    const lease = await h.client.createSandbox();
    try {
      await exec(lease.id, 'mkdir -p /workspace/w && ln -s /etc /workspace/out');
      const now = await h.client.fileChanges(lease.id, { path: '/workspace/w' });
      await exec(lease.id, 'echo hi > /workspace/w/new.txt');
      const page = await eventually(
        () => h.client.fileChanges(lease.id, { since: now.cursor, path: '/workspace/w' }),
        (p) => p.changes.some((c) => 'path' in c && c.path === '/workspace/w/new.txt'),
      );
      expect(page.changes.filter((c) => 'path' in c && !c.path?.startsWith('/workspace/w/'))).toEqual([]);
      await expect(h.client.fileChanges(lease.id, { path: '/workspace/out/passwd' })).rejects.toMatchObject({
        status: 400,
        code: 'input.path_outside_workspace',
      });
    } finally {
      await h.client.releaseSandbox(lease.id);
    }
  });
});
