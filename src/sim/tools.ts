/**
 * The simulator's one rule for tool calls, shared by every wire format (vendor.ts, openaiTools.ts):
 * which offered tool a request calls, its arguments built from the schema, and the pieces they stream in.
 */
import { simPromptText } from "./text.ts";
import type { SimMessage } from "./tokens.ts";

export interface SimToolOffer {
  name: string;
  /** JSON Schema of the arguments, as the vendor wrote it. */
  schema: unknown;
}

/** The parts of a request that decide whether it calls a tool. */
export interface ToolQuestion {
  messages: SimMessage[];
  tools: SimToolOffer[];
  /** The tool the request requires (`any` = whichever), or null when calling is optional. */
  toolRequired: string | "any" | null;
  /** The last turn carries tool results: answer in text. */
  afterToolResult: boolean;
}

/** Tokens per streamed piece of tool-call arguments. */
export const toolPieceTokens = 3;

/** The tool this request calls, or null for a text reply. */
export function toolToCall(request: ToolQuestion): SimToolOffer | null {
  if (request.tools.length === 0 || request.afterToolResult) return null;
  if (request.toolRequired === "any") return request.tools[0] ?? null;
  if (request.toolRequired) return request.tools.find((t) => t.name === request.toolRequired) ?? null;
  const last = [...request.messages].reverse().find((m) => m.role === "user");
  const text = last ? simPromptText([last]) : "";
  return request.tools.find((t) => text.includes(t.name)) ?? null;
}

/**
 * Arguments from the schema: an enum's first value, strings "sim", numbers 1, booleans true, others null.
 * @example simToolArguments({ type: "object", properties: { city: { type: "string" } } }) // {"city":"sim"}
 */
export function simToolArguments(schema: unknown): Record<string, unknown> {
  const properties = (schema as { properties?: Record<string, { type?: unknown; enum?: unknown }> } | null)?.properties ?? {};
  const args: Record<string, unknown> = {};
  for (const [name, property] of Object.entries(properties)) {
    const type = String(property?.type ?? "").toLowerCase();
    const choices = Array.isArray(property?.enum) ? property.enum : [];
    if (choices.length > 0) {
      args[name] = choices[0]; // an enum's first value: a value the schema allows
      continue;
    }
    args[name] = type === "string" ? "sim" : type === "number" || type === "integer" ? 1 : type === "boolean" ? true : null;
  }
  return args;
}

/** Cuts text into pieces of `tokens` simulator tokens each, keeping every character. */
export function splitByTokens(text: string, tokens: number): string[] {
  const starts: number[] = [];
  let count = 0;
  for (const match of text.matchAll(/[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_]/gu)) {
    if (count > 0 && count % tokens === 0) starts.push(match.index);
    count++;
  }
  const pieces: string[] = [];
  let from = 0;
  for (const start of starts) {
    pieces.push(text.slice(from, start));
    from = start;
  }
  pieces.push(text.slice(from));
  return pieces;
}

/**
 * A structured-output reply: JSON of the schema's shape (simToolArguments), one token a piece, cut
 * at `maxTokens` (null: no limit). The vendor's models keep to the schema; clients that route on
 * such a reply (the Gemini CLI's model router) read it rather than retry.
 */
export function simStructuredPieces(schema: unknown, maxTokens: number | null): { pieces: string[]; cut: boolean } {
  const pieces = splitByTokens(JSON.stringify(simToolArguments(schema)), 1);
  const cut = maxTokens !== null && pieces.length > maxTokens;
  return { pieces: cut ? pieces.slice(0, maxTokens) : pieces, cut };
}
