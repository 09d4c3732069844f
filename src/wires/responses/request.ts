/**
 * OpenAI Responses request (POST /v1/responses) → the gateway's chat request, so that it takes
 * the one chat path (admission, reserve, metering, residency). Stateless: nothing is stored, so
 * `store: true`, `previous_response_id`, `conversation` and `background` are refused with a 400
 * that says why. Function, custom and namespace tools become chat's function tools and hosted
 * tools are left out (tools.ts).
 *
 *   instructions            → a leading system message
 *   input (string)          → one user message
 *   message items           → messages; input_text/output_text → text parts, input_image → image_url
 *   function_call items     → an assistant message's tool_calls (consecutive calls share one)
 *   function_call_output    → a tool message
 *   custom_tool_call(_output) → a function call with `{"input": …}` / a tool message (tools.ts)
 *   additional_tools items  → tools, as if in `tools`
 *   reasoning items, hosted tools' call items → dropped (no backend takes them back through chat)
 *   max_output_tokens       → max_completion_tokens
 *   reasoning.effort        → reasoning_effort, for a model that reasons (catalog/reasoning.ts)
 *   text.format             → response_format;  tools/tool_choice → chat's function tools
 *   web_search tool, max_tool_calls → Anthropic's web search (`anthropic.web_search`), run by an
 *                             Anthropic backend within the calls the hold covers, left out elsewhere
 */
import { z } from "zod";
import { takesReasoningEffort } from "../../catalog/reasoning.ts";
import { fail, isFailure, type Failure } from "../../errors.ts";
import { type AnthropicWebSearch, CHAT_TOKENS_MAX, MESSAGES_MAX } from "../../operations/chat/schema.ts";
import { zodFailure } from "../../errors.ts";
import { unknownField, zodFailureAt } from "../fields.ts";
import { flatToolName, responsesToolsToChat, type ToolNames } from "./tools.ts";

/** Tools one request may offer (the chat path's bound). */
export const RESPONSES_TOOLS_MAX = 1_000;

const tokens = z.number().int().min(1).max(CHAT_TOKENS_MAX);

const inputText = z.object({ type: z.enum(["input_text", "output_text"]), text: z.string() });
const inputImage = z.object({
  type: z.literal("input_image"),
  image_url: z.string().nullish(),
  file_id: z.string().nullish(),
  detail: z.enum(["low", "high", "auto", "original"]).nullish(),
});
const refusalPart = z.object({ type: z.literal("refusal"), refusal: z.string() });
const contentPart = z.union([inputText.loose(), inputImage.loose(), refusalPart.loose(), z.looseObject({ type: z.string() })]);

/** An earlier output item's `id` and `status` come back with it and are not sent on. */
const itemEcho = { id: z.string().max(256).nullish(), status: z.string().max(32).nullish() };
const messageItem = z.strictObject({
  ...itemEcho,
  type: z.literal("message").optional(),
  role: z.enum(["user", "assistant", "system", "developer"]),
  content: z.union([z.string(), z.array(contentPart)]),
});
const functionCallItem = z.strictObject({
  ...itemEcho,
  type: z.literal("function_call"),
  call_id: z.string().min(1),
  name: z.string().min(1),
  namespace: z.string().nullish(),
  arguments: z.string(),
});
const customToolCallItem = z.strictObject({
  ...itemEcho,
  type: z.literal("custom_tool_call"),
  call_id: z.string().min(1),
  name: z.string().min(1),
  namespace: z.string().nullish(),
  input: z.string(),
});
const functionCallOutputItem = z.strictObject({
  ...itemEcho,
  type: z.enum(["function_call_output", "custom_tool_call_output"]),
  call_id: z.string().min(1),
  output: z.union([z.string(), z.array(contentPart)]),
});
const additionalToolsItem = z.strictObject({
  ...itemEcho,
  role: z.string().max(32).nullish(),
  type: z.literal("additional_tools"),
  tools: z.array(z.looseObject({ type: z.string() })).max(RESPONSES_TOOLS_MAX),
});
const otherItem = z.looseObject({ type: z.string() });
/** Calls of hosted tools in earlier turns: their results were the model's own, nothing to send back. */
const HOSTED_CALL_ITEMS: ReadonlySet<string> = new Set([
  "web_search_call",
  "file_search_call",
  "code_interpreter_call",
  "image_generation_call",
]);
const inputItem = z.union([messageItem, functionCallItem, functionCallOutputItem, otherItem]);

