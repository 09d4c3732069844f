/**
 * POST /v1beta/models/{model}:generateContent and :streamGenerateContent?alt=sse: the Gemini
 * wire format. A stream is a series of whole GenerateContentResponse events with the running
 * usage in each; the last carries the finishReason (Gemini sends no end marker). Function calls
 * arrive whole. The flow and knobs are vendor.ts's.
 */
import { z } from "zod";
import { SIM_IMAGE_TOKENS, simFieldsTokens, simValueTokens, type SimMessage } from "./tokens.ts";
import type { Refusal, ReplyPlan, VendorRequest, VendorWire } from "./vendor.ts";

const part = z.looseObject({
  text: z.string().optional(),
  thought: z.boolean().optional(),
  functionResponse: z.looseObject({ name: z.string().optional(), response: z.record(z.string(), z.unknown()).optional() }).optional(),
});

const GeminiRequestSchema = z.looseObject({
  contents: z.array(z.looseObject({ role: z.enum(["user", "model"]).optional(), parts: z.array(part) })).min(1),
  systemInstruction: z.looseObject({ parts: z.array(part) }).optional(),
  generationConfig: z
    .looseObject({
      maxOutputTokens: z.number().int().min(1).optional(),
      thinkingConfig: z.looseObject({ thinkingBudget: z.number().int().min(-1).optional() }).optional(),
    })
    .optional(),
  tools: z
    .array(
      z.looseObject({
        functionDeclarations: z
          .array(z.looseObject({ name: z.string(), parameters: z.unknown().optional(), parametersJsonSchema: z.unknown().optional() }))
          .optional(),
      }),
    )
    .optional(),
  toolConfig: z
    .looseObject({
      functionCallingConfig: z
        .looseObject({ mode: z.string().optional(), allowedFunctionNames: z.array(z.string()).optional() })
        .optional(),
    })
    .optional(),
});

