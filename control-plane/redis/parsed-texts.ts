/**
 * Records kept in Redis as JSON text, parsed once per distinct text: a read whose text is the
 * one parsed last for its key gets the earlier result. Validating a record with its schema costs
 * far more than reading it (a lease record with its policy snapshot: 0.3–1 ms of CPU, on every
 * transition and sandbox request; issue 14), and the text decides the result, so the text is
 * the cache's only test of freshness: whatever wrote the key, a changed text is parsed anew.
 */

/** `value` with every object in it frozen: a result shared between readers must not change under them. */
function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

export class ParsedTexts<T> {
  private readonly entries = new Map<string, { text: string; value: T }>();

  /**
   * `parse`: text → record (throws what the schema throws); `maxKeys`: how many keys are kept,
   * the one parsed or written longest ago dropped first.
   */
  constructor(
    private readonly parse: (text: string) => T,
    private readonly maxKeys: number,
  ) {}

  /** The record of `key` stored as `text`, deep-frozen: parsed unless `text` is the last one seen for `key`. */
  read(key: string, text: string): T {
    const hit = this.entries.get(key);
    if (hit?.text === text) return hit.value;
    return this.remember(key, text, this.parse(text));
  }

  /**
   * Records that `key` now holds `text`, whose parse is `value` (a record this process wrote,
   * so the next read of that text needs no parse). `value` must be what `parse(text)` returns;
   * it is deep-frozen and returned.
   */
  remember(key: string, text: string, value: T): T {
    deepFreeze(value);
    // Re-inserted: a key whose text changed counts as the newest.
    this.entries.delete(key);
    this.entries.set(key, { text, value });
    if (this.entries.size > this.maxKeys) this.entries.delete(this.entries.keys().next().value!);
    return value;
  }
}
