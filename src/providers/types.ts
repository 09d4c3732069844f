/**
 * What every upstream adapter provides. Adapters are pure transforms: they build upstream
 * requests and read upstream replies, and do no I/O and read no clock (upstream.ts does the
 * I/O). Usage travels with the bytes: every decoded reply or stream piece carries the usage it
 * reports, so no caller parses vendor JSON twice and no path can forget billing.
 */
import type { Failure } from "../errors.ts";
import type { Counts } from "../units.ts";
import type { ChunkText } from "./chunk.ts";

export type BackendKind = "openai" | "anthropic" | "gemini";

/**
 * What a reply used, by unit (src/units.ts), as the vendor reports it. `input` is the whole
 * prompt, as OpenAI's `prompt_tokens` counts it; the cache figures are parts of it that vendors
 * price apart: `cache_read` tokens were read from the vendor's prompt cache (OpenAI
 * `cached_tokens`, Gemini `cachedContentTokenCount`, Anthropic `cache_read_input_tokens`),
 * `cache_write` tokens were written to it (Anthropic `cache_creation_input_tokens`). Their sum
 * never exceeds `input`. `cache_write_1h` is the part of the writes kept for an hour (Anthropic
 * `cache_creation.ephemeral_1h_input_tokens`), priced above 5-minute writes; never more than
 * `cache_write`. `hosted_call` counts the calls of a vendor-run tool (Anthropic
 * `server_tool_use.web_search_requests`), billed per call.
 */
export type Usage = Counts & { input: number; output: number };

export interface UpstreamRequest {
  path: string;
  /** JSON text, raw bytes, or a multipart form (fetch sets its boundary: no content-type header then). */
  body: string | Uint8Array | FormData;
  headers: Record<string, string>;
}

/** A request whose body is JSON text (every chat request). */
export type JsonUpstreamRequest = UpstreamRequest & { body: string };

export interface ChatRequestInput {
  /** The client's request body, already validated. */
  body: Record<string, unknown>;
  upstreamModel: string;
  /** The output budget the reserve covers: the upstream is never allowed more. */
  maxTokens: number;
  stream: boolean;
}

/**
 * What a translating adapter needs to write an OpenAI-format reply, given by the caller so the
 * transforms read no clock: `chatcmpl-<requestId>` becomes the reply's id.
 */
export interface ReplyContext {
  requestId: string;
  /** The model id the client asked for (the catalog id), echoed in the reply. */
  model: string;
  /** Unix seconds. */
  created: number;
}

/** A whole reply in the OpenAI `chat.completion` format, with the usage it reports. */
export interface ChatReply {
  body: string;
  /**
   * `body` as a value: what it was parsed from or written from (usage travels with the bytes). The
   * edge reads the generated text and sets the cost from it without parsing `body` again; never mutated.
   */
  json: unknown;
  usage: Usage | null;
}

/**
 * One SSE event to relay: an OpenAI `chat.completion.chunk` JSON (the upstream's own payload for
 * OpenAI-style backends, a translation for the others).
 */
/**
 * One decoded chunk (chunk.ts ChunkText: the value, and the upstream's own text when it is the
 * upstream's), with what the relay meters.
 */
export type StreamFrame = ChunkText & {
  /** The chunk that carries only usage (empty `choices`), dropped when the client did not ask. */
  usageOnly: boolean;
  /** Content delivered by this frame, for metering when the upstream reports no usage. */
  text: string;
  /** Usage this frame reports: the final figure, or vLLM's running total on every chunk. */
  usage?: Usage;
};

export interface StreamPiece {
  frames: StreamFrame[];
  usage?: Usage;
  /**
   * The prompt's tokens as the upstream reported them when its stream started (Anthropic's
   * message_start): shown by wires that state them first, never billed from (usage is).
   */
  inputTokensAtStart?: number;
  /** The upstream sent an error event mid-stream. */
  error?: Failure;
  /** The upstream's end-of-stream marker was seen. */
  done: boolean;
}

export interface ChatStreamDecoder {
  push(text: string): StreamPiece;
}

