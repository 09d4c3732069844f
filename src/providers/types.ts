/**
 * What every upstream adapter provides. Adapters are pure transforms: they build upstream
 * requests and read upstream replies, and do no I/O and read no clock (upstream.ts does the
 * I/O). Usage travels with the bytes: every decoded reply or stream piece carries the usage it
 * reports, so no caller parses vendor JSON twice and no path can forget billing.
 */
import type { Failure } from "../errors.ts";

export type BackendKind = "openai";

export interface Usage {
  inputTokens: number;
  outputTokens: number;
}

export interface UpstreamRequest {
  path: string;
  body: string;
  headers: Record<string, string>;
}

export interface ChatRequestInput {
  /** The client's request body, already validated. */
  body: Record<string, unknown>;
  upstreamModel: string;
  /** The output budget the reserve covers: the upstream is never allowed more. */
  maxTokens: number;
  stream: boolean;
}

/** One SSE event to relay: the upstream's own `data:` payload, untouched. */
export interface StreamFrame {
  data: string;
  /** The chunk that carries only usage (empty `choices`), dropped when the client did not ask. */
  usageOnly: boolean;
  /** Content delivered by this frame, for metering when the upstream reports no usage. */
  text: string;
  /** Usage this frame reports: the final figure, or vLLM's running total on every chunk. */
  usage?: Usage;
}

export interface StreamPiece {
  frames: StreamFrame[];
  usage?: Usage;
  /** The upstream sent an error event mid-stream. */
  error?: Failure;
  /** The upstream's end-of-stream marker was seen. */
  done: boolean;
  /** Nothing arrived for a keep-alive interval. */
  keepAlive?: boolean;
}

export interface ChatStreamDecoder {
  push(text: string): StreamPiece;
}

export interface UpstreamFailure extends Failure {
  /** Worth trying another backend (before the first byte reached the client). */
  retryable: boolean;
}

export interface ChatAdapter {
  buildChatRequest(input: ChatRequestInput): UpstreamRequest;
  parseChatResponse(text: string): { usage: Usage | null } | UpstreamFailure;
  createChatStreamDecoder(): ChatStreamDecoder;
}

/**
 * One adapter per backend kind. Each operation is a key; an operation the vendor lacks is a
 * missing key, never a stub that throws.
 */
export interface ProviderAdapter {
  kind: BackendKind;
  /** The vendor's error reply (any operation) as one of the gateway's errors. */
  errorToFailure(status: number, text: string): UpstreamFailure;
  chat: ChatAdapter;
}
