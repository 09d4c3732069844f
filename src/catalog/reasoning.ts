/**
 * Catalog models that take a reasoning effort (`reasoning_effort` on chat, `reasoning.effort` on
 * Responses, `thinking` on Messages). The translated wires pass the effort only to these: an
 * OpenAI-compatible upstream refuses it for a model without reasoning, and the client asked for
 * an option, not for a failure. Chat requests pass through as the client wrote them.
 */
import { MODEL_ALIASES } from "./aliases.ts";

export const REASONING_MODELS: ReadonlySet<string> = new Set([
  "claude-3-7-sonnet",
  "claude-sonnet-4",
  "claude-opus-4",
  "deepseek-r1",
  "gemini-2.5-flash",
  "gemini-2.5-pro",
  "grok-3-mini",
  "o3",
  "o4-mini",
  "qwen3-235b-a22b",
]);

/** @example takesReasoningEffort("claude-sonnet-4-20250514") // true (a dated id of a listed model) */
export function takesReasoningEffort(id: string): boolean {
  return REASONING_MODELS.has(MODEL_ALIASES.get(id) ?? id);
}
