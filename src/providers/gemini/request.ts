/**
 * OpenAI chat request → Gemini generateContent request. System and developer messages become
 * `systemInstruction`; assistant turns are `model` turns; tool calls become `functionCall` parts
 * and tool results `functionResponse` parts, named by the call they answer (Gemini matches
 * results to calls by function name, OpenAI by id).
 */
import {
  argumentsToObject,
  contentText,
  dataUrlToInline,
  imageUrlOf,
  readChatShape,
  type ChatMessage,
  type ChatShape,
} from "../chatShape.ts";
import type { ChatRequestInput, JsonUpstreamRequest, TextCountAdapter } from "../types.ts";
import { countField } from "../anthropic/request.ts";
import { imageTypeOfUrl } from "../../tokens/media.ts";

type Part = Record<string, unknown>;
interface Content {
  role: "user" | "model";
  parts: Part[];
}

/** A remote image's type from its extension; Gemini needs one for `fileData` (JPEG when the URL shows none). */
function mimeTypeOfUrl(url: string): string {
  return imageTypeOfUrl(url) ?? "image/jpeg";
}

function contentToGeminiParts(value: ChatMessage["content"]): Part[] {
  if (typeof value === "string") return value === "" ? [] : [{ text: value }];
  const parts: Part[] = [];
  for (const part of value ?? []) {
    if (part.type === "text" && "text" in part && typeof part.text === "string") parts.push({ text: part.text });
    else if (part.type === "image_url" && "image_url" in part) {
      const url = imageUrlOf(part as Parameters<typeof imageUrlOf>[0]);
      const inline = dataUrlToInline(url);
      parts.push(inline ? { inlineData: inline } : { fileData: { mimeType: mimeTypeOfUrl(url), fileUri: url } });
    }
  }
  return parts;
}

/** The conversation as Gemini contents, with the system text apart. */
export function messagesToGemini(messages: ChatMessage[]): { system: string | null; contents: Content[] } {
  const system: string[] = [];
  const contents: Content[] = [];
  const callNames = new Map<string, string>();
  for (const message of messages) {
    let content: Content | null = null;
    switch (message.role) {
      case "system":
      case "developer":
        system.push(contentText(message.content));
        continue;
      case "user":
        content = { role: "user", parts: contentToGeminiParts(message.content) };
        break;
      case "assistant": {
        const parts = contentToGeminiParts(message.content);
        for (const call of message.tool_calls ?? []) {
          callNames.set(call.id, call.function.name);
          parts.push({ functionCall: { name: call.function.name, args: argumentsToObject(call.function.arguments) } });
        }
        content = { role: "model", parts };
        break;
      }
      case "tool":
      case "function": {
        const name = (message.tool_call_id && callNames.get(message.tool_call_id)) ?? message.name ?? "";
        content = { role: "user", parts: [{ functionResponse: { name, response: { content: contentText(message.content) } } }] };
        break;
      }
    }
    if (!content || content.parts.length === 0) continue;
    const last = contents[contents.length - 1];
    if (last && last.role === content.role) last.parts.push(...content.parts);
    else contents.push(content);
  }
  return { system: system.length > 0 ? system.join("\n\n") : null, contents };
}

export function toolChoiceToGemini(shape: ChatShape): Record<string, unknown> | null {
  const choice = shape.tool_choice;
  if (!choice) return null;
  if (choice === "auto") return { functionCallingConfig: { mode: "AUTO" } };
  if (choice === "none") return { functionCallingConfig: { mode: "NONE" } };
  if (choice === "required") return { functionCallingConfig: { mode: "ANY" } };
  return { functionCallingConfig: { mode: "ANY", allowedFunctionNames: [choice.function.name] } };
}

/** Gemini models that think (2.5 and later): their thoughts are billed as output. */
const THINKING_MODEL = /^gemini-(2\.5|[3-9])/;

/**
 * The output limit the hold covers, split between thoughts and the reply for a thinking model.
 * Gemini's documentation says maxOutputTokens and the thinking budget are separate; reports
 * (googleapis/python-genai issues 782 and 2062) show maxOutputTokens capping both. Either way
 * the sum sent stays within the limit: half for thoughts, the rest for the reply.
 * @example geminiOutputLimits("gemini-2.5-flash", 8_192) // { maxOutputTokens: 4096, thinkingConfig: { thinkingBudget: 4096 } }
 */
