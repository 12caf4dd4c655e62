import { createHash, randomBytes } from 'node:crypto';
import { spawn } from 'node-pty';
import { describe, expect, it } from 'vitest';
import { PtyInput } from './pty-input.js';

/** node-pty's master fd (a getter its typings leave out). */
const fdOf = (pty: unknown): number => (pty as { fd: number }).fd;

describe('PtyInput', () => {
  it('writes every byte in order to a program that reads them', async () => {
    const pty = spawn('/bin/sh', ['-c', 'stty raw -echo; echo READY; head -c 300000 | sha256sum'], { cols: 80, rows: 24, encoding: null });
    let out = '';
    pty.onData((d: string | Buffer) => (out += d.toString()));
    const exited = new Promise<void>((resolve) => pty.onExit(() => resolve()));
    const input = new PtyInput(fdOf(pty), 1024 * 1024);
    const data = randomBytes(300_000);
    // After the stty: bytes before it would meet a canonical-mode terminal.
    await expect.poll(() => out).toContain('READY');
    for (let at = 0; at < data.length; at += 7000) input.write(data.subarray(at, at + 7000));
    await exited;
    expect(out).toContain(createHash('sha256').update(data).digest('hex'));
    expect(input.droppedBytes).toBe(0);
  });

  it('holds at most its bound for a program that does not read, drops and counts the rest', async () => {
    const pty = spawn('/bin/sh', ['-c', 'exec sleep 30'], { cols: 80, rows: 24, encoding: null });
    const input = new PtyInput(fdOf(pty), 1024 * 1024);
    for (let i = 0; i < 8; i += 1) input.write(Buffer.alloc(1024 * 1024, 0x61));
    // The kernel takes a few KiB; everything past the bound is dropped.
    expect(input.droppedBytes).toBeGreaterThan(6 * 1024 * 1024);
    input.close();
    pty.kill('SIGKILL');
  });
});
