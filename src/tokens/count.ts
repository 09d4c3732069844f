/**
 * Token counting. The hot path uses a cheap upper bound: byte-level BPE never makes more tokens
 * than UTF-8 bytes, so bytes plus fixed allowances per message, image and tool bound the prompt
 * without tokenising it. The exact js-tiktoken count (o200k_base, ~0.4 s to load) is loaded
 * lazily and used for billing only when an upstream reports no usage.
 */
import type { Tiktoken } from "js-tiktoken/lite";

/** Role markers and separators a chat template adds around each message. */
export const MESSAGE_ALLOWANCE_TOKENS = 8;
/** Priming tokens for the assistant's reply. */
export const REQUEST_ALLOWANCE_TOKENS = 8;
/** An image part, at the most detailed tiling any vendor bills for one image. */
export const IMAGE_ALLOWANCE_TOKENS = 6_400;
/** An audio or file part with no text to measure. */
export const FILE_ALLOWANCE_TOKENS = 65_536;

const utf8Bytes = (text: string) => Buffer.byteLength(text, "utf8");

function partBound(part: unknown): number {
  if (typeof part !== "object" || part === null) return utf8Bytes(String(part));
  const p = part as { type?: unknown; text?: unknown };
  if (typeof p.text === "string") return utf8Bytes(p.text);
  if (p.type === "image_url") return IMAGE_ALLOWANCE_TOKENS;
  return FILE_ALLOWANCE_TOKENS;
}

function contentBound(content: unknown): number {
  if (content === null || content === undefined) return 0;
  if (typeof content === "string") return utf8Bytes(content);
  if (Array.isArray(content)) return content.reduce((sum: number, part) => sum + partBound(part), 0);
  return utf8Bytes(JSON.stringify(content));
}

/** An upper bound on the prompt's tokens, in O(bytes) with no tokeniser. */
export function promptTokensUpperBound(request: { messages: readonly Record<string, unknown>[]; tools?: unknown }): number {
  let bound = REQUEST_ALLOWANCE_TOKENS;
  for (const message of request.messages) {
    bound += MESSAGE_ALLOWANCE_TOKENS + contentBound(message.content);
    if (typeof message.name === "string") bound += utf8Bytes(message.name);
    if (message.tool_calls !== undefined) bound += utf8Bytes(JSON.stringify(message.tool_calls));
  }
  if (request.tools !== undefined) bound += utf8Bytes(JSON.stringify(request.tools));
  return bound;
}

let encoder: Promise<Tiktoken> | null = null;

function loadEncoder(): Promise<Tiktoken> {
  encoder ??= (async () => {
    const { Tiktoken } = await import("js-tiktoken/lite");
    const { default: o200k } = await import("js-tiktoken/ranks/o200k_base");
    return new Tiktoken(o200k);
  })();
  return encoder;
}

/** The exact o200k_base token count of `text`. */
export async function countTokens(text: string): Promise<number> {
  if (text.length === 0) return 0;
  return (await loadEncoder()).encode(text).length;
}

/** Tokens a chat template adds per message and to prime the reply (OpenAI's published counts). */
export const EXACT_MESSAGE_TOKENS = 3;
export const EXACT_REPLY_TOKENS = 3;

/**
 * Exact prompt tokens (o200k_base) with OpenAI's template counts: used at the wallet's edge,
 * where the cheap bound would refuse, and for billing when the upstream reports no usage.
 */
export async function countPromptTokens(messages: readonly Record<string, unknown>[]): Promise<number> {
  let total = EXACT_REPLY_TOKENS;
  for (const message of messages) {
    const content = message.content;
    const text =
      typeof content === "string"
        ? content
        : Array.isArray(content)
          ? content.map((p) => (typeof (p as { text?: unknown })?.text === "string" ? (p as { text: string }).text : "")).join("")
          : "";
    total += EXACT_MESSAGE_TOKENS + (await countTokens(text));
    if (typeof message.name === "string") total += 1;
  }
  return total;
}
