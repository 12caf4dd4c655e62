/**
 * The legs between the nodes and the control plane's side are TLS (k8s-lab.sh make_tls; the node
 * relays dial `tls:`): a connection that does not speak TLS gets nothing there, even with a valid
 * header and token, and one that does, trusting the lab's CA, is served.
 */
import { once } from 'node:events';
import net from 'node:net';
import tls from 'node:tls';
import { describe, expect, it } from 'vitest';
import { agentLinkKey } from '../../control-plane/agent-link/link-listener.js';
import { linkToken } from '../../contract/link.js';
import { apiAs, putPolicyVariant, useHarness } from '../fixtures/index.js';
import { useKubernetesLab } from '../fixtures/kubernetes.js';

const lab = useKubernetesLab('link-tls');
const h = useHarness(() => lab.settings());

/** Everything `socket` receives until it closes (at most 5 s). */
async function received(socket: net.Socket): Promise<string> {
  let text = '';
  socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
  socket.on('error', () => undefined);
  socket.setTimeout(5000, () => socket.destroy());
  await once(socket, 'close');
  return text;
}

describe('TLS on the links from the nodes', () => {
  it('the link front serves a valid header only over TLS; plaintext gets no byte back', async () => {
    await putPolicyVariant(h, 'link-tls', (p) => {
      p.network = { mode: 'allowlist', allow: [{ host: 'example.invalid', ports: [443] }] };
    });
    try {
      const lease = await h.client.createSandbox({ policy: 'link-tls' });
      const header = `${JSON.stringify({ v: 1, lease: lease.id, channel: 'egress', token: linkToken(agentLinkKey(h.config.secretsKey!), lease.id) })}\n`;
      // The egress proxy answers an origin-form request 400: proof the connection reached it.
      const request = 'GET /not-a-proxy-request HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n';
      const [host, port] = [lab.registry.split(':')[0]!, 7071];
      const plain = net.connect({ host, port });
      plain.write(header + request);
      expect(await received(plain)).toBe('');
      const secure = tls.connect({ host, port });
      await once(secure, 'secureConnect');
      secure.write(header + request);
      expect(await received(secure)).toMatch(/^HTTP\/1\.1 4\d\d /);
      await h.client.releaseSandbox(lease.id);
    } finally {
      await apiAs(() => h.url)(h.apiKey, 'DELETE', '/v1/policies/link-tls');
    }
  });

  it("the hub's Redis leg answers no plaintext command; over TLS it is Redis", async () => {
    const [host, port] = [lab.registry.split(':')[0]!, 6390];
    const plain = net.connect({ host, port });
    plain.write('PING\r\n');
    expect(await received(plain)).toBe('');
    const secure = tls.connect({ host, port });
    await once(secure, 'secureConnect');
    secure.write('PING\r\nQUIT\r\n');
    // Set-up's Redis requires its password: an unauthenticated PING is refused, by Redis.
    expect(await received(secure)).toMatch(/^-NOAUTH /);
  });
});