export function geminiOutputLimits(upstreamModel: string, maxTokens: number): Record<string, unknown> {
  if (!THINKING_MODEL.test(upstreamModel) || maxTokens < 2) return { maxOutputTokens: maxTokens };
  const thinkingBudget = Math.floor(maxTokens / 2);
  return { maxOutputTokens: maxTokens - thinkingBudget, thinkingConfig: { thinkingBudget } };
}

function generationConfigOf(shape: ChatShape, input: Pick<ChatRequestInput, "upstreamModel" | "maxTokens">): Record<string, unknown> {
  const config: Record<string, unknown> = geminiOutputLimits(input.upstreamModel, input.maxTokens);
  if (shape.temperature != null) config.temperature = shape.temperature;
  if (shape.top_p != null) config.topP = shape.top_p;
  if (shape.stop != null) config.stopSequences = typeof shape.stop === "string" ? [shape.stop] : shape.stop;
  if (shape.seed != null) config.seed = shape.seed;
  if (shape.presence_penalty != null) config.presencePenalty = shape.presence_penalty;
  if (shape.frequency_penalty != null) config.frequencyPenalty = shape.frequency_penalty;
  const format = shape.response_format;
  if (format?.type === "json_object") config.responseMimeType = "application/json";
  if (format?.type === "json_schema") {
    config.responseMimeType = "application/json";
    const schema = (format as { json_schema?: { schema?: unknown } }).json_schema?.schema;
    if (schema) config.responseJsonSchema = schema;
  }
  return config;
}

/**
 * @example openAIToGeminiRequest({ body, upstreamModel: "gemini-2.5-flash", maxTokens: 512, stream: true }, key).path
 *   // "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
 */
export function openAIToGeminiRequest(input: ChatRequestInput, apiKey: string | undefined): JsonUpstreamRequest {
  const shape = readChatShape(input.body);
  const { system, contents } = messagesToGemini(shape.messages);
  const body: Record<string, unknown> = { contents, generationConfig: generationConfigOf(shape, input) };
  if (system) body.systemInstruction = { parts: [{ text: system }] };
  if (shape.tools && shape.tools.length > 0) {
    body.tools = [
      {
        functionDeclarations: shape.tools.map((t) => ({
          name: t.function.name,
          ...(t.function.description ? { description: t.function.description } : {}),
          // Full JSON Schema, as OpenAI clients write it; `parameters` takes only an OpenAPI subset.
          ...(t.function.parameters ? { parametersJsonSchema: t.function.parameters } : {}),
        })),
      },
    ];
    const toolConfig = toolChoiceToGemini(shape);
    if (toolConfig) body.toolConfig = toolConfig;
  }
  const model = encodeURIComponent(input.upstreamModel);
  const path = input.stream ? `/v1beta/models/${model}:streamGenerateContent?alt=sse` : `/v1beta/models/${model}:generateContent`;
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: input.stream ? "text/event-stream" : "application/json",
  };
  if (apiKey) headers["x-goog-api-key"] = apiKey;
  return { path, body: JSON.stringify(body), headers };
}

/**
 * Gemini's free count (`POST /v1beta/models/{m}:countTokens`) of a text as one user turn: its `totalTokens`.
 * @example geminiCount(key).buildCountRequest("Hi", "gemini-2.5-flash") // { path: "/v1beta/models/gemini-2.5-flash:countTokens", … }
 */
export function geminiCount(apiKey: string | undefined): TextCountAdapter {
  return {
    buildCountRequest: (text, upstreamModel) => {
      const headers: Record<string, string> = { "content-type": "application/json" };
      if (apiKey) headers["x-goog-api-key"] = apiKey;
      const body = JSON.stringify({ contents: [{ role: "user", parts: [{ text }] }] });
      return { path: `/v1beta/models/${encodeURIComponent(upstreamModel)}:countTokens`, body, headers };
    },
    parseCountResponse: (text) => countField(text, "totalTokens"),
  };
}
