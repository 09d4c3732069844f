/**
 * A map bounded by its entry count that evicts the oldest setting first, in constant time.
 *
 * Why not a Map alone (`map.delete(map.keys().next().value)`): JavaScriptCore's Map leaves a hole
 * for each deleted entry until it rehashes, and a new iterator walks every hole at the front, so
 * evicting the oldest of 10,000 entries cost about 26 µs (against 1 µs here); on one busy key the
 * settled-ids memory alone took a tenth of the gateway's CPU (bench/RESULTS.md, the cost ledger).
 */
export class FifoMap<K, V> {
  readonly #entries = new Map<K, { value: V; seq: number }>();
  /** Settings in order, oldest at #head; one whose entry was set again or deleted since is stale. */
  #queue: { key: K; seq: number }[] = [];
  #head = 0;
  #seq = 0;

  constructor(readonly sizeMax: number) {
    if (!Number.isInteger(sizeMax) || sizeMax < 1) throw new RangeError(`sizeMax must be an integer >= 1 (got ${sizeMax})`);
  }

  get size(): number {
    return this.#entries.size;
  }

  get(key: K): V | undefined {
    return this.#entries.get(key)?.value;
  }

  has(key: K): boolean {
    return this.#entries.has(key);
  }

  /** Sets `key` as the newest entry, evicting the oldest ones beyond sizeMax. */
  set(key: K, value: V): void {
    const seq = ++this.#seq;
    this.#entries.set(key, { value, seq });
    this.#queue.push({ key, seq });
    while (this.#entries.size > this.sizeMax) this.#evictOldest();
    // Stale settings (a key set again, or deleted) are dropped once they are most of the queue.
    if (this.#queue.length - this.#head > 2 * this.sizeMax) this.#compact();
  }

  delete(key: K): boolean {
    return this.#entries.delete(key);
  }

  clear(): void {
    this.#entries.clear();
    this.#queue = [];
    this.#head = 0;
  }

  #evictOldest(): void {
    for (;;) {
      const oldest = this.#queue[this.#head++]!;
      if (this.#entries.get(oldest.key)?.seq === oldest.seq) {
        this.#entries.delete(oldest.key);
        break;
      }
    }
    if (this.#head > this.sizeMax) this.#compact();
  }

  /** Keeps only the live settings, oldest first: linear, and run at most once per sizeMax settings. */
  #compact(): void {
    this.#queue = this.#queue.slice(this.#head).filter((s) => this.#entries.get(s.key)?.seq === s.seq);
    this.#head = 0;
  }
}
