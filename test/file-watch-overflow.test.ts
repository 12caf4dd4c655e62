/**
 * File watch (issue 13 part 7) where changes are lost, against a real sandbox: each way a loss is
 * made explicit that can really be made to happen here — the policy's `watch.maxConcurrent`
 * (`429 watch.limit_exceeded`), the inotify helper dying (`watch.overflow` `watcher_restarted`,
 * then `watch.started` again), and a reader that stops reading while the log moves past what it
 * keeps (`watch.overflow` `client_behind` on the stream). `kernel_queue` and `resync_required` of
 * `changes?since` are in file-watch.test.ts.
 */
import { request, type IncomingMessage } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { leaseKeys } from '../contract/queue.js';
import { SbxError, type FileWatch, type WatchEvent } from '../sdk/index.js';
import { apiAs, execIn, putPolicyVariant, useHarness } from './fixtures/index.js';

const h = useHarness();
const api = apiAs(() => h.url);
const POLICY = 'watch-overflow';
let leaseId: string;
const run = execIn(() => h.client);
const exec = (cmd: string, waitSeconds = 60) => run(leaseId, cmd, { waitSeconds });

/** Watches a test opened; closed after the file whatever happened. */
const opened = new Set<FileWatch>();

beforeAll(async () => {
  await putPolicyVariant(h, POLICY, (policy) => (policy.watch = { maxConcurrent: 1 }));
  leaseId = (await h.client.createSandbox({ policy: POLICY })).id;
});

afterAll(async () => {
  for (const w of opened) w.close();
  if (leaseId) await h.client.releaseSandbox(leaseId);
  await api(h.apiKey, 'DELETE', `/v1/policies/${POLICY}`);
});

async function watchOf(path: string): Promise<{ w: FileWatch; events: WatchEvent[] }> {
  const events: WatchEvent[] = [];
  const w = await h.client.watchFiles(leaseId, path, { onEvent: (e) => events.push(e) });
  opened.add(w);
  return { w, events };
}

async function closeAll(): Promise<void> {
  for (const w of opened) w.close();
  await Promise.all([...opened].map((w) => w.done.catch(() => undefined)));
  opened.clear();
  await expect.poll(() => h.redis.zcard(`${h.config.redisPrefix}watch-slots:${leaseId}`)).toBe(0);
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    if (err instanceof SbxError) return err.code;
    throw err;
  }
  throw new Error('expected an SbxError');
}

