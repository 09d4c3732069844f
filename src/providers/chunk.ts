/**
 * A `chat.completion.chunk` as a value: what every stream decoder hands the relay, and what the
 * client wires read (src/wires). A translating decoder builds it (typed by construction); an
 * OpenAI-style upstream's own chunk is its JSON parsed once by the decoder and checked here, in
 * place, so that the chat wire can still relay the upstream's own text untouched.
 */
import { z } from "zod";

export const chatUsage = z.looseObject({
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
  prompt_tokens_details: z.looseObject({ cached_tokens: z.number().int().nonnegative().nullish() }).nullish(),
  completion_tokens_details: z.looseObject({ reasoning_tokens: z.number().int().nonnegative().nullish() }).nullish(),
  /** The billed cost in toman, set by the chat path once settled (src/admission/costReply.ts). */
  cost: z.number().nonnegative().nullish(),
});
export type ChatUsage = z.infer<typeof chatUsage>;

/**
 * A block of a tool the vendor ran (Anthropic's web search: server_tool_use, web_search_tool_result),
 * as the vendor sent it (src/providers/anthropic/response.ts isServerToolBlock).
 */
export const vendorBlock = z.looseObject({ type: z.string() });
export type VendorBlock = z.infer<typeof vendorBlock>;

export interface ToolCallDelta {
  index: number;
  id?: string | null;
  type?: string;
  function?: { name?: string | null; arguments?: string | null } | null;
}

export interface ChunkDelta {
  role?: string;
  content?: string | null;
  reasoning_content?: string | null;
  refusal?: string | null;
  tool_calls?: ToolCallDelta[] | null;
  anthropic_block?: VendorBlock | null;
}

export interface ChatChunk {
  /** Read with a check where used: an upstream's own chunk may carry anything here. */
  id?: unknown;
  object?: unknown;
  created?: unknown;
  model?: unknown;
  service_tier?: unknown;
  choices: { index: number; delta?: ChunkDelta | null; logprobs?: unknown; finish_reason?: string | null }[];
  usage?: ChatUsage | null;
}

/**
 * One decoded frame's chunk: `chunk` as a value, and `json`, the upstream's own text of it when the
 * chunk is the upstream's (OpenAI-style backends; null when a decoder built it). `chunk` is null
 * for an upstream chunk the gateway cannot read as one: the chat wire relays its text as sent,
 * the translated wires skip it.
 */
export type ChunkText = { chunk: ChatChunk; json: string | null } | { chunk: null; json: string };

/**
 * The chunk's JSON as the chat wire sends it: the upstream's own text, else the value written once.
 * @example chunkJson({ chunk: { choices: [] }, json: null }) // '{"choices":[]}'
 */
export function chunkJson(frame: ChunkText): string {
  return frame.json ?? JSON.stringify(frame.chunk);
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);
const isCount = (value: unknown) => Number.isSafeInteger(value) && (value as number) >= 0;
const isText = (value: unknown) => value == null || typeof value === "string";

function isToolCallDelta(value: unknown): boolean {
  if (!isObject(value) || !isCount(value.index) || !isText(value.id)) return false;
  const call = value.function;
  return call == null || (isObject(call) && isText(call.name) && isText(call.arguments));
}

function isDelta(value: unknown): boolean {
  if (value == null) return true;
  if (!isObject(value) || !isText(value.content) || !isText(value.reasoning_content) || !isText(value.refusal)) return false;
  const calls = value.tool_calls;
  if (calls != null && !(Array.isArray(calls) && calls.every(isToolCallDelta))) return false;
  const block = value.anthropic_block;
  return block == null || (isObject(block) && typeof block.type === "string");
}

const isChoice = (value: unknown) => isObject(value) && isCount(value.index) && isDelta(value.delta) && isText(value.finish_reason);

/**
 * An upstream's parsed chunk as a ChatChunk, checked in place (the same object, its keys in the
 * upstream's order), or null when it is not one: choices of counted indexes, text deltas and tool
 * calls, a usage of whole counts (zod's chatUsage, only when present).
 * @example chatChunkOf({ choices: [{ index: 0, delta: { content: "Hi" } }] }) // the same object
 */
export function chatChunkOf(value: unknown): ChatChunk | null {
  if (!isObject(value) || !Array.isArray(value.choices) || !value.choices.every(isChoice)) return null;
  if (value.usage != null && !chatUsage.safeParse(value.usage).success) return null;
  return value as unknown as ChatChunk;
}
