/**
 * Credential injection (policy `secrets.inject`, issue 16 part 1), the pure half: a lease's
 * placeholders, and putting secret values in their place in one intercepted request. No
 * sockets, no TLS (intercept.ts does that), no clock.
 *
 * The sandbox holds a placeholder where a credential goes; the egress proxy replaces it with
 * the value only where a rule for the request's host says (a header, a query parameter, a JSON
 * or form body). A placeholder anywhere else in the request head is left as it is and reported
 * (`stray`), so the proxy can log the attempt.
 */
import { createHmac, hkdfSync } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';
import { hostPatternMatches, type InjectRule } from './schema.js';

/** Every placeholder starts with this; then 40 lower-case hex digits. */
export const PLACEHOLDER_PREFIX = 'sbxph_';

/** The key placeholders are derived under, from the secrets key (HKDF-SHA256), so no other key material is kept. */
export function placeholderKey(secretsKey: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', secretsKey, Buffer.alloc(0), 'sbx credential placeholders', 32));
}

/**
 * The placeholder of `secret` in lease `leaseId`: `sbxph_` and the first 40 hex digits of
 * HMAC-SHA256(key, leaseId NUL secret). Unique per lease and secret, not guessable without the
 * key, the same after a control-plane restart; only unreserved URL characters, so it passes
 * unchanged through headers, query strings, JSON and form encoding.
 */
export function placeholderOf(key: Buffer, leaseId: string, secret: string): string {
  return PLACEHOLDER_PREFIX + createHmac('sha256', key).update(`${leaseId}\0${secret}`).digest('hex').slice(0, 40);
}

/** One rule of a lease, with its secret's placeholder and value. */
export interface Injection {
  rule: InjectRule;
  placeholder: string;
  value: string;
}

/** How many values of each secret went into a request (names only). */
export type InjectedCounts = Map<string, number>;

/** A request head after injection. */
export interface InjectedHead {
  /** The request target (path and query). */
  path: string;
  /** Raw header pairs `[name, value, name, value, ...]`. */
  headers: string[];
  injected: InjectedCounts;
  /** Secrets whose placeholder appeared where no rule for this host puts its value (left unreplaced). */
  stray: string[];
}

/** The lease's injections whose rule names `host`. */
export function injectionsFor(host: string, injections: readonly Injection[]): Injection[] {
  // As the allowlist compares names: lower case, a trailing dot dropped.
  const name = host.toLowerCase().replace(/\.$/, '');
  return injections.filter((i) => i.rule.hosts.some((pattern) => hostPatternMatches(pattern, name)));
}

const add = (counts: InjectedCounts, secret: string, n: number): void => {
  if (n > 0) counts.set(secret, (counts.get(secret) ?? 0) + n);
};

/** `text` with every `placeholder` replaced by `value`, and how many there were. */
function replaceAll(text: string, placeholder: string, value: string): [string, number] {
  const parts = text.split(placeholder);
  return [parts.join(value), parts.length - 1];
}

/**
 * Puts values into a request head: `applicable` are the injections for the request's host
 * (injectionsFor), `all` every injection of the lease (for stray placeholders). A header rule
 * replaces the placeholder in header `name` — also inside `Basic` credentials (base64 of
 * `user:password`, as git and `curl -u` send them) — and adds `name: template` when the request
 * has no such header and the rule has a template. A query rule replaces it in the value of
 * parameter `name` (the value percent-encoded).
 */
export function injectHead(
  path: string,
  rawHeaders: readonly string[],
  applicable: readonly Injection[],
  all: readonly Injection[],
): InjectedHead {
  const injected: InjectedCounts = new Map();
  const headers = [...rawHeaders];
  let target = path;
  for (const { rule, placeholder, value } of applicable) {
    if (rule.in === 'header') {
      const name = rule.name!.toLowerCase();
      let present = false;
      for (let i = 0; i + 1 < headers.length; i += 2) {
        if (headers[i]!.toLowerCase() !== name) continue;
        present = true;
        const [replaced, n] = replaceAll(headers[i + 1]!, placeholder, value);
        headers[i + 1] = n > 0 ? replaced : inBasicCredentials(headers[i + 1]!, placeholder, value, injected, rule.secret);
        add(injected, rule.secret, n);
      }
      if (!present && rule.template !== undefined) {
        headers.push(rule.name!, rule.template.split('{value}').join(value));
        add(injected, rule.secret, 1);
      }
    } else if (rule.in === 'query') {
      target = injectQuery(target, rule.name!, placeholder, value, (n) => add(injected, rule.secret, n));
    }
  }
  // What is left of any placeholder in the head went somewhere no rule names.
  const head = `${target}\n${headers.join('\n')}`;
  const stray = all.filter((i) => head.includes(i.placeholder)).map((i) => i.rule.secret);
  return { path: target, headers, injected, stray: [...new Set(stray)] };
}