const toolChoice = z.union([
  z.enum(["auto", "none", "required"]),
  z.looseObject({ type: z.enum(["function", "custom"]), name: z.string().min(1), namespace: z.string().nullish() }),
  z.looseObject({ type: z.string() }),
]);

const textFormat = z.union([
  z.looseObject({ type: z.literal("text") }),
  z.looseObject({ type: z.literal("json_object") }),
  z.looseObject({
    type: z.literal("json_schema"),
    name: z.string().min(1),
    schema: z.record(z.string(), z.unknown()),
    description: z.string().nullish(),
    strict: z.boolean().nullish(),
  }),
]);

/**
 * `include` values the reply may be asked for. `reasoning.encrypted_content` (Codex sends it) is
 * accepted and adds nothing: the gateway is stateless and returns no reasoning items. Any other
 * value is a 400 naming it.
 */
export const RESPONSES_INCLUDE = ["reasoning.encrypted_content"] as const;

/**
 * Every top-level field is known (a strict object: any other is a 400 naming it). Translated:
 * model, input, instructions, tools, tool_choice, parallel_tool_calls, max_tool_calls,
 * max_output_tokens, temperature, top_p, reasoning.effort and text.verbosity (for a model that
 * reasons; dropped for others, which refuse them), text.format, stream,
 * user, prompt_cache_key, prompt_cache_retention, safety_identifier, service_tier (priced by the
 * pool's paid fields, src/operations/chat/paidFields.ts). Accepted with no effect on the bill:
 * metadata and client_metadata (labels), include (above), reasoning.summary and reasoning.context
 * (no reasoning items come back), truncation "disabled" (the window is checked, never truncated).
 * Refused with a reason: store: true, previous_response_id, conversation, background.
 */
export const responsesRequest = z.strictObject({
  model: z.string().min(1).max(256),
  input: z.union([z.string(), z.array(inputItem).min(1).max(MESSAGES_MAX)]),
  instructions: z.string().nullish(),
  tools: z
    .array(z.looseObject({ type: z.string() }))
    .max(RESPONSES_TOOLS_MAX)
    .nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  /** The most hosted-tool calls: Anthropic's web search `max_uses` (src/operations/chat/hosted.ts). */
  max_tool_calls: tokens.nullish(),
  max_output_tokens: tokens.nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  reasoning: z
    .strictObject({
      effort: z.enum(["none", "minimal", "low", "medium", "high", "xhigh"]).nullish(),
      summary: z.enum(["auto", "concise", "detailed"]).nullish(),
      generate_summary: z.enum(["auto", "concise", "detailed"]).nullish(),
      context: z.string().max(64).nullish(),
    })
    .nullish(),
  text: z.strictObject({ format: textFormat.optional(), verbosity: z.enum(["low", "medium", "high"]).nullish() }).nullish(),
  include: z.array(z.enum(RESPONSES_INCLUDE)).max(RESPONSES_INCLUDE.length).nullish(),
  stream: z.boolean().nullish(),
  store: z.boolean().nullish(),
  previous_response_id: z.string().nullish(),
  conversation: z.unknown().optional(),
  background: z.boolean().nullish(),
  truncation: z
    .literal("disabled", { error: 'Only `truncation: "disabled"` is supported: the gateway checks the window and never truncates.' })
    .nullish(),
  user: z.string().nullish(),
  metadata: z.record(z.string(), z.string()).nullish(),
  client_metadata: z.record(z.string().max(64), z.string().max(4_096)).nullish(),
  prompt_cache_key: z.string().max(1_024).nullish(),
  prompt_cache_retention: z.enum(["in_memory", "24h"]).nullish(),
  safety_identifier: z.string().max(64).nullish(),
  service_tier: z.enum(["auto", "default", "flex", "scale", "priority"]).nullish(),
});

