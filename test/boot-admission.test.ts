/**
 * Boot admission against a real control plane, Docker engine and Redis: with
 * `SBX_BOOT_CONCURRENCY=1`, creates sent at once all succeed, one boot at a time (each
 * container starts only after the previous sandbox's agent said hello), and `GET /metrics`
 * shows the waiting creates as `sbx_sandbox_boots{state="queued"}` meanwhile.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Lease } from '../contract/objects.js';
import { docker, eventually, startHarness, type Harness } from './fixtures/index.js';

const CREATES = 3;

let h: Harness;

beforeAll(async () => {
  h = await startHarness({ SBX_BOOT_CONCURRENCY: '1' });
});

afterAll(async () => {
  await h?.close();
});

/** The value of one sample of `GET /metrics` (e.g. `sbx_sandbox_boots{state="queued"}`), or null when absent. */
async function metric(sample: string): Promise<number | null> {
  const text = await (await fetch(`${h.url}/metrics`, { headers: { authorization: `Bearer ${h.apiKey}` } })).text();
  const line = text.split('\n').find((l) => l.startsWith(`${sample} `));
  return line === undefined ? null : Number(line.slice(sample.length + 1));
}

describe('boot admission (SBX_BOOT_CONCURRENCY=1)', () => {
  it('boots creates sent at once one after another, all of them ready, the waiting ones reported as queued', async () => {
    const creates = Array.from({ length: CREATES }, () => h.client.createSandbox({ ttlSeconds: 300 }));
    // While one boots, the others wait for its slot.
    await eventually(
      async () => [await metric('sbx_sandbox_boots{state="booting"}'), await metric('sbx_sandbox_boots{state="queued"}')],
      ([booting, queued]) => booting === 1 && (queued ?? 0) >= 1,
    );
    const leases: Lease[] = await Promise.all(creates);
    expect(leases.map((l) => l.status)).toEqual(Array(CREATES).fill('ready'));
    const boots = await Promise.all(
      leases.map(async (lease) => {
        const startedAtMs = Date.parse((await docker('inspect', '-f', '{{.State.StartedAt}}', `sbx-${lease.id}`)).trim());
        const ready = (await h.client.leaseEvents(lease.id)).find((e) => e.to === 'ready');
        return { id: lease.id, startedAtMs, readyAtMs: Date.parse(ready!.at) };
      }),
    );
    boots.sort((a, b) => a.startedAtMs - b.startedAtMs);
    for (let i = 1; i < boots.length; i += 1) {
      // The next container started only once the one before had said hello; its `ready` is
      // written a few ms after the slot is free, long before the next container's start.
      expect(boots[i]!.startedAtMs, `${boots[i]!.id} started before ${boots[i - 1]!.id} was ready`).toBeGreaterThanOrEqual(
        boots[i - 1]!.readyAtMs - 100,
      );
    }
    expect(await metric('sbx_sandbox_boots{state="booting"}')).toBe(0);
    expect(await metric('sbx_sandbox_boots{state="queued"}')).toBe(0);
  });
});