/** `Basic <base64(user:password)>` with the placeholder replaced inside, or `header` as it was. */
function inBasicCredentials(header: string, placeholder: string, value: string, injected: InjectedCounts, secret: string): string {
  const m = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header);
  if (!m) return header;
  const [replaced, n] = replaceAll(Buffer.from(m[1]!, 'base64').toString('utf8'), placeholder, value);
  if (n === 0) return header;
  add(injected, secret, n);
  return `Basic ${Buffer.from(replaced, 'utf8').toString('base64')}`;
}

/** `path` with the placeholder in the value(s) of query parameter `name` replaced by the percent-encoded value. */
function injectQuery(path: string, name: string, placeholder: string, value: string, count: (n: number) => void): string {
  const q = path.indexOf('?');
  if (q < 0) return path;
  const params = path
    .slice(q + 1)
    .split('&')
    .map((pair) => {
      const eq = pair.indexOf('=');
      if (eq < 0 || safeDecode(pair.slice(0, eq)) !== name) return pair;
      const [replaced, n] = replaceAll(pair.slice(eq + 1), placeholder, encodeURIComponent(value));
      count(n);
      return `${pair.slice(0, eq + 1)}${replaced}`;
    });
  return `${path.slice(0, q + 1)}${params.join('&')}`;
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text.replace(/\+/g, ' '));
  } catch {
    return text;
  }
}

/**
 * A stream that replaces the placeholders of `applicable` body rules in a request body of
 * `contentType`, or null when none applies: JSON (`application/json`, `+json`) gets the value
 * escaped for a JSON string, a form (`application/x-www-form-urlencoded`) gets it
 * percent-encoded; other bodies pass untouched. Holds at most one chunk and the longest
 * placeholder's length in memory, whatever the body's size. `onInjected(secret)` is called per
 * replacement.
 */
export function bodyInjector(
  contentType: string | undefined,
  applicable: readonly Injection[],
  onInjected: (secret: string) => void,
): Transform | null {
  const type = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  const json = type === 'application/json' || type.endsWith('+json');
  const form = type === 'application/x-www-form-urlencoded';
  const rules = applicable.filter((i) => i.rule.in === 'body');
  if ((!json && !form) || rules.length === 0) return null;
  const swaps = rules.map((i) => ({
    secret: i.rule.secret,
    from: Buffer.from(i.placeholder),
    to: Buffer.from(json ? JSON.stringify(i.value).slice(1, -1) : encodeURIComponent(i.value)),
  }));
  return new PlaceholderSwap(swaps, onInjected);
}

/** One placeholder of a body and the bytes that replace it. */
interface Swap {
  secret: string;
  from: Buffer;
  to: Buffer;
}

/** The streaming replacement of bodyInjector: a carry of one placeholder's length less one byte between chunks. */
class PlaceholderSwap extends Transform {
  private carry: Buffer = Buffer.alloc(0);
  private readonly keep: number;

  constructor(
    private readonly swaps: readonly Swap[],
    private readonly onInjected: (secret: string) => void,
  ) {
    super();
    this.keep = Math.max(...swaps.map((s) => s.from.length)) - 1;
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    const buf = this.carry.length === 0 ? chunk : Buffer.concat([this.carry, chunk]);
    const out: Buffer[] = [];
    let pos = 0;
    for (;;) {
      let next: { at: number; swap: Swap } | null = null;
      for (const swap of this.swaps) {
        const at = buf.indexOf(swap.from, pos);
        if (at >= 0 && (next === null || at < next.at)) next = { at, swap };
      }
      if (next === null) break;
      out.push(buf.subarray(pos, next.at), next.swap.to);
      this.onInjected(next.swap.secret);
      pos = next.at + next.swap.from.length;
    }
    // The tail may hold the start of a placeholder that the next chunk completes.
    const hold = Math.max(pos, buf.length - this.keep);
    out.push(buf.subarray(pos, hold));
    this.carry = Buffer.from(buf.subarray(hold));
    done(null, Buffer.concat(out));
  }

  override _flush(done: TransformCallback): void {
    done(null, this.carry);
  }
}
