/**
 * OpenAI chat request → Anthropic Messages request (POST /v1/messages). System and developer
 * messages become `system`; tool results become `tool_result` blocks in a user turn; assistant
 * tool calls become `tool_use` blocks; consecutive turns of one role are merged, since Anthropic
 * wants user and assistant to alternate. Prompt-cache marks (`cache_control`) on content parts,
 * on a message (its last block), on tools and on the request itself (Anthropic's automatic
 * caching) are passed on where they were; a marked system part makes `system` a list of text
 * blocks so the mark keeps its place. Anthropic's own fields that chat lacks (`anthropic`:
 * thinking, output_config, context_management, betas, web search, as the Messages wire received
 * them) are sent as they came, thinking kept inside the output budget.
 */
import {
  argumentsToObject,
  cacheControl,
  contentText,
  dataUrlToInline,
  imageUrlOf,
  readChatShape,
  type ChatMessage,
  type ChatShape,
  type ContentPart,
} from "../chatShape.ts";
import type { AnthropicExtras } from "../../operations/chat/schema.ts";
import type { ChatRequestInput, JsonUpstreamRequest, TextCountAdapter } from "../types.ts";

/** The API version every request names; replies and events below follow it. */
export const ANTHROPIC_VERSION = "2023-06-01";

type Block = Record<string, unknown>;
interface Turn {
  role: "user" | "assistant";
  content: Block[];
}

/** The part's own cache mark, read through the shared schema (a malformed one is dropped). */
function markOf(part: ContentPart): Block {
  const mark = cacheControl.parse((part as { cache_control?: unknown }).cache_control);
  return mark ? { cache_control: mark } : {};
}

function contentToAnthropicBlocks(value: ChatMessage["content"]): Block[] {
  if (typeof value === "string") return value === "" ? [] : [{ type: "text", text: value }];
  const blocks: Block[] = [];
  for (const part of value ?? []) {
    if (part.type === "text" && "text" in part && typeof part.text === "string")
      blocks.push({ type: "text", text: part.text, ...markOf(part) });
    else if (part.type === "image_url" && "image_url" in part) {
      const url = imageUrlOf(part as Parameters<typeof imageUrlOf>[0]);
      const inline = dataUrlToInline(url);
      blocks.push({
        type: "image",
        source: inline ? { type: "base64", media_type: inline.mimeType, data: inline.data } : { type: "url", url },
        ...markOf(part),
      });
    }
  }
  return blocks;
}

/** A mark on the message itself goes on its last block, where Anthropic reads it. */
function withMessageMark(message: ChatMessage, turn: Turn | null): Turn | null {
  const last = turn?.content[turn.content.length - 1];
  if (last && message.cache_control) last.cache_control = message.cache_control;
  return turn;
}

function messageToAnthropicTurn(message: ChatMessage): Turn | null {
  switch (message.role) {
    case "user":
      return { role: "user", content: contentToAnthropicBlocks(message.content) };
    case "assistant": {
      const content = contentToAnthropicBlocks(message.content);
      for (const call of message.tool_calls ?? []) {
        content.push({ type: "tool_use", id: call.id, name: call.function.name, input: argumentsToObject(call.function.arguments) });
      }
      return { role: "assistant", content };
    }
    case "tool":
    case "function":
      return {
        role: "user",
        content: [{ type: "tool_result", tool_use_id: message.tool_call_id ?? message.name ?? "", content: contentText(message.content) }],
      };
    default:
      return null;
  }
}

/** The conversation as alternating turns, with the system text apart (its blocks, when any is marked). */
export function messagesToAnthropic(messages: ChatMessage[]): { system: string | null; systemBlocks: Block[] | null; turns: Turn[] } {
  const system: string[] = [];
  const systemBlocks: Block[] = [];
  const turns: Turn[] = [];
  for (const message of messages) {
    if (message.role === "system" || message.role === "developer") {
      system.push(contentText(message.content));
      const blocks = contentToAnthropicBlocks(message.content).filter((b) => b.type === "text");
      systemBlocks.push(...(withMessageMark(message, { role: "user", content: blocks })?.content ?? []));
      continue;
    }
    const turn = withMessageMark(message, messageToAnthropicTurn(message));
    if (!turn || turn.content.length === 0) continue;
    const last = turns[turns.length - 1];
    if (last && last.role === turn.role) last.content.push(...turn.content);
    else turns.push(turn);
  }
  const marked = systemBlocks.some((b) => b.cache_control);
  return { system: system.length > 0 ? system.join("\n\n") : null, systemBlocks: marked ? systemBlocks : null, turns };
}

