/**
 * Anthropic Messages request (POST /v1/messages) → the gateway's chat request, so that any model
 * of the catalog answers it through the one chat path. The reverse of the Anthropic adapter
 * (src/providers/anthropic/request.ts), with the same pairs of blocks and messages:
 *
 *   system (string or text blocks)   → a leading system message (its blocks as text parts when one
 *                                      carries cache_control, so each mark keeps its place)
 *   a `system` message in `messages`  → a system message in its place (an OpenAI-style backend
 *                                      takes it there; the Anthropic adapter joins every system
 *                                      message to the request's `system`, in order)
 *   user text and image blocks       → a user message's text and image_url parts
 *   user tool_result blocks          → tool messages, in order, before the rest of that turn (their
 *                                      images join the turn's user message: tool messages carry text)
 *   assistant text / tool_use        → an assistant message's content / tool_calls
 *   thinking, redacted_thinking      → dropped (no backend takes them back through chat)
 *   max_tokens (required)            → max_tokens;  stop_sequences → stop
 *   tools / tool_choice              → function tools / auto, required, a named function, none
 *   thinking {enabled, budget}       → reasoning_effort by budget, for a model that reasons
 *                                      (catalog/reasoning.ts); thinking adaptive → the
 *                                      output_config effort, when it names one
 *   thinking, output_config, context_management, the anthropic-beta header
 *                                    → `anthropic` (chat/schema.ts anthropicExtras): sent as they
 *                                      are to an Anthropic backend, dropped for the others
 *   cache_control on blocks, tools   → cache_control on the chat parts, messages and tools
 *
 * Anthropic's web search tool (`web_search_20250305` and later) → `anthropic.web_search`: run by an
 * Anthropic backend within the calls the hold covers, left out elsewhere (src/operations/chat/hosted.ts).
 * Other server tools (code execution …) and document blocks have no chat counterpart: a 400
 * names them.
 */
import { z } from "zod";
import { takesReasoningEffort } from "../../catalog/reasoning.ts";
import { fail, isFailure, type Failure } from "../../errors.ts";
import { type AnthropicExtras, anthropicExtras, anthropicWebSearch, CHAT_TOKENS_MAX, MESSAGES_MAX } from "../../operations/chat/schema.ts";
import { zodFailure } from "../../errors.ts";
import { unknownField, zodFailureAt } from "../fields.ts";

/** Tools and stop sequences one request may carry (Anthropic's own limits are lower). */
export const MESSAGES_TOOLS_MAX = 1_000;
export const STOP_SEQUENCES_MAX = 64;
/** Thinking budgets at or above these ask for medium and high effort; below, low. */
export const THINKING_MEDIUM_TOKENS = 4_096;
export const THINKING_HIGH_TOKENS = 16_384;

const textBlock = z.looseObject({ type: z.literal("text"), text: z.string() });
const imageSource = z.union([
  z.looseObject({ type: z.literal("base64"), media_type: z.string().min(1), data: z.string() }),
  z.looseObject({ type: z.literal("url"), url: z.string().min(1) }),
]);
const imageBlock = z.looseObject({ type: z.literal("image"), source: imageSource });
const toolUseBlock = z.looseObject({ type: z.literal("tool_use"), id: z.string().min(1), name: z.string().min(1), input: z.unknown() });
const toolResultBlock = z.looseObject({
  type: z.literal("tool_result"),
  tool_use_id: z.string().min(1),
  content: z.union([z.string(), z.array(z.union([textBlock, imageBlock, z.looseObject({ type: z.string() })]))]).optional(),
  is_error: z.boolean().optional(),
});
const anyBlock = z.looseObject({ type: z.string() });

const message = z.strictObject({
  // `system` inside the conversation: Claude Code sends instructions mid-conversation this way.
  role: z.enum(["user", "assistant", "system"]),
  content: z.union([z.string(), z.array(anyBlock)]),
  // A turn's own effort (per-turn-control): output within max_tokens, so no price; not sent on.
  output_config: anthropicExtras.shape.output_config,
});

/** A system text block: its mark is kept, its citations (earlier replies' sources) are not sent on. */
const systemBlock = z.strictObject({
  type: z.literal("text"),
  text: z.string(),
  cache_control: z.unknown().optional(),
  citations: z.unknown().optional(),
});

/**
 * The fields each content block may carry; any other is a 400 naming it. `citations` on text
 * and `signature` on thinking come back from earlier replies and are not sent on (no price).
 */
