/**
 * POST /v1/responses: a minimal OpenAI Responses API (stateless), for backends configured with
 * `responses_api: true`. Reads `instructions`, `input` (a string, or message, function_call and
 * function_call_output items), function tools, `tool_choice` and `max_output_tokens`; answers a
 * `response` object, or its typed SSE events with sequence numbers. Written from the public API
 * reference, independently of the gateway's own translation. The flow and knobs are vendor.ts's.
 */
import { z } from "zod";
import { simFieldsTokens, type SimMessage } from "./tokens.ts";
import type { Refusal, ReplyPlan, VendorRequest, VendorWire } from "./vendor.ts";

const part = z.looseObject({ type: z.string(), text: z.string().optional() });
const item = z.looseObject({
  type: z.string().optional(),
  role: z.string().optional(),
  content: z.union([z.string(), z.array(part)]).optional(),
  output: z.union([z.string(), z.array(part)]).optional(),
});

const ResponsesRequestSchema = z.looseObject({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(item).min(1)]),
  instructions: z.string().nullish(),
  max_output_tokens: z.number().int().min(1).nullish(),
  stream: z.boolean().nullish(),
  tools: z.array(z.looseObject({ type: z.string(), name: z.string().optional(), parameters: z.unknown().optional() })).nullish(),
  tool_choice: z.union([z.enum(["auto", "none", "required"]), z.looseObject({ type: z.string(), name: z.string().optional() })]).nullish(),
});

function refusal(status: number, type: string, code: string | null, message: string, headers?: Record<string, string>): Refusal {
  return { status, body: JSON.stringify({ error: { message, type, param: null, code } }), headers };
}

const textOf = (value: string | z.infer<typeof part>[] | undefined) =>
  typeof value === "string" ? value : (value ?? []).map((p) => p.text ?? "").join("");

/** Fields that steer sampling, delivery or storage; `input` and `instructions` are counted as messages. */
const RESPONSES_CONTROL_FIELDS: ReadonlySet<string> = new Set([
  "model",
  "input",
  "instructions",
  "stream",
  "max_output_tokens",
  "temperature",
  "top_p",
  "store",
  "metadata",
  "user",
  "parallel_tool_calls",
  "reasoning",
  "truncation",
  "service_tier",
  "include",
  "tool_choice",
]);

function parse(raw: unknown): VendorRequest | string {
  const result = ResponsesRequestSchema.safeParse(raw);
  if (!result.success) {
    const issue = result.error.issues[0];
    return `${issue?.path.join(".") || "body"}: ${issue?.message ?? "invalid request"}`;
  }
  const body = result.data;
  const items = typeof body.input === "string" ? [{ role: "user", content: body.input }] : body.input;
  const messages: SimMessage[] = body.instructions ? [{ role: "system", content: body.instructions }] : [];
  for (const i of items) {
    if (i.type === "function_call_output") messages.push({ role: "tool", content: textOf(i.output) });
    else if (i.role) messages.push({ role: i.role, content: textOf(i.content) });
  }
  const choice = body.tool_choice;
  const tools =
    choice === "none"
      ? []
      : (body.tools ?? []).filter((t) => t.type === "function" && t.name).map((t) => ({ name: t.name!, schema: t.parameters }));
  return {
    model: body.model,
    stream: body.stream === true,
    messages,
    promptExtraTokens: simFieldsTokens(body, RESPONSES_CONTROL_FIELDS),
    maxTokens: body.max_output_tokens ?? null,
    tools,
    toolRequired: choice === "required" ? "any" : typeof choice === "object" && choice?.name ? choice.name : null,
    afterToolResult: items[items.length - 1]?.type === "function_call_output",
  };
}

const ids = (plan: ReplyPlan) => ({
  response: `resp_sim_${plan.seq}`,
  message: `msg_sim_${plan.seq}`,
  call: `call_sim_${plan.seq}`,
  item: `fc_sim_${plan.seq}`,
});

