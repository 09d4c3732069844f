/**
 * The simulator's own tokenizer. It is deliberately NOT tiktoken: the simulator is the independent
 * truth for billing tests, so it must be simple enough to count by hand.
 *
 * Rule: a token is either a maximal run of letters, digits and `_`, or one single character that
 * is none of those and not whitespace. Whitespace is never a token.
 *
 *   "Hello, world!"        → Hello | , | world | !            = 4
 *   " lorem"               → lorem                             = 1
 *   "naïve café 123_abc?"  → naïve | café | 123_abc | ?        = 4
 *
 * A prompt costs, per message, 3 + the tokens of its text, plus 3 for the whole prompt:
 *
 *   [{ role: "user", content: "Hello, world!" }] → (3 + 4) + 3 = 10
 *
 * A message's text is its `content` string, or for a content array the concatenation (no
 * separator) of the parts' `text` fields; other parts, `name`, tool calls and roles cost nothing.
 */

const tokenPattern = /[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_]/gu;

/** Per-message overhead, as in OpenAI's published counting recipe. */
export const simMessageOverheadTokens = 3;
/** Priming overhead of the assistant reply, counted once per prompt. */
export const simPromptOverheadTokens = 3;

/** A content part as found in chat messages; only `text` is counted. */
export type SimContentPart = { readonly type?: string; readonly text?: string };

/** The slice of a chat message the simulator reads. */
export type SimMessage = {
  readonly role?: string;
  readonly content?: string | readonly SimContentPart[] | null;
};

/**
 * Counts tokens by the simulator's rule.
 * @example simCountTokens("Hello, world!") // 4
 */
export function simCountTokens(text: string): number {
  return text.match(tokenPattern)?.length ?? 0;
}

/**
 * The text of one message: the string content, or the `text` parts joined with no separator.
 * @example simMessageText([{ type: "text", text: "foo" }, { type: "text", text: "bar" }]) // "foobar"
 */
export function simMessageText(content: SimMessage["content"]): string {
  if (typeof content === "string") return content;
  if (!content) return "";
  let text = "";
  for (const part of content) if (typeof part.text === "string") text += part.text;
  return text;
}

/**
 * Prompt tokens by the simulator's rule: Σ (3 + tokens of the message text) + 3.
 * @example simPromptTokens([{ role: "user", content: "Hello, world!" }]) // 10
 */
export function simPromptTokens(messages: readonly SimMessage[]): number {
  let total = simPromptOverheadTokens;
  for (const message of messages) {
    total += simMessageOverheadTokens + simCountTokens(simMessageText(message.content));
  }
  return total;
}
