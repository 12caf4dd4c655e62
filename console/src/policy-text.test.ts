import { describe, expect, it } from 'vitest';
import { locateIssues, parsePolicyText, policyDiff, policyToText } from './policy-text.js';

const YAML = `description: test
filesystem:
  writableRoots:
    - path: /workspace
      sizeBytes: 1048576
    - { path: /tmp, sizeBytes: 5 }
resources:
  cpus: 999
  gpus: 1
`;

describe('policy editor text', () => {
  it('shows a policy as YAML without name and version, and reads it back', () => {
    const text = policyToText({ name: 'p', version: 3, description: 'd', resources: { cpus: 2 } });
    expect(text).not.toMatch(/^(name|version):/m);
    expect(parsePolicyText(text)).toEqual({ ok: true, value: { description: 'd', resources: { cpus: 2 } } });
  });

  it('reads JSON text as well', () => {
    expect(parsePolicyText('{"resources": {"cpus": 2}}')).toEqual({ ok: true, value: { resources: { cpus: 2 } } });
  });

  it('reports a syntax error and a duplicate key at their lines', () => {
    const bad = parsePolicyText('resources:\n  cpus: 2\n  cpus: [1\n');
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(bad.issue.line).toBeGreaterThanOrEqual(3);
    const duplicate = parsePolicyText('a: 1\nb: 2\na: 3\n');
    expect(duplicate).toMatchObject({ ok: false, issue: { line: 3, exact: true } });
  });

  it('places a field, an unknown field and a sequence item at the line they are written on', () => {
    const located = locateIssues(YAML, [
      { path: 'resources.cpus', message: 'too big' },
      { path: 'resources.gpus', message: 'unknown field' },
      { path: 'filesystem.writableRoots.1.sizeBytes', message: 'too small' },
      { path: 'filesystem.writableRoots.0.path', message: 'x' },
    ]);
    expect(located.map((i) => [i.line, i.exact])).toEqual([
      [8, true],
      [9, true],
      [6, true],
      [4, true],
    ]);
  });

  it('places a missing field at its nearest written parent, inexactly; a missing top-level field and the document itself nowhere', () => {
    const located = locateIssues(YAML, [
      { path: 'resources.memoryBytes', message: 'required' },
      { path: 'runtime', message: 'required' },
      { path: '', message: 'expected object' },
    ]);
    expect(located.map((i) => [i.line, i.exact])).toEqual([
      [7, false],
      [null, false],
      [null, false],
    ]);
  });

  it('locates paths in JSON text too', () => {
    const json = '{\n  "resources": {\n    "cpus": 999\n  }\n}\n';
    expect(locateIssues(json, [{ path: 'resources.cpus', message: 'too big' }])[0]).toMatchObject({ line: 3, exact: true });
  });

  it('diffs two policies as the editor shows them: hunks of added and removed lines with their line numbers and context', () => {
    const before = { name: 'p', version: 1, network: { mode: 'allowlist', allow: [{ host: 'a.test', ports: [443] }] }, tools: { x: 1 } };
    const after = {
      name: 'p',
      version: 2,
      network: {
        mode: 'allowlist',
        allow: [
          { host: 'a.test', ports: [443, 8443] },
          { host: 'b.test', ports: [80] },
        ],
      },
      tools: { x: 1 },
    };
    const hunks = policyDiff(before, after, 1);
    expect(hunks).toHaveLength(1);
    const changed = hunks[0]!.filter((l) => l.kind !== ' ');
    expect(changed).toEqual([
      { kind: '+', text: '        - 8443', line: 7 },
      { kind: '+', text: '    - host: b.test', line: 8 },
      { kind: '+', text: '      ports:', line: 9 },
      { kind: '+', text: '        - 80', line: 10 },
    ]);
    expect(hunks[0]![0]).toEqual({ kind: ' ', text: '        - 443', line: 6 });
    // A kept line after the additions is numbered where it is in the new text.
    expect(hunks[0]!.at(-1)).toEqual({ kind: ' ', text: 'tools:', line: 11 });
    expect(policyDiff(before, { ...before, version: 9 })).toEqual([]);
  });
});