export function toolChoiceToAnthropic(shape: ChatShape): Block | null {
  const choice = shape.tool_choice;
  const parallel = shape.parallel_tool_calls === false ? { disable_parallel_tool_use: true } : {};
  if (!choice) return shape.parallel_tool_calls === false ? { type: "auto", ...parallel } : null;
  if (choice === "auto") return { type: "auto", ...parallel };
  if (choice === "none") return { type: "none" };
  if (choice === "required") return { type: "any", ...parallel };
  return { type: "tool", name: choice.function.name, ...parallel };
}

/** What `json_object` adds to the system text: Anthropic has no schema-free JSON mode. */
export const JSON_OBJECT_INSTRUCTION = "Reply with one valid JSON object and nothing else: no prose, no code fences.";

/**
 * OpenAI `response_format` → Anthropic: `json_schema` becomes structured output
 * (`output_config.format`, so the reply's text is JSON that fits the schema); `json_object`, which
 * has no Anthropic counterpart, becomes an instruction in the system text; `text` is the default.
 */
export function responseFormatToAnthropic(format: ChatShape["response_format"]): { outputConfig?: Block; instruction?: string } {
  if (format?.type === "json_object") return { instruction: JSON_OBJECT_INSTRUCTION };
  if (format?.type !== "json_schema") return {};
  const schema = (format as { json_schema?: { schema?: unknown } }).json_schema?.schema;
  const objectSchema = typeof schema === "object" && schema !== null && !Array.isArray(schema) ? schema : { type: "object" };
  return { outputConfig: { format: { type: "json_schema", schema: objectSchema } } };
}

/** Thinking budgets for the chat wire's efforts; Anthropic's least is 1,024 tokens. */
export const THINKING_BUDGET_TOKENS = { low: 1_024, medium: 4_096, high: 16_384 } as const;

/**
 * `reasoning_effort` → extended thinking, within the output budget (Anthropic counts thinking in
 * max_tokens and wants the budget below it); null when there is no room for the least budget.
 * @example reasoningEffortToThinking("medium", 8_192) // { type: "enabled", budget_tokens: 4096 }
 */
export function reasoningEffortToThinking(effort: unknown, maxTokens: number): Block | null {
  if (effort !== "low" && effort !== "medium" && effort !== "high") return null;
  const budget = Math.min(THINKING_BUDGET_TOKENS[effort], maxTokens - 1);
  return budget >= THINKING_BUDGET_TOKENS.low ? { type: "enabled", budget_tokens: budget } : null;
}

/**
 * The client's own thinking setting within the output budget: an enabled budget at or above
 * max_tokens is lowered below it, and dropped when the least budget no longer fits.
 * @example thinkingWithinBudget({ type: "enabled", budget_tokens: 32_000 }, 8_192) // { type: "enabled", budget_tokens: 8191 }
 */
export function thinkingWithinBudget(thinking: NonNullable<AnthropicExtras["thinking"]>, maxTokens: number): Block | null {
  if (thinking.type !== "enabled") return thinking;
  const budget = Math.min(thinking.budget_tokens, maxTokens - 1);
  return budget >= THINKING_BUDGET_TOKENS.low ? { ...thinking, budget_tokens: budget } : null;
}

/** Thinking: the client's own setting when it sent one, else the chat effort's. */
function thinkingOf(input: ChatRequestInput, extras: AnthropicExtras | undefined): Block | null {
  if (extras?.thinking) return thinkingWithinBudget(extras.thinking, input.maxTokens);
  return reasoningEffortToThinking(input.body.reasoning_effort, input.maxTokens);
}

