/**
 * OpenAI chat request → OpenAI Responses request (POST /responses), for OpenAI-compatible
 * backends whose pool setting says they speak the Responses API (`responses_api: true`). The
 * reverse of src/wires/responses/request.ts: every request reaches such a backend in its native
 * wire, whatever wire the client used, and stays stateless (`store: false`).
 *
 *   system, developer messages   → input items of that role
 *   user content parts           → input_text / input_image
 *   assistant text / tool_calls  → an assistant item / function_call items
 *   tool messages                → function_call_output items
 *   max_tokens (the budget)      → max_output_tokens;  reasoning_effort → reasoning.effort
 *   response_format              → text.format;  function tools → Responses function tools
 */
import { contentText, imageUrlOf, readChatShape, type ChatMessage, type ChatShape } from "../../chatShape.ts";
import type { ChatRequestInput, JsonUpstreamRequest } from "../../types.ts";

type Item = Record<string, unknown>;

function userContent(content: ChatMessage["content"]): string | Item[] {
  if (typeof content === "string" || !content) return content ?? "";
  const parts: Item[] = [];
  for (const part of content) {
    if (part.type === "text" && "text" in part && typeof part.text === "string") parts.push({ type: "input_text", text: part.text });
    else if (part.type === "image_url" && "image_url" in part) {
      const image = part as Parameters<typeof imageUrlOf>[0];
      const detail = typeof image.image_url === "object" ? image.image_url.detail : undefined;
      parts.push({ type: "input_image", image_url: imageUrlOf(image), detail: detail ?? "auto" });
    }
  }
  return parts;
}

function messageToItems(message: ChatMessage): Item[] {
  switch (message.role) {
    case "system":
    case "developer":
      return [{ role: message.role, content: contentText(message.content) }];
    case "user":
      return [{ role: "user", content: userContent(message.content) }];
    case "assistant": {
      const items: Item[] = [];
      const text = contentText(message.content);
      if (text !== "") items.push({ role: "assistant", content: text });
      for (const call of message.tool_calls ?? [])
        items.push({ type: "function_call", call_id: call.id, name: call.function.name, arguments: call.function.arguments });
      return items;
    }
    case "tool":
    case "function":
      return [{ type: "function_call_output", call_id: message.tool_call_id ?? message.name ?? "", output: contentText(message.content) }];
  }
}

function toolChoiceToResponses(choice: ChatShape["tool_choice"]): unknown {
  if (!choice || typeof choice === "string") return choice ?? undefined;
  return { type: "function", name: choice.function.name };
}

function formatToResponses(format: ChatShape["response_format"]): unknown {
  if (!format || format.type === "text") return undefined;
  if (format.type === "json_object") return { type: "json_object" };
  const spec = (format as { json_schema?: { name?: string; schema?: unknown; strict?: boolean } }).json_schema;
  return {
    type: "json_schema",
    name: spec?.name ?? "response",
    schema: spec?.schema ?? { type: "object" },
    ...(spec?.strict != null ? { strict: spec.strict } : {}),
  };
}

/**
 * @example chatToResponsesRequest({ body, upstreamModel: "gpt-4.1", maxTokens: 512, stream: true }, key).path // "/responses"
 */
export function chatToResponsesRequest(input: ChatRequestInput, apiKey: string | undefined): JsonUpstreamRequest {
  const shape = readChatShape(input.body);
  const body: Record<string, unknown> = {
    model: input.upstreamModel,
    input: shape.messages.flatMap(messageToItems),
    max_output_tokens: input.maxTokens,
    store: false,
  };
  if (input.stream) body.stream = true;
  if (shape.temperature != null) body.temperature = shape.temperature;
  if (shape.top_p != null) body.top_p = shape.top_p;
  if (shape.user) body.user = shape.user;
  if (shape.tools && shape.tools.length > 0) {
    body.tools = shape.tools.map((t) => ({
      type: "function",
      name: t.function.name,
      ...(t.function.description ? { description: t.function.description } : {}),
      parameters: t.function.parameters ?? { type: "object", properties: {} },
      strict: false,
    }));
    const choice = toolChoiceToResponses(shape.tool_choice);
    if (choice !== undefined) body.tool_choice = choice;
    if (shape.parallel_tool_calls != null) body.parallel_tool_calls = shape.parallel_tool_calls;
  }
  const effort = input.body.reasoning_effort;
  if (typeof effort === "string") body.reasoning = { effort };
  const format = formatToResponses(shape.response_format);
  if (format) body.text = { format };
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: input.stream ? "text/event-stream" : "application/json",
  };
  if (apiKey) headers.authorization = `Bearer ${apiKey}`;
  return { path: "/responses", body: JSON.stringify(body), headers };
}