describe('file watch: losses made explicit', () => {
  it("the policy's watch.maxConcurrent bounds open watches (1 here: the second is 429 watch.limit_exceeded); closing gives the slot back", async () => {
    const first = await watchOf('/workspace');
    const refused = await api(h.apiKey, 'GET', `/v1/sandboxes/${leaseId}/files/watch?path=/workspace`);
    expect([refused.status, refused.body.error.code, refused.body.error.details]).toEqual([429, 'watch.limit_exceeded', { limit: 1 }]);
    first.w.close();
    await first.w.done;
    await expect.poll(() => h.redis.zcard(`${h.config.redisPrefix}watch-slots:${leaseId}`)).toBe(0);
    await watchOf('/tmp');
    await closeAll();
  });

  it('a killed inotify helper is a watch.overflow (watcher_restarted), then watch.started again; later changes are seen, and the log keeps the loss', async () => {
    const before = await h.client.fileChanges(leaseId);
    const { events } = await watchOf('/workspace');
    // The helper runs as the tool user: a call may kill it (as any process of that user).
    const kill = 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = sbx-inotify ] && kill -KILL ${p#/proc/}; done; true';
    expect((await exec(kill)).status).toBe('succeeded');
    await expect
      .poll(() => events.findIndex((e) => e.type === 'watch.overflow' && e.reason === 'watcher_restarted'), { timeout: 30_000 })
      .toBeGreaterThanOrEqual(0);
    const lost = events.findIndex((e) => e.type === 'watch.overflow' && e.reason === 'watcher_restarted');
    await expect.poll(() => events.slice(lost).some((e) => e.type === 'watch.started'), { timeout: 30_000 }).toBe(true);
    expect((await exec('echo after > /workspace/after-restart')).status).toBe('succeeded');
    await expect
      .poll(() => events.some((e) => e.type === 'created' && e.path === '/workspace/after-restart'), { timeout: 30_000 })
      .toBe(true);
    const page = await h.client.fileChanges(leaseId, { since: before.cursor });
    expect(page.changes.map((e) => (e.type === 'watch.overflow' ? `overflow ${e.reason}` : e.type))).toEqual(
      expect.arrayContaining(['overflow watcher_restarted', 'watch.started', 'created']),
    );
    // A cursor the log never had (past its end) is 410 too.
    expect(await codeOf(h.client.fileChanges(leaseId, { since: page.cursor + 1000 }))).toBe('watch.resync_required');
    await closeAll();
  }, 120_000);

  it('a reader that stops reading while the log moves past what it keeps gets watch.overflow (client_behind), then the changes after it', async () => {
    const start = await h.client.fileChanges(leaseId);
    const keys = leaseKeys(h.config.redisPrefix, leaseId);
    // The raw stream, not read: once the socket's buffers are full the server waits on it.
    const { req, res } = await new Promise<{ req: ReturnType<typeof request>; res: IncomingMessage }>((resolve, reject) => {
      const req = request(`${h.url}/v1/sandboxes/${leaseId}/files/watch?path=/workspace&since=${start.cursor}`, {
        headers: { authorization: `Bearer ${h.apiKey}` },
      });
      req.once('response', (res) => resolve({ req, res }));
      req.once('error', reject);
      req.end();
    });
    try {
      expect(res.statusCode).toBe(200);
      // Long paths make every event about 1 KiB: the stream stops within the first ~10 MiB of
      // events. Bursts of creations go on until the log's oldest kept entry is well past that
      // point: a burst may itself overflow the kernel queue or the agent's buffer (an explicit
      // loss of some of its events), so how many it takes is not fixed.
      const dir = ['a', 'b', 'c', 'd'].map((c) => c.repeat(250)).join('/');
      const oldestSeq = async (): Promise<number> =>
        Number((await h.redis.xrange(keys.changes, '-', '+', 'COUNT', 1))[0]?.[0].split('-')[0]);
      const lastSeq = async (): Promise<number> =>
        Number((await h.redis.xrevrange(keys.changes, '+', '-', 'COUNT', 1))[0]?.[0].split('-')[0]);
      for (let round = 1; (await oldestSeq()) <= start.cursor + 12_000; round++) {
        // The agent logs a flood at a bounded rate (the rest is one kernel_queue entry): under
        // load a burst may add only a few thousand entries.
        expect(round, 'bursts needed to move the log past the reader').toBeLessThanOrEqual(60);
        const before = await lastSeq();
        const burst = `mkdir -p /workspace/cb/${round}/${dir} && cd /workspace/cb/${round}/${dir} && for i in $(seq 1 10000); do : > f$i; done`;
        expect((await exec(burst, 300)).status).toBe('succeeded');
        // The burst reached the log (the agent sends changes in batches).
        await expect.poll(lastSeq, { timeout: 60_000 }).toBeGreaterThan(before);
      }
      // Now read: the server finds its place gone from the log and says so.
      const seen: Array<{ type: string; id: number; data: { reason?: string; seq?: number } }> = [];
      let text = '';
      await new Promise<void>((resolve, reject) => {
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
          let end: number;
          while ((end = text.indexOf('\n\n')) >= 0) {
            const block = text.slice(0, end);
            text = text.slice(end + 2);
            const field = (name: string): string | undefined => new RegExp(`^${name}: ?(.*)$`, 'm').exec(block)?.[1];
            const type = field('event');
            if (!type) continue;
            seen.push({ type, id: Number(field('id')), data: JSON.parse(field('data') ?? 'null') as never });
            const overflow = seen.findIndex((e) => e.type === 'watch.overflow' && e.data.reason === 'client_behind');
            if (overflow >= 0 && seen.slice(overflow + 1).some((e) => e.type === 'created')) resolve();
          }
        });
        res.once('error', reject);
        res.once('end', () => reject(new Error(`stream ended; saw ${seen.length} events`)));
      });
      const at = seen.findIndex((e) => e.type === 'watch.overflow' && e.data.reason === 'client_behind');
      const overflow = seen[at]!;
      const ids = seen.slice(1).map((e) => e.id);
      expect(ids).toEqual([...ids].sort((a, b) => a - b));
      // Before it, the changes up to where the reader stopped; the overflow's seq is the last one
      // it missed; after it, changes the log still has.
      expect(seen[at - 1]!.id).toBeLessThan(overflow.id);
      expect(overflow.data.seq).toBe(overflow.id);
      // (Among them may be the bursts' own explicit losses: kernel_queue, agent_buffer.)
      expect(seen[at + 1]!.id).toBeGreaterThan(overflow.id);
      // (A reader still slower than the log may fall behind again: another client_behind, said the same way.)
      expect(seen.slice(at + 1).some((e) => e.type === 'created')).toBe(true);
    } finally {
      req.destroy();
      await exec('rm -rf /workspace/cb', 120);
    }
  }, 400_000);
});
