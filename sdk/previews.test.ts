import { describe, expect, it } from 'vitest';
import { SbxClient } from './client.js';
import { SbxError } from './errors.js';
import { SandboxPorts } from './previews.js';

/** Ports of a sandbox whose client records every URL it would send. */
function portsRecording(): { ports: SandboxPorts; sent: string[] } {
  const sent: string[] = [];
  const client = new SbxClient('http://127.0.0.1:9', 'key', {
    fetch: async (input) => {
      sent.push(String(input));
      return new Response('ok');
    },
  });
  return { ports: new SandboxPorts({ client, id: 'sbx_1' }), sent };
}

describe('SandboxPorts.fetch', () => {
  it('refuses a path with a dot segment before sending it, so the URL cannot resolve to another API route', async () => {
    const { ports, sent } = portsRecording();
    for (const path of ['/../../events', '/%2e%2e/top.txt', 'a/%2E./b', '/a%2F..%2Fb?x=1', '/%00']) {
      const err = await ports.fetch(8000, path).catch((e: unknown) => e);
      expect(err, path).toBeInstanceOf(SbxError);
      expect((err as SbxError).code, path).toBe('preview.invalid_path');
    }
    expect(sent).toEqual([]);
  });

  it('refuses a port outside 1-65535 before sending', async () => {
    const { ports, sent } = portsRecording();
    for (const port of [0, 65_536, -1, 80.5, Number.NaN])
      expect(((await ports.fetch(port, '/').catch((e: unknown) => e)) as SbxError).code, String(port)).toBe('input.invalid');
    expect(sent).toEqual([]);
  });

  it('sends a normalised path and its query as given, under the port prefix', async () => {
    const { ports, sent } = portsRecording();
    await ports.fetch(8000, 'api/a%2Fb?q=../x');
    expect(sent).toEqual(['http://127.0.0.1:9/v1/sandboxes/sbx_1/ports/8000/api/a%2Fb?q=../x']);
  });
});
