/**
 * File transfers through the sandbox's agent (contract/transfers.ts, issue 14): the archive is
 * checked entry by entry while it streams into the sandbox, yet nothing of a refused or cut
 * upload is kept; bulk bytes cross the agent tunnel, not Redis.
 */
import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { UPLOAD_SCRIPT } from '../contract/transfers.js';
import { AGENT_SPOOL_DIR } from '../control-plane/policies/compiler.js';
import { SbxError } from '../sdk/index.js';
import { docker, eventually, execIn, rawExchange, tarBytes, useLeasedSandbox, type Harness } from './fixtures/index.js';

let h: Harness;
let leaseId: string;

const { exec } = useLeasedSandbox((harness, id) => {
  h = harness;
  leaseId = id;
});

/** Entries named `.sbx-upload.*` in /workspace: staging directories an upload left behind. */
async function stagingLeft(): Promise<string> {
  return (await exec('ls -A /workspace | grep "^\\.sbx-upload" || true')).stdout.trim();
}

/** Bytes Redis read and wrote on the network so far (INFO stats). */
async function redisNetBytes(): Promise<number> {
  const info = await h.redis.info('stats');
  const field = (name: string): number => Number(new RegExp(`^${name}:(\\d+)`, 'm').exec(info)?.[1] ?? NaN);
  return field('total_net_input_bytes') + field('total_net_output_bytes');
}