export type ResponsesRequest = z.infer<typeof responsesRequest>;

type ChatMessage = Record<string, unknown>;

/** The fields each content part may carry; `annotations` and `logprobs` come back from earlier replies and are not sent on. */
const PART_FIELDS: Readonly<Record<string, ReadonlySet<string>>> = {
  input_text: new Set(["type", "text"]),
  output_text: new Set(["type", "text", "annotations", "logprobs"]),
  input_image: new Set(["type", "image_url", "file_id", "detail"]),
  refusal: new Set(["type", "refusal"]),
};

function partsToChat(parts: z.infer<typeof contentPart>[], at: string): unknown[] | Failure {
  const out: unknown[] = [];
  for (const [i, part] of parts.entries()) {
    const unknown = unknownField(part, PART_FIELDS[part.type], `${at}.${i}`);
    if (unknown) return unknown;
    if ((part.type === "input_text" || part.type === "output_text") && typeof part.text === "string")
      out.push({ type: "text", text: part.text });
    else if (part.type === "refusal" && typeof part.refusal === "string") out.push({ type: "text", text: part.refusal });
    else if (part.type === "input_image") {
      const image = part as z.infer<typeof inputImage>;
      if (!image.image_url) {
        return fail(
          "invalid_request",
          "input_image needs `image_url` (a URL or a data URL): this gateway stores no files, so `file_id` cannot be used.",
          { param: `${at}.${i}` },
        );
      }
      const detail = image.detail === "low" || image.detail === "high" ? { detail: image.detail } : {};
      out.push({ type: "image_url", image_url: { url: image.image_url, ...detail } });
    } else {
      return fail("invalid_request", `Content of type \`${part.type}\` is not supported here; send input_text or input_image.`, {
        param: `${at}.${i}.type`,
      });
    }
  }
  return out;
}

function outputText(output: string | z.infer<typeof contentPart>[]): string {
  if (typeof output === "string") return output;
  return output.map((p) => (typeof p.text === "string" ? p.text : "")).join("");
}

/** A call the model made in an earlier turn, as chat's: a custom tool's input is its `input` argument. */
function callItemToChat(raw: z.infer<typeof otherItem>, at: string): Record<string, unknown> | Failure {
  const item = raw.type === "function_call" ? functionCallItem.safeParse(raw) : customToolCallItem.safeParse(raw);
  if (!item.success) return zodFailureAt(item.error, at);
  const args = "arguments" in item.data ? item.data.arguments : JSON.stringify({ input: item.data.input });
  return {
    id: item.data.call_id,
    type: "function",
    function: { name: flatToolName(item.data.namespace, item.data.name), arguments: args },
  };
}

/** The input items as chat messages, in order. */
function itemsToChat(items: z.infer<typeof inputItem>[]): ChatMessage[] | Failure {
  const messages: ChatMessage[] = [];
  for (const [i, raw] of items.entries()) {
    const at = `input.${i}`;
    if (raw.type === "function_call" || raw.type === "custom_tool_call") {
      const call = callItemToChat(raw, at);
      if (isFailure(call)) return call;
      // Calls right after an assistant message (its text, or other calls) belong to it.
      const last = messages[messages.length - 1];
      if (last?.role === "assistant") {
        const calls = (last.tool_calls as unknown[] | undefined) ?? [];
        calls.push(call);
        last.tool_calls = calls;
      } else messages.push({ role: "assistant", content: null, tool_calls: [call] });
    } else if (raw.type === "function_call_output" || raw.type === "custom_tool_call_output") {
      const item = functionCallOutputItem.safeParse(raw);
      if (!item.success) return zodFailureAt(item.error, at);
      messages.push({ role: "tool", tool_call_id: item.data.call_id, content: outputText(item.data.output) });
    } else if (raw.type === "additional_tools") {
      // Its tools are read with the request's (offeredTools); here its own fields are checked.
      const item = additionalToolsItem.safeParse(raw);
      if (!item.success) return zodFailureAt(item.error, at);
    } else if (raw.type === "reasoning" || HOSTED_CALL_ITEMS.has(raw.type as string)) {
    } else if (raw.type === undefined || raw.type === "message") {
      const item = messageItem.safeParse(raw);
      if (!item.success) return zodFailureAt(item.error, at);
      const { role, content } = item.data;
      if (typeof content === "string") messages.push({ role, content });
      else {
        const parts = partsToChat(content, `${at}.content`);
        if ("code" in parts) return parts;
        messages.push({ role, content: parts });
      }
    } else {
      return fail(
        "invalid_request",
        `Input items of type \`${raw.type}\` are not supported: this gateway is stateless and offers function tools only.`,
        { param: `${at}.type` },
      );
    }
  }
  return messages;
}

