/**
 * Gemini generateContent request (POST /v1beta/models/{model}:generateContent) → the gateway's
 * chat request, so that any model of the catalog answers it through the one chat path. The
 * reverse of the Gemini adapter (src/providers/gemini/request.ts), with the same pairs:
 *
 *   systemInstruction (text parts, or a string) → a leading system message
 *   user text, inlineData, fileData parts       → a user message's text and image_url parts
 *   model text / functionCall parts             → an assistant message's content / tool_calls
 *   functionResponse parts                      → tool messages answering the call of that id
 *                                                 (or the earliest unanswered call of that name)
 *   thought parts                               → dropped (no backend takes them back through chat)
 *   tools[].functionDeclarations                → function tools (Gemini's upper-case schema
 *                                                 types in lower case); tools Google runs itself
 *                                                 (googleSearch, codeExecution …) are a 400 naming
 *                                                 them: they are billed apart, unpriced here
 *   toolConfig.functionCallingConfig            → tool_choice auto, required, a named function, none
 *   generationConfig.maxOutputTokens            → max_tokens (the hold covers it, and admission
 *                                                 lowers it to what the wallet covers)
 *   thinkingConfig.thinkingBudget               → reasoning_effort for a model that reasons, by the
 *                                                 Messages wire's budget bands; the thoughts stay
 *                                                 within max_tokens (a Gemini backend is sent half
 *                                                 of it as its budget)
 *   stopSequences, temperature, topP, seed, penalties, responseMimeType / response schemas
 *                                               → stop, temperature, top_p, seed, penalties, response_format
 */
import { z } from "zod";
import { takesReasoningEffort } from "../../catalog/reasoning.ts";
import { fail, isFailure, type Failure } from "../../errors.ts";
import { CHAT_TOKENS_MAX, MESSAGES_MAX } from "../../operations/chat/schema.ts";
import { zodFailure } from "../../errors.ts";
import { geminiCallToOpenAI, geminiPart } from "../../providers/gemini/response.ts";
import { MESSAGES_TOOLS_MAX, STOP_SEQUENCES_MAX, thinkingToReasoningEffort } from "../messages/request.ts";
import { geminiSchema, schemaToJsonSchema } from "./schema.ts";
import { geminiObject } from "./spellings.ts";

/** Parts one content may carry. */
export const GEMINI_PARTS_MAX = 10_000;
/** Entries of `tools` and of `safetySettings` one request may carry (Google's own lists are far shorter). */
export const GEMINI_TOOLS_MAX = 128;
export const GEMINI_SAFETY_SETTINGS_MAX = 64;

/**
 * A request part: every field known (any other is a 400 naming it), each in either spelling
 * (spellings.ts). `thoughtSignature` comes back from earlier replies and is not sent on; code
 * execution parts are known and refused where read. `args` and `response` are the user's own.
 */
const requestPart = geminiObject({
  text: z.string().optional(),
  thought: z.boolean().optional(),
  functionCall: geminiObject({ ...geminiPart.shape.functionCall.unwrap().shape }).optional(),
  thoughtSignature: z.string().optional(),
  inlineData: geminiObject({ mimeType: z.string().min(1), data: z.string() }).optional(),
  fileData: geminiObject({ mimeType: z.string().optional(), fileUri: z.string().min(1) }).optional(),
  functionResponse: geminiObject({
    id: z.string().optional(),
    name: z.string().min(1),
    response: z.record(z.string(), z.unknown()).optional(),
  }).optional(),
  executableCode: z.unknown().optional(),
  codeExecutionResult: z.unknown().optional(),
});
type RequestPart = z.infer<typeof requestPart>;

const content = geminiObject({
  role: z.enum(["user", "model", "function", "tool"]).optional(),
  parts: z.array(requestPart).max(GEMINI_PARTS_MAX),
});

/** `response` / `responseJsonSchema` describe what the function returns: chat has no place for them, and they have no price. */
const functionDeclaration = geminiObject({
  name: z.string().min(1),
  description: z.string().optional(),
  parameters: geminiSchema.optional(),
  parametersJsonSchema: z.unknown().optional(),
  response: geminiSchema.optional(),
  responseJsonSchema: z.unknown().optional(),
});

