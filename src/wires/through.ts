/**
 * A translated wire's side of the chat operation (Responses, Messages, Gemini): the relay's
 * events written as the wire's events (each chunk read as the value it is, never parsed again),
 * and the prompt counted as admission counts it. Nothing here meters or settles: the chat
 * operation did.
 */
import type { RelayEvent } from "../operations/chat/events.ts";
import { type Relay, RelayBody } from "../operations/chat/relay.ts";
import { countPromptTokens, countTokens } from "../tokens/count.ts";
import { chatFrameOf, type ChatFrame } from "./chat.ts";

const encoder = new TextEncoder();

/** What a wire may read of the stream beside its frames. */
export interface StreamFacts {
  /** The prompt's tokens as the backend told them at the start (an Anthropic backend does), or null. */
  inputTokensAtStart: number | null;
  /** The vendor-run tool's calls billed: known when the relay sends its end (`done`), 0 before. */
  hostedCallsBilled: number;
}

/** A wire's stream translation: its opening events, then the events of each relay event. */
export interface WireStream {
  start(): string;
  frame(frame: ChatFrame, facts: StreamFacts): string;
}

/**
 * The relay's events written by `wire`: what Elysia's generator route returns. A client that
 * stops pulling (Elysia returns the iterator) has left, as on chat's own SSE body.
 */
export function wireBody(relay: Relay, wire: WireStream): RelayBody {
  const render = (events: RelayEvent[]) => {
    let text = "";
    for (const event of events) {
      const read = chatFrameOf(event);
      if (read) text += wire.frame(read, relay);
    }
    return text === "" ? null : encoder.encode(text);
  };
  return new RelayBody(relay, render, encoder.encode(wire.start()));
}

/**
 * A translated prompt's tokens by the gateway's own count, as admission counts it: the messages
 * by o200k_base with OpenAI's template counts, tool definitions and tool calls by their JSON. Runs
 * in the key's turn on the tokenizer threads; null when the tokenizer is too busy to answer.
 */
export async function countChatPrompt(messages: Record<string, unknown>[], tools: unknown, keyId: string): Promise<number | null> {
  const calls = messages.flatMap((m) => (Array.isArray(m.tool_calls) ? [JSON.stringify(m.tool_calls)] : []));
  const extra = [JSON.stringify(tools ?? []), ...calls].filter((text) => text !== "[]");
  const counting = { purpose: "service", fairnessKey: keyId } as const;
  const counts = await Promise.all([countPromptTokens(messages, counting), ...extra.map((text) => countTokens(text, counting))]).catch(
    () => null,
  );
  return counts ? counts.reduce((sum, n) => sum + n, 0) : null;
}
