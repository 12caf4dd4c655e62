/**
 * Image facts measured once per image (issue 14): the first agent of an image probes it, the
 * control plane keeps the image's part of those facts, and the next agent of the same image,
 * tool user and agent runtime reports them without probing.
 */
import { describe, expect, it } from 'vitest';
import type { ImageFacts } from '../contract/objects.js';
import { Handshake } from '../control-plane/agent-link/handshake.js';
import { useHarness } from './fixtures/index.js';

const h = useHarness();

describe('image facts', () => {
  it("the first lease of an image keeps what its agent measured, and a later lease's agent reports the kept facts", async () => {
    const handshake = new Handshake(h.redis, h.config.redisPrefix, { sendBinding: async () => undefined });
    const first = await h.client.createSandbox();
    try {
      const m = first.manifest!;
      const scope = { agentRuntimeDir: h.config.agentRuntimeDir, imageId: m.image.id, toolUser: m.user };
      expect(await handshake.knownImageFacts(scope)).toEqual({ os: m.os, toolchain: m.toolchain, libc: m.libc, programs: m.programs });
      // Facts no probe of this image could print: a later agent that probed would report the real ones.
      const marked: ImageFacts = { os: m.os, toolchain: { ...m.toolchain, node: 'v0.0.0-kept' }, libc: m.libc, programs: m.programs };
      await handshake.keepImageFacts(scope, { ...m, ...marked });
      const second = await h.client.createSandbox();
      try {
        expect(second.manifest!.toolchain.node).toBe('v0.0.0-kept');
        expect(second.manifest!.user).toEqual(m.user);
      } finally {
        await h.client.releaseSandbox(second.id);
      }
    } finally {
      await h.client.releaseSandbox(first.id);
    }
  });
});