/** `thinkingLevel` and `includeThoughts` are accepted and not translated: the thoughts stay within max_tokens either way. */
const thinkingConfig = geminiObject({
  thinkingBudget: z.number().int().min(-1).max(CHAT_TOKENS_MAX).optional(),
  includeThoughts: z.boolean().optional(),
  thinkingLevel: z.string().max(32).optional(),
});

/**
 * Every generationConfig field is known: any other (speechConfig, mediaResolution, logprobs …)
 * is a 400 naming it. `topK` is accepted and not sent on (chat has none; sampling has no price);
 * `responseModalities` may ask for text alone (image and audio output are priced apart).
 */
const generationConfig = geminiObject({
  maxOutputTokens: z.number().int().min(1).max(CHAT_TOKENS_MAX).optional(),
  temperature: z.number().min(0).max(2).optional(),
  topP: z.number().min(0).max(1).optional(),
  topK: z.number().optional(),
  candidateCount: z.literal(1).optional(),
  stopSequences: z.array(z.string()).max(STOP_SEQUENCES_MAX).optional(),
  seed: z.number().int().optional(),
  presencePenalty: z.number().optional(),
  frequencyPenalty: z.number().optional(),
  responseMimeType: z.string().optional(),
  responseSchema: geminiSchema.optional(),
  responseJsonSchema: z.unknown().optional(),
  thinkingConfig: thinkingConfig.optional(),
  responseModalities: z
    .array(z.literal("TEXT", { error: "Only text output is supported: image and audio output are priced apart." }))
    .max(1)
    .optional(),
});

/**
 * Tools Google runs itself (googleSearch, codeExecution, urlContext …): billed apart from the
 * tokens (per grounded prompt, per execution), which the catalog has no price for.
 */
const hostedTool = z.unknown().optional();
const tool = geminiObject({
  functionDeclarations: z.array(functionDeclaration).max(MESSAGES_TOOLS_MAX).optional(),
  googleSearch: hostedTool,
  googleSearchRetrieval: hostedTool,
  codeExecution: hostedTool,
  urlContext: hostedTool,
  fileSearch: hostedTool,
  googleMaps: hostedTool,
  computerUse: hostedTool,
  enterpriseWebSearch: hostedTool,
  retrieval: hostedTool,
  exaAiSearch: hostedTool,
  parallelAiSearch: hostedTool,
  mcpServers: hostedTool,
});

/** Accepted and not sent on: safety thresholds have no price, and chat has no place for them. */
const safetySetting = geminiObject({
  category: z.string().max(64),
  threshold: z.string().max(64).optional(),
  method: z.string().max(64).optional(),
});

/** The fields of a generateContent body, every one known (any other is a 400 naming it). */
const requestShape = {
  contents: z.array(content).min(1).max(MESSAGES_MAX),
  systemInstruction: z.union([z.string(), content]).optional(),
  tools: z.array(tool).max(GEMINI_TOOLS_MAX).optional(),
  toolConfig: geminiObject({
    functionCallingConfig: geminiObject({
      mode: z.enum(["MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED"]).optional(),
      allowedFunctionNames: z.array(z.string()).max(MESSAGES_TOOLS_MAX).optional(),
    }).optional(),
  }).optional(),
  generationConfig: generationConfig.optional(),
  safetySettings: z.array(safetySetting).max(GEMINI_SAFETY_SETTINGS_MAX).optional(),
  cachedContent: z.undefined({ error: "Cached contents are not stored by this gateway; send the whole conversation." }).optional(),
};

export const generateContentRequest = geminiObject(requestShape);

export type GenerateContentRequest = z.infer<typeof generateContentRequest>;

const countShape = { ...requestShape, contents: requestShape.contents.optional() };

/**
 * countTokens takes `contents` alone, a whole `generateContentRequest`, or (as @google/genai
 * sends on Vertex) a generateContent body's fields beside `contents`; each is counted.
 */
export const countTokensRequest = geminiObject({
  ...countShape,
  generateContentRequest: geminiObject({ ...countShape, model: z.string().max(256).optional() }).optional(),
});

