/**
 * The console's only way of making DOM: elements with attributes, listeners and children, where
 * every string becomes a text node. Nothing is ever parsed as HTML, so no value the API returns
 * (a label, a policy description, an audit detail) can turn into markup or script.
 */

/** What `h` accepts as a child: nodes as they are, strings and numbers as text, the rest skipped. */
export type Child = Node | string | number | null | undefined | false;

/** Attributes (`true` sets an empty one, `false`/undefined leaves it out) and `on<event>` listeners. */
export type Props = Record<string, string | number | boolean | undefined | ((event: Event) => void)>;

/** An element `tag` with `props` and `children`. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, props: Props = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (typeof value === 'function') el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, '');
    else if (value !== false && value !== undefined) el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

/** Appends `children` to `parent` (as `h` does). */
export function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces everything in `parent` with `children`. */
export function replace(parent: Node, ...children: Child[]): void {
  while (parent.firstChild) parent.removeChild(parent.firstChild);
  append(parent, children);
}

/** A timestamp as `YYYY-MM-DD HH:MM:SS` in UTC: the same on every admin's screen and in the logs. */
export function formatTime(iso: string): string {
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)}`;
}

/** Seconds as `1h 02m`, `4m 05s` or `12s`; `expired` at or below zero. */
export function formatDuration(seconds: number): string {
  if (seconds <= 0) return 'expired';
  const s = Math.floor(seconds);
  const pad = (n: number): string => String(n).padStart(2, '0');
  if (s >= 3600) return `${Math.floor(s / 3600)}h ${pad(Math.floor((s % 3600) / 60))}m`;
  if (s >= 60) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  return `${s}s`;
}

/** Bytes in binary units (`512 B`, `1.5 KiB`, `2.0 GiB`). */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/** `sha256:0123456789ab…` → `0123456789ab`: enough to tell versions apart at a glance. */
export function shortDigest(digest: string | null): string {
  return digest === null ? '—' : digest.replace(/^sha256:/, '').slice(0, 12);
}