const BLOCK_FIELDS: Readonly<Record<string, ReadonlySet<string>>> = {
  text: new Set(["type", "text", "cache_control", "citations"]),
  image: new Set(["type", "source", "cache_control"]),
  tool_use: new Set(["type", "id", "name", "input", "cache_control"]),
  tool_result: new Set(["type", "tool_use_id", "content", "is_error", "cache_control"]),
  thinking: new Set(["type", "thinking", "signature"]),
  redacted_thinking: new Set(["type", "data"]),
};
/** A client tool's fields: `defer_loading` and `strict` have no price (every tool is sent and counted as input) and are not sent on. */
const CLIENT_TOOL_FIELDS: ReadonlySet<string> = new Set([
  "type",
  "name",
  "description",
  "input_schema",
  "cache_control",
  "defer_loading",
  "strict",
]);

const tool = z.looseObject({
  name: z.string().min(1),
  type: z.string().optional(),
  description: z.string().optional(),
  input_schema: z.record(z.string(), z.unknown()).optional(),
});

const toolChoice = z.strictObject({
  type: z.enum(["auto", "any", "tool", "none"]),
  name: z.string().optional(),
  disable_parallel_tool_use: z.boolean().optional(),
});

/**
 * Every top-level field is known (a strict object: any other is a 400 naming it). `top_k` is
 * accepted and not sent on (chat has no top_k; sampling has no price), `metadata.user_id` becomes
 * chat's `user`.
 */
export const messagesRequest = z.strictObject({
  model: z.string().min(1).max(256),
  max_tokens: z.number().int().min(1).max(CHAT_TOKENS_MAX),
  messages: z.array(message).min(1).max(MESSAGES_MAX),
  system: z.union([z.string(), z.array(systemBlock)]).optional(),
  stop_sequences: z.array(z.string()).max(STOP_SEQUENCES_MAX).optional(),
  stream: z.boolean().optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().min(0).max(1).optional(),
  top_k: z.number().int().min(0).optional(),
  tools: z.array(tool).max(MESSAGES_TOOLS_MAX).optional(),
  tool_choice: toolChoice.optional(),
  thinking: anthropicExtras.shape.thinking,
  output_config: anthropicExtras.shape.output_config,
  context_management: anthropicExtras.shape.context_management,
  metadata: z.strictObject({ user_id: z.string().nullish() }).optional(),
});

export type MessagesRequest = z.infer<typeof messagesRequest>;

/** count_tokens takes the same body without `max_tokens`. */
export const countTokensRequest = messagesRequest.omit({ max_tokens: true, stream: true });

type ChatMessage = Record<string, unknown>;

const refuseBlock = (type: string, param: string) =>
  fail(
    "invalid_request",
    `Content blocks of type \`${type}\` are not supported by this gateway; send text, image, tool_use and tool_result blocks.`,
    { param },
  );

const cacheMark = z.strictObject({ type: z.literal("ephemeral"), ttl: z.enum(["5m", "1h"]).optional() });

/** A block's (or tool's) prompt-cache mark, kept where chat carries one; a malformed mark is dropped. */
function markOf(raw: Record<string, unknown>): { cache_control?: z.infer<typeof cacheMark> } {
  const mark = cacheMark.safeParse(raw.cache_control);
  return mark.success ? { cache_control: mark.data } : {};
}

function imageToChat(block: z.infer<typeof imageBlock>) {
  const source = block.source;
  const url = source.type === "base64" ? `data:${source.media_type};base64,${source.data}` : source.url;
  return { type: "image_url", image_url: { url }, ...markOf(block) };
}

function toolResultText(block: z.infer<typeof toolResultBlock>): string {
  const content = block.content;
  if (content === undefined) return "";
  if (typeof content === "string") return content;
  return content.map((b) => (b.type === "text" && typeof b.text === "string" ? b.text : "")).join("");
}

/** A text block's text, or the 400 naming it when it has none. */
function blockText(raw: z.infer<typeof anyBlock>, param: string): string | Failure {
  const block = textBlock.safeParse(raw);
  return block.success ? block.data.text : zodFailureAt(block.error, param);
}

/** One user turn: its tool results first (each answers a call of the turn before), then its own parts. */
function userTurnToChat(blocks: z.infer<typeof anyBlock>[], at: string): ChatMessage[] | Failure {
  const out: ChatMessage[] = [];
  const parts: unknown[] = [];
  for (const [i, raw] of blocks.entries()) {
    const param = `${at}.${i}`;
    if (raw.type === "text") {
      const text = blockText(raw, param);
      if (isFailure(text)) return text;
      parts.push({ type: "text", text, ...markOf(raw) });
    } else if (raw.type === "image") {
      const image = imageBlock.safeParse(raw);
      if (!image.success) return zodFailureAt(image.error, param);
      parts.push(imageToChat(image.data));
    } else if (raw.type === "tool_result") {
      const result = toolResultBlock.safeParse(raw);
      if (!result.success) return zodFailureAt(result.error, param);
      const text = toolResultText(result.data);
      out.push({
        role: "tool",
        tool_call_id: result.data.tool_use_id,
        content: result.data.is_error ? `Error: ${text}` : text,
        ...markOf(result.data),
      });
      // A chat tool message carries text only: the result's images follow in the turn's user message.
      for (const block of Array.isArray(result.data.content) ? result.data.content : []) {
        const image = imageBlock.safeParse(block);
        if (image.success) parts.push(imageToChat(image.data));
      }
    } else if (raw.type === "thinking" || raw.type === "redacted_thinking") continue;
    else return refuseBlock(raw.type, `${param}.type`);
  }
  if (parts.length > 0) out.push({ role: "user", content: parts });
  return out;
}

