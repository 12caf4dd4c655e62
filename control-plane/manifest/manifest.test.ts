import { describe, expect, it } from 'vitest';
import type { SandboxFacts } from '../../contract/objects.js';
import { buildManifest, manifestDigest } from './manifest.js';

const facts: SandboxFacts = {
  os: { id: 'debian', name: 'Debian GNU/Linux 12 (bookworm)', version: '12' },
  arch: 'x86_64',
  kernel: '6.1.0',
  toolchain: { node: 'v20.20.2', git: 'git version 2.39.5', python: 'Python 3.11.2' },
  user: { name: 'sandbox', uid: 1000, gid: 1000, home: '/home/sandbox' },
  workdir: '/workspace',
  agentVersion: '0.1.0',
};
const input = {
  facts,
  image: { ref: 'sbx-sandbox:latest', id: 'sha256:abc' },
  engineVersion: '20.10',
  ociRuntime: 'runc',
  policy: { name: 'default', version: 1, digest: `sha256:${'0'.repeat(64)}` },
  network: { mode: 'none' as const, allowlistDigest: null },
  env: { B: 'secret-value', A: '1' },
  secretRefs: [],
  createdAt: new Date('2026-11-30T10:00:00.000Z'),
};

describe('EnvironmentManifest', () => {
  it('is content-addressed: the digest is the canonical hash of the other fields, whatever the env order', () => {
    const a = buildManifest(input);
    const b = buildManifest({ ...input, env: { A: '1', B: 'secret-value' } });
    expect(a.digest).toBe(b.digest);
    expect(manifestDigest(a)).toBe(a.digest);
    expect(manifestDigest({ ...a, kernel: 'other' })).not.toBe(a.digest);
  });

  it('holds env names and a digest, never env values', () => {
    const m = buildManifest(input);
    expect(m.env.keys).toEqual(['A', 'B']);
    expect(JSON.stringify(m)).not.toContain('secret-value');
    expect(buildManifest({ ...input, env: { A: '1', B: 'other' } }).env.digest).not.toBe(m.env.digest);
  });

  it('reads a manifest stored before the network field existed as mode none (the only mode then)', async () => {
    const { EnvironmentManifest } = await import('../../contract/objects.js');
    const { network: _network, ...older } = buildManifest(input);
    expect(EnvironmentManifest.parse(older).network).toEqual({ mode: 'none', allowlistDigest: null });
  });

  it('records the network mode and allowlist digest, so two allowlists give two manifests', () => {
    const a = buildManifest({ ...input, network: { mode: 'allowlist', allowlistDigest: `sha256:${'a'.repeat(64)}` } });
    const b = buildManifest({ ...input, network: { mode: 'allowlist', allowlistDigest: `sha256:${'b'.repeat(64)}` } });
    expect(a.network.mode).toBe('allowlist');
    expect(a.digest).not.toBe(b.digest);
  });
});
