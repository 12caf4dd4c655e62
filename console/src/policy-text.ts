/**
 * The policy editor's text: a policy shown as YAML, read back from YAML or JSON (JSON is YAML),
 * and the API's issue paths (`resources.cpus`, `filesystem.writableRoots.0.path`) located at
 * the line of the text where that field is written. Pure: no DOM, unit-tested.
 */
import { structuredPatch } from 'diff';
import { isMap, isScalar, isSeq, LineCounter, parseDocument, stringify, type Node as YamlNode } from 'yaml';

/** One problem of a policy document, as `400 policy.invalid` lists it. */
export interface PolicyIssue {
  path: string;
  message: string;
}

/**
 * An issue placed in the text: `line` (1-based) is where the field at `path` is written, or,
 * when that field is absent, where its nearest written parent is (`exact` false); null when not
 * even the first segment is written (or the path is the document itself).
 */
export interface LocatedIssue extends PolicyIssue {
  line: number | null;
  exact: boolean;
}

/** The result of reading the editor's text: the document, or the first syntax error and its line. */
export type ParsedPolicyText = { ok: true; value: unknown } | { ok: false; issue: LocatedIssue };

/**
 * A policy document as editor text: YAML, without `name` and `version` — the name is the page's
 * and the version is the server's to assign (the console sends the next one as a compare-and-swap).
 */
export function policyToText(policy: Record<string, unknown>): string {
  const { name: _name, version: _version, ...rest } = policy;
  return stringify(rest, { lineWidth: 0 });
}

/** One line of a policy diff: kept (`' '`), removed (`'-'`) or added (`'+'`), with its line in the new text (removed: the old). */
export interface DiffLine {
  kind: ' ' | '-' | '+';
  text: string;
  line: number;
}

/**
 * The change from policy `before` to `after` as the editor shows them (policyToText): hunks of
 * changed lines with `contextLines` unchanged lines around them (jsdiff's `structuredPatch`).
 * Empty when the two read the same.
 */
export function policyDiff(before: Record<string, unknown>, after: Record<string, unknown>, contextLines = 3): DiffLine[][] {
  const patch = structuredPatch('before', 'after', policyToText(before), policyToText(after), '', '', { context: contextLines });
  return patch.hunks.map((hunk) => {
    let oldLine = hunk.oldStart;
    let newLine = hunk.newStart;
    return hunk.lines
      .filter((l) => !l.startsWith('\\'))
      .map((l): DiffLine => {
        const kind = l[0] as DiffLine['kind'];
        // Kept lines are numbered as in the new text (where they will be), removed ones as in the old.
        const line = kind === '-' ? oldLine++ : kind === '+' ? newLine++ : (oldLine++, newLine++);
        return { kind, text: l.slice(1), line };
      });
  });
}

/** Reads editor text (YAML or JSON). A syntax error or a duplicate key is reported at its line. */
export function parsePolicyText(text: string): ParsedPolicyText {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: true });
  const error = doc.errors[0];
  if (error) {
    const line = error.linePos?.[0]?.line ?? null;
    return { ok: false, issue: { path: '', message: error.message.split('\n')[0] ?? error.message, line, exact: line !== null } };
  }
  return { ok: true, value: doc.toJS() };
}

/**
 * Places each of `issues` at a line of `text`. A path is followed through the document: a
 * mapping key by name (the key's own line, so an unknown field is marked where it is written),
 * a sequence item by index (the item's first line). Text that does not parse locates nothing.
 */
export function locateIssues(text: string, issues: readonly PolicyIssue[]): LocatedIssue[] {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter });
  const lineOf = (offset: number): number => lineCounter.linePos(offset).line;
  return issues.map((issue) => {
    if (doc.errors.length > 0 || issue.path === '') return { ...issue, line: null, exact: false };
    let node: unknown = doc.contents;
    let line: number | null = null;
    let exact = true;
    for (const segment of issue.path.split('.')) {
      const next = step(node, segment);
      if (!next) {
        exact = false;
        break;
      }
      line = lineOf(next.offset);
      node = next.node;
    }
    return { ...issue, line, exact: exact && line !== null };
  });
}

/** One step along a path: the child of `node` at `segment` and the offset where it is written. */
function step(node: unknown, segment: string): { node: unknown; offset: number } | undefined {
  if (isMap(node)) {
    const pair = node.items.find((p) => isScalar(p.key) && String(p.key.value) === segment);
    const keyRange = pair && isScalar(pair.key) ? pair.key.range : undefined;
    return pair && keyRange ? { node: pair.value, offset: keyRange[0] } : undefined;
  }
  if (isSeq(node) && /^\d+$/.test(segment)) {
    const item = node.items[Number(segment)] as YamlNode | undefined;
    return item?.range ? { node: item, offset: item.range[0] } : undefined;
  }
  return undefined;
}
