/**
 * What the simulator served, request by request: the independent truth billing tests compare the
 * gateway's ledger against. An entry is written once, when its request ends (completed, failed,
 * aborted by the client, or ended by `stop()`), and before the last byte of a successful reply
 * is sent, so a caller that has read the whole reply can rely on finding it.
 */

export type SimFinishReason = "stop" | "length" | "error" | "aborted" | "stalled";

export type SimLogEntry = {
  /** Arrival order, 1-based; also the number in the reply id `chatcmpl-sim-<seq>`. */
  readonly seq: number;
  /** The caller's `x-request-id` header, or null. */
  readonly requestId: string | null;
  readonly model: string;
  /** The route served, for the vendor wires (`/v1/messages`, `/v1/responses`, Gemini's paths). */
  readonly path?: string;
  readonly stream: boolean;
  /** Billed prompt tokens: 0 for requests refused before generation (400, 401, 429, 500). */
  readonly promptTokens: number;
  /** Parts of promptTokens reported as read from / written to the prompt cache (absent: none). */
  readonly cacheReadTokens?: number;
  readonly cacheWriteTokens?: number;
  /** Web searches run for the request, billed per call (absent: none). */
  readonly webSearchCalls?: number;
  /** Tokens actually generated and written to the caller. */
  readonly completionTokens: number;
  readonly finishReason: SimFinishReason;
  readonly status: number;
  /** The caller went away before the reply ended. */
  readonly aborted: boolean;
  /** Milliseconds since the epoch. */
  readonly startedAt: number;
  readonly endedAt: number;
  /** The operation, when not a chat completion. */
  readonly operation?: SimOperation;
  /** Units served by that operation: input tokens, images, input characters or audio seconds (rounded up). */
  readonly units?: number;
};

export type SimOperation = "embeddings" | "images" | "speech" | "transcription";

export type SimLogTotals = { requests: number; promptTokens: number; completionTokens: number };

/** Entries kept; older ones are dropped (totals still count them). */
export const simLogEntriesMax = 100_000;

export class SimLog {
  readonly #entriesMax: number;
  readonly #ring: (SimLogEntry | undefined)[] = [];
  #head = 0;
  #size = 0;
  readonly #byRequestId = new Map<string, SimLogEntry[]>();
  #totals: SimLogTotals = { requests: 0, promptTokens: 0, completionTokens: 0 };
  #seq = 0;
  #inFlight = 0;
  #inFlightMax = 0;

  constructor(entriesMax: number = simLogEntriesMax) {
    if (!Number.isInteger(entriesMax) || entriesMax < 1) throw new Error("entriesMax must be >= 1");
    this.#entriesMax = entriesMax;
  }

  /** Marks a request as started; returns its seq. Pair with exactly one `record`. */
  begin(): number {
    this.#inFlight++;
    if (this.#inFlight > this.#inFlightMax) this.#inFlightMax = this.#inFlight;
    return ++this.#seq;
  }

  /** Stores the entry of a request that `begin` started. */
  record(entry: SimLogEntry): void {
    this.#inFlight--;
    if (this.#size === this.#entriesMax) this.#evictOldest();
    this.#ring[(this.#head + this.#size) % this.#entriesMax] = entry;
    this.#size++;
    if (entry.requestId !== null) {
      const same = this.#byRequestId.get(entry.requestId);
      if (same) same.push(entry);
      else this.#byRequestId.set(entry.requestId, [entry]);
    }
    this.#totals.requests++;
    this.#totals.promptTokens += entry.promptTokens;
    this.#totals.completionTokens += entry.completionTokens;
  }

  /** Entries in the order their requests ended, oldest first. */
  entries(): SimLogEntry[] {
    const out: SimLogEntry[] = [];
    for (let i = 0; i < this.#size; i++) {
      const entry = this.#ring[(this.#head + i) % this.#entriesMax];
      if (entry) out.push(entry);
    }
    return out;
  }

  /** Every kept entry with this `x-request-id` (retries share one), oldest first. */
  byRequestId(requestId: string): SimLogEntry[] {
    return [...(this.#byRequestId.get(requestId) ?? [])];
  }

  /** Forgets entries and totals; in-flight requests stay counted and `inFlightMax` restarts. */
  clear(): void {
    this.#ring.length = 0;
    this.#head = 0;
    this.#size = 0;
    this.#byRequestId.clear();
    this.#totals = { requests: 0, promptTokens: 0, completionTokens: 0 };
    this.#inFlightMax = this.#inFlight;
  }

  /** Sums over every entry recorded since start or the last `clear()`. */
  get totals(): SimLogTotals {
    return { ...this.#totals };
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  get inFlightMax(): number {
    return this.#inFlightMax;
  }

  #evictOldest(): void {
    const oldest = this.#ring[this.#head];
    this.#ring[this.#head] = undefined;
    this.#head = (this.#head + 1) % this.#entriesMax;
    this.#size--;
    if (!oldest || oldest.requestId === null) return;
    const same = this.#byRequestId.get(oldest.requestId);
    same?.shift();
    if (same?.length === 0) this.#byRequestId.delete(oldest.requestId);
  }
}
