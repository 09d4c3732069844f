/**
 * POST /v1/messages: the Anthropic Messages wire format (API version 2023-06-01), non-streamed
 * and as named SSE events (message_start, content_block_start/delta/stop, message_delta with
 * the cumulative output_tokens, message_stop). The flow and knobs are vendor.ts's.
 *
 * The web search tool (`web_search_20250305` and later): the model runs `webSearchCalls`
 * searches, at most the tool's `max_uses`, before it answers; each is a server_tool_use block and
 * a web_search_tool_result block, counted in `usage.server_tool_use.web_search_requests`.
 */
import { z } from "zod";
import { SIM_IMAGE_TOKENS, simFieldsTokens, type SimMessage } from "./tokens.ts";
import type { Refusal, ReplyPlan, VendorRequest, VendorWire } from "./vendor.ts";

const block = z.looseObject({
  type: z.string(),
  text: z.string().optional(),
  content: z.union([z.string(), z.array(z.looseObject({ type: z.string(), text: z.string().optional() }))]).optional(),
});

const AnthropicRequestSchema = z.looseObject({
  model: z.string().min(1),
  max_tokens: z.number().int().min(1),
  messages: z.array(z.looseObject({ role: z.enum(["user", "assistant"]), content: z.union([z.string(), z.array(block)]) })).min(1),
  system: z.union([z.string(), z.array(z.looseObject({ type: z.string(), text: z.string() }))]).optional(),
  stream: z.boolean().optional(),
  tools: z
    .array(
      z.looseObject({
        name: z.string(),
        type: z.string().optional(),
        input_schema: z.unknown().optional(),
        max_uses: z.number().int().min(1).optional(),
      }),
    )
    .optional(),
  tool_choice: z.looseObject({ type: z.enum(["auto", "any", "tool", "none"]), name: z.string().optional() }).optional(),
});

function errorBody(type: string, message: string): string {
  return JSON.stringify({ type: "error", error: { type, message } });
}

function refusal(status: number, type: string, message: string, headers?: Record<string, string>): Refusal {
  return { status, body: errorBody(type, message), headers };
}

/** A block's countable text: text blocks, and the text of tool results. */
function blockText(b: Block): string {
  if (b.type === "text") return b.text ?? "";
  if (b.type !== "tool_result") return "";
  if (typeof b.content === "string") return b.content;
  return (b.content ?? []).map((part) => part.text ?? "").join("");
}

type AnthropicRequest = z.infer<typeof AnthropicRequestSchema>;
type Block = z.infer<typeof block>;

/** Fields that steer sampling or delivery; `messages` and `system` are counted as messages. */
// A prompt-cache mark (`cache_control`) steers the cache; the model does not read it.
const controlFields = new Set([
  "model",
  "max_tokens",
  "messages",
  "system",
  "stream",
  "temperature",
  "top_p",
  "top_k",
  "stop_sequences",
  "metadata",
  "cache_control",
]);
const textFields = new Set(["type", "text", "cache_control"]);
const toolResultFields = new Set(["type", "content", "cache_control"]);

/** A block's cost beyond the text blockText reads: its other data (a tool call's name and input), an image's price. */
function blockExtraTokens(b: Block): number {
  if (b.type === "tool_result") {
    const parts = Array.isArray(b.content) ? b.content : [];
    return simFieldsTokens(b, toolResultFields) + parts.reduce((sum, part) => sum + blockExtraTokens(part), 0);
  }
  return simFieldsTokens(b, textFields) + (b.type === "image" ? SIM_IMAGE_TOKENS : 0);
}

/**
 * What an Anthropic request costs beyond its messages' text: every block's other data, the
 * system blocks' other data, and every body field that is not a control field (tools, tool_choice,
 * output_config), by tokens.ts's rule.
 */
export function simAnthropicExtraTokens(body: AnthropicRequest): number {
  let total = simFieldsTokens(body, controlFields);
  if (Array.isArray(body.system)) for (const b of body.system) total += simFieldsTokens(b, textFields);
  for (const message of body.messages) if (Array.isArray(message.content)) for (const b of message.content) total += blockExtraTokens(b);
  return total;
}

