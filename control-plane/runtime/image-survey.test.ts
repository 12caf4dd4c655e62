/**
 * The image survey's records: link targets merge, empty roots, a root's archive kept only whole
 * and within its size bound, and a damaged facts file read as nothing recorded.
 */
import { mkdtemp, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { text } from 'node:stream/consumers';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ArchiveRecorder, ImageSurvey, SURVEY_ARCHIVE_MAX_BYTES } from './image-survey.js';

const ID = 'sha256:' + 'ab'.repeat(32);
let dir: string;
let survey: ImageSurvey;

async function recorderOf(imageId: string, sourcePath: string): Promise<ArchiveRecorder> {
  const recorder = await survey.archiveRecorder(imageId, sourcePath);
  if (recorder === null) throw new Error('no recorder: the survey directory could not be made');
  return recorder;
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sbx-survey-'));
  survey = new ImageSurvey(dir);
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('image survey', () => {
  it('link targets found by two checks merge; a path never checked is absent', async () => {
    await survey.recordLinks(ID, new Map([['/testbed', '/etc']]));
    await survey.recordLinks(ID, new Map([['/home', null]]));
    expect(await (await survey.record(ID)).links(['/testbed', '/home', '/tmp'])).toEqual(
      new Map([
        ['/testbed', '/etc'],
        ['/home', null],
      ]),
    );
    expect(await (await survey.record('sha256:' + 'cd'.repeat(32))).links(['/testbed'])).toEqual(new Map());
  });

  it('a root recorded empty reads as empty; one never recorded as null', async () => {
    await survey.recordEmpty(ID, '/tmp');
    expect(await (await survey.record(ID)).root('/tmp')).toEqual({ kind: 'empty' });
    expect(await (await survey.record(ID)).root('/workspace')).toBeNull();
  });

  it('an archive kept whole reads back byte for byte; a dropped one leaves no file', async () => {
    const kept = await recorderOf(ID, '/workspace');
    kept.write(Buffer.from('head,'));
    kept.write(Buffer.from('tail'));
    await kept.keep();
    const root = await (await survey.record(ID)).root('/workspace');
    expect(root?.kind).toBe('archive');
    expect(await text((root as { archive: Readable }).archive)).toBe('head,tail');

    const dropped = await recorderOf(ID, '/testbed');
    dropped.write(Buffer.from('partial'));
    await dropped.drop();
    expect(await (await survey.record(ID)).root('/testbed')).toBeNull();
    expect((await readdir(join(dir, ID.replace(':', '-')))).filter((f) => f.endsWith('.tmp'))).toEqual([]);
  });

  it('an archive past SURVEY_ARCHIVE_MAX_BYTES is not kept, and its temporary file goes', async () => {
    const recorder = await recorderOf(ID, '/big');
    const chunk = Buffer.alloc(1024 * 1024);
    for (let written = 0; written <= SURVEY_ARCHIVE_MAX_BYTES; written += chunk.length) recorder.write(chunk);
    await recorder.keep();
    expect(await (await survey.record(ID)).root('/big')).toBeNull();
    expect((await readdir(join(dir, ID.replace(':', '-')))).filter((f) => f.endsWith('.tmp'))).toEqual([]);
  });

  it('a damaged facts file reads as nothing recorded, and the next record replaces it', async () => {
    await survey.recordEmpty(ID, '/tmp');
    await writeFile(join(dir, ID.replace(':', '-'), 'facts.json'), '{"links":');
    expect(await (await survey.record(ID)).root('/tmp')).toBeNull();
    await survey.recordEmpty(ID, '/tmp');
    expect(await (await survey.record(ID)).root('/tmp')).toEqual({ kind: 'empty' });
  });

  it('sweep removes the records of images the engine no longer has, and keeps the others', async () => {
    const gone = 'sha256:' + 'cd'.repeat(32);
    await survey.recordEmpty(ID, '/tmp');
    await survey.recordEmpty(gone, '/tmp');
    const asked: string[] = [];
    const removed = await survey.sweep(async (imageId) => (asked.push(imageId), imageId === ID));
    expect(removed).toBe(1);
    expect(asked.sort()).toEqual([ID, gone].sort());
    expect(await (await survey.record(ID)).root('/tmp')).toEqual({ kind: 'empty' });
    expect(await (await survey.record(gone)).root('/tmp')).toBeNull();
  });

  it('once: concurrent reads of the same thing of an image run one at first, the others after it ended, side by side', async () => {
    const order: string[] = [];
    let finishFirst!: () => void;
    const first = survey.once(ID, 'links', async () => {
      order.push('first started');
      await new Promise<void>((resolve) => (finishFirst = resolve));
      order.push('first ended');
      return 'first';
    });
    const waiters = [1, 2].map((n) => survey.once(ID, 'links', async () => (order.push(`waiter ${n} ran`), `waiter ${n}`)));
    // Another thing of the same image is not held up.
    expect(await survey.once(ID, 'root /tmp', async () => 'other')).toBe('other');
    expect(order).toEqual(['first started']);
    finishFirst();
    expect(await Promise.all([first, ...waiters])).toEqual(['first', 'waiter 1', 'waiter 2']);
    expect(order).toEqual(['first started', 'first ended', 'waiter 1 ran', 'waiter 2 ran']);
  });

  it('once: a read that never ends holds the waiters for waitMaxMs at most, then they read for themselves', async () => {
    const impatient = new ImageSurvey(dir, { waitMaxMs: 50 });
    void impatient.once(ID, 'links', () => new Promise<string>(() => undefined));
    expect(await impatient.once(ID, 'links', async () => 'read myself')).toBe('read myself');
  });

  it('facts of another format version (written by earlier code) read as nothing recorded', async () => {
    await survey.recordLinks(ID, new Map([['/testbed', null]]));
    expect((await survey.record(ID)).links(['/testbed'])).toEqual(new Map([['/testbed', null]]));
    await writeFile(
      join(dir, ID.replace(':', '-'), 'facts.json'),
      JSON.stringify({ links: { '/testbed': null }, emptyRoots: [], largeRoots: [] }),
    );
    expect((await survey.record(ID)).links(['/testbed'])).toEqual(new Map());
  });

  it('once: a failed first read lets the waiters read for themselves', async () => {
    const first = survey.once(ID, 'links', async () => Promise.reject(new Error('engine gone')));
    const waiter = survey.once(ID, 'links', async () => 'read again');
    await expect(first).rejects.toThrow('engine gone');
    expect(await waiter).toBe('read again');
  });

  it('a record holds the facts recorded when it was read (links, empty and large roots), and reads archives when asked', async () => {
    await survey.recordLinks(ID, new Map([['/home', null]]));
    await survey.recordEmpty(ID, '/tmp');
    await survey.recordLarge(ID, '/testbed');
    const recorder = await recorderOf(ID, '/workspace');
    recorder.write(Buffer.from('tar'));
    await recorder.keep();
    const record = await survey.record(ID);
    await survey.recordEmpty(ID, '/later');
    expect(record.links(['/home', '/opt'])).toEqual(new Map([['/home', null]]));
    expect(await record.root('/tmp')).toEqual({ kind: 'empty' });
    expect(await record.root('/testbed')).toEqual({ kind: 'large' });
    const archived = await record.root('/workspace');
    expect(await text((archived as { archive: Readable }).archive)).toBe('tar');
    expect(await record.root('/later')).toBeNull();
    expect(await (await survey.record(ID)).root('/later')).toEqual({ kind: 'empty' });
  });

  it('a recorder whose file cannot be written settles keep() and drop() (was: drop waited forever for a close already past)', async () => {
    const broken = new ArchiveRecorder(join(dir, 'no-such-dir', '.x.tmp'), join(dir, 'no-such-dir', 'root.tar'));
    broken.write(Buffer.from('bytes'));
    await broken.drop();
    const broken2 = new ArchiveRecorder(join(dir, 'no-such-dir', '.y.tmp'), join(dir, 'no-such-dir', 'root.tar'));
    broken2.write(Buffer.from('bytes'));
    await broken2.keep();
    expect(await readdir(dir)).toEqual([]);
  });

  it('changes made at once all land (one image, one process): none is lost to another read-modify-write', async () => {
    await Promise.all([
      survey.recordEmpty(ID, '/a'),
      survey.recordEmpty(ID, '/b'),
      survey.recordLarge(ID, '/c'),
      survey.recordLinks(ID, new Map([['/home', null]])),
    ]);
    const record = await survey.record(ID);
    expect(record.links(['/home'])).toEqual(new Map([['/home', null]]));
    expect(await Promise.all(['/a', '/b', '/c'].map((p) => record.root(p)))).toEqual([
      { kind: 'empty' },
      { kind: 'empty' },
      { kind: 'large' },
    ]);
  });

  it('an empty archive file (a crash between create and write) reads as not recorded', async () => {
    const recorder = await recorderOf(ID, '/workspace');
    await recorder.keep();
    expect(await (await survey.record(ID)).root('/workspace')).toBeNull();
  });

  it('sweep removes temporary files over an hour old of images still present, and keeps newer ones', async () => {
    await survey.recordEmpty(ID, '/tmp');
    const imageDir = join(dir, ID.replace(':', '-'));
    await writeFile(join(imageDir, '.old.tmp'), 'x');
    await writeFile(join(imageDir, '.new.tmp'), 'x');
    const twoHoursAgo = new Date(Date.now() - 2 * 3600_000);
    await utimes(join(imageDir, '.old.tmp'), twoHoursAgo, twoHoursAgo);
    expect(await survey.sweep(async () => true)).toBe(0);
    expect((await readdir(imageDir)).sort()).toEqual(['.new.tmp', 'facts.json']);
  });
});
