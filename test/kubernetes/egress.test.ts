/**
 * Network mode `allowlist` on Kubernetes: the sandbox still has no route; its agent's proxy
 * listener goes through the node relay's link socket to the control plane's egress proxy, which
 * allows and logs by the policy. Servers of the test's own on the hub: the allowed one is
 * reached, the other receives nothing.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { apiAs, execIn, putPolicyVariant, useHarness } from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';

const lab = useKubernetesLab('egress');
const h = useHarness(() => lab.settings());
const exec = execIn(() => h.client);

async function serve(host: string, answer: string): Promise<{ server: http.Server; port: number; hits: string[] }> {
  const hits: string[] = [];
  const server = http.createServer((req, res) => {
    hits.push(req.url ?? '');
    res.end(answer);
  });
  server.listen(0, host);
  await once(server, 'listening');
  return { server, port: (server.address() as AddressInfo).port, hits };
}

describe('egress on Kubernetes', () => {
  it("reaches an allowlisted destination through the relay and the control plane's proxy, and nothing else", async () => {
    const hub = lab.registry.split(':')[0]!;
    const allowed = await serve(hub, 'egress-ok');
    const other = await serve(hub, 'must-not-be-seen');
    try {
      await putPolicyVariant(h, 'k8s-egress', (p) => {
        p.network = { mode: 'allowlist', allow: [{ cidr: `${hub}/32`, ports: [allowed.port] }] };
      });
      const lease = await h.client.createSandbox({ policy: 'k8s-egress' });
      // Through the proxy the agent gives tools (HTTP_PROXY), with the runtime's node: the image may have no HTTP client.
      const get = (port: number): string =>
        `/opt/sbx/bin/node -e 'const u=new URL(process.env.HTTP_PROXY);require("http").get({host:u.hostname,port:u.port,path:process.argv[1]},` +
        `r=>{let b="";r.on("data",d=>b+=d);r.on("end",()=>console.log(r.statusCode,b))}).on("error",e=>console.log("error",e.code))' http://${hub}:${port}/path-${port}`;
      const ok = await exec(lease.id, get(allowed.port));
      expect(ok.stdout.trim()).toBe('200 egress-ok');
      expect(allowed.hits).toEqual([`/path-${allowed.port}`]);
      const denied = await exec(lease.id, get(other.port));
      expect(denied.stdout.trim()).toMatch(/^403 /);
      expect(other.hits).toEqual([]);
      const log = await h.client.egress(lease.id);
      expect(log.map((e) => [e.decision, e.port])).toEqual(
        expect.arrayContaining([
          ['allowed', allowed.port],
          ['denied', other.port],
        ]),
      );
      await h.client.releaseSandbox(lease.id);
    } finally {
      allowed.server.close();
      other.server.close();
      await apiAs(() => h.url)(h.apiKey, 'DELETE', '/v1/policies/k8s-egress');
    }
  });
});
