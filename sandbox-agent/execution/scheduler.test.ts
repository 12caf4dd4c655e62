import { describe, expect, it } from 'vitest';
import { AccessScheduler, conflicts, type Access } from './scheduler.js';

const read = (path: string): Access => ({ kind: 'path', path, mode: 'read' });
const write = (path: string): Access => ({ kind: 'path', path, mode: 'write' });
const all: Access = { kind: 'all' };

/** Lets every resolved promise callback run. */
const settle = (): Promise<void> => new Promise((r) => setImmediate(r));

/** Acquires and records when the call got to start; `release` ends it. */
function track(s: AccessScheduler, accesses: Access[], started: string[], name: string): Promise<() => void> {
  return s.acquire(accesses).then((release) => {
    started.push(name);
    return release;
  });
}

describe('conflicts', () => {
  it('reads share; a write excludes the same path, its parents and its children; all excludes everything', () => {
    expect(conflicts(read('/w/a'), read('/w/a'))).toBe(false);
    expect(conflicts(write('/w/a'), read('/w/a'))).toBe(true);
    expect(conflicts(write('/w/a'), read('/w'))).toBe(true);
    expect(conflicts(write('/w'), write('/w/a/b'))).toBe(true);
    expect(conflicts(write('/w/a'), write('/w/ab'))).toBe(false);
    expect(conflicts(write('/w/a'), write('/w/b'))).toBe(false);
    expect(conflicts(all, read('/x'))).toBe(true);
  });
});

describe('AccessScheduler', () => {
  it('runs non-conflicting calls at once: reads in parallel, writes to different files in parallel', async () => {
    const s = new AccessScheduler();
    const started: string[] = [];
    const calls = [
      track(s, [read('/w/a')], started, 'r1'),
      track(s, [read('/w/a')], started, 'r2'),
      track(s, [write('/w/b')], started, 'w'),
    ];
    await settle();
    expect(started.sort()).toEqual(['r1', 'r2', 'w']);
    for (const release of await Promise.all(calls)) release();
    expect(s.size).toBe(0);
  });

  it('an overlapping write waits for the earlier call and starts when it is released', async () => {
    const s = new AccessScheduler();
    const started: string[] = [];
    const first = track(s, [read('/w/a')], started, 'read');
    void track(s, [write('/w/a')], started, 'write');
    await settle();
    expect(started).toEqual(['read']);
    (await first)();
    await settle();
    expect(started).toEqual(['read', 'write']);
  });

  it('a later call never overtakes an earlier conflicting one that is still waiting', async () => {
    const s = new AccessScheduler();
    const started: string[] = [];
    const r1 = track(s, [read('/w/a')], started, 'r1');
    void track(s, [write('/w/a')], started, 'w2');
    // r3 could run beside r1 (two reads), but w2, queued before it, writes what r3 reads.
    void track(s, [read('/w/a')], started, 'r3');
    void track(s, [read('/w/other')], started, 'r4');
    await settle();
    expect(started).toEqual(['r1', 'r4']);
    (await r1)();
    await settle();
    expect(started).toEqual(['r1', 'r4', 'w2']);
  });

  it('exec (all) runs alone and in order with everything around it', async () => {
    const s = new AccessScheduler();
    const started: string[] = [];
    const r = track(s, [read('/w/a')], started, 'read');
    const e = track(s, [all], started, 'exec');
    void track(s, [read('/w/z')], started, 'after');
    await settle();
    expect(started).toEqual(['read']);
    (await r)();
    await settle();
    expect(started).toEqual(['read', 'exec']);
    const release = await e;
    release();
    release();
    await settle();
    expect(started).toEqual(['read', 'exec', 'after']);
  });
});

describe('AccessScheduler with calls that touch nothing', () => {
  it('a call with no accesses (a process listing or signal) runs beside a running exec and a waiting unresolved call', async () => {
    const s = new AccessScheduler();
    const started: string[] = [];
    const exec = await track(s, [all], started, 'exec');
    const unresolved = s.acquire([], () => new Promise<Access[]>(() => undefined));
    const list = await track(s, [], started, 'list');
    expect(started).toEqual(['exec', 'list']);
    list();
    exec();
    void unresolved;
  });
});

describe('AccessScheduler with unresolved accesses', () => {
  /** A resolver the test settles by hand, recording when the scheduler asked for it. */
  function deferred(asked: string[], name: string): { resolver: () => Promise<Access[]>; give: (a: Access[]) => void } {
    let give: (a: Access[]) => void = () => undefined;
    const promise = new Promise<Access[]>((r) => (give = r));
    return {
      resolver: () => {
        asked.push(name);
        return promise;
      },
      give: (a) => give(a),
    };
  }

  it('resolves only after earlier `all` calls finished, and blocks later calls until resolved', async () => {
    const s = new AccessScheduler();
    const started: string[] = [];
    const asked: string[] = [];
    const exec = await track(s, [all], started, 'exec');
    const a = deferred(asked, 'a');
    const slotA = s.acquire([], a.resolver).then((release) => (started.push('a'), release));
    const slotB = track(s, [read('/other')], started, 'b');
    await settle();
    expect(asked).toEqual([]);
    exec();
    await settle();
    expect(asked).toEqual(['a']);
    expect(started).toEqual(['exec']);
    a.give([write('/w/x')]);
    await settle();
    expect(started).toEqual(['exec', 'a', 'b']);
    (await slotA)();
    (await slotB)();
    expect(s.size).toBe(0);
  });

  it('different canonical files run side by side; the same canonical file never overtakes', async () => {
    const s = new AccessScheduler();
    const started: string[] = [];
    const asked: string[] = [];
    const a = deferred(asked, 'a');
    const b = deferred(asked, 'b');
    const c = deferred(asked, 'c');
    const slotA = s.acquire([], a.resolver).then((release) => (started.push('a'), release));
    const slotB = s.acquire([], b.resolver).then((release) => (started.push('b'), release));
    const slotC = s.acquire([], c.resolver).then((release) => (started.push('c'), release));
    await settle();
    expect(asked).toEqual(['a']);
    a.give([write('/w/one')]);
    await settle();
    expect(asked).toEqual(['a', 'b']);
    b.give([write('/w/two')]);
    await settle();
    c.give([write('/w/one')]);
    await settle();
    expect(started).toEqual(['a', 'b']);
    (await slotA)();
    await settle();
    expect(started).toEqual(['a', 'b', 'c']);
    (await slotB)();
    (await slotC)();
  });

  it('a resolved read shares with a running read of the same file', async () => {
    const s = new AccessScheduler();
    const started: string[] = [];
    const first = await track(s, [read('/w/a')], started, 'first');
    const second = await s.acquire([], async () => [read('/w/a')]);
    first();
    second();
    expect(s.size).toBe(0);
  });
});
