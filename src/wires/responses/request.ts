/**
 * OpenAI Responses request (POST /v1/responses) → the gateway's chat request, so that it takes
 * the one chat path (admission, reserve, metering, residency). Stateless: nothing is stored, so
 * `store: true`, `previous_response_id`, `conversation` and `background` are refused with a 400
 * that says why. Only function tools translate; built-in tools (web search, files, computer use)
 * are refused by name.
 *
 *   instructions            → a leading system message
 *   input (string)          → one user message
 *   message items           → messages; input_text/output_text → text parts, input_image → image_url
 *   function_call items     → an assistant message's tool_calls (consecutive calls share one)
 *   function_call_output    → a tool message
 *   reasoning items         → dropped (no backend takes them back through chat)
 *   max_output_tokens       → max_completion_tokens
 *   reasoning.effort        → reasoning_effort, for a model that reasons (catalog/reasoning.ts)
 *   text.format             → response_format;  tools/tool_choice → chat's function tools
 */
import { z } from "zod";
import { takesReasoningEffort } from "../../catalog/reasoning.ts";
import { fail, type Failure } from "../../errors.ts";
import { CHAT_TOKENS_MAX, MESSAGES_MAX } from "../../http/chat/schema.ts";
import { zodFailure } from "../../http/guard.ts";

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

const messageItem = z.looseObject({
  type: z.literal("message").optional(),
  role: z.enum(["user", "assistant", "system", "developer"]),
  content: z.union([z.string(), z.array(contentPart)]),
});
const functionCallItem = z.looseObject({
  type: z.literal("function_call"),
  call_id: z.string().min(1),
  name: z.string().min(1),
  arguments: z.string(),
});
const functionCallOutputItem = z.looseObject({
  type: z.literal("function_call_output"),
  call_id: z.string().min(1),
  output: z.union([z.string(), z.array(contentPart)]),
});
const otherItem = z.looseObject({ type: z.string() });
const inputItem = z.union([messageItem, functionCallItem, functionCallOutputItem, otherItem]);

const functionTool = z.looseObject({
  type: z.literal("function"),
  name: z.string().min(1),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
});

const toolChoice = z.union([
  z.enum(["auto", "none", "required"]),
  z.looseObject({ type: z.literal("function"), name: z.string().min(1) }),
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

export const responsesRequest = z.looseObject({
  model: z.string().min(1).max(256),
  input: z.union([z.string(), z.array(inputItem).min(1).max(MESSAGES_MAX)]),
  instructions: z.string().nullish(),
  tools: z
    .array(z.looseObject({ type: z.string() }))
    .max(RESPONSES_TOOLS_MAX)
    .nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  max_output_tokens: tokens.nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  reasoning: z.looseObject({ effort: z.enum(["none", "minimal", "low", "medium", "high", "xhigh"]).nullish() }).nullish(),
  text: z.looseObject({ format: textFormat.optional() }).nullish(),
  stream: z.boolean().nullish(),
  store: z.boolean().nullish(),
  previous_response_id: z.string().nullish(),
  conversation: z.unknown().optional(),
  background: z.boolean().nullish(),
  user: z.string().nullish(),
  metadata: z.record(z.string(), z.string()).nullish(),
});

export type ResponsesRequest = z.infer<typeof responsesRequest>;

type ChatMessage = Record<string, unknown>;

function partsToChat(parts: z.infer<typeof contentPart>[], at: string): unknown[] | Failure {
  const out: unknown[] = [];
  for (const [i, part] of parts.entries()) {
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

/** The input items as chat messages, in order. */
function itemsToChat(items: z.infer<typeof inputItem>[]): ChatMessage[] | Failure {
  const messages: ChatMessage[] = [];
  for (const [i, raw] of items.entries()) {
    const at = `input.${i}`;
    if (raw.type === "function_call") {
      const item = functionCallItem.parse(raw);
      const call = { id: item.call_id, type: "function", function: { name: item.name, arguments: item.arguments } };
      // Calls right after an assistant message (its text, or other calls) belong to it.
      const last = messages[messages.length - 1];
      if (last?.role === "assistant") {
        const calls = (last.tool_calls as unknown[] | undefined) ?? [];
        calls.push(call);
        last.tool_calls = calls;
      } else messages.push({ role: "assistant", content: null, tool_calls: [call] });
    } else if (raw.type === "function_call_output") {
      const item = functionCallOutputItem.parse(raw);
      messages.push({ role: "tool", tool_call_id: item.call_id, content: outputText(item.output) });
    } else if (raw.type === "reasoning") {
    } else if (raw.type === undefined || raw.type === "message") {
      const item = messageItem.safeParse(raw);
      if (!item.success) return fail("invalid_request", `Invalid message item: ${item.error.issues[0]!.message}`, { param: at });
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

function toolsToChat(body: ResponsesRequest): { tools?: unknown[]; tool_choice?: unknown } | Failure {
  const out: { tools?: unknown[]; tool_choice?: unknown } = {};
  if (body.tools && body.tools.length > 0) {
    const tools: unknown[] = [];
    for (const [i, raw] of body.tools.entries()) {
      const tool = functionTool.safeParse(raw);
      if (!tool.success) {
        return fail("invalid_request", `Tools of type \`${raw.type}\` are not supported: only function tools are.`, {
          param: `tools.${i}.type`,
        });
      }
      const { name, description, parameters, strict } = tool.data;
      tools.push({
        type: "function",
        function: {
          name,
          ...(description ? { description } : {}),
          parameters: parameters ?? { type: "object", properties: {} },
          ...(strict != null ? { strict } : {}),
        },
      });
    }
    out.tools = tools;
  }
  const choice = body.tool_choice;
  if (typeof choice === "string") out.tool_choice = choice;
  else if (choice?.type === "function" && typeof choice.name === "string")
    out.tool_choice = { type: "function", function: { name: choice.name } };
  else if (choice) return fail("invalid_request", `tool_choice of type \`${choice.type}\` is not supported.`, { param: "tool_choice" });
  return out;
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
export function responsesToChat(raw: unknown): { request: ResponsesRequest; chat: Record<string, unknown> } | Failure {
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
  const chat: Record<string, unknown> = { model: body.model, messages, ...tools };
  if (body.max_output_tokens != null) chat.max_completion_tokens = body.max_output_tokens;
  if (body.temperature != null) chat.temperature = body.temperature;
  if (body.top_p != null) chat.top_p = body.top_p;
  if (body.parallel_tool_calls != null && chat.tools) chat.parallel_tool_calls = body.parallel_tool_calls;
  if (body.reasoning?.effort && takesReasoningEffort(body.model)) chat.reasoning_effort = body.reasoning.effort;
  const format = formatToChat(body.text?.format);
  if (format) chat.response_format = format;
  if (body.user) chat.user = body.user;
  if (body.stream === true) {
    chat.stream = true;
    // The usage chunk carries the figures of `response.completed`.
    chat.stream_options = { include_usage: true };
  }
  return { request: body, chat };
}
