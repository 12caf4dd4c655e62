import { machine, release } from 'node:os';
import { describe, expect, it } from 'vitest';
import type { ImageFacts } from '../../contract/objects.js';
import { AgentConfig } from '../../contract/queue.js';
import { measureFacts, parseOsRelease } from './facts.js';

describe('parseOsRelease', () => {
  it('reads KEY=value lines with and without quotes (os-release(5))', () => {
    expect(parseOsRelease('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n# comment\n')).toEqual({
      PRETTY_NAME: 'Debian GNU/Linux 12 (bookworm)',
      ID: 'debian',
      VERSION_ID: '12',
    });
  });
});

describe('measureFacts with kept image facts', () => {
  it("reports the kept image facts instead of probing, and the sandbox's own parts as measured here", async () => {
    const kept: ImageFacts = {
      os: { id: 'kept', name: 'Kept OS', version: '1' },
      toolchain: { node: 'v0.0.0-kept', npm: null, git: 'git version 0.0.0-kept', python: null, pip: null },
      libc: { family: 'musl', version: '0.0.0' },
      programs: { rg: null },
    };
    const toolUser = { name: 'user', uid: process.getuid!(), gid: process.getgid!(), home: '/tmp' };
    const config = AgentConfig.parse({
      leaseId: 'sbx_factstest',
      rootPrefix: 'x:',
      redis: { path: '/nonexistent', username: 'u', password: 'p' },
      toolUser,
      workdir: '/workspace',
      imageEnv: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
      env: {},
      spool: { dir: '/tmp', maxArtifactBytes: 1, maxTotalBytes: 1 },
      files: { roots: ['/tmp'], maxFileBytes: 1 },
      secrets: { grants: [], deliveryKey: null },
      imageFacts: kept,
    });
    const facts = await measureFacts(config);
    expect(facts).toMatchObject({ ...kept, arch: machine(), kernel: release(), user: toolUser, workdir: '/workspace' });
    expect(facts.shell?.path).toMatch(/^\/bin\/(ba)?sh$/);
  });
});