/** The request as the simulator reads it, or why it is invalid. */
export function parseAnthropicRequest(raw: unknown): AnthropicRequest | string {
  const result = AnthropicRequestSchema.safeParse(raw);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  return `${issue?.path.join(".") || "body"}: ${issue?.message ?? "invalid request"}`;
}

/** The messages the prompt rule counts: the system text first, then each turn's text. */
export function anthropicSimMessages(body: AnthropicRequest): SimMessage[] {
  const messages: SimMessage[] = [];
  if (body.system !== undefined) {
    messages.push({ role: "system", content: typeof body.system === "string" ? body.system : body.system.map((b) => b.text).join("") });
  }
  for (const message of body.messages) {
    const content = typeof message.content === "string" ? message.content : message.content.map(blockText).join("");
    messages.push({ role: message.role, content });
  }
  return messages;
}

function parse(raw: unknown): VendorRequest | string {
  const body = parseAnthropicRequest(raw);
  if (typeof body === "string") return body;
  const last = body.messages[body.messages.length - 1]!;
  const choice = body.tool_choice;
  const isSearch = (t: { type?: string }) => /^web_search_\d{8}$/.test(t.type ?? "");
  const search = choice?.type === "none" ? undefined : body.tools?.find(isSearch);
  return {
    model: body.model,
    stream: body.stream === true,
    messages: anthropicSimMessages(body),
    promptExtraTokens: simAnthropicExtraTokens(body),
    maxTokens: body.max_tokens,
    tools:
      choice?.type === "none" ? [] : (body.tools ?? []).filter((t) => !isSearch(t)).map((t) => ({ name: t.name, schema: t.input_schema })),
    ...(search ? { webSearchMaxUses: search.max_uses ?? null } : {}),
    toolRequired: choice?.type === "any" ? "any" : choice?.type === "tool" ? (choice.name ?? null) : null,
    afterToolResult: last.role === "user" && Array.isArray(last.content) && last.content.some((b) => b.type === "tool_result"),
  };
}

function stopReason(plan: ReplyPlan): string {
  return plan.finish === "tool" ? "tool_use" : plan.finish === "length" ? "max_tokens" : "end_turn";
}

function event(type: string, data: Record<string, unknown>): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
}

const messageId = (plan: ReplyPlan) => `msg_sim_${plan.seq}`;
/** The answer's block follows the searches' blocks. */
const answerIndex = (plan: ReplyPlan) => 2 * plan.webSearchCalls;
const toolUseId = (plan: ReplyPlan) => `toolu_sim_${plan.seq}`;

/** The searches' blocks, in the order Anthropic sends them: each call, then its results. */
function searchBlocks(plan: ReplyPlan): Record<string, unknown>[] {
  const blocks: Record<string, unknown>[] = [];
  for (let i = 0; i < plan.webSearchCalls; i++) {
    const id = `srvtoolu_sim_${plan.seq}_${i}`;
    blocks.push({ type: "server_tool_use", id, name: "web_search", input: { query: `simulated search ${i + 1}` } });
    blocks.push({
      type: "web_search_tool_result",
      tool_use_id: id,
      content: [
        {
          type: "web_search_result",
          url: `https://example.com/${i + 1}`,
          title: `Result ${i + 1}`,
          encrypted_content: "sim",
          page_age: null,
        },
      ],
    });
  }
  return blocks;
}

