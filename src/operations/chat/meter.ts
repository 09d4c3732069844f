/**
 * The live meter of one stream: counts output tokens as chunks arrive and keeps the request's
 * hold ahead of them.
 *
 *   count:  the upstream's running usage when a chunk carries it (vLLM's continuous usage);
 *           otherwise an upper bound: the exact js-tiktoken count of a delivered prefix plus the
 *           UTF-8 bytes delivered since (byte-level BPE never makes more tokens than bytes). The
 *           text since the last count is counted off the event loop every METER_RECOUNT_BYTES,
 *           keeping the bound tight in O(bytes) overall; billing counts the whole text once.
 *   cover:  before a chunk is delivered, its upper bound must fit what the hold covers; if not,
 *           the bound is made exact, then the hold is extended (steps doubling from the first
 *           step to METER_STEP_TOKENS_MAX, halved down to METER_STEP_TOKENS_MIN when refused).
 *           When no step is granted, the chunk is withheld: the stream is cut there.
 *   ahead:  once the room left is under half a step, the next extension starts in the
 *           background, so a stream with money rarely waits for one.
 *
 *   report: every usage figure the upstream sends (a chunk's running count, a translated wire's
 *           usage event, hidden reasoning included) replaces the count, and the hold is extended
 *           to cover it; reasoning the hold cannot cover leaves the next delivery uncovered, so
 *           the stream is cut there, and settlement charges what the wallet has.
 *
 * The hold is the request's admission (src/admission): the meter reads what it covers from it
 * and keeps no copy of the reserve.
 *
 * Invariant: delivered tokens (by the exact count, or by the upstream's own) ≤ covered tokens.
 */
import { countTokens } from "../../tokens/count.ts";

/** Largest extension, in output tokens. */
export const METER_STEP_TOKENS_MAX = 1_024;
/** Smallest extension tried before the stream is cut, in output tokens. */
export const METER_STEP_TOKENS_MIN = 16;
/** Bytes delivered past the last exact count that trigger a recount in the background. */
export const METER_RECOUNT_BYTES = 512;

/** The request's hold, as the meter sees it. */
export interface MeterHold {
  /** Output tokens the hold covers now (all choices). */
  readonly coveredOutputUnits: number;
  /** Grows the hold by this many output tokens (coveredOutputUnits follows); false when refused. */
  extend(addUnits: number): Promise<boolean>;
}

export interface MeterOptions {
  hold: MeterHold;
  /** The most the stream may produce (all choices): the upstream was told as much. */
  capTokens: number;
  /**
   * False for a stream whose client set max_tokens: the upstream was told the same budget and
   * bounds itself (by its own tokenizer, which may count differently), so nothing is withheld.
   */
  enforce?: boolean;
  /** The exact count (js-tiktoken on its thread); replaceable in tests. */
  count?: (text: string) => Promise<number>;
}

const utf8Bytes = (text: string) => Buffer.byteLength(text, "utf8");

export class StreamMeter {
  /** Everything delivered to the client, in order. */
  delivered = "";
  private exactTokens = 0;
  private exactLength = 0;
  private pendingBytes = 0;
  /** The upstream's running count at the last delivered chunk, when it reports one. */
  private reportedTokens: number | null = null;
  private step: number;
  private extending: Promise<boolean> | null = null;
  private recounting = false;
  private whole: { length: number; tokens: number } | null = null;
  private refused = false;
  private readonly count: (text: string) => Promise<number>;

  constructor(private readonly options: MeterOptions) {
    this.step = Math.max(METER_STEP_TOKENS_MIN, Math.min(METER_STEP_TOKENS_MAX, options.hold.coveredOutputUnits));
    this.count = options.count ?? countTokens;
  }

  /** Output tokens the hold covers now. */
  get covered(): number {
    return this.options.hold.coveredOutputUnits;
  }

  /** Delivered output tokens: an upper bound (exact() gives the count). */
  get tokens(): number {
    return this.reportedTokens ?? this.exactTokens + this.pendingBytes;
  }

  /** What delivering `text` would bring the count to (an upper bound unless the upstream reported it), and its bytes. */
  private bound(text: string, reported: number | undefined): { reported: number | undefined; need: number; bytes: number } {
    const bytes = utf8Bytes(text);
    // A chunk without a running count after chunks with one: bound it by its bytes.
    if (reported === undefined && this.reportedTokens !== null) reported = this.reportedTokens + bytes;
    return { reported, need: reported ?? this.exactTokens + this.pendingBytes + bytes, bytes };
  }

