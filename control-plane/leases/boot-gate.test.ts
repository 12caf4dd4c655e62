/**
 * The boot gate: no more boots at once than its slots, the rest admitted in order as slots free
 * (also when a boot throws), creates of leases before pool fills, and 0 slots admitting all.
 */
import { describe, expect, it } from 'vitest';
import { BootGate, type BootKind } from './boot-gate.js';

/** A boot that runs until `finish` or `fail` is called; `started` says whether the gate admitted it. */
function heldBoot(gate: BootGate, kind: BootKind, order: string[], name: string) {
  let finish!: () => void;
  let fail!: (err: Error) => void;
  let started = false;
  const done = gate.run(kind, () => {
    started = true;
    order.push(name);
    return new Promise<string>((resolve, reject) => {
      finish = () => resolve(name);
      fail = reject;
    });
  });
  done.catch(() => undefined);
  return { done, started: () => started, finish: () => finish(), fail: (err: Error) => fail(err) };
}

/** Lets admitted boots' callbacks run (the gate hands a slot over in a promise continuation). */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('BootGate', () => {
  it('admits no more boots than its slots and the next in arrival order as each ends', async () => {
    const gate = new BootGate(2);
    const order: string[] = [];
    const boots = ['a', 'b', 'c', 'd'].map((n) => heldBoot(gate, 'lease', order, n));
    await settle();
    expect(order).toEqual(['a', 'b']);
    expect([gate.booting, gate.queued]).toEqual([2, 2]);
    boots[1]!.finish();
    await expect(boots[1]!.done).resolves.toBe('b');
    await settle();
    expect(order).toEqual(['a', 'b', 'c']);
    expect([gate.booting, gate.queued]).toEqual([2, 1]);
    boots[0]!.finish();
    await settle();
    expect(order).toEqual(['a', 'b', 'c', 'd']);
    boots[2]!.finish();
    boots[3]!.finish();
    await Promise.all(boots.map((b) => b.done));
    expect([gate.booting, gate.queued]).toEqual([0, 0]);
  });

  it('frees the slot of a boot that throws, and its caller gets the error', async () => {
    const gate = new BootGate(1);
    const order: string[] = [];
    const failing = heldBoot(gate, 'lease', order, 'a');
    const next = heldBoot(gate, 'lease', order, 'b');
    await settle();
    expect(next.started()).toBe(false);
    failing.fail(new Error('agent never said hello'));
    await expect(failing.done).rejects.toThrow('agent never said hello');
    await settle();
    expect(next.started()).toBe(true);
    next.finish();
    await expect(next.done).resolves.toBe('b');
    expect(gate.booting).toBe(0);
  });

  it('admits a waiting lease create before pool fills that waited longer', async () => {
    const gate = new BootGate(1);
    const order: string[] = [];
    const first = heldBoot(gate, 'pool', order, 'pool-1');
    const pool2 = heldBoot(gate, 'pool', order, 'pool-2');
    const lease = heldBoot(gate, 'lease', order, 'lease');
    await settle();
    first.finish();
    await settle();
    expect(order).toEqual(['pool-1', 'lease']);
    lease.finish();
    await settle();
    expect(order).toEqual(['pool-1', 'lease', 'pool-2']);
    pool2.finish();
    await Promise.all([first.done, lease.done, pool2.done]);
  });

  it('a boot arriving while a slot passes to a waiter does not overtake it', async () => {
    const gate = new BootGate(1);
    const order: string[] = [];
    const a = heldBoot(gate, 'lease', order, 'a');
    const b = heldBoot(gate, 'lease', order, 'b');
    await settle();
    a.finish();
    // Arrives before b's admission has run: b holds the slot already, so c waits.
    const c = heldBoot(gate, 'lease', order, 'c');
    await settle();
    expect(order).toEqual(['a', 'b']);
    expect(c.started()).toBe(false);
    b.finish();
    await settle();
    c.finish();
    await Promise.all([a.done, b.done, c.done]);
    expect(order).toEqual(['a', 'b', 'c']);
  });

  it('with 0 slots admits every boot at once', async () => {
    const gate = new BootGate(0);
    const order: string[] = [];
    const boots = Array.from({ length: 50 }, (_, i) => heldBoot(gate, i % 2 ? 'pool' : 'lease', order, `b${i}`));
    await settle();
    expect(order).toHaveLength(50);
    expect(gate.queued).toBe(0);
    for (const b of boots) b.finish();
    await Promise.all(boots.map((b) => b.done));
  });

  it('refuses slots that are not a non-negative integer', () => {
    expect(() => new BootGate(-1)).toThrow(RangeError);
    expect(() => new BootGate(1.5)).toThrow(RangeError);
  });
});