export interface UpstreamFailure extends Failure {
  /** Worth trying another backend (before the first byte reached the client). */
  retryable: boolean;
}

export interface ChatAdapter {
  /** Choices (`n`) one call returns at most; absent when the upstream takes any `n` (OpenAI-style). */
  choicesMax?: number;
  /**
   * Chat requests are always JSON. Undefined when this backend cannot serve the request (`n`
   * above `choicesMax`): the pool then tries another backend.
   */
  buildChatRequest(input: ChatRequestInput): JsonUpstreamRequest | undefined;
  /** The upstream's 2xx body as an OpenAI `chat.completion` (the OpenAI adapter returns it as is). */
  parseChatResponse(text: string, context: ReplyContext): ChatReply | UpstreamFailure;
  createChatStreamDecoder(context: ReplyContext): ChatStreamDecoder;
  /** The vendor's free token count of a text (Anthropic's count_tokens, Gemini's countTokens); absent where it has none. */
  count?: TextCountAdapter;
}

/** A vendor's count endpoint: the request counting `text` for `upstreamModel`, and its reply's count (null when it has none). */
export interface TextCountAdapter {
  buildCountRequest(text: string, upstreamModel: string): JsonUpstreamRequest;
  parseCountResponse(text: string): number | null;
}

/**
 * One adapter per backend kind. Each operation is a key; an operation the vendor lacks is a
 * missing key, never a stub that throws.
 */
export interface ProviderAdapter {
  kind: BackendKind;
  /** The vendor's error reply (any operation) as one of the gateway's errors. */
  errorToFailure(status: number, text: string): UpstreamFailure;
  chat?: ChatAdapter;
  embeddings?: EmbeddingsAdapter;
  images?: ImagesAdapter;
  speech?: SpeechAdapter;
  transcription?: TranscriptionAdapter;
}

/** The request of any operation but chat: the client's validated body and the upstream's model id. */
export interface OperationInput<Body> {
  body: Body;
  upstreamModel: string;
}

/** One embedding vector, decoded to numbers whatever encoding the upstream used. */
export interface EmbeddingsReply {
  vectors: number[][];
  /** Input tokens the upstream reports, or null when it reports none. */
  inputTokens: number | null;
}

export interface EmbeddingsAdapter {
  /** Whether `input` may be token arrays (a request with them gets a 400 when no backend takes them). */
  acceptsTokenArrays: boolean;
  /** Inputs one call takes at most; absent when the gateway's own bound is the only one. */
  inputsMax?: number;
  /**
   * `input` normalised to an array: strings or token arrays. Undefined when this vendor cannot
   * take the input (Gemini has no token arrays): the pool then tries another backend.
   */
  buildEmbeddingsRequest(input: OperationInput<{ input: string[] | number[][]; dimensions?: number }>): UpstreamRequest | undefined;
  parseEmbeddingsResponse(text: string): EmbeddingsReply | UpstreamFailure;
}

/** An image as the upstream gave it: bytes in base64, or a URL the gateway must fetch itself. */
export type UpstreamImage = { b64: string; revisedPrompt?: string } | { url: string; revisedPrompt?: string };

/**
 * The token usage a GPT image model reports with its images (`usage`): text and image input
 * tokens, image output tokens. `imageInputTokens` never exceeds what the input leaves after text.
 */
export interface ImageUsage {
  textInputTokens: number;
  imageInputTokens: number;
  outputTokens: number;
}

export interface ImagesAdapter {
  buildImagesRequest(input: OperationInput<Record<string, unknown>>): UpstreamRequest;
  parseImagesResponse(text: string): { images: UpstreamImage[]; usage?: ImageUsage } | UpstreamFailure;
}

export interface SpeechAdapter {
  /** The reply body is the audio itself, relayed as it arrives. */
  buildSpeechRequest(input: OperationInput<Record<string, unknown>>): UpstreamRequest;
}

export interface TranscriptionAdapter {
  /** The reply body is relayed untouched (JSON or text, as `response_format` asked). */
  buildTranscriptionRequest(input: OperationInput<{ fields: Record<string, string | string[]>; file: File }>): UpstreamRequest;
}