  /**
   * deliver() when the hold already covers `text`: records it and returns true without waiting
   * (the usual chunk); false, recording nothing, when deliver() must make room first.
   */
  deliverNow(text: string, reported?: number): boolean {
    const b = this.bound(text, reported);
    if (b.need > this.covered && this.options.enforce !== false) return false;
    this.record(text, b.reported, null, b.bytes);
    return true;
  }

  /**
   * Makes room for `text` (with the upstream's running count after it, when reported) and records
   * it as delivered; false when the hold cannot cover it (then nothing is recorded).
   */
  async deliver(text: string, reported?: number): Promise<boolean> {
    if (this.deliverNow(text, reported)) return true;
    const b = this.bound(text, reported);
    let need = b.need;
    let exactAll: number | null = null;
    while (need > this.covered && this.options.enforce !== false) {
      if (b.reported === undefined && exactAll === null) {
        // Only the part past the last count: a sum of counts of pieces is never below the count
        // of the whole in practice (a split only loses merges), so the bound stays a bound.
        exactAll = this.exactTokens + (await this.count(this.delivered.slice(this.exactLength) + text));
        need = exactAll;
        continue;
      }
      if (!(await this.extendOnce())) return false;
    }
    this.record(text, b.reported, exactAll, b.bytes);
    return true;
  }

  private record(text: string, reported: number | undefined, exactAll: number | null, bytes: number): void {
    this.delivered += text;
    if (reported !== undefined) this.reportedTokens = reported;
    else if (exactAll !== null) {
      this.exactTokens = exactAll;
      this.exactLength = this.delivered.length;
      this.pendingBytes = 0;
    } else this.pendingBytes += bytes;
    this.recountAhead();
    this.extendAhead();
  }

  /**
   * The upstream's own running count of output tokens (hidden reasoning included), from a usage
   * figure that came without text to deliver. It replaces the count, and the hold is extended to
   * cover it while the wallet allows; false when it could not be covered.
   */
  async report(outputTokens: number): Promise<boolean> {
    this.reportedTokens = outputTokens;
    while (this.tokens > this.covered && this.options.enforce !== false) {
      if (!(await this.extendOnce())) return false;
    }
    this.extendAhead();
    return true;
  }

  /** Waits for an extension in flight, so that the request settles after it. */
  async idle(): Promise<void> {
    await this.extending?.catch(() => false);
  }

  /** The exact count of everything delivered (the upstream's when it reported one). */
  async exact(): Promise<number> {
    if (this.reportedTokens !== null) return this.reportedTokens;
    if (this.whole?.length !== this.delivered.length) {
      // The whole text, once: never more than the sum of the pieces the hold was checked against.
      this.whole = { length: this.delivered.length, tokens: await this.count(this.delivered) };
    }
    return this.whole.tokens;
  }

  private recountAhead(): void {
    // Not enforcing: nothing is decided on the live count, the whole text is counted once at the end.
    if (this.recounting || this.pendingBytes < METER_RECOUNT_BYTES || this.reportedTokens !== null || this.options.enforce === false)
      return;
    this.recounting = true;
    const from = this.exactLength;
    const length = this.delivered.length;
    const piece = this.delivered.slice(from, length);
    this.count(piece).then(
      (tokens) => {
        this.recounting = false;
        if (this.exactLength !== from) return; // an exact count at the edge overtook this one
        this.pendingBytes = Math.max(0, this.pendingBytes - utf8Bytes(piece));
        this.exactTokens += tokens;
        this.exactLength = length;
      },
      () => (this.recounting = false),
    );
  }

  private extendAhead(): void {
    if (this.extending || this.refused || this.options.enforce === false) return;
    if (this.covered - this.tokens >= this.step / 2 || this.covered >= this.options.capTokens) return;
    void this.extendOnce();
  }

  /** One extension (or joins the one in flight); false once the hold can grow no more. */
  private extendOnce(): Promise<boolean> {
    if (this.extending) return this.extending;
    if (this.refused) return Promise.resolve(false);
    this.extending = (async () => {
      let step = Math.min(this.step, this.options.capTokens - this.covered);
      while (step > 0) {
        if (await this.options.hold.extend(step)) {
          this.step = Math.min(METER_STEP_TOKENS_MAX, this.step * 2);
          return true;
        }
        if (step <= METER_STEP_TOKENS_MIN) break;
        step = Math.max(METER_STEP_TOKENS_MIN, Math.floor(step / 2));
      }
      this.refused = true;
      return false;
    })().finally(() => (this.extending = null));
    return this.extending;
  }
}
