/**
 * o200k_base token counting in time linear in the text's bytes, whatever the text: an exact
 * count, or, past its time, the proven bounds `lower` and `upper` (its UTF-8 bytes).
 *
 * In full, with the reasoning: docs/internals.md#counting-tokens-in-linear-time.
 */

/** The longest o200k_base token, in bytes: no token covers more, so tokens ≥ bytes ÷ 128. */
export const O200K_TOKEN_BYTES_MAX = 128;
/** Longest pre-token counted whole; longer ones are cut (see `upper`). Bounds the merge arrays. */
export const PIECE_BYTES_MAX = 64 * 1024;
/** Tokens added to the upper bound per cut inside a pre-token. */
export const CUT_MARGIN_TOKENS = 1;
/** Pair ranks remembered between counts; cleared when full. */
const PAIR_CACHE_ENTRIES_MAX = 1 << 20;
/** Short pre-tokens (words, mostly) whose counts are remembered between counts, and how short. */
const SHORT_PRE_TOKENS_MAX = 1 << 16;
const SHORT_PRE_TOKEN_CHARS_MAX = 16;
/** Characters whose longest in-run token is remembered, and run pieces whose count is. */
const RUN_CACHE_ENTRIES_MAX = 4_096;
const NO_RANK = -1;

export interface TokenCount {
  /** Exact, or the sum over cut pieces when a pre-token exceeded PIECE_BYTES_MAX. */
  tokens: number;
  /** Proven: the true count is at least this. */
  lower: number;
  /** The true count is at most this (see the module comment for cuts). */
  upper: number;
  /** Bytes that went through the merge (the work done). */
  bytesCounted: number;
}

/** A long pre-token being counted piece by piece. */
interface LongPreToken {
  bytes: Buffer;
  /** The next piece starts here. */
  at: number;
  cuts: number;
}

export interface CountLimits {
  /** Merge work allowed over all the texts; the rest is bounded by its bytes. */
  bytesMax: number;
  /**
   * The caller only needs to know whether the texts have more tokens than this: once the proven
   * lower bound (counted tokens plus unread bytes ÷ 128) exceeds it, counting stops.
   */
  lowerEnough?: number;
}

/** A count in progress over several texts (see TokenCounter.step). */
export interface CountJob {
  texts: string[];
  bytesMax: number;
  lowerEnough: number;
  /** UTF-8 bytes of the pre-tokens read so far, and of all the texts (when lowerEnough is set). */
  bytesSeen: number;
  bytesTotal: number;
  counts: TokenCount[];
  /** The text being counted, and the UTF-16 index its next pre-token starts at. */
  text: number;
  from: number;
  long: LongPreToken | null;
  bytesCounted: number;
}

export interface Ranks {
  pat_str: string;
  bpe_ranks: string;
}

/** Latin-1 string of bytes: one char per byte, so byte sequences can key a Map. */
function latin1(bytes: Uint8Array, from: number, to: number): string {
  return String.fromCharCode.apply(null, bytes.subarray(from, to) as unknown as number[]);
}

/** A binary min-heap of numbers (rank × 2^24 + position), in one growable array. */
class MinHeap {
  items = new Float64Array(1024);
  size = 0;
  push(value: number): void {
    if (this.size === this.items.length) {
      const grown = new Float64Array(this.items.length * 2);
      grown.set(this.items);
      this.items = grown;
    }
    let i = this.size++;
    const a = this.items;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (a[parent]! <= value) break;
      a[i] = a[parent]!;
      i = parent;
    }
    a[i] = value;
  }
  pop(): number {
    const a = this.items;
    const top = a[0]!;
    const last = a[--this.size]!;
    let i = 0;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= this.size) break;
      if (child + 1 < this.size && a[child + 1]! < a[child]!) child++;
      if (a[child]! >= last) break;
      a[i] = a[child]!;
      i = child;
    }
    a[i] = last;
    return top;
  }
}

const POSITION_SPAN = 2 ** 24; // > PIECE_BYTES_MAX

export class TokenCounter {
  private readonly ranks = new Map<string, number>();
  private readonly tokenBytes: Uint8Array[] = [];
  private readonly pairs = new Map<number, number>();
  private readonly runLongest = new Map<string, number>();
  private readonly shortPreTokens = new Map<string, { tokens: number; bytes: number }>();
  /** Tokens of a run piece ("<chars>:<char>"), so a repeated attack costs its scan only. */
  private readonly runPieces = new Map<string, number>();
  private readonly pattern: RegExp;
  private readonly encoder = new TextEncoder();
  /** The longest token in the vocabulary, in bytes (128 for o200k_base). */
  readonly tokenBytesMax: number;
  private readonly pieceBytesMax: number;
  // Merge state for one piece, allocated once at the largest size.
  private readonly bytes = new Uint8Array(PIECE_BYTES_MAX + 4);
  private readonly rank = new Int32Array(PIECE_BYTES_MAX + 4);
  private readonly next = new Int32Array(PIECE_BYTES_MAX + 4);
  private readonly prev = new Int32Array(PIECE_BYTES_MAX + 4);
  private readonly heap = new MinHeap();
  private readonly byteRank = new Int32Array(256);

