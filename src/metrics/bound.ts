/**
 * Counters and histograms whose series are bound once per label set and written out at scrape
 * time. prom-client joins and looks up a request's labels on every increment (6–8 per request,
 * ~7 µs); a bound series is a plain object the request path adds to, so the labels are looked up
 * once, when the series is first bound, and the request path does no string work at all.
 *
 * Only for label sets that are closed (operations, catalog models, configured backends, statuses):
 * a family holds at most SERIES_MAX series, and binds past that to one more whose labels are all
 * OVERFLOW_LABEL, so a label that is somehow open costs memory once, not per value.
 */

/** Series of one family at most; past it, new label sets share the overflow series. */
export const SERIES_MAX = 4_096;
/** Every label's value in the overflow series. */
export const OVERFLOW_LABEL = "other";

/** One counter series: add to `value`. */
export interface CounterCell {
  value: number;
}

/** One histogram series: counts per bucket (not cumulative), sum and count. */
export interface HistogramCell {
  readonly counts: number[];
  sum: number;
  count: number;
}

interface Family<L extends string, C> {
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly L[];
  readonly series: Map<string, { labels: Record<L, string>; cell: C }>;
}

function keyOf<L extends string>(labelNames: readonly L[], labels: Record<L, string>): string {
  return labelNames.map((n) => labels[n]).join("\u0000");
}

function bindIn<L extends string, C>(family: Family<L, C>, labels: Record<L, string>, create: () => C): C {
  const found = family.series.get(keyOf(family.labelNames, labels));
  if (found) return found.cell;
  const full = family.series.size >= SERIES_MAX;
  const bound = full ? (Object.fromEntries(family.labelNames.map((n) => [n, OVERFLOW_LABEL])) as Record<L, string>) : { ...labels };
  const key = keyOf(family.labelNames, bound);
  let entry = family.series.get(key);
  if (!entry) {
    entry = { labels: bound, cell: create() };
    family.series.set(key, entry);
  }
  return entry.cell;
}

function header(name: string, help: string, type: "counter" | "histogram"): string {
  return `# HELP ${name} ${escapeText(help)}\n# TYPE ${name} ${type}\n`;
}

function labelText(labels: Record<string, string>, extra?: string): string {
  const parts = Object.entries(labels).map(([n, v]) => `${n}="${escapeText(v).replace(/"/g, '\\"')}"`);
  if (extra) parts.push(extra);
  return parts.length ? `{${parts.join(",")}}` : "";
}

function escapeText(text: string): string {
  return text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

/**
 * A counter family of bound series.
 * @example const c = new BoundCounter("x_total", "Xs.", ["model"]); c.bind({ model: "m" }).value += 1;
 */
export class BoundCounter<L extends string> implements Family<L, CounterCell> {
  readonly series = new Map<string, { labels: Record<L, string>; cell: CounterCell }>();
  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly L[],
  ) {}

  bind(labels: Record<L, string>): CounterCell {
    return bindIn(this, labels, () => ({ value: 0 }));
  }

  /** The family in Prometheus' text format; a series never added to is left out. */
  exposition(): string {
    let text = header(this.name, this.help, "counter");
    for (const { labels, cell } of this.series.values()) {
      if (cell.value > 0) text += `${this.name}${labelText(labels)} ${cell.value}\n`;
    }
    return text;
  }
}

/**
 * A histogram family of bound series over fixed upper bounds (seconds, ascending).
 * @example const h = new BoundHistogram("t_seconds", "T.", ["model"], [0.1, 1]); observe(h.bind({ model: "m" }), h.bounds, 0.3);
 */
export class BoundHistogram<L extends string> implements Family<L, HistogramCell> {
  readonly series = new Map<string, { labels: Record<L, string>; cell: HistogramCell }>();
  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly L[],
    readonly bounds: readonly number[],
  ) {}

  bind(labels: Record<L, string>): HistogramCell {
    // One count per bound and one past the last (+Inf).
    return bindIn(this, labels, () => ({ counts: new Array<number>(this.bounds.length + 1).fill(0), sum: 0, count: 0 }));
  }

  observe(cell: HistogramCell, value: number): void {
    let i = 0;
    while (i < this.bounds.length && value > this.bounds[i]!) i++;
    cell.counts[i]!++;
    cell.sum += value;
    cell.count++;
  }

  /** The family in Prometheus' text format (cumulative buckets, then sum and count); an unused series is left out. */
  exposition(): string {
    let text = header(this.name, this.help, "histogram");
    for (const { labels, cell } of this.series.values()) {
      if (cell.count === 0) continue;
      let cumulative = 0;
      for (let i = 0; i <= this.bounds.length; i++) {
        cumulative += cell.counts[i]!;
        const le = i < this.bounds.length ? String(this.bounds[i]) : "+Inf";
        text += `${this.name}_bucket${labelText(labels, `le="${le}"`)} ${cumulative}\n`;
      }
      text += `${this.name}_sum${labelText(labels)} ${cell.sum}\n`;
      text += `${this.name}_count${labelText(labels)} ${cell.count}\n`;
    }
    return text;
  }
}
