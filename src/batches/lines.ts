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

/** A file's lines as text, without the last empty one. */
export function lineTexts(text: string): string[] {
  const texts = text.split("\n");
  if (texts.at(-1)?.trim() === "") texts.pop();
  return texts;
}

/**
 * The file's lines, or what fails the batch (each bad line named; a repeated custom id too).
 * @example await checkLines(deps, "/v1/embeddings", text, key) // { lines: [{ line: 1, customId: "a", body }] }
 */
export async function checkLines(
  deps: Pick<GatewayDeps, "catalog" | "env">,
  endpoint: BatchEndpoint,
  text: string,
  key: KeyRecord,
): Promise<{ lines: BatchLine[] } | { errors: BatchError[] }> {
  const texts = lineTexts(text);
  if (texts.length === 0) return { errors: [{ code: "empty_file", message: "The input file has no lines.", param: null, line: null }] };
  if (texts.length > FILE_LINES_MAX) {
    const message = `The input file has ${texts.length} lines, more than the limit of ${FILE_LINES_MAX}.`;
    return { errors: [{ code: "too_many_lines", message, param: null, line: null }] };
  }
  const lines: BatchLine[] = [];
  const errors: BatchError[] = [];
  const seen = new Set<string>();
  const turn = turns();
  for (const [i, t] of texts.entries()) {
    if (errors.length >= BATCH_ERRORS_MAX) break;
    await turn();
    const checked = checkLine(deps, endpoint, t, i + 1, key);
    if ("code" in checked) {
      errors.push(checked);
    } else if (seen.has(checked.customId)) {
      const message = `Line ${i + 1} repeats custom_id ${JSON.stringify(checked.customId)}: each line needs its own.`;
      errors.push({ code: "duplicate_custom_id", message, param: "custom_id", line: i + 1 });
    } else {
      seen.add(checked.customId);
      lines.push(checked);
    }
  }
  return errors.length > 0 ? { errors } : { lines };
}