  /** `pieceBytesMax` below PIECE_BYTES_MAX only to test cuts on small texts. */
  constructor(source: Ranks, options: { pieceBytesMax?: number } = {}) {
    this.pieceBytesMax = Math.min(options.pieceBytesMax ?? PIECE_BYTES_MAX, PIECE_BYTES_MAX);
    this.pattern = new RegExp(source.pat_str, "gu");
    let longest = 0;
    for (const line of source.bpe_ranks.split("\n")) {
      if (!line) continue;
      const [, offsetText, ...tokens] = line.split(" ");
      const offset = Number.parseInt(offsetText!, 10);
      tokens.forEach((token, i) => {
        const bytes = Buffer.from(token, "base64");
        this.ranks.set(bytes.toString("latin1"), offset + i);
        this.tokenBytes[offset + i] = new Uint8Array(bytes);
        longest = Math.max(longest, bytes.length);
      });
    }
    this.tokenBytesMax = longest;
    for (let b = 0; b < 256; b++) this.byteRank[b] = this.ranks.get(String.fromCharCode(b))!;
  }

  /** Counts `text`, merging at most `bytesMax` bytes (the rest is bounded, not counted). */
  count(text: string, bytesMax = Number.POSITIVE_INFINITY): TokenCount {
    const job = this.start([text], { bytesMax });
    while (!this.step(job, Number.POSITIVE_INFINITY));
    return job.counts[0]!;
  }

  /** A count of several texts that `step` advances (see CountLimits). */
  start(texts: string[], limits: CountLimits): CountJob {
    const bytesTotal = limits.lowerEnough === undefined ? 0 : texts.reduce((sum, t) => sum + Buffer.byteLength(t, "utf8"), 0);
    return {
      texts,
      bytesMax: limits.bytesMax,
      lowerEnough: limits.lowerEnough ?? Number.POSITIVE_INFINITY,
      counts: texts.map(() => ({ tokens: 0, lower: 0, upper: 0, bytesCounted: 0 })),
      text: 0,
      from: 0,
      long: null,
      bytesCounted: 0,
      bytesSeen: 0,
      bytesTotal,
    };
  }

  /**
   * Advances `job` by about `sliceBytes` bytes of merge work (one pre-token or piece more at most,
   * itself bounded by PIECE_BYTES_MAX); true when every text is counted. Resuming continues the
   * pre-token regex where it stopped, so slicing never changes a count.
   */
  step(job: CountJob, sliceBytes: number): boolean {
    const pauseAt = job.bytesCounted + sliceBytes;
    while (job.text < job.texts.length) {
      if (job.bytesCounted < job.bytesMax && job.bytesCounted >= pauseAt) {
        if (!this.provenAbove(job)) return false;
        job.bytesMax = job.bytesCounted; // enough is known: the rest is bounded, not counted
      }
      const text = job.texts[job.text]!;
      const result = job.counts[job.text]!;
      if (job.long) {
        this.continueLong(job, result, Math.min(pauseAt, job.bytesMax));
        if (job.long && job.bytesCounted >= job.bytesMax) {
          this.boundLongRest(job.long, result);
          job.long = null;
        }
        continue;
      }
      if (job.bytesCounted >= job.bytesMax) {
        this.boundRest(text.slice(job.from), result);
        this.nextText(job);
        continue;
      }
      this.pattern.lastIndex = job.from;
      const match = this.pattern.exec(text);
      if (match === null) {
        this.nextText(job);
        continue;
      }
      job.from = match.index + match[0].length;
      const before = result.bytesCounted;
      this.countPreToken(match[0], job, result);
      job.bytesCounted += result.bytesCounted - before;
    }
    return true;
  }

  /** Whether the job's proven lower bound, its unread bytes ÷ 128 included, exceeds lowerEnough. */
  private provenAbove(job: CountJob): boolean {
    if (job.lowerEnough === Number.POSITIVE_INFINITY) return false;
    let lower = Math.floor((job.bytesTotal - job.bytesSeen) / this.tokenBytesMax);
    for (let i = 0; i <= job.text && i < job.counts.length; i++) lower += job.counts[i]!.lower;
    return lower > job.lowerEnough;
  }