/** `tools` and every `additional_tools` item's tools, where they were sent. */
function offeredTools(body: ResponsesRequest): { tools: { type: string }[]; at: string }[] {
  const groups = body.tools ? [{ tools: body.tools, at: "tools" }] : [];
  if (typeof body.input === "string") return groups;
  for (const [i, raw] of body.input.entries()) {
    if (raw.type !== "additional_tools") continue;
    const item = additionalToolsItem.safeParse(raw);
    if (item.success) groups.push({ tools: item.data.tools, at: `input.${i}.tools` });
  }
  return groups;
}

function toolsToChat(body: ResponsesRequest): { fields: { tools?: unknown[]; tool_choice?: unknown }; names: ToolNames } | Failure {
  const offered = responsesToolsToChat(offeredTools(body));
  if ("code" in offered) return offered;
  const fields: { tools?: unknown[]; tool_choice?: unknown } = offered.tools.length > 0 ? { tools: offered.tools } : {};
  const choice = body.tool_choice;
  if (typeof choice === "string") fields.tool_choice = choice;
  else if ((choice?.type === "function" || choice?.type === "custom") && typeof choice.name === "string") {
    const name = flatToolName(choice.namespace as string | null | undefined, choice.name);
    if (!offered.names.has(name))
      return fail("invalid_request", `tool_choice names \`${name}\`, which is not offered.`, { param: "tool_choice" });
    fields.tool_choice = { type: "function", function: { name } };
  }
  // A hosted tool's choice names a tool left out: the model chooses among the rest.
  else if (choice && offered.omitted.includes(choice.type)) fields.tool_choice = "auto";
  else if (choice) return fail("invalid_request", `tool_choice of type \`${choice.type}\` is not supported.`, { param: "tool_choice" });
  if (fields.tool_choice !== undefined && !fields.tools) delete fields.tool_choice;
  return { fields, names: offered.names };
}

const webSearchTool = z.looseObject({
  type: z.enum(["web_search", "web_search_preview"]),
  user_location: z.looseObject({ type: z.literal("approximate") }).nullish(),
  filters: z.looseObject({ allowed_domains: z.array(z.string()).nullish() }).nullish(),
});

/**
 * The Responses wire's `web_search` tool as Anthropic's web search, which an Anthropic backend
 * runs (and other backends never see): `max_tool_calls` as its `max_uses`, the location and the
 * allowed domains as they are (the same shapes). The reply carries the answer, not
 * `web_search_call` items. Null when the request offers no web search.
 * @example webSearchToAnthropic({ …, tools: [{ type: "web_search" }], max_tool_calls: 2 })
 *   // { type: "web_search_20250305", name: "web_search", max_uses: 2 }
 */
export function webSearchToAnthropic(body: ResponsesRequest): AnthropicWebSearch | null {
  const found = (body.tools ?? []).map((tool) => webSearchTool.safeParse(tool)).find((parsed) => parsed.success);
  if (!found?.data) return null;
  const tool = found.data;
  const domains = tool.filters?.allowed_domains;
  return {
    type: "web_search_20250305",
    name: "web_search",
    ...(body.max_tool_calls != null ? { max_uses: body.max_tool_calls } : {}),
    ...(tool.user_location ? { user_location: tool.user_location } : {}),
    ...(domains && domains.length > 0 ? { allowed_domains: domains } : {}),
  };
}