const statusNames: Record<number, string> = { 400: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL" };

function refusal(status: number, message: string, headers?: Record<string, string>): Refusal {
  return { status, body: JSON.stringify({ error: { code: status, message, status: statusNames[status] ?? "UNKNOWN" } }), headers };
}

/** A part's countable text: text (not thoughts), and a function response's `content` string. */
function partText(p: Part): string {
  if (typeof p.text === "string" && !p.thought) return p.text;
  const content = p.functionResponse?.response?.content;
  return typeof content === "string" ? content : "";
}

type GeminiRequest = z.infer<typeof GeminiRequestSchema>;
type Part = z.infer<typeof part>;

/** Fields that steer sampling or delivery; `contents` and `systemInstruction` are counted as messages. */
const controlFields = new Set(["contents", "systemInstruction", "generationConfig", "safetySettings", "cachedContent", "labels"]);
const partTextFields = new Set(["text", "thought", "functionResponse"]);

/**
 * A part's cost beyond the text partText reads: its other data (a function call, a thought's
 * signature), a function response without the `content` counted as text, an image's price.
 */
function partExtraTokens(p: Part): number {
  let total = simFieldsTokens(p, partTextFields);
  if (p.functionResponse) {
    const { content, ...rest } = p.functionResponse.response ?? {};
    total += simValueTokens({ ...p.functionResponse, response: rest });
    // A string `content` is partText's, unless the part's own text took its place.
    if (typeof content !== "string" || (typeof p.text === "string" && !p.thought)) total += simValueTokens(content);
  }
  if (typeof p.text === "string" && p.thought) total += simValueTokens(p.text);
  return total + ("inlineData" in p || "fileData" in p ? SIM_IMAGE_TOKENS : 0);
}

/**
 * What a Gemini request costs beyond its messages' text: every part's other data, every body
 * field that is not a control field (tools, toolConfig), and the output schema in generationConfig.
 */
export function simGeminiExtraTokens(body: GeminiRequest): number {
  let total = simFieldsTokens(body, controlFields);
  const config = body.generationConfig as Record<string, unknown> | undefined;
  total += simValueTokens(config?.responseJsonSchema) + simValueTokens(config?.responseSchema);
  for (const p of body.systemInstruction?.parts ?? []) total += partExtraTokens(p);
  for (const content of body.contents) for (const p of content.parts) total += partExtraTokens(p);
  return total;
}

/** The request body as the simulator reads it, or why it is invalid. */
export function parseGeminiRequest(raw: unknown): GeminiRequest | string {
  const result = GeminiRequestSchema.safeParse(raw);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  return `Invalid JSON payload received. ${issue?.path.join(".") || "body"}: ${issue?.message ?? "invalid"}`;
}

/** The messages the prompt rule counts: the system instruction first, then each turn's text. */
export function geminiSimMessages(body: GeminiRequest): SimMessage[] {
  const messages: SimMessage[] = [];
  if (body.systemInstruction) messages.push({ role: "system", content: body.systemInstruction.parts.map(partText).join("") });
  for (const content of body.contents)
    messages.push({ role: content.role === "model" ? "assistant" : "user", content: content.parts.map(partText).join("") });
  return messages;
}

/** `/v1beta/models/gemini-2.5-flash:streamGenerateContent` (or `/v1/…`) → model and method. */
export function geminiTarget(url: URL): { model: string; method: string } | null {
  const match = /^\/v1(?:beta)?\/models\/([^/:]+):([A-Za-z]+)$/.exec(url.pathname);
  return match ? { model: decodeURIComponent(match[1]!), method: match[2]! } : null;
}

/** The JSON schema a structured-output request asks the reply to keep to, if any. */
function outputSchemaOf(config: Record<string, unknown> | undefined): { outputSchema?: unknown } {
  const schema = config?.responseJsonSchema ?? config?.responseSchema;
  return schema === undefined || schema === null ? {} : { outputSchema: schema };
}

function parse(raw: unknown, req: Request): VendorRequest | string {
  const url = new URL(req.url);
  const target = geminiTarget(url);
  if (!target || (target.method !== "generateContent" && target.method !== "streamGenerateContent"))
    return `Unknown method in ${url.pathname}.`;
  const stream = target.method === "streamGenerateContent";
  if (stream && url.searchParams.get("alt") !== "sse") return "The simulator streams only with alt=sse.";
  const body = parseGeminiRequest(raw);
  if (typeof body === "string") return body;
  const last = body.contents[body.contents.length - 1]!;
  const calling = body.toolConfig?.functionCallingConfig;
  const declarations = (body.tools ?? []).flatMap((t) => t.functionDeclarations ?? []);
  const mode = calling?.mode?.toUpperCase();
  return {
    model: target.model,
    stream,
    messages: geminiSimMessages(body),
    promptExtraTokens: simGeminiExtraTokens(body),
    maxTokens: body.generationConfig?.maxOutputTokens ?? null,
    thinkingBudget: body.generationConfig?.thinkingConfig?.thinkingBudget ?? null,
    ...outputSchemaOf(body.generationConfig as Record<string, unknown> | undefined),
    tools: mode === "NONE" ? [] : declarations.map((d) => ({ name: d.name, schema: d.parametersJsonSchema ?? d.parameters })),
    toolRequired: mode === "ANY" ? (calling?.allowedFunctionNames?.[0] ?? "any") : null,
    afterToolResult: last.parts.some((p) => p.functionResponse !== undefined),
  };
}

function usageMetadata(plan: ReplyPlan, tokens: number) {
  return {
    promptTokenCount: plan.promptTokens,
    candidatesTokenCount: tokens,
    totalTokenCount: plan.promptTokens + tokens + plan.thoughtTokens,
    ...(plan.thoughtTokens > 0 ? { thoughtsTokenCount: plan.thoughtTokens } : {}),
    ...(plan.cacheReadTokens > 0 ? { cachedContentTokenCount: plan.cacheReadTokens } : {}),
  };
}

function response(plan: ReplyPlan, parts: unknown[], tokens: number, finishReason?: string): string {
  return JSON.stringify({
    candidates: [{ content: { parts, role: "model" }, ...(finishReason ? { finishReason } : {}), index: 0 }],
    usageMetadata: usageMetadata(plan, tokens),
    modelVersion: plan.model,
    responseId: `sim-${plan.seq}`,
  });
}

const finishReason = (plan: ReplyPlan) => (plan.finish === "length" ? "MAX_TOKENS" : "STOP");
const toolPart = (plan: ReplyPlan) => ({ functionCall: { name: plan.tool!.name, args: JSON.parse(plan.tool!.argumentsJson) } });

export const geminiWire: VendorWire = {
  authorized: (options, req) =>
    options.apiKey === null ||
    req.headers.get("x-goog-api-key") === options.apiKey ||
    new URL(req.url).searchParams.get("key") === options.apiKey,
  unauthorized: refusal(400, "API key not valid. Please pass a valid API key."),
  rateLimited: refusal(429, "Resource has been exhausted (e.g. check quota). (simulated)", { "retry-after": "1" }),
  serverError: refusal(500, "An internal error has occurred. (simulated)"),
  invalid: (message) => refusal(400, message),
  parse,
  toolArgumentsWhole: true,
  reportsThoughtTokens: true,
  reportsCacheWrites: false,

  complete(plan) {
    const parts = plan.tool ? [toolPart(plan)] : [{ text: plan.chunks.map((c) => c.text).join("") }];
    return response(plan, parts, plan.tokens, finishReason(plan));
  },

  head: () => "",

  chunk(plan, index) {
    const chunk = plan.chunks[index]!;
    const parts = plan.tool ? [toolPart(plan)] : [{ text: chunk.text }];
    return `data: ${response(plan, parts, chunk.tokensAfter)}\n\n`;
  },

  tail(plan) {
    return `data: ${response(plan, [{ text: "" }], plan.tokens, finishReason(plan))}\n\n`;
  },
};