/**
 * @example openAIToAnthropicRequest({ body, upstreamModel: "claude-sonnet-4-5", maxTokens: 512, stream: true }, key)
 *   // { path: "/v1/messages", headers: { "x-api-key": key, "anthropic-version": "2023-06-01", … }, body: … }
 */
export function openAIToAnthropicRequest(input: ChatRequestInput, apiKey: string | undefined): JsonUpstreamRequest {
  const shape = readChatShape(input.body);
  const extras = input.body.anthropic as AnthropicExtras | undefined;
  const { system, systemBlocks, turns } = messagesToAnthropic(shape.messages);
  const format = responseFormatToAnthropic(shape.response_format);
  const body: Record<string, unknown> = { model: input.upstreamModel, max_tokens: input.maxTokens, messages: turns };
  const systemText = [system, format.instruction].filter((text) => text).join("\n\n");
  if (systemBlocks) body.system = format.instruction ? [...systemBlocks, { type: "text", text: format.instruction }] : systemBlocks;
  else if (systemText) body.system = systemText;
  if (format.outputConfig || extras?.output_config) body.output_config = { ...extras?.output_config, ...format.outputConfig };
  if (extras?.context_management) body.context_management = extras.context_management;
  if (input.stream) body.stream = true;
  const thinking = thinkingOf(input, extras);
  // With thinking on, Anthropic takes no temperature and no top_p below 0.95: the effort wins.
  if (thinking) body.thinking = thinking;
  if (!thinking || thinking.type === "disabled") {
    if (shape.temperature != null) body.temperature = Math.min(shape.temperature, 1);
    if (shape.top_p != null) body.top_p = shape.top_p;
  }
  if (shape.stop != null) body.stop_sequences = typeof shape.stop === "string" ? [shape.stop] : shape.stop;
  if (shape.user) body.metadata = { user_id: shape.user };
  if (shape.cache_control) body.cache_control = shape.cache_control;
  if (shape.tools && shape.tools.length > 0 && shape.tool_choice !== "none") {
    body.tools = shape.tools.map((t) => ({
      name: t.function.name,
      ...(t.function.description ? { description: t.function.description } : {}),
      input_schema: t.function.parameters ?? { type: "object", properties: {} },
      ...(t.cache_control ? { cache_control: t.cache_control } : {}),
    }));
    const choice = toolChoiceToAnthropic(shape);
    if (choice) body.tool_choice = choice;
  }
  // Anthropic's web search, with the calls the hold covers as its max_uses (src/operations/chat/hosted.ts).
  if (extras?.web_search && shape.tool_choice !== "none") body.tools = [...((body.tools as Block[] | undefined) ?? []), extras.web_search];
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: input.stream ? "text/event-stream" : "application/json",
    "anthropic-version": ANTHROPIC_VERSION,
  };
  if (extras?.betas && extras.betas.length > 0) headers["anthropic-beta"] = extras.betas.join(",");
  if (apiKey) headers["x-api-key"] = apiKey;
  return { path: "/v1/messages", body: JSON.stringify(body), headers };
}

/**
 * Anthropic's free count (`POST /v1/messages/count_tokens`) of a text sent as one user message:
 * its `input_tokens`, the text's tokens and the message's few framing tokens.
 * @example anthropicCount(key).buildCountRequest("Hi", "claude-sonnet-4") // { path: "/v1/messages/count_tokens", … }
 */
export function anthropicCount(apiKey: string | undefined): TextCountAdapter {
  return {
    buildCountRequest: (text, upstreamModel) => {
      const headers: Record<string, string> = { "content-type": "application/json", "anthropic-version": ANTHROPIC_VERSION };
      if (apiKey) headers["x-api-key"] = apiKey;
      const body = JSON.stringify({ model: upstreamModel, messages: [{ role: "user", content: text }] });
      return { path: "/v1/messages/count_tokens", body, headers };
    },
    parseCountResponse: (text) => countField(text, "input_tokens"),
  };
}

/** A non-negative integer field of a count reply's JSON, or null. */
export function countField(text: string, field: string): number | null {
  try {
    const value = (JSON.parse(text) as Record<string, unknown> | null)?.[field];
    return typeof value === "number" && Number.isSafeInteger(value) && value >= 0 ? value : null;
  } catch {
    return null;
  }
}
