/**
 * Tool calls on the OpenAI route, by the same rule as the other wire formats (tools.ts): a
 * request that offers tools and requires one (`tool_choice`), or whose last user message names
 * one, gets one deterministic call, its arguments streamed a few tokens per chunk.
 */
import type { ChatRequest } from "./options.ts";
import { simCountTokens } from "./tokens.ts";
import { simToolArguments, splitByTokens, toolPieceTokens, toolToCall } from "./tools.ts";

export interface OpenAIToolPlan {
  id: string;
  name: string;
  /** The arguments JSON in the pieces streamed. */
  pieces: string[];
  /** Completion tokens served after each piece. */
  tokensAfter: number[];
}

type ToolOffer = { type?: unknown; function?: { name?: unknown; parameters?: unknown } };

export function openAIToolPlan(body: ChatRequest, seq: number): OpenAIToolPlan | null {
  // The hot path (no tools) allocates nothing: the simulator is the benchmarks' ceiling.
  if (!Array.isArray(body.tools) || body.tools.length === 0) return null;
  const tools = (body.tools as ToolOffer[])
    .filter((t) => t?.type === "function" && typeof t.function?.name === "string")
    .map((t) => ({ name: t.function!.name as string, schema: t.function!.parameters }));
  if (tools.length === 0 || body.tool_choice === "none") return null;
  const choice = body.tool_choice as { function?: { name?: unknown } } | string | undefined;
  const named = typeof choice === "object" && typeof choice?.function?.name === "string" ? choice.function.name : null;
  const tool = toolToCall({
    messages: body.messages,
    tools,
    toolRequired: choice === "required" ? "any" : named,
    afterToolResult: body.messages[body.messages.length - 1]?.role === "tool",
  });
  if (!tool) return null;
  const pieces = splitByTokens(JSON.stringify(simToolArguments(tool.schema)), toolPieceTokens);
  let served = "";
  const tokensAfter = pieces.map((piece) => simCountTokens((served += piece)));
  return { id: `call_sim_${seq}`, name: tool.name, pieces, tokensAfter };
}