function formatToChat(format: z.infer<typeof textFormat> | undefined): unknown {
  if (!format || format.type === "text") return undefined;
  if (format.type === "json_object") return { type: "json_object" };
  const f = format as Extract<z.infer<typeof textFormat>, { type: "json_schema" }>;
  return {
    type: "json_schema",
    json_schema: {
      name: f.name,
      schema: f.schema,
      ...(f.description ? { description: f.description } : {}),
      ...(f.strict != null ? { strict: f.strict } : {}),
    },
  };
}

/** What this stateless gateway refuses, with the reason the client needs. */
function statefulRefusal(body: ResponsesRequest): Failure | null {
  if (body.store === true) {
    return fail("invalid_request", "Stored responses are not available: this gateway is stateless. Send `store: false` (or omit it).", {
      param: "store",
    });
  }
  if (body.previous_response_id) {
    return fail(
      "invalid_request",
      "previous_response_id is not supported: this gateway stores no responses. Send the whole conversation as `input` items.",
      { param: "previous_response_id" },
    );
  }
  if (body.conversation != null)
    return fail(
      "invalid_request",
      "Conversations are not supported: this gateway stores none. Send the whole conversation as `input` items.",
      { param: "conversation" },
    );
  if (body.background === true)
    return fail("invalid_request", "Background responses are not supported: this gateway stores no responses.", { param: "background" });
  return null;
}

/**
 * A Responses request as the gateway's chat body, or the 400 that names the field at fault.
 * @example responsesToChat({ model: "gpt-4o", input: "Hi", max_output_tokens: 64 })
 *   // { model: "gpt-4o", messages: [{ role: "user", content: "Hi" }], max_completion_tokens: 64 }
 */
export function responsesToChat(
  raw: unknown,
): { request: ResponsesRequest; chat: Record<string, unknown>; toolNames: ToolNames } | Failure {
  const parsed = responsesRequest.safeParse(raw);
  if (!parsed.success) return zodFailure(parsed.error);
  const body = parsed.data;
  const refused = statefulRefusal(body);
  if (refused) return refused;
  const messages: ChatMessage[] = body.instructions ? [{ role: "system", content: body.instructions }] : [];
  const items = typeof body.input === "string" ? [{ role: "user" as const, content: body.input }] : body.input;
  const translated = itemsToChat(items);
  if ("code" in translated) return translated;
  messages.push(...translated);
  if (messages.length === 0) return fail("invalid_request", "The input has no message to answer.", { param: "input" });
  const tools = toolsToChat(body);
  if ("code" in tools) return tools;
  const chat: Record<string, unknown> = { model: body.model, messages, ...tools.fields };
  const search = webSearchToAnthropic(body);
  if (search) chat.anthropic = { web_search: search };
  if (body.max_output_tokens != null) chat.max_completion_tokens = body.max_output_tokens;
  if (body.temperature != null) chat.temperature = body.temperature;
  if (body.top_p != null) chat.top_p = body.top_p;
  if (body.parallel_tool_calls != null && chat.tools) chat.parallel_tool_calls = body.parallel_tool_calls;
  if (body.reasoning?.effort && takesReasoningEffort(body.model)) chat.reasoning_effort = body.reasoning.effort;
  const format = formatToChat(body.text?.format);
  if (format) chat.response_format = format;
  if (body.user) chat.user = body.user;
  // Verbosity is a reasoning model's setting, as the effort is (other models refuse it).
  if (body.text?.verbosity && takesReasoningEffort(body.model)) chat.verbosity = body.text.verbosity;
  for (const field of ["prompt_cache_key", "prompt_cache_retention", "safety_identifier", "service_tier"] as const)
    if (body[field] != null) chat[field] = body[field];
  if (body.stream === true) {
    chat.stream = true;
    // The usage chunk carries the figures of `response.completed`.
    chat.stream_options = { include_usage: true };
  }
  return { request: body, chat, toolNames: tools.names };
}
