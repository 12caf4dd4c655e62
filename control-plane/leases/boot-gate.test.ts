/**
 * The boot gate: no more lease boots at once than its slots, the rest admitted in order as
 * slots free (also when a boot throws); pool boots only when a slot is spare (none waiting, one
 * left to creates), never queued; 0 slots admitting all.
 */
import { describe, expect, it } from 'vitest';
import { BootGate } from './boot-gate.js';

/** A boot that runs until `finish` or `fail` is called; `started` says whether the gate admitted it. */
function heldBoot(gate: BootGate, order: string[], name: string, pool = false) {
  let finish!: () => void;
  let fail!: (err: Error) => void;
  let started = false;
  const boot = () => {
    started = true;
    order.push(name);
    return new Promise<string>((resolve, reject) => {
      finish = () => resolve(name);
      fail = reject;
    });
  };
  const done: Promise<string | null> = pool ? gate.tryRun(boot) : gate.run(boot);
  done.catch(() => undefined);
  return { done, started: () => started, finish: () => finish(), fail: (err: Error) => fail(err) };
}

/** Lets admitted boots' callbacks run (the gate hands a slot over in a promise continuation). */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('BootGate', () => {
  it('admits no more lease boots than its slots and the next in arrival order as each ends', async () => {
    const gate = new BootGate(2);
    const order: string[] = [];
    const boots = ['a', 'b', 'c', 'd'].map((n) => heldBoot(gate, order, n));
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
    const failing = heldBoot(gate, order, 'a');
    const next = heldBoot(gate, order, 'b');
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

  it('runs a pool boot only with a slot to spare: never queued, one slot left to creates, none while a create waits', async () => {
    const gate = new BootGate(3);
    const order: string[] = [];
    const pools = [heldBoot(gate, order, 'pool-1', true), heldBoot(gate, order, 'pool-2', true)];
    const refused = heldBoot(gate, order, 'pool-3', true);
    await expect(refused.done).resolves.toBeNull();
    expect(refused.started()).toBe(false);
    // The slot left over is a create's.
    const create = heldBoot(gate, order, 'lease-1');
    const waiting = heldBoot(gate, order, 'lease-2');
    await settle();
    expect(order).toEqual(['pool-1', 'pool-2', 'lease-1']);
    expect(gate.queued).toBe(1);
    // A pool slot freed goes to the waiting create, and a pool boot is refused while one waits.
    pools[0]!.finish();
    await expect(heldBoot(gate, order, 'pool-4', true).done).resolves.toBeNull();
    await settle();
    expect(order).toEqual(['pool-1', 'pool-2', 'lease-1', 'lease-2']);
    for (const b of [pools[1]!, create, waiting]) b.finish();
    await Promise.all([...pools, create, waiting].map((b) => b.done));
    expect([gate.booting, gate.queued]).toEqual([0, 0]);
  });

  it('a boot arriving while a slot passes to a waiter does not overtake it', async () => {
    const gate = new BootGate(1);
    const order: string[] = [];
    const a = heldBoot(gate, order, 'a');
    const b = heldBoot(gate, order, 'b');
    await settle();
    a.finish();
    // Arrives before b's admission has run: b holds the slot already, so c waits.
    const c = heldBoot(gate, order, 'c');
    await settle();
    expect(order).toEqual(['a', 'b']);
    expect(c.started()).toBe(false);
    b.finish();
    await settle();
    c.finish();
    await Promise.all([a.done, b.done, c.done]);
    expect(order).toEqual(['a', 'b', 'c']);
  });

  it('with 1 slot a pool boot may take it when it is free', async () => {
    const gate = new BootGate(1);
    const order: string[] = [];
    const pool = heldBoot(gate, order, 'pool', true);
    await settle();
    expect(pool.started()).toBe(true);
    pool.finish();
    await expect(pool.done).resolves.toBe('pool');
  });

  it('with 0 slots admits every boot at once, pool boots too', async () => {
    const gate = new BootGate(0);
    const order: string[] = [];
    const boots = Array.from({ length: 50 }, (_, i) => heldBoot(gate, order, `b${i}`, i % 2 === 1));
    await settle();
    expect(order).toHaveLength(50);
    expect(gate.queued).toBe(0);
    for (const b of boots) b.finish();
    await Promise.all(boots.map((b) => b.done));
  });

  it("gives pools one slot fewer than creates, at least one, and the caller's default when unbounded", () => {
    expect(new BootGate(4).poolSlots(8)).toBe(3);
    expect(new BootGate(2).poolSlots(8)).toBe(1);
    expect(new BootGate(1).poolSlots(8)).toBe(1);
    expect(new BootGate(0).poolSlots(8)).toBe(8);
  });

  it('refuses slots that are not a non-negative integer', () => {
    expect(() => new BootGate(-1)).toThrow(RangeError);
    expect(() => new BootGate(1.5)).toThrow(RangeError);
  });
});