function assistantTurnToChat(blocks: z.infer<typeof anyBlock>[], at: string): ChatMessage | Failure {
  let text = "";
  const calls: unknown[] = [];
  for (const [i, raw] of blocks.entries()) {
    const param = `${at}.${i}`;
    if (raw.type === "text") {
      const block = blockText(raw, param);
      if (isFailure(block)) return block;
      text += block;
    } else if (raw.type === "tool_use") {
      const use = toolUseBlock.safeParse(raw);
      if (!use.success) return zodFailureAt(use.error, param);
      calls.push({ id: use.data.id, type: "function", function: { name: use.data.name, arguments: JSON.stringify(use.data.input ?? {}) } });
    } else if (raw.type === "thinking" || raw.type === "redacted_thinking") continue;
    else return refuseBlock(raw.type, `${param}.type`);
  }
  return { role: "assistant", content: text === "" && calls.length > 0 ? null : text, ...(calls.length > 0 ? { tool_calls: calls } : {}) };
}

/** A system message inside the conversation: its text blocks, as one text. */
function systemTurnText(blocks: z.infer<typeof anyBlock>[], at: string): string | Failure {
  let text = "";
  for (const [i, raw] of blocks.entries()) {
    if (raw.type !== "text") return refuseBlock(raw.type, `${at}.${i}.type`);
    const block = blockText(raw, `${at}.${i}`);
    if (isFailure(block)) return block;
    text += block;
  }
  return text;
}

/** The system text as chat content: its blocks as text parts when one is marked for the prompt cache. */
function systemToChat(system: MessagesRequest["system"]): string | unknown[] {
  if (typeof system === "string") return system;
  const blocks = system ?? [];
  if (blocks.some((b) => markOf(b).cache_control)) return blocks.map((b) => ({ type: "text", text: b.text, ...markOf(b) }));
  return blocks.map((b) => b.text).join("\n");
}

/** The conversation as chat messages, the system text first. */
export function conversationToChat(body: Pick<MessagesRequest, "system" | "messages">): ChatMessage[] | Failure {
  const out: ChatMessage[] = [];
  const system = systemToChat(body.system);
  if (system.length > 0) out.push({ role: "system", content: system });
  for (const [i, m] of body.messages.entries()) {
    const at = `messages.${i}.content`;
    if (typeof m.content === "string") {
      out.push({ role: m.role, content: m.content });
      continue;
    }
    for (const [j, block] of m.content.entries()) {
      const unknown = unknownField(block, BLOCK_FIELDS[block.type], `${at}.${j}`);
      if (unknown) return unknown;
    }
    if (m.role === "system") {
      const text = systemTurnText(m.content, at);
      if (isFailure(text)) return text;
      out.push({ role: "system", content: text });
    } else if (m.role === "user") {
      const turn = userTurnToChat(m.content, at);
      if ("code" in turn) return turn;
      out.push(...turn);
    } else {
      const turn = assistantTurnToChat(m.content, at);
      if (isFailure(turn)) return turn;
      out.push(turn);
    }
  }
  return out;
}

