/**
 * An upstream's whole JSON reply, read against its schema. Malformed JSON or a reply of another
 * shape is the upstream's fault, so it is retryable on another backend.
 */
import type { z } from "zod";
import type { UpstreamFailure } from "./types.ts";

/**
 * `what` names the expected reply in the error: "The upstream reply is not <what>." `json` is the
 * text as parsed (the schema's output may leave fields out): a reply relayed as the upstream wrote
 * it is read from this value, never parsed again.
 */
export function parseUpstreamReply<T>(
  text: string,
  schema: z.ZodType<T, unknown>,
  what: string,
): { reply: T; json: unknown } | { failure: UpstreamFailure } {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { failure: { code: "upstream_error", message: "The upstream replied with malformed JSON.", retryable: true } };
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) return { failure: { code: "upstream_error", message: `The upstream reply is not ${what}.`, retryable: true } };
  return { reply: parsed.data, json };
}
