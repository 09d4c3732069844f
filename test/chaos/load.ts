/**
 * The chaos suite's clients: a mixed load of plain and streamed chat, embeddings, streams the
 * client aborts, requests from an empty wallet (402) and slow readers, spread over the nodes a
 * load balancer would send to. Every answer is sorted by kind; an answer the gateway does not
 * document (a status whose code does not match it, a 500, a stream cut with no error frame, a
 * connection lost on a node no fault touched) is kept as undocumented, with its first examples.
 */
import { describe as describeError, type ErrorCode } from "../../src/errors.ts";

/** Longest a request may take before the client gives up (a paused node never answers). */
export const REQUEST_MS_MAX = 20_000;
const UNDOCUMENTED_EXAMPLES_MAX = 20;
const SLOW_READ_PAUSE_MS = 25;
/** Codes the faults may cause besides the load's own 402s and 429s. */
const FAULT_CODES = new Set<ErrorCode>(["service_unavailable", "no_healthy_backend", "upstream_timeout", "upstream_error"]);
const LOAD_CODES = new Set<ErrorCode>(["insufficient_quota", "concurrency_limit_exceeded", "rate_limit_exceeded"]);

export type Operation = "chat" | "stream" | "embeddings" | "abort" | "poor" | "slow";
export const OPERATIONS: Operation[] = ["chat", "stream", "embeddings", "abort", "poor", "slow"];

export interface LoadTarget {
  url: string;
  /** A fault is acting on this node: a lost connection to it is expected. */
  faulted: boolean;
  /** A load balancer would not send it new requests (killed, paused). */
  out: boolean;
  /** Streams open on it now (a kill waits for one, to land mid-stream). */
  streamsOpen: number;
}

const chatBody = (stream: boolean, maxTokens: number) =>
  JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello, chaos!" }], max_tokens: maxTokens, stream });
const embeddingsBody = JSON.stringify({ model: "text-embedding-3-small", input: ["one", "two"] });

export class Load {
  readonly kinds = new Map<string, number>();
  readonly undocumented: string[] = [];
  undocumentedCount = 0;
  private running: Promise<void>[] = [];
  private stopped = false;

  constructor(
    readonly targets: LoadTarget[],
    private readonly keys: { rich: string; poor: string },
  ) {}

  get requests(): number {
    let total = 0;
    for (const n of this.kinds.values()) total += n;
    return total;
  }

  start(workers: number): void {
    this.stopped = false;
    this.running = Array.from({ length: workers }, (_, i) => this.worker(i));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.running);
  }

  private async worker(i: number): Promise<void> {
    for (let n = i; !this.stopped; n++) {
      const live = this.targets.filter((t) => !t.out);
      if (live.length === 0) {
        await Bun.sleep(50);
        continue;
      }
      const target = live[Math.floor(Math.random() * live.length)]!;
      const operation = OPERATIONS[n % OPERATIONS.length]!;
      const kind = await this.request(target, operation).catch((error: Error) => this.lost(target, operation, error));
      this.count(kind, target);
      if (kind.startsWith("429") || kind.startsWith("503")) await Bun.sleep(20);
    }
  }

  private count(kind: string, target: LoadTarget): void {
    this.kinds.set(kind, (this.kinds.get(kind) ?? 0) + 1);
    if (!kind.startsWith("undocumented")) return;
    this.undocumentedCount++;
    if (this.undocumented.length < UNDOCUMENTED_EXAMPLES_MAX) this.undocumented.push(`${kind} (node ${target.url})`);
  }

  private lost(target: LoadTarget, operation: Operation, error: Error): string {
    if (target.faulted) return `cut by fault`;
    return `undocumented: ${operation} ${error.name}: ${error.message.slice(0, 120)}`;
  }

  private async request(target: LoadTarget, operation: Operation): Promise<string> {
    const key = operation === "poor" ? this.keys.poor : this.keys.rich;
    const path = operation === "embeddings" ? "/v1/embeddings" : "/v1/chat/completions";
    const streamed = operation === "stream" || operation === "abort" || operation === "slow";
    const body = operation === "embeddings" ? embeddingsBody : chatBody(streamed, operation === "slow" ? 40 : 16);
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(new Error("client timeout")), REQUEST_MS_MAX);
    try {
      const response = await fetch(`${target.url}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body,
        signal: abort.signal,
        keepalive: false,
      });
      if (response.status !== 200) return this.refusal(response, target);
      if (!streamed) {
        await response.arrayBuffer();
        return `200 ${operation}`;
      }
      target.streamsOpen++;
      try {
        return await this.readStream(response, operation, abort, target);
      } finally {
        target.streamsOpen--;
      }
    } finally {
      clearTimeout(timer);
    }
  }

  private async refusal(response: Response, target: LoadTarget): Promise<string> {
    const text = await response.text();
    let code: string | undefined;
    try {
      code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
    } catch {}
    if (code && documented(code, response.status)) return `${response.status} ${code}`;
    if (target.faulted && response.status >= 500) return `${response.status} from a faulted node`;
    return `undocumented: ${response.status} ${text.slice(0, 160)}`;
  }

  private async readStream(response: Response, operation: Operation, abort: AbortController, target: LoadTarget): Promise<string> {
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let text = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      if (operation === "abort" && text.includes("data: {")) {
        abort.abort(new Error("client abort"));
        return "aborted by client";
      }
      if (operation === "slow") await Bun.sleep(SLOW_READ_PAUSE_MS);
    }
    const error = /data: (\{"error".*)\n/.exec(text);
    if (error) {
      const code = (JSON.parse(error[1]!) as { error: { code?: string } }).error.code ?? "";
      return documented(code, 200) || FAULT_CODES.has(code as ErrorCode)
        ? `stream error ${code}`
        : `undocumented: stream error ${error[1]!.slice(0, 160)}`;
    }
    if (text.includes("data: [DONE]")) return `200 ${operation}`;
    return target.faulted ? "stream cut by fault" : `undocumented: stream ended without [DONE] or an error frame`;
  }
}

/** A code of the closed set whose status matches, and one a fault or the load may cause. */
function documented(code: string, status: number): boolean {
  if (!FAULT_CODES.has(code as ErrorCode) && !LOAD_CODES.has(code as ErrorCode)) return false;
  return status === 200 || describeError(code as ErrorCode).status === status;
}