export function toolsToChat(body: Pick<MessagesRequest, "tools" | "tool_choice">): Record<string, unknown> | Failure {
  const out: Record<string, unknown> = {};
  if (body.tools && body.tools.length > 0) {
    const tools: unknown[] = [];
    for (const [i, t] of body.tools.entries()) {
      const search = anthropicWebSearch.safeParse(t);
      if (search.success) {
        out.anthropic = { web_search: search.data };
        continue;
      }
      const unknown = unknownField(t, CLIENT_TOOL_FIELDS, `tools.${i}`);
      if (unknown && (t.type === undefined || t.type === "custom")) return unknown;
      if ((t.type !== undefined && t.type !== "custom") || !t.input_schema) {
        return fail(
          "invalid_request",
          `Tool \`${t.name}\` is a server tool (${t.type ?? "no input_schema"}): only client tools with an input_schema are supported.`,
          {
            param: `tools.${i}`,
          },
        );
      }
      tools.push({
        type: "function",
        function: { name: t.name, ...(t.description ? { description: t.description } : {}), parameters: t.input_schema },
        ...markOf(t),
      });
    }
    if (tools.length > 0) out.tools = tools;
  }
  const choice = body.tool_choice;
  // A choice that names the web search leaves the model free to search: chat names only functions.
  if (choice && !(choice.type === "tool" && choice.name === "web_search" && out.anthropic)) {
    if (choice.type === "tool" && !choice.name)
      return fail("invalid_request", "tool_choice of type `tool` needs the tool's `name`.", { param: "tool_choice.name" });
    out.tool_choice =
      choice.type === "auto"
        ? "auto"
        : choice.type === "any"
          ? "required"
          : choice.type === "none"
            ? "none"
            : { type: "function", function: { name: choice.name } };
    if (choice.disable_parallel_tool_use === true && out.tools) out.parallel_tool_calls = false;
  }
  return out;
}

/** A thinking budget as the chat wire's effort. */
export function thinkingToReasoningEffort(budgetTokens: number): "low" | "medium" | "high" {
  if (budgetTokens >= THINKING_HIGH_TOKENS) return "high";
  return budgetTokens >= THINKING_MEDIUM_TOKENS ? "medium" : "low";
}

/** The anthropic-beta header's names (comma-separated), or the 400 when there are too many or too long. */
function betasOf(header: string | null): string[] | Failure {
  const names = (header ?? "")
    .split(",")
    .map((name) => name.trim())
    .filter((name) => name !== "");
  const betas = anthropicExtras.shape.betas.safeParse(names);
  return betas.success
    ? (betas.data ?? [])
    : fail("invalid_request", `Invalid anthropic-beta header: ${betas.error.issues[0]!.message}`, { param: "anthropic-beta" });
}

/** The effort a thinking setting asks of a chat model that reasons: by budget, or the output_config's effort. */
function thinkingToEffort(body: MessagesRequest): "low" | "medium" | "high" | null {
  if (body.thinking?.type === "enabled") return thinkingToReasoningEffort(body.thinking.budget_tokens);
  const effort = body.output_config?.effort;
  if (body.thinking?.type !== "adaptive" || !effort) return null;
  return effort === "max" ? "high" : effort;
}

/** Anthropic's fields without a chat counterpart, for an Anthropic backend (absent when none is set). */
function anthropicExtrasOf(body: MessagesRequest, betas: string[]): AnthropicExtras | null {
  const extras: AnthropicExtras = {};
  if (body.thinking) extras.thinking = body.thinking;
  if (body.output_config) extras.output_config = body.output_config;
  if (body.context_management) extras.context_management = body.context_management;
  if (betas.length > 0) extras.betas = betas;
  return Object.keys(extras).length > 0 ? extras : null;
}

/**
 * A Messages request as the gateway's chat body, or the 400 that names the field at fault.
 * @example messagesToChat({ model: "claude-sonnet-4", max_tokens: 64, messages: [{ role: "user", content: "Hi" }] })
 *   // { chat: { model: "claude-sonnet-4", max_tokens: 64, messages: [{ role: "user", content: "Hi" }] }, … }
 */
export function messagesToChat(
  raw: unknown,
  headers: Pick<Headers, "get"> = new Headers(),
): { request: MessagesRequest; chat: Record<string, unknown> } | Failure {
  const parsed = messagesRequest.safeParse(raw);
  if (!parsed.success) return zodFailure(parsed.error);
  const body = parsed.data;
  const betas = betasOf(headers.get("anthropic-beta"));
  if (isFailure(betas)) return betas;
  const messages = conversationToChat(body);
  if ("code" in messages) return messages;
  const tools = toolsToChat(body);
  if (isFailure(tools)) return tools;
  const chat: Record<string, unknown> = { model: body.model, messages, max_tokens: body.max_tokens, ...tools };
  if (body.stop_sequences && body.stop_sequences.length > 0) chat.stop = body.stop_sequences;
  if (body.temperature !== undefined) chat.temperature = body.temperature;
  if (body.top_p !== undefined) chat.top_p = body.top_p;
  const effort = thinkingToEffort(body);
  if (effort && takesReasoningEffort(body.model)) chat.reasoning_effort = effort;
  const extras = anthropicExtrasOf(body, betas);
  if (extras) chat.anthropic = { ...(chat.anthropic as AnthropicExtras | undefined), ...extras };
  if (body.metadata?.user_id) chat.user = body.metadata.user_id;
  if (body.stream === true) {
    chat.stream = true;
    // The usage chunk carries the figures of `message_delta`.
    chat.stream_options = { include_usage: true };
  }
  return { request: body, chat };
}