  private nextText(job: CountJob): void {
    job.text++;
    job.from = 0;
  }

  /** Text left unscanned once the work cap is reached: bounded by its bytes alone. */
  private boundRest(rest: string, result: TokenCount): void {
    const bytes = Buffer.byteLength(rest, "utf8");
    result.upper += bytes;
    result.tokens += bytes;
    result.lower += Math.floor(bytes / this.tokenBytesMax);
  }

  private countPreToken(piece: string, job: CountJob, result: TokenCount): void {
    const known = piece.length <= SHORT_PRE_TOKEN_CHARS_MAX ? this.shortPreTokens.get(piece) : undefined;
    if (known !== undefined) {
      job.bytesSeen += known.bytes;
      return this.add(known.tokens, known.bytes, result);
    }
    if (isAscii(piece)) {
      if (piece.length <= this.pieceBytesMax) {
        job.bytesSeen += piece.length;
        return this.addExact(piece, piece, piece.length, result);
      }
    } else if (piece.length * 3 <= this.pieceBytesMax) {
      const n = this.encoder.encodeInto(piece, this.bytes).written;
      job.bytesSeen += n;
      return this.addExact(piece, latin1(this.bytes, 0, n), n, result);
    }
    // Longer than a piece: cut, and bounded below by the longest token that fits inside it.
    const repeated = repeatedChar(piece);
    if (repeated !== null) return this.countRun(repeated, piece.length / repeated.length, job, result);
    const bytes = Buffer.from(piece, "utf8");
    job.bytesSeen += bytes.length;
    result.lower += Math.ceil(bytes.length / this.tokenBytesMax);
    job.long = { bytes, at: 0, cuts: -1 };
  }

  /**
   * A long run of one character: its pieces are all alike but the last, so two merges count it
   * whatever its length (the same pieces and count as cutting it piece by piece).
   */
  private countRun(char: string, length: number, job: CountJob, result: TokenCount): void {
    const unitBytes = Buffer.byteLength(char, "utf8");
    const perPiece = Math.max(1, Math.floor(this.pieceBytesMax / unitBytes));
    const full = Math.floor(length / perPiece);
    const restChars = length - full * perPiece;
    job.bytesSeen += length * unitBytes;
    result.lower += Math.ceil((length * unitBytes) / this.longestInRun(char));
    const pieceTokens = (chars: number) => {
      if (chars === 0) return 0;
      const known = this.runPieces.get(`${chars}:${char}`);
      if (known !== undefined) return known;
      const key = Buffer.from(char.repeat(chars), "utf8").toString("latin1");
      result.bytesCounted += key.length;
      const tokens = this.ranks.has(key) ? 1 : this.mergeCount(key, key.length);
      if (this.runPieces.size >= RUN_CACHE_ENTRIES_MAX) this.runPieces.clear();
      this.runPieces.set(`${chars}:${char}`, tokens);
      return tokens;
    };
    const tokens = full * pieceTokens(full > 0 ? perPiece : 0) + pieceTokens(restChars);
    const cuts = full + (restChars > 0 ? 1 : 0) - 1;
    result.tokens += tokens;
    result.upper += tokens + Math.max(0, cuts) * CUT_MARGIN_TOKENS;
  }

  /** A pre-token that fits one piece: exact. */
  private addExact(piece: string, key: string, n: number, result: TokenCount): void {
    const whole = this.ranks.get(key);
    const tokens = whole === undefined ? this.mergeCount(key, n) : 1;
    if (piece.length <= SHORT_PRE_TOKEN_CHARS_MAX) {
      if (this.shortPreTokens.size >= SHORT_PRE_TOKENS_MAX) this.shortPreTokens.clear();
      this.shortPreTokens.set(piece, { tokens, bytes: n });
    }
    this.add(tokens, n, result);
  }

  private add(tokens: number, n: number, result: TokenCount): void {
    result.tokens += tokens;
    result.lower += tokens;
    result.upper += tokens;
    result.bytesCounted += n;
  }

  /** Counts pieces of a long pre-token until it ends or the work reaches `workMax`. */
  private continueLong(job: CountJob, result: TokenCount, workMax: number): void {
    const long = job.long!;
    const { bytes } = long;
    while (long.at < bytes.length) {
      let to = Math.min(bytes.length, long.at + this.pieceBytesMax);
      while (to < bytes.length && (bytes[to]! & 0xc0) === 0x80) to--; // cut between characters
      if (job.bytesCounted >= workMax) return;
      const key = bytes.toString("latin1", long.at, to);
      const tokens = this.ranks.has(key) ? 1 : this.mergeCount(key, to - long.at);
      result.bytesCounted += to - long.at;
      job.bytesCounted += to - long.at;
      result.tokens += tokens;
      result.upper += tokens;
      long.cuts++;
      long.at = to;
    }
    result.upper += Math.max(0, long.cuts) * CUT_MARGIN_TOKENS;
    job.long = null;
  }

