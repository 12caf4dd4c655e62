/**
 * Secret redaction: every occurrence of a lease's secret value in what leaves the sandbox
 * (output events, results, spooled artifacts, file-tool data) is replaced by
 * `[REDACTED:<name>]`, also when the value arrives split across output chunks.
 *
 * Rules, the same for streams and one-shot text:
 * - Every occurrence of every value is covered, overlapping ones included, so no byte of a
 *   value survives next to a marker.
 * - Occurrences are taken leftmost first and, at the same start, longest first: a value that
 *   contains another is reported under its own name (`[REDACTED:LONG]`, not `LONG`'s pieces).
 * - Where an occurrence overlaps the covered run before it, it adds a marker only if it is of
 *   another secret (`aaaa` with value `aa` is one marker; `ab`+`bc` over `abc` is two); one
 *   that just touches the run (`abab` with `ab`) adds its own marker.
 * - Every other byte passes through unchanged, binary included.
 *
 * A stream holds back only bytes that may begin a value not yet complete: the longest suffix
 * of what it has seen that is a proper prefix of some value (at most maxLen-1 bytes), plus the
 * bytes of a run already replaced that a following occurrence may still overlap (also within
 * the last maxLen-1 bytes). `end()` releases the rest.
 */

/** A secret value to redact and the name its marker shows. */
export interface RedactionSecret {
  name: string;
  value: Buffer;
}

interface Pattern {
  name: string;
  value: Buffer;
  marker: Buffer;
}

interface Occurrence {
  start: number;
  end: number;
  pattern: Pattern;
}

/** The `[REDACTED:<name>]` text a value of secret `name` is replaced with. */
export function redactionMarker(name: string): string {
  return `[REDACTED:${name}]`;
}

/** The compiled set of one lease's secret values; makes stream redactors and redacts whole values. */
export class Redaction {
  private readonly patterns: Pattern[];
  private readonly firstBytes: Uint8Array;
  /** Length of the longest value, bytes (0 when there is nothing to redact). */
  readonly maxLength: number;

  /**
   * Empty values are ignored (they cannot leak anything). When two secrets have the same value,
   * the marker names the one whose name sorts first.
   */
  constructor(secrets: Iterable<RedactionSecret>) {
    const byValue = new Map<string, Pattern>();
    for (const s of [...secrets].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      const key = s.value.toString('latin1');
      if (s.value.length === 0 || byValue.has(key)) continue;
      byValue.set(key, { name: s.name, value: Buffer.from(s.value), marker: Buffer.from(redactionMarker(s.name), 'utf8') });
    }
    this.patterns = [...byValue.values()];
    this.maxLength = Math.max(0, ...this.patterns.map((p) => p.value.length));
    this.firstBytes = new Uint8Array(256);
    for (const p of this.patterns) this.firstBytes[p.value[0]!] = 1;
  }

  /** True when there is at least one value to redact. */
  get active(): boolean {
    return this.patterns.length > 0;
  }

  /** A redactor for one byte stream (e.g. one call's stdout). */
  stream(): StreamRedactor {
    return new StreamRedactor(this);
  }

  /** `data` with every value replaced. */
  redactBytes(data: Buffer): Buffer {
    if (!this.active) return data;
    const r = this.stream();
    return Buffer.concat([r.push(data), r.end()]);
  }

  /** `text` (as UTF-8) with every value replaced; the same string when nothing matched. */
  redactText(text: string): string {
    if (!this.active) return text;
    const bytes = Buffer.from(text, 'utf8');
    if (!this.patterns.some((p) => bytes.includes(p.value))) return text;
    return this.redactBytes(bytes).toString('utf8');
  }

  /** A copy of a JSON-like value (objects, arrays, strings, numbers...) with every string redacted. */
  redactDeep<T>(value: T): T {
    if (!this.active) return value;
    const walk = (v: unknown): unknown => {
      if (typeof v === 'string') return this.redactText(v);
      if (Array.isArray(v)) return v.map(walk);
      if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
      return v;
    };
    return walk(value) as T;
  }

