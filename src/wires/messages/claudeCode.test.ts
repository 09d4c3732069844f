/**
 * Claude Code's request (recorded from `claude -p "say hi" --model sonnet`, 2.1.332) through the
 * Messages wire and the chat path's schema to each kind of backend: an Anthropic backend gets
 * its thinking, output_config, context_management, betas and the system blocks with their
 * cache marks as Claude Code sent them; an OpenAI-style backend gets none of Anthropic's fields.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { isFailure } from "../../errors.ts";
import { chatRequest } from "../../operations/chat/schema.ts";
import { openAIToAnthropicRequest } from "../../providers/anthropic/request.ts";
import { chatToOpenAIRequest } from "../../providers/openai/request.ts";
import { messagesToChat } from "./request.ts";

const RECORDED = JSON.parse(readFileSync(join(import.meta.dir, "../../../test/fixtures/clients/claude-code-sonnet.json"), "utf8")) as {
  headers: Record<string, string>;
  body: Record<string, any>;
};
const MAX_TOKENS = 128_000;

/** The recorded request as the chat path admits it: translated, then checked by the chat schema. */
function admitted(body: Record<string, unknown> = RECORDED.body) {
  const out = messagesToChat(body, new Headers(RECORDED.headers));
  if (isFailure(out)) throw new Error(`${out.param}: ${out.message}`);
  const parsed = chatRequest.safeParse(out.chat);
  if (!parsed.success) throw new Error(JSON.stringify(parsed.error.issues[0]));
  return parsed.data as Record<string, unknown>;
}

describe("Claude Code's recorded request", () => {
  test("to an Anthropic backend: its own fields and the system blocks as sent, the betas in the header", () => {
    const upstream = openAIToAnthropicRequest(
      { body: admitted(), upstreamModel: "claude-sonnet-5-5", maxTokens: MAX_TOKENS, stream: true },
      "k",
    );
    const body = JSON.parse(upstream.body);
    expect(body.thinking).toEqual(RECORDED.body.thinking);
    expect(body.output_config).toEqual(RECORDED.body.output_config);
    expect(body.context_management).toEqual(RECORDED.body.context_management);
    expect(body.system.slice(0, RECORDED.body.system.length)).toEqual(RECORDED.body.system);
    expect(upstream.headers["anthropic-beta"]).toBe(RECORDED.headers["anthropic-beta"]);
    expect(body.max_tokens).toBe(MAX_TOKENS);
    expect(body.tools.map((t: { name: string }) => t.name)).toEqual(RECORDED.body.tools.map((t: { name: string }) => t.name));
  });

  test("thinking with a budget stays inside the output budget the reserve covers", () => {
    const chat = admitted({ ...RECORDED.body, thinking: { type: "enabled", budget_tokens: 32_000 } });
    const body = JSON.parse(openAIToAnthropicRequest({ body: chat, upstreamModel: "m", maxTokens: 8_192, stream: true }, "k").body);
    expect(body.thinking).toEqual({ type: "enabled", budget_tokens: 8_191 });
    const small = JSON.parse(openAIToAnthropicRequest({ body: chat, upstreamModel: "m", maxTokens: 1_000, stream: true }, "k").body);
    expect(small.thinking).toBeUndefined();
  });

  test("to an OpenAI-style backend: none of Anthropic's fields, the effort as reasoning_effort", () => {
    const body = JSON.parse(
      chatToOpenAIRequest({ body: admitted(), upstreamModel: "gpt-4o-mini", maxTokens: 4_096, stream: true }, "k").body,
    );
    expect(body.anthropic).toBeUndefined();
    expect(body.thinking).toBeUndefined();
    expect(body.reasoning_effort).toBe("medium");
  });

  test("a malformed beta list is refused, naming the header", () => {
    const out = messagesToChat(RECORDED.body, new Headers({ "anthropic-beta": "x".repeat(200) }));
    expect(isFailure(out) ? out.param : out).toBe("anthropic-beta");
  });
});