/** The first tool Google would run itself, as the 400 naming it; null when every tool is a function. */
function hostedToolRefusal(body: Pick<GenerateContentRequest, "tools">): Failure | null {
  for (const [i, entry] of (body.tools ?? []).entries()) {
    for (const [name, value] of Object.entries(entry)) {
      if (name === "functionDeclarations" || value === undefined) continue;
      return fail(
        "invalid_request",
        `Tool \`${name}\` runs on Google's side and is billed apart from the tokens, which this gateway cannot price; offer functionDeclarations.`,
        { param: `tools.${i}.${name}` },
      );
    }
  }
  return null;
}

type ChatMessage = Record<string, unknown>;

/** A call made in an earlier model turn, for the responses that answer it. */
interface MadeCall {
  id: string;
  name: string;
  answered: boolean;
}

/** The id a call without Gemini's own id gets: unique in the request, stable across its turns. */
const callIdOf = (index: number) => `call_${index}`;

function imagePart(part: RequestPart): Record<string, unknown> | null {
  if (part.inlineData) return { type: "image_url", image_url: { url: `data:${part.inlineData.mimeType};base64,${part.inlineData.data}` } };
  if (part.fileData) return { type: "image_url", image_url: { url: part.fileData.fileUri } };
  return null;
}

/** A function's response as the text of a tool message: its `output` or `content` text, else its JSON. */
function responseText(response: Record<string, unknown> | undefined): string {
  if (!response) return "";
  const keys = Object.keys(response);
  const only = keys.length === 1 ? response[keys[0]!] : undefined;
  if ((keys[0] === "output" || keys[0] === "content") && typeof only === "string") return only;
  return JSON.stringify(response);
}

function userTurnToChat(parts: RequestPart[], calls: MadeCall[], at: string): ChatMessage[] | Failure {
  const out: ChatMessage[] = [];
  const chatParts: unknown[] = [];
  for (const [i, part] of parts.entries()) {
    if (part.functionResponse) {
      const { id, name, response } = part.functionResponse;
      const call = calls.find((c) => !c.answered && (id ? c.id === id : c.name === name));
      if (!call) {
        return fail("invalid_request", `This functionResponse answers no earlier functionCall of \`${name}\`.`, {
          param: `${at}.${i}.functionResponse`,
        });
      }
      call.answered = true;
      out.push({ role: "tool", tool_call_id: call.id, content: responseText(response) });
    } else if (part.thought) continue;
    else if (typeof part.text === "string") chatParts.push({ type: "text", text: part.text });
    else {
      const image = imagePart(part);
      if (!image) return refusePart(`${at}.${i}`);
      chatParts.push(image);
    }
  }
  if (chatParts.length > 0) out.push({ role: "user", content: chatParts });
  return out;
}

function modelTurnToChat(parts: RequestPart[], calls: MadeCall[], at: string): ChatMessage | Failure {
  let text = "";
  const toolCalls: unknown[] = [];
  for (const [i, part] of parts.entries()) {
    if (part.thought) continue;
    if (part.functionCall) {
      const id = part.functionCall.id ?? callIdOf(calls.length);
      calls.push({ id, name: part.functionCall.name, answered: false });
      toolCalls.push(geminiCallToOpenAI(id, part.functionCall));
    } else if (typeof part.text === "string") text += part.text;
    else return refusePart(`${at}.${i}`);
  }
  return {
    role: "assistant",
    content: text === "" && toolCalls.length > 0 ? null : text,
    ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
  };
}

const refusePart = (param: string) =>
  fail("invalid_request", "This part has no chat counterpart; send text, inlineData, fileData, functionCall and functionResponse parts.", {
    param,
  });

function systemText(system: GenerateContentRequest["systemInstruction"]): string {
  if (system === undefined) return "";
  if (typeof system === "string") return system;
  return system.parts.map((p) => p.text ?? "").join("\n");
}

