/**
 * A batch's input file, checked whole before anything runs: every line's JSON, its method and
 * url, its body by the operation's own schema, its model (in the catalog, of the operation, open
 * to the key, priced). A file with any bad line fails the batch, its errors naming the lines
 * (OpenAI's `errors.data`, at most BATCH_ERRORS_MAX of them).
 */
import { z } from "zod";
import { operationModel, unitPrice } from "../admission/model.ts";
import type { GatewayDeps } from "../admission/deps.ts";
import type { Operation } from "../catalog/seed.ts";
import { type Failure, isFailure, zodFailure } from "../errors.ts";
import type { KeyRecord } from "../keys/store.ts";
import { messagesToChat } from "../wires/messages/request.ts";
import { responsesToChat } from "../wires/responses/request.ts";
import { chatRequest } from "../operations/chat/schema.ts";
import { embeddingsRequest } from "../operations/embeddings/schema.ts";
import { FILE_LINES_MAX } from "../files/files.ts";
import { jsonDepthExceeds } from "../json.ts";

/** The endpoints a batch may run, and the operation and priced unit each one's model needs. */
export const BATCH_ENDPOINTS = {
  "/v1/chat/completions": { operation: "chat", unit: "input_token" },
  "/v1/responses": { operation: "chat", unit: "input_token" },
  "/v1/embeddings": { operation: "embeddings", unit: "input_token" },
  /** Anthropic's Message Batches (their own routes: src/batches/messages.ts). */
  "/v1/messages": { operation: "chat", unit: "input_token" },
} as const satisfies Record<string, { operation: Operation; unit: string }>;
export type BatchEndpoint = keyof typeof BATCH_ENDPOINTS;
/** The endpoints OpenAI's Batch API runs. */
export const OPENAI_BATCH_ENDPOINTS = ["/v1/chat/completions", "/v1/responses", "/v1/embeddings"] as const;

/** Errors a failed batch lists (the first ones, by line). */
export const BATCH_ERRORS_MAX = 100;
/** Longest a file's check holds the event loop before it lets other work run. */
export const CHECK_TURN_MS = 5;
/** A line's `custom_id` (OpenAI's bound). */
export const CUSTOM_ID_CHARS_MAX = 512;

const inputLine = z.strictObject({
  custom_id: z.string().min(1).max(CUSTOM_ID_CHARS_MAX),
  method: z.literal("POST"),
  url: z.string(),
  body: z.record(z.string(), z.unknown()),
});

/** One line as it will run: its number (from 1), custom id and body. */
export interface BatchLine {
  line: number;
  customId: string;
  body: Record<string, unknown>;
}

/** A line's problem, as OpenAI's BatchError. */
export interface BatchError {
  code: string;
  message: string;
  param: string | null;
  line: number | null;
}

/** The body's own checks: the operation's schema, and no stream (a line's reply is read whole). */
function bodyRefusal(endpoint: BatchEndpoint, body: Record<string, unknown>): Failure | null {
  if (body.stream === true) return { code: "invalid_request", message: "A batch line cannot stream: drop `stream`.", param: "stream" };
  if (endpoint === "/v1/responses" || endpoint === "/v1/messages") {
    const translated = endpoint === "/v1/responses" ? responsesToChat(body) : messagesToChat(body);
    return isFailure(translated) ? translated : null;
  }
  const schema = endpoint === "/v1/embeddings" ? embeddingsRequest : chatRequest;
  const parsed = schema.safeParse(body);
  return parsed.success ? null : zodFailure(parsed.error);
}

/** The line's model: in the catalog, of the endpoint's operation, open to the key, priced. */
function modelRefusal(deps: Pick<GatewayDeps, "catalog">, endpoint: BatchEndpoint, body: Record<string, unknown>, key: KeyRecord) {
  const { operation, unit } = BATCH_ENDPOINTS[endpoint];
  const model = operationModel(deps, String(body.model), operation, key);
  if (isFailure(model)) return model;
  const price = unitPrice(model, unit);
  return isFailure(price) ? price : null;
}

/** One line's check: its size and nesting as a live request's body, its JSON, shape, url, body and model. */
function checkLine(
  deps: Pick<GatewayDeps, "catalog" | "env">,
  endpoint: BatchEndpoint,
  text: string,
  line: number,
  key: KeyRecord,
): BatchLine | BatchError {
  const { BODY_BYTES_MAX: bytesMax, JSON_DEPTH_MAX: depthMax } = deps.env;
  if (Buffer.byteLength(text) > bytesMax) {
    return { code: "request_too_large", message: `Line ${line} is larger than a request's limit of ${bytesMax} bytes.`, param: null, line };
  }
  if (jsonDepthExceeds(text, depthMax)) {
    return { code: "invalid_request", message: `Line ${line} nests deeper than the limit of ${depthMax} levels.`, param: null, line };
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { code: "invalid_json_line", message: `Line ${line} is not valid JSON.`, param: null, line };
  }
  const parsed = inputLine.safeParse(raw);
  if (!parsed.success) {
    const failure = zodFailure(parsed.error);
    return { code: "invalid_request", message: `Line ${line}: ${failure.message}`, param: failure.param ?? null, line };
  }
  const { custom_id: customId, url, body } = parsed.data;
  if (url !== endpoint) {
    return { code: "mismatched_endpoint", message: `Line ${line} is for ${url}, but the batch runs ${endpoint}.`, param: "url", line };
  }
  const refused = bodyRefusal(endpoint, body) ?? modelRefusal(deps, endpoint, body, key);
  if (refused) {
    const param = refused.param ? `body.${refused.param}` : "body";
    return { code: refused.code, message: `Line ${line}: ${refused.message}`, param, line };
  }
  return { line, customId, body };
}