function outputItem(plan: ReplyPlan, done: boolean) {
  const id = ids(plan);
  if (plan.tool) {
    return {
      type: "function_call",
      id: id.item,
      call_id: id.call,
      name: plan.tool.name,
      arguments: done ? plan.tool.argumentsJson : "",
      status: done ? "completed" : "in_progress",
    };
  }
  const text = plan.chunks.map((c) => c.text).join("");
  return {
    type: "message",
    id: id.message,
    role: "assistant",
    status: done ? "completed" : "in_progress",
    content: done ? [{ type: "output_text", text, annotations: [] }] : [],
  };
}

function response(plan: ReplyPlan, done: boolean) {
  const incomplete = done && plan.finish === "length";
  return {
    id: ids(plan).response,
    object: "response",
    created_at: 0,
    status: done ? (incomplete ? "incomplete" : "completed") : "in_progress",
    incomplete_details: incomplete ? { reason: "max_output_tokens" } : null,
    error: null,
    model: plan.model,
    output: done ? [outputItem(plan, true)] : [],
    usage: done
      ? {
          input_tokens: plan.promptTokens,
          input_tokens_details: { cached_tokens: 0 },
          output_tokens: plan.tokens,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: plan.promptTokens + plan.tokens,
        }
      : null,
  };
}

/** Events before the first delta: created, in_progress, the item added (and its text part). */
const headEvents = (plan: ReplyPlan) => (plan.tool ? 3 : 4);

function event(type: string, sequence: number, data: Record<string, unknown>): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence, ...data })}\n\n`;
}

export const responsesWire: VendorWire = {
  authorized: (options, req) => options.apiKey === null || req.headers.get("authorization") === `Bearer ${options.apiKey}`,
  unauthorized: refusal(401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
  rateLimited: refusal(429, "requests", "rate_limit_exceeded", "Rate limit reached for requests (simulated).", { "retry-after": "1" }),
  serverError: refusal(500, "server_error", null, "The server had an error while processing your request (simulated)."),
  invalid: (message) => refusal(400, "invalid_request_error", null, message),
  parse,
  toolArgumentsWhole: false,
  reportsThoughtTokens: false,
  reportsCacheWrites: false,

  complete: (plan) => JSON.stringify(response(plan, true)),

  head(plan) {
    const at = { output_index: 0 };
    let text =
      event("response.created", 0, { response: response(plan, false) }) +
      event("response.in_progress", 1, { response: response(plan, false) });
    text += event("response.output_item.added", 2, { ...at, item: outputItem(plan, false) });
    if (!plan.tool)
      text += event("response.content_part.added", 3, {
        ...at,
        item_id: ids(plan).message,
        content_index: 0,
        part: { type: "output_text", text: "", annotations: [] },
      });
    return text;
  },

  chunk(plan, index) {
    const sequence = headEvents(plan) + index;
    const delta = plan.chunks[index]!.text;
    if (plan.tool) return event("response.function_call_arguments.delta", sequence, { output_index: 0, item_id: ids(plan).item, delta });
    return event("response.output_text.delta", sequence, {
      output_index: 0,
      item_id: ids(plan).message,
      content_index: 0,
      delta,
      logprobs: [],
    });
  },

  tail(plan) {
    let sequence = headEvents(plan) + plan.chunks.length;
    const done = outputItem(plan, true);
    let text = "";
    if (plan.tool)
      text += event("response.function_call_arguments.done", sequence++, {
        output_index: 0,
        item_id: ids(plan).item,
        name: plan.tool.name,
        arguments: plan.tool.argumentsJson,
      });
    else {
      const whole = plan.chunks.map((c) => c.text).join("");
      const at = { output_index: 0, item_id: ids(plan).message, content_index: 0 };
      text += event("response.output_text.done", sequence++, { ...at, text: whole, logprobs: [] });
      text += event("response.content_part.done", sequence++, { ...at, part: { type: "output_text", text: whole, annotations: [] } });
    }
    text += event("response.output_item.done", sequence++, { output_index: 0, item: done });
    const finished = response(plan, true);
    return text + event(`response.${finished.status}`, sequence, { response: finished });
  },
};
