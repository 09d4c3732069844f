/**
 * The gateway's own chat output, read back by the wires translated from it (Responses, Messages):
 * the `chat.completion` body of a whole reply, and the relay's frames (a chunk's JSON, a
 * keep-alive, the end, a failure). Both come from the gateway itself, yet are parsed with zod: a
 * field the schema does not know is dropped, never trusted by a cast.
 */
import { z } from "zod";
import type { Failure } from "../errors.ts";

const toolCallDelta = z.looseObject({
  index: z.number().int().nonnegative(),
  id: z.string().nullish(),
  function: z.looseObject({ name: z.string().nullish(), arguments: z.string().nullish() }).nullish(),
});

/**
 * A block of a tool the vendor ran (Anthropic's web search: server_tool_use, web_search_tool_result),
 * as the vendor sent it (src/providers/anthropic/response.ts isServerToolBlock).
 */
export const vendorBlock = z.looseObject({ type: z.string() });
export type VendorBlock = z.infer<typeof vendorBlock>;

export const chatUsage = z.looseObject({
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
  prompt_tokens_details: z.looseObject({ cached_tokens: z.number().int().nonnegative().nullish() }).nullish(),
  completion_tokens_details: z.looseObject({ reasoning_tokens: z.number().int().nonnegative().nullish() }).nullish(),
  /** The billed cost in toman, set by the chat path once settled (src/admission/costReply.ts). */
  cost: z.number().nonnegative().nullish(),
});
export type ChatUsage = z.infer<typeof chatUsage>;

/** The billed cost a chat usage carries, as the translated wires' usage field (absent when not settled). */
export function usageCost(usage: ChatUsage | null): { cost?: number } {
  return typeof usage?.cost === "number" ? { cost: usage.cost } : {};
}

export const chatChunk = z.looseObject({
  choices: z.array(
    z.looseObject({
      index: z.number().int().nonnegative(),
      delta: z
        .looseObject({
          content: z.string().nullish(),
          reasoning_content: z.string().nullish(),
          refusal: z.string().nullish(),
          tool_calls: z.array(toolCallDelta).nullish(),
          anthropic_block: vendorBlock.nullish(),
        })
        .nullish(),
      finish_reason: z.string().nullish(),
    }),
  ),
  usage: chatUsage.nullish(),
});
export type ChatChunk = z.infer<typeof chatChunk>;

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

export type ChunkDelta = NonNullable<ChatChunk["choices"][number]["delta"]>;

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
 * One frame of the relay (src/operations/chat/relay.ts), as the translating wires see it: its chunk
 * parsed, or the keep-alive, the end, or the failure that ended it.
 */
export type ChatFrame =
  | { kind: "chunk"; chunk: ChatChunk }
  | { kind: "keepAlive" }
  | { kind: "done" }
  | { kind: "error"; failure: Failure };

/** A relay frame for the wires; null for a chunk that is not one (never sent by the relay). */
export function chatFrameOf(
  frame: { kind: "data"; data: string } | { kind: "keepAlive" | "done" } | { kind: "error"; failure: Failure },
): ChatFrame | null {
  if (frame.kind !== "data") return frame.kind === "error" ? { kind: "error", failure: frame.failure } : { kind: frame.kind };
  try {
    const chunk = chatChunk.safeParse(JSON.parse(frame.data));
    return chunk.success ? { kind: "chunk", chunk: chunk.data } : null;
  } catch {
    return null;
  }
}

/** A whole chat reply as a value (the pool's reading of it), or null when it is not a chat completion. */
export function chatCompletionOf(value: unknown): ChatCompletion | null {
  const parsed = chatCompletion.safeParse(value);
  return parsed.success ? parsed.data : null;
}
