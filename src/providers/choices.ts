/**
 * How many choices (`n`) one upstream call can return. OpenAI-style backends return `n` choices
 * themselves; Anthropic has no `n`, and the Gemini adapter reads one candidate. Such a backend
 * is skipped for `n > 1` (so a mixed pool sends the request where it can be served), and a pool
 * with no backend able to serve it refuses with a 400 naming `n` before anything is reserved:
 * the client never gets one choice while the reserve counted `n`.
 */
import { fail, type Failure } from "../errors.ts";
import type { ChatAdapter, ProviderAdapter } from "./types.ts";

/** `n` of an OpenAI chat body (1 when absent or not a number). */
export function choicesOf(body: Record<string, unknown>): number {
  return typeof body.n === "number" && Number.isInteger(body.n) && body.n > 1 ? body.n : 1;
}

/** Whether one call to this chat adapter can return `n` choices. */
export function chatTakesChoices(chat: ChatAdapter | undefined, n: number): boolean {
  return chat !== undefined && n <= (chat.choicesMax ?? Number.POSITIVE_INFINITY);
}

/**
 * The 400 for a request asking more choices than any backend of its pool returns, else null.
 *
 * @example choicesRefusal([{ adapter: anthropicAdapter(key) }], 2, "claude-3-5-haiku")?.param // "n"
 */
export function choicesRefusal(backends: readonly { adapter: ProviderAdapter }[], n: number, model: string): Failure | null {
  if (n <= 1 || backends.length === 0 || backends.some((b) => chatTakesChoices(b.adapter.chat, n))) return null;
  const most = Math.max(...backends.map((b) => b.adapter.chat?.choicesMax ?? 1));
  return fail(
    "invalid_request",
    `${model} returns at most ${most} choice${most === 1 ? "" : "s"} per request; \`n\` = ${n} is not supported. Send ${n} requests instead.`,
    { param: "n" },
  );
}