/** A search block as Anthropic streams it: a call starts with an empty input, streamed as JSON after. */
function streamedBlock(block: Record<string, unknown>, index: number): string {
  if (block.type !== "server_tool_use")
    return event("content_block_start", { index, content_block: block }) + event("content_block_stop", { index });
  return (
    event("content_block_start", { index, content_block: { ...block, input: {} } }) +
    event("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: JSON.stringify(block.input) } }) +
    event("content_block_stop", { index })
  );
}

/**
 * Anthropic's input_tokens are the prompt tokens neither read from nor written to the cache.
 * Reported times `usageScale` (a vendor that overstates), or not at all with `omitUsage` (a
 * proxy that drops it): the log keeps the true figures.
 */
function usage(plan: ReplyPlan, outputTokens: number) {
  const scaled = (n: number) => Math.round(n * plan.usageReport.scale);
  const writes1h = scaled(plan.cacheWrite1hTokens);
  const writes = scaled(plan.cacheWriteTokens);
  return {
    ...searchUsage(plan),
    input_tokens: scaled(plan.promptTokens - plan.cacheReadTokens - plan.cacheWriteTokens),
    cache_creation_input_tokens: writes,
    cache_creation: { ephemeral_5m_input_tokens: writes - writes1h, ephemeral_1h_input_tokens: writes1h },
    cache_read_input_tokens: scaled(plan.cacheReadTokens),
    output_tokens: scaled(outputTokens),
  };
}

function searchUsage(plan: ReplyPlan) {
  const searches = Math.round(plan.webSearchCalls * plan.usageReport.scale);
  return plan.webSearchCalls > 0 ? { server_tool_use: { web_search_requests: searches } } : {};
}

/** The reply's usage field, unless usage is omitted. */
const usageField = (plan: ReplyPlan, outputTokens: number) => (plan.usageReport.omit ? {} : { usage: usage(plan, outputTokens) });

export const anthropicWire: VendorWire = {
  // Anthropic takes the key as `x-api-key`, and recent SDKs send it as a Bearer token.
  authorized: (options, req) =>
    options.apiKey === null ||
    req.headers.get("x-api-key") === options.apiKey ||
    req.headers.get("authorization") === `Bearer ${options.apiKey}`,
  unauthorized: refusal(401, "authentication_error", "invalid x-api-key"),
  rateLimited: refusal(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit (simulated).", {
    "retry-after": "1",
  }),
  serverError: refusal(500, "api_error", "Internal server error (simulated)."),
  invalid: (message) => refusal(400, "invalid_request_error", message),
  parse,
  toolArgumentsWhole: false,
  reportsThoughtTokens: false,
  reportsCacheWrites: true,

  complete(plan) {
    const content: Record<string, unknown>[] = plan.tool
      ? [{ type: "tool_use", id: toolUseId(plan), name: plan.tool.name, input: JSON.parse(plan.tool.argumentsJson) }]
      : [{ type: "text", text: plan.chunks.map((c) => c.text).join("") }];
    content.unshift(...searchBlocks(plan));
    return JSON.stringify({
      id: messageId(plan),
      type: "message",
      role: "assistant",
      model: plan.model,
      content,
      stop_reason: stopReason(plan),
      stop_sequence: null,
      ...usageField(plan, plan.tokens),
    });
  },

  head(plan) {
    const message = {
      id: messageId(plan),
      type: "message",
      role: "assistant",
      content: [],
      model: plan.model,
      stop_reason: null,
      stop_sequence: null,
      ...usageField(plan, Math.min(1, plan.tokens)),
    };
    const contentBlock = plan.tool
      ? { type: "tool_use", id: toolUseId(plan), name: plan.tool.name, input: {} }
      : { type: "text", text: "" };
    const searches = searchBlocks(plan).map(streamedBlock).join("");
    const index = answerIndex(plan);
    return (
      event("message_start", { message }) +
      searches +
      event("content_block_start", { index, content_block: contentBlock }) +
      event("ping", {})
    );
  },

  chunk(plan, index) {
    const text = plan.chunks[index]!.text;
    const delta = plan.tool ? { type: "input_json_delta", partial_json: text } : { type: "text_delta", text };
    return event("content_block_delta", { index: answerIndex(plan), delta });
  },

  tail(plan) {
    return (
      event("content_block_stop", { index: answerIndex(plan) }) +
      event("message_delta", {
        delta: { stop_reason: stopReason(plan), stop_sequence: null },
        ...(plan.usageReport.omit
          ? {}
          : { usage: { output_tokens: Math.round(plan.tokens * plan.usageReport.scale), ...searchUsage(plan) } }),
      }) +
      event("message_stop", {})
    );
  },
};