/** The conversation as chat messages, the system instruction first. */
export function contentsToChat(body: Pick<GenerateContentRequest, "contents" | "systemInstruction">): ChatMessage[] | Failure {
  const out: ChatMessage[] = [];
  const system = systemText(body.systemInstruction);
  if (system !== "") out.push({ role: "system", content: system });
  const calls: MadeCall[] = [];
  for (const [i, turn] of body.contents.entries()) {
    const at = `contents.${i}.parts`;
    if (turn.role === "model") {
      const message = modelTurnToChat(turn.parts, calls, at);
      if (isFailure(message)) return message;
      out.push(message);
    } else {
      const messages = userTurnToChat(turn.parts, calls, at);
      if ("code" in messages) return messages;
      out.push(...messages);
    }
  }
  return out;
}

export function toolsToChat(body: Pick<GenerateContentRequest, "tools" | "toolConfig">): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const declarations = (body.tools ?? []).flatMap((t) => t.functionDeclarations ?? []);
  if (declarations.length > 0) {
    out.tools = declarations.map((d) => {
      const parameters = d.parametersJsonSchema ?? (d.parameters ? schemaToJsonSchema(d.parameters) : undefined);
      return {
        type: "function",
        function: { name: d.name, ...(d.description ? { description: d.description } : {}), ...(parameters ? { parameters } : {}) },
      };
    });
  }
  const config = body.toolConfig?.functionCallingConfig;
  if (config?.mode && out.tools) {
    const only = config.allowedFunctionNames?.length === 1 ? config.allowedFunctionNames[0] : undefined;
    if (config.mode === "NONE") out.tool_choice = "none";
    else if (config.mode === "ANY") out.tool_choice = only ? { type: "function", function: { name: only } } : "required";
    else out.tool_choice = "auto";
  }
  return out;
}

function generationToChat(config: z.infer<typeof generationConfig> | undefined, model: string): Record<string, unknown> {
  const chat: Record<string, unknown> = {};
  if (!config) return chat;
  if (config.maxOutputTokens !== undefined) chat.max_tokens = config.maxOutputTokens;
  if (config.temperature !== undefined) chat.temperature = config.temperature;
  if (config.topP !== undefined) chat.top_p = config.topP;
  if (config.stopSequences && config.stopSequences.length > 0) chat.stop = config.stopSequences;
  if (config.seed !== undefined) chat.seed = config.seed;
  if (config.presencePenalty !== undefined) chat.presence_penalty = config.presencePenalty;
  if (config.frequencyPenalty !== undefined) chat.frequency_penalty = config.frequencyPenalty;
  const schema = config.responseJsonSchema ?? (config.responseSchema ? schemaToJsonSchema(config.responseSchema) : undefined);
  if (schema) chat.response_format = { type: "json_schema", json_schema: { name: "response", schema } };
  else if (config.responseMimeType === "application/json") chat.response_format = { type: "json_object" };
  const budget = config.thinkingConfig?.thinkingBudget;
  // 0 turns thinking off, -1 leaves it to the model: neither names an effort.
  if (budget !== undefined && budget > 0 && takesReasoningEffort(model)) chat.reasoning_effort = thinkingToReasoningEffort(budget);
  return chat;
}

/**
 * A generateContent request for `model` as the gateway's chat body, or the 400 that names the field at fault.
 * @example generateContentToChat({ contents: [{ role: "user", parts: [{ text: "Hi" }] }] }, "gemini-2.5-flash", false)
 *   // { chat: { model: "gemini-2.5-flash", messages: [{ role: "user", content: [{ type: "text", text: "Hi" }] }] }, … }
 */
export function generateContentToChat(
  raw: unknown,
  model: string,
  stream: boolean,
): { request: GenerateContentRequest; chat: Record<string, unknown> } | Failure {
  const parsed = generateContentRequest.safeParse(raw);
  if (!parsed.success) return zodFailure(parsed.error);
  const body = parsed.data;
  const hosted = hostedToolRefusal(body);
  if (hosted) return hosted;
  const messages = contentsToChat(body);
  if ("code" in messages) return messages;
  const chat: Record<string, unknown> = { model, messages, ...toolsToChat(body), ...generationToChat(body.generationConfig, model) };
  if (stream) {
    chat.stream = true;
    // The usage chunk carries the last event's usageMetadata.
    chat.stream_options = { include_usage: true };
  }
  return { request: body, chat };
}
