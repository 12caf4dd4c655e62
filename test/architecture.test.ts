/**
 * The floor plan, checked mechanically (no Docker or Redis needed):
 * (a) no import cycle among the TypeScript modules of control-plane/, sandbox-agent/,
 *     contract/, cli/ and sdk/;
 * (b) no `.ts` file in control-plane/ or sandbox-agent/ over MAX_LINES lines;
 * (c) every folder with a README.md lists each of its direct entries in it.
 *
 * (a) walks the imports itself rather than using madge or dependency-cruiser: every import in
 * these folders is a static specifier (relative ones end in `.js` and name a `.ts` file beside
 * it), so a regular expression over `import`/`export … from` and `import('…')` finds every
 * edge exactly, with no dependency tree to install. It counts `import type` too: a cycle
 * through types alone is still two modules that cannot be understood apart. Import boundaries
 * between the parts (which package each adapter owns) are contract/import-boundaries.test.ts.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = new URL('..', import.meta.url).pathname;
/** Files as git sees them: tracked, or new and not ignored (so node_modules/ and dist/ are out). */
const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard'], { cwd: root, encoding: 'utf8' })
  .split('\n')
  .filter((f) => f !== '' && existsSync(join(root, f)));

/** The longest a `.ts` file of control-plane/ or sandbox-agent/ may be, lines. */
const MAX_LINES = 400;

const SPECIFIERS = [
  /^\s*(?:import|export)\b[^'"`;]*?\bfrom\s*['"]([^'"]+)['"]/gm,
  /^\s*import\s*['"]([^'"]+)['"]/gm,
  /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g,
];

/** The modules `file` imports among `known`: relative specifiers, `.js` resolved to the `.ts` source. */
function importsOf(file: string, known: ReadonlySet<string>): string[] {
  const text = readFileSync(join(root, file), 'utf8');
  const targets = new Set<string>();
  for (const pattern of SPECIFIERS) {
    for (const match of text.matchAll(pattern)) {
      const spec = match[1]!;
      if (!spec.startsWith('.')) continue;
      const target = normalize(join(dirname(file), spec)).replace(/\.js$/, '.ts');
      if (known.has(target)) targets.add(target);
    }
  }
  return [...targets];
}

/** Strongly connected components with more than one module (or a module importing itself): Tarjan's algorithm. */
function cycles(graph: ReadonlyMap<string, string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  let next = 0;
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next += 1;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(component.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

describe('architecture', () => {
  it('(a) no import cycle in control-plane/, sandbox-agent/, contract/, cli/, sdk/ (type imports count)', () => {
    const modules = files.filter((f) => /^(control-plane|sandbox-agent|contract|cli|sdk)\/.*\.ts$/.test(f));
    const known = new Set(modules);
    const graph = new Map(modules.map((m) => [m, importsOf(m, known)]));
    expect(graph.size).toBeGreaterThan(100);
    expect(cycles(graph)).toEqual([]);
  });

  it("(a) config.ts imports no domain: only schema files (a setting is parsed with its domain's schema), which import only schemas", () => {
    const known = new Set(files.filter((f) => f.endsWith('.ts')));
    const reached = new Set<string>();
    const walk = (file: string): void => {
      for (const target of importsOf(file, known)) {
        if (reached.has(target)) continue;
        reached.add(target);
        walk(target);
      }
    };
    walk('control-plane/config.ts');
    expect([...reached].filter((f) => f.startsWith('control-plane/') && !f.endsWith('/schema.ts'))).toEqual([]);
  });

  it(`(b) no .ts file in control-plane/ or sandbox-agent/ is over ${MAX_LINES} lines`, () => {
    const long = files
      .filter((f) => /^(control-plane|sandbox-agent)\/.*\.ts$/.test(f))
      .map((f) => ({ file: f, lines: readFileSync(join(root, f), 'utf8').split('\n').length - 1 }))
      .filter(({ lines }) => lines > MAX_LINES);
    expect(long).toEqual([]);
  });

  /**
   * The rule: in every folder that has a README.md, each direct entry (file or folder, as git
   * sees them; hidden entries and the README itself aside) appears in that README inside
   * backticks, as `name` or `name/`, or as the first part of a path (`name/…`) relative to
   * the folder or to the repository root (`folder/name/…`). A test file
   * `x.test.ts` counts as listed when its subject `x.ts` is: tests sit beside their code.
   */
  it('(c) every folder with a README lists each of its direct entries in it', () => {
    const readmes = files.filter((f) => f === 'README.md' || f.endsWith('/README.md'));
    const missing: string[] = [];
    for (const readme of readmes) {
      const dir = dirname(readme) === '.' ? '' : `${dirname(readme)}/`;
      const entries = new Set(files.filter((f) => f.startsWith(dir)).map((f) => f.slice(dir.length).split('/')[0]!));
      const text = readFileSync(join(root, readme), 'utf8');
      const spans = [...text.matchAll(/`([^`\n]+)`/g)].map((m) => m[1]!.trim().replace(/^\.\//, ''));
      const quoted = new Set(spans.map((span) => (dir !== '' && span.startsWith(dir) ? span.slice(dir.length) : span).split('/')[0]!));
      for (const entry of entries) {
        if (entry === 'README.md' || entry.startsWith('.')) continue;
        const subject = entry.replace(/\.test\.ts$/, '.ts');
        if (!quoted.has(entry) && !quoted.has(subject)) missing.push(`${readme}: ${entry}`);
      }
    }
    expect(missing).toEqual([]);
  });
});
