/**
 * The gateway's own chat output as the wires translated from it read it (Responses, Messages,
 * Gemini): the `chat.completion` value of a whole reply (the pool's reading of it, checked with
 * zod), and the relay's events, whose chunks are values already (src/providers/chunk.ts: built
 * by a decoder, or an upstream's own chunk checked once as it was decoded).
 */
import { z } from "zod";
import type { Failure } from "../errors.ts";
import type { RelayEvent } from "../operations/chat/events.ts";
import { chatUsage, type ChatChunk, type ChatUsage, type ChunkDelta, vendorBlock, type VendorBlock } from "../providers/chunk.ts";

export { chatUsage, type ChatChunk, type ChatUsage, type ChunkDelta, vendorBlock, type VendorBlock };

/** The billed cost a chat usage carries, as the translated wires' usage field (absent when not settled). */
export function usageCost(usage: ChatUsage | null): { cost?: number } {
  return typeof usage?.cost === "number" ? { cost: usage.cost } : {};
}

export const chatCompletion = z.looseObject({
  choices: z
    .array(
      z.looseObject({
        message: z.looseObject({
          content: z.string().nullish(),
          reasoning_content: z.string().nullish(),
          refusal: z.string().nullish(),
          tool_calls: z
            .array(z.looseObject({ id: z.string(), function: z.looseObject({ name: z.string(), arguments: z.string() }) }))
            .nullish(),
          /** The vendor's whole content, when it ran a tool of its own. */
          anthropic_content: z.array(vendorBlock).nullish(),
        }),
        finish_reason: z.string().nullish(),
      }),
    )
    .min(1),
  usage: chatUsage.nullish(),
});
export type ChatCompletion = z.infer<typeof chatCompletion>;

/**
 * The one choice of a chunk, as the translated wires read it (they never ask for `n`): its delta,
 * the visible text it adds (content, or a refusal), and its finish reason.
 */
export function onlyChoice(chunk: ChatChunk): { delta: ChunkDelta; text: string; finishReason: string | null } | null {
  const choice = chunk.choices.find((c) => c.index === 0);
  if (!choice) return null;
  const delta = choice.delta ?? {};
  return { delta, text: delta.content ?? delta.refusal ?? "", finishReason: choice.finish_reason ?? null };
}

/**
 * One event of the relay (src/operations/chat/events.ts), as the translating wires read it: a
 * chunk's value (the usage chunk too), the keep-alive, the end, or the failure that ended it.
 */
export type ChatFrame =
  | { kind: "chunk" | "usage"; chunk: ChatChunk }
  | { kind: "keepAlive" }
  | { kind: "done" }
  | { kind: "error"; failure: Failure };

/** A relay event for the wires; null for an upstream chunk the gateway could not read as one (the chat wire relays it as sent). */
export function chatFrameOf(event: RelayEvent): ChatFrame | null {
  if (event.kind !== "chunk" && event.kind !== "usage") return event;
  return event.chunk === null ? null : { kind: event.kind, chunk: event.chunk };
}

/** A whole chat reply as a value (the pool's reading of it), or null when it is not a chat completion. */
export function chatCompletionOf(value: unknown): ChatCompletion | null {
  const parsed = chatCompletion.safeParse(value);
  return parsed.success ? parsed.data : null;
}
