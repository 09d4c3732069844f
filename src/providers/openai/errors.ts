/**
 * Maps an OpenAI-style error reply to the gateway's errors. vLLM, SGLang and TGI spell errors
 * their own ways: `{"object":"error","message":…,"code":400}` with an integer code (vLLM before
 * 0.9), `{"error":{…,"code":400}}` (vLLM since), `{"error":"…"}` (TGI); all are read here.
 */
import { z } from "zod";
import { statusToFailure } from "../status.ts";
import type { UpstreamFailure } from "../types.ts";

const errorDetail = z.object({
  message: z.string(),
  /** OpenAI: a string or null; vLLM: the HTTP status as an integer. */
  code: z.union([z.string(), z.number()]).nullish(),
});

export const openAIErrorBody = z.union([
  z.object({ error: errorDetail }),
  z.object({ error: z.string() }),
  z.object({ object: z.literal("error"), message: z.string(), code: z.union([z.string(), z.number()]).nullish() }),
  z.object({ message: z.string() }),
]);

/** The vendor's message from any of the shapes above, or null. */
export function openAIErrorMessage(json: unknown): string | null {
  const parsed = openAIErrorBody.safeParse(json);
  if (!parsed.success) return null;
  const body = parsed.data;
  if ("error" in body) return typeof body.error === "string" ? body.error : body.error.message;
  return body.message;
}

/** vLLM's integer `code` is an HTTP status; it wins when the reply itself said 200. */
function integerCode(json: unknown): number | null {
  const parsed = openAIErrorBody.safeParse(json);
  if (!parsed.success) return null;
  const body = parsed.data;
  const code = "error" in body ? (typeof body.error === "string" ? null : body.error.code) : "code" in body ? body.code : null;
  return typeof code === "number" && Number.isInteger(code) && code >= 400 && code <= 599 ? code : null;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

export function openAIErrorToFailure(status: number, text: string): UpstreamFailure {
  const json = parseJson(text);
  const effective = status < 400 ? (integerCode(json) ?? 502) : status;
  return statusToFailure(effective, openAIErrorMessage(json));
}
