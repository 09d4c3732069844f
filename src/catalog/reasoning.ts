/**
 * Catalog models that take a reasoning effort (`reasoning_effort` on chat, `reasoning.effort` on
 * Responses, `thinking` on Messages), as the catalog file marks them (`capabilities.reasoning_effort`).
 * The translated wires pass the effort only to these: an OpenAI-compatible upstream refuses it for
 * a model without reasoning, and the client asked for an option, not for a failure. Chat requests
 * pass through as the client wrote them.
 */
import { SEED_MODELS } from "./seed.ts";

export const REASONING_MODELS: ReadonlySet<string> = new Set(
  SEED_MODELS.filter((m) => m.capabilities.reasoning_effort).flatMap((m) => [m.id, ...m.aliases]),
);

/** @example takesReasoningEffort("claude-sonnet-4-20250514") // true (a dated id of a listed model) */
export function takesReasoningEffort(id: string): boolean {
  return REASONING_MODELS.has(id);
}

/**
 * Vendors whose models reason unseen: OpenAI's reasoning is never streamed, Gemini streams its
 * thoughts only when asked (and bills them all), Claude 4's thinking is streamed summarized and
 * billed in full. Other vendors' reasoning (DeepSeek's, Qwen's, Grok's `reasoning_content`) is
 * streamed as it is generated, so the relay counts it as visible text.
 */
const HIDDEN_REASONING_VENDORS: ReadonlySet<string> = new Set(["openai", "google", "anthropic"]);

/** @example hidesReasoning({ id: "o3", vendor: "openai" }) // true; deepseek-r1's reasoning is streamed: false */
export function hidesReasoning(model: { id: string; vendor: string }): boolean {
  return takesReasoningEffort(model.id) && HIDDEN_REASONING_VENDORS.has(model.vendor);
}