  /** The rest of a long pre-token when the work cap stopped its count: its bytes bound it. */
  private boundLongRest(long: LongPreToken, result: TokenCount): void {
    const rest = long.bytes.length - long.at;
    result.upper += rest + Math.max(0, long.cuts + 1) * CUT_MARGIN_TOKENS;
    result.tokens += rest;
  }

  /**
   * The longest token that can occur inside a run of `char`: tokens whose bytes follow the
   * char's bytes periodically from some offset. Scans the vocabulary once per character.
   */
  private longestInRun(char: string): number {
    const known = this.runLongest.get(char);
    if (known !== undefined) return known;
    const unit = this.encoder.encode(char);
    let longest = 1;
    for (const token of this.tokenBytes) {
      if (!token || token.length <= longest) continue;
      for (let offset = 0; offset < unit.length; offset++) {
        let fits = true;
        for (let i = 0; i < token.length && fits; i++) fits = token[i] === unit[(i + offset) % unit.length];
        if (fits) {
          longest = token.length;
          break;
        }
      }
    }
    if (this.runLongest.size >= RUN_CACHE_ENTRIES_MAX) this.runLongest.clear();
    this.runLongest.set(char, longest);
    return longest;
  }

  /** The rank of two adjacent parts merged, or NO_RANK; parts are always tokens. */
  private pairRank(left: number, leftRank: number, right: number, rightEnd: number): number {
    const rightRank = this.rank[right]!;
    const key = leftRank * 2 ** 18 + rightRank;
    const cached = this.pairs.get(key);
    if (cached !== undefined) return cached;
    const merged = this.ranks.get(latin1(this.bytes, left, rightEnd)) ?? NO_RANK;
    if (this.pairs.size >= PAIR_CACHE_ENTRIES_MAX) this.pairs.clear();
    this.pairs.set(key, merged);
    return merged;
  }

  /**
   * BPE over one piece (a latin-1 key of n bytes), lowest rank first and leftmost on ties, as
   * js-tiktoken does, with a heap of candidate pairs. Returns the number of parts left.
   */
  private mergeCount(key: string, n: number): number {
    const { bytes, rank, next, prev, heap } = this;
    for (let i = 0; i < n; i++) {
      bytes[i] = key.charCodeAt(i);
      rank[i] = this.byteRank[bytes[i]!]!;
      next[i] = i + 1;
      prev[i] = i - 1;
    }
    const end = (i: number) => next[i]!; // a part spans [i, next[i])
    heap.size = 0;
    for (let i = 0; i + 1 < n; i++) {
      const r = this.pairRank(i, rank[i]!, i + 1, end(i + 1));
      if (r !== NO_RANK) heap.push(r * POSITION_SPAN + i);
    }
    let parts = n;
    while (heap.size > 0) {
      const top = heap.pop();
      const r = Math.floor(top / POSITION_SPAN);
      const i = top - r * POSITION_SPAN;
      if (rank[i]! < 0) continue; // absorbed into a part to its left
      const j = next[i]!;
      if (j >= n || this.pairRank(i, rank[i]!, j, end(j)) !== r) continue; // stale
      rank[i] = r;
      next[i] = next[j]!;
      rank[j] = -1;
      if (next[i]! < n) prev[next[i]!] = i;
      parts--;
      if (prev[i]! >= 0) {
        const p = prev[i]!;
        const pr = this.pairRank(p, rank[p]!, i, end(i));
        if (pr !== NO_RANK) heap.push(pr * POSITION_SPAN + p);
      }
      if (next[i]! < n) {
        const k = next[i]!;
        const nr = this.pairRank(i, rank[i]!, k, end(k));
        if (nr !== NO_RANK) heap.push(nr * POSITION_SPAN + i);
      }
    }
    return parts;
  }
}

function isAscii(text: string): boolean {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) > 0x7f) return false;
  return true;
}

/** The one character `text` repeats, or null (a surrogate pair counts as one character). */
function repeatedChar(text: string): string | null {
  const first = String.fromCodePoint(text.codePointAt(0)!);
  const step = first.length;
  if (text.length % step !== 0) return null;
  for (let i = step; i < text.length; i += step) {
    if (text.charCodeAt(i) !== first.charCodeAt(0) || (step === 2 && text.charCodeAt(i + 1) !== first.charCodeAt(1))) return null;
  }
  return first;
}