describe('file transfers through the agent', () => {
  it('an unsafe entry after 8 MB of accepted ones is files.unsafe_entry, and none of the accepted entries is kept', async () => {
    const archive = await tarBytes([
      { name: 'big-1.bin', content: randomBytes(4 * 1024 * 1024) },
      { name: 'big-2.bin', content: randomBytes(4 * 1024 * 1024) },
      { name: 'late/../../escape.txt', content: 'x' },
    ]);
    const error = await h.client.uploadTar(leaseId, '/workspace/late-refusal', archive).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SbxError);
    expect((error as SbxError).code).toBe('files.unsafe_entry');
    expect((error as SbxError).info.details?.entry).toBe('late/../../escape.txt');
    // The accepted entries reached the sandbox's tar before the refusal; the script kept none of them.
    expect((await exec('ls /workspace/late-refusal 2>&1 || true')).stdout).toMatch(/No such file/);
    expect((await exec('ls /workspace/escape.txt 2>&1 || true')).stdout).toMatch(/No such file/);
    expect(await stagingLeft()).toBe('');
  });

  it.each(['reset', 'half'] as const)(
    'an upload whose client goes away (%s) right after a whole entry keeps nothing and leaves no staging directory',
    async (close) => {
      const first = 3 * 1024 * 1024;
      const body = await tarBytes([
        { name: 'first.bin', content: randomBytes(first) },
        { name: 'second.bin', content: randomBytes(1024 * 1024) },
      ]);
      const head = [
        `PUT /v1/sandboxes/${leaseId}/files?path=/workspace/cut-${close} HTTP/1.1`,
        `host: 127.0.0.1`,
        `authorization: Bearer ${h.apiKey}`,
        'content-type: application/x-tar',
        `content-length: ${body.length}`,
        'connection: close',
        '',
        '',
      ].join('\r\n');
      // Cut at the end of the first entry's data: a tar reading this much sees a whole archive
      // (GNU tar needs no end blocks), so only the missing completion mark keeps it from landing.
      const cut = body.subarray(0, 512 + first);
      await rawExchange(Number(new URL(h.url).port), Buffer.concat([Buffer.from(head), cut]), close).catch(() => null);
      // The sandbox's side ends once the control plane has given up the stream: wait for that, bounded.
      await eventually(stagingLeft, (left) => left === '', 15_000);
      expect((await exec(`ls /workspace/cut-${close} 2>&1 || true`)).stdout).toMatch(/No such file/);
    },
  );

  it.each([
    ['without its completion mark (a stream cut at an entry boundary) keeps nothing: exit 5', false, 5],
    ['with its completion mark lands whole, the mark itself not kept', true, 0],
  ])('the upload script, fed a whole-looking archive %s', async (_label, withMark, exitCode) => {
    const mark = `.sbx-upload-complete.${'A'.repeat(22)}`;
    const dir = `/workspace/script-${withMark ? 'marked' : 'unmarked'}`;
    await exec(`rm -rf /tmp/src && mkdir -p /tmp/src/sub && echo one > /tmp/src/sub/one.txt${withMark ? ` && : > /tmp/src/${mark}` : ''}`);
    // tar -c ends the archive with its end blocks: to GNU tar on the other side it is whole.
    const r = await exec({
      argv: [
        'sh',
        '-c',
        'tar -C /tmp/src -cf - . | sh -c "$0" sbx-upload "$@"',
        UPLOAD_SCRIPT,
        dir,
        '/workspace',
        dir.slice('/workspace/'.length),
        mark,
      ],
    });
    expect(r.exitCode).toBe(exitCode);
    const listing = (await exec(`ls -A ${dir} ${dir}/sub 2>&1 || true`)).stdout;
    if (withMark) expect(listing).toBe(`${dir}:\nsub\n\n${dir}/sub:\none.txt\n`);
    else {
      expect(r.stderr).toContain('archive cut short');
      expect(listing).toMatch(/No such file/);
    }
    expect(await stagingLeft()).toBe('');
  });

  it('an archive whose root directory is read-only (tar -C dir -c . of a 0555 dir) lands whole', async () => {
    const archive = await tarBytes([
      { name: './', type: 'directory', mode: 0o555 },
      { name: './f.txt', content: 'inside a read-only root' },
    ]);
    expect(await h.client.uploadTar(leaseId, '/workspace/ro-root', archive)).toMatchObject({ entries: 2 });
    expect((await exec('cat /workspace/ro-root/f.txt')).stdout).toBe('inside a read-only root');
    expect(await stagingLeft()).toBe('');
  });

  it('a directory entry over a symlink the sandbox planted is 409 files.type_conflict: nothing is merged through the link', async () => {
    await exec('mkdir -p /workspace/planted-dir /tmp/link-target && ln -sfn /tmp/link-target /workspace/planted-dir/link');
    const error = await h.client
      .uploadTar(leaseId, '/workspace/planted-dir', await tarBytes([{ name: 'link/through.txt', content: 'x' }]))
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'files.type_conflict', status: 409 });
    expect((await exec('ls -A /tmp/link-target')).stdout).toBe('');
    expect(await stagingLeft()).toBe('');
  });

  it('an upload past the size of its writable root is 507 files.no_space and keeps nothing', async () => {
    const small = await h.client.createSandbox({ writableRoots: [{ path: '/testbed', sizeBytes: 2 * 1024 * 1024 }] });
    try {
      const error = await h.client
        .uploadTar(small.id, '/testbed/fill', await tarBytes([{ name: 'big.bin', content: randomBytes(4 * 1024 * 1024) }]))
        .catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'files.no_space', status: 507 });
      expect((await execIn(() => h.client)(small.id, 'ls -A /testbed')).stdout).toBe('');
    } finally {
      await h.client.releaseSandbox(small.id);
    }
  });

  it('a call finishing while an upload streams does not end the upload: the sweep after it spares the transfer script', async () => {
    const archive = await tarBytes([
      { name: 'one.bin', content: randomBytes(1024 * 1024) },
      { name: 'two.bin', content: randomBytes(1024 * 1024) },
    ]);
    let sendRest: () => void = () => undefined;
    const rest = new Promise<void>((resolve) => (sendRest = resolve));
    const body = new ReadableStream<Uint8Array>({
      async start(controller) {
        controller.enqueue(archive.subarray(0, 512 * 1024));
        await rest;
        controller.enqueue(archive.subarray(512 * 1024));
        controller.close();
      },
    });
    const upload = fetch(`${h.url}/v1/sandboxes/${leaseId}/files?path=/workspace/during-a-call`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${h.apiKey}`, 'content-type': 'application/x-tar' },
      body,
      duplex: 'half',
    } as RequestInit);
    // The script is running (its staging directory is there): a call now ends with a sweep of the tool user's processes.
    await eventually(stagingLeft, (left) => left !== '', 15_000);
    expect((await exec('true')).status).toBe('succeeded');
    sendRest();
    const response = await upload;
    expect(response.status).toBe(200);
    expect((await exec('ls /workspace/during-a-call')).stdout).toBe('one.bin\ntwo.bin\n');
    expect(await stagingLeft()).toBe('');
  });

  it('16 MB up and back down arrive byte for byte, and Redis carries under 1 MB of it', async () => {
    const content = randomBytes(16 * 1024 * 1024);
    const before = await redisNetBytes();
    const summary = await h.client.uploadTar(leaseId, '/workspace/through-agent', await tarBytes([{ name: 'payload.bin', content }]));
    expect(summary).toMatchObject({ path: '/workspace/through-agent', entries: 1, bytes: content.length });
    const response = await h.client.raw('GET', `/v1/sandboxes/${leaseId}/files?path=/workspace/through-agent/payload.bin`);
    expect(response.status).toBe(200);
    const back = Buffer.from(await response.arrayBuffer());
    const after = await redisNetBytes();
    const inSandbox = (await exec('sha256sum /workspace/through-agent/payload.bin')).stdout.split(' ')[0];
    const sha = createHash('sha256').update(content).digest('hex');
    expect(inSandbox).toBe(sha);
    expect(await entryDigest(back, 'payload.bin')).toBe(sha);
    // 32 MB crossed the control plane; the exec above and the plane's own traffic are far under this.
    expect(after - before).toBeLessThan(1024 * 1024);
  });

  it("a stdout's artifact comes over the tunnel, not Redis: 32 MB of stdout moves no more Redis bytes than 5 MB; whole; no copy left at the agent", async () => {
    /** Redis bytes moved by an exec of `bytes` of stdout, and its result. */
    const measured = async (bytes: number): Promise<{ redisBytes: number; result: Awaited<ReturnType<typeof exec>> }> => {
      const before = await redisNetBytes();
      const result = await exec({ argv: ['head', '-c', String(bytes), '/dev/zero'] });
      return { redisBytes: (await redisNetBytes()) - before, result };
    };
    // Both keep the same 4 MiB in events and the result (which do cross Redis); only the artifacts differ, by 27 MB.
    const small = await measured(5_000_000);
    const big = await measured(32_000_000);
    expect(big.redisBytes - small.redisBytes).toBeLessThan(4_000_000);
    const artifactId = big.result.truncation?.stdout?.fullArtifact;
    expect(artifactId).toMatch(/^art_/);
    const response = await h.client.raw('GET', `/v1/sandboxes/${leaseId}/artifacts/${artifactId}`);
    const body = Buffer.from(await response.arrayBuffer());
    expect(body.length).toBe(32_000_000);
    expect(createHash('sha256').update(body).digest('hex')).toBe(big.result.receipt?.outputs?.stdout.sha256);
    // Released once stored: the agent's spool directory is empty again.
    expect((await docker('exec', `sbx-${leaseId}`, 'ls', '-A', AGENT_SPOOL_DIR)).trim()).toBe('');
  });
});

/** The sha256 of entry `name` in the tar `archive`. */
async function entryDigest(archive: Buffer, name: string): Promise<string> {
  const tar = await import('tar-stream');
  const extract = tar.extract();
  let digest = '';
  extract.on('entry', (header, stream, next) => {
    const hash = createHash('sha256');
    stream.on('data', (chunk) => hash.update(chunk as Buffer));
    stream.on('end', () => {
      if (header.name === name) digest = hash.digest('hex');
      next();
    });
  });
  const finished = new Promise<void>((resolve, reject) => {
    extract.on('finish', () => resolve());
    extract.on('error', reject);
  });
  extract.end(archive);
  await finished;
  return digest;
}