  /** Every occurrence in `buf` starting before `before`, leftmost first, longest first at one start. */
  occurrences(buf: Buffer, before: number): Occurrence[] {
    const found: Occurrence[] = [];
    for (const pattern of this.patterns) {
      for (let i = buf.indexOf(pattern.value); i !== -1 && i < before; i = buf.indexOf(pattern.value, i + 1)) {
        found.push({ start: i, end: i + pattern.value.length, pattern });
      }
    }
    return found.sort((a, b) => a.start - b.start || b.end - a.end);
  }

  /**
   * The first position from which the end of `buf` is a proper prefix of some value (an
   * occurrence that more bytes may complete), or `buf.length` when there is none.
   */
  pendingFrom(buf: Buffer): number {
    for (let p = Math.max(0, buf.length - this.maxLength + 1); p < buf.length; p += 1) {
      if (this.firstBytes[buf[p]!] === 0) continue;
      const rest = buf.length - p;
      for (const { value } of this.patterns) {
        if (value.length > rest && buf.compare(value, 0, rest, p, buf.length) === 0) return p;
      }
    }
    return buf.length;
  }
}

/**
 * Redacts one byte stream fed in chunks: `push` returns what may leave now, `end` the rest.
 * Concatenating every return value gives exactly the one-shot `Redaction.redactBytes` of the
 * whole stream, wherever the chunks were split.
 */
export class StreamRedactor {
  /** Bytes seen but not yet released. */
  private held: Buffer = Buffer.alloc(0);
  /** How many bytes at the start of `held` are already replaced by a marker (a run a later occurrence may overlap). */
  private coveredHeld = 0;
  /** Name of the last marker emitted (an overlapping occurrence of the same secret adds none). */
  private lastName: string | null = null;

  constructor(private readonly redaction: Redaction) {}

  /** Bytes pushed but not yet released (at most the longest value's length minus one). */
  get heldBytes(): number {
    return this.held.length;
  }

  /** Feeds the next bytes of the stream; returns the redacted bytes that may leave now (maybe empty). */
  push(chunk: Buffer): Buffer {
    if (!this.redaction.active) return chunk;
    if (chunk.length === 0) return chunk;
    this.held = this.held.length === 0 ? chunk : Buffer.concat([this.held, chunk]);
    return this.release(this.redaction.pendingFrom(this.held));
  }

  /** The stream ended: returns every byte still held, redacted. The redactor is then fresh. */
  end(): Buffer {
    if (!this.redaction.active) return Buffer.alloc(0);
    const out = this.release(this.held.length);
    this.held = Buffer.alloc(0);
    this.coveredHeld = 0;
    this.lastName = null;
    return out;
  }

  /**
   * Emits `held[0, upTo)` redacted. Occurrences starting before `upTo` are final (a longer
   * value starting there would have made its start pending); bytes from `upTo` on stay held.
   */
  private release(upTo: number): Buffer {
    const buf = this.held;
    const out: Buffer[] = [];
    let done = this.coveredHeld;
    for (const { start, end, pattern } of this.redaction.occurrences(buf, upTo)) {
      if (end <= done) continue;
      if (start > done) out.push(buf.subarray(done, start));
      if (start >= done || pattern.name !== this.lastName) {
        out.push(pattern.marker);
        this.lastName = pattern.name;
      }
      done = end;
    }
    if (done < upTo) {
      out.push(buf.subarray(done, upTo));
      done = upTo;
    }
    // A run replaced past `upTo` stays held with the bytes after it: a later occurrence may overlap it.
    this.coveredHeld = done - upTo;
    this.held = Buffer.from(buf.subarray(upTo));
    return out.length === 1 ? out[0]! : Buffer.concat(out);
  }
}