/**
 * A file of many lines is read a slice at a time: the event loop runs between them. The function
 * returned lets it run once CHECK_TURN_MS have passed since it last did.
 * @example const turn = turns(); for (const t of texts) { await turn(); check(t); }
 */
export function turns(): () => Promise<void> {
  let turnStartedMs = performance.now();
  return async () => {
    if (performance.now() - turnStartedMs < CHECK_TURN_MS) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
    turnStartedMs = performance.now();
  };
}

/** A file's bytes as they come: its slices from the table (src/files/files.ts `fileSlices`), or one piece already in memory (`inOnePiece`). */
export type ByteSource = AsyncIterable<Uint8Array>;

/** Bytes already in memory (an upload, a Message Batch's requests) as a source of one piece. */
export async function* inOnePiece(content: Uint8Array): AsyncGenerator<Uint8Array> {
  yield content;
}

/**
 * A file's lines as text, each decoded on its own (the whole file decoded and split at once holds
 * the loop for tens of ms at FILE_BYTES_MAX), without the last one when only whitespace follows
 * the last newline. A line may span slices: its bytes are joined before it is decoded, so a
 * character split between two slices decodes whole. The one reading of a file's lines: its check
 * and its models both take it.
 * @example for await (const text of lineTexts(inOnePiece(new TextEncoder().encode("a\nb\n")))) … // "a", "b"
 */
export async function* lineTexts(source: ByteSource): AsyncGenerator<string> {
  // A newline byte is never inside a UTF-8 sequence: each line decodes as it would in the whole.
  const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
  let first = true;
  const decoded = (parts: Uint8Array[]) => {
    const text = decoder.decode(parts.length === 1 ? parts[0] : Buffer.concat(parts));
    const atStart = first;
    first = false;
    return atStart && text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  };
  // The bytes of a line begun in earlier slices; bounded by the file, which FILE_BYTES_MAX bounds.
  let begun: Uint8Array[] = [];
  for await (const slice of source) {
    let start = 0;
    for (let newline = slice.indexOf(0x0a); newline !== -1; newline = slice.indexOf(0x0a, start)) {
      yield decoded([...begun, slice.subarray(start, newline)]);
      begun = [];
      start = newline + 1;
    }
    if (start < slice.length) begun.push(slice.subarray(start));
  }
  if (begun.length === 0) return;
  const last = decoded(begun);
  if (last.trim() !== "") yield last;
}

/**
 * The file's lines, or what fails the batch (each bad line named; a repeated custom id too).
 * @example await checkLines(deps, "/v1/embeddings", inOnePiece(content), key) // { lines: [{ line: 1, customId: "a", body }] }
 */
export async function checkLines(
  deps: Pick<GatewayDeps, "catalog" | "env">,
  endpoint: BatchEndpoint,
  content: ByteSource,
  key: KeyRecord,
): Promise<{ lines: BatchLine[] } | { errors: BatchError[] }> {
  const checked = await checkedLines(deps, endpoint, content, key);
  if (checked.count === 0) return { errors: [{ code: "empty_file", message: "The input file has no lines.", param: null, line: null }] };
  if (checked.count > FILE_LINES_MAX) {
    const message = `The input file has more than the limit of ${FILE_LINES_MAX} lines.`;
    return { errors: [{ code: "too_many_lines", message, param: null, line: null }] };
  }
  return checked.errors.length > 0 ? { errors: checked.errors } : { lines: checked.lines };
}

/** Each line checked, a slice at a time, until BATCH_ERRORS_MAX errors; counted up to one past FILE_LINES_MAX. */
async function checkedLines(deps: Pick<GatewayDeps, "catalog" | "env">, endpoint: BatchEndpoint, content: ByteSource, key: KeyRecord) {
  const lines: BatchLine[] = [];
  const errors: BatchError[] = [];
  const seen = new Set<string>();
  const turn = turns();
  let count = 0;
  for await (const t of lineTexts(content)) {
    if (++count > FILE_LINES_MAX) break;
    await turn();
    if (errors.length >= BATCH_ERRORS_MAX) continue;
    const checked = checkLine(deps, endpoint, t, count, key);
    if ("code" in checked) {
      errors.push(checked);
    } else if (seen.has(checked.customId)) {
      const message = `Line ${count} repeats custom_id ${JSON.stringify(checked.customId)}: each line needs its own.`;
      errors.push({ code: "duplicate_custom_id", message, param: "custom_id", line: count });
    } else {
      seen.add(checked.customId);
      lines.push(checked);
    }
  }
  return { count, lines, errors };
}
