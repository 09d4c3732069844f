import { describe, expect, test } from "bun:test";
import { anthropicAdapter } from "./anthropic/index.ts";
import { choicesRefusal } from "./choices.ts";
import { geminiAdapter } from "./gemini/index.ts";
import { openAIAdapter } from "./openai/index.ts";

const input = (n?: number) => ({
  body: { model: "m", messages: [{ role: "user", content: "Hi" }], ...(n === undefined ? {} : { n }) },
  upstreamModel: "up",
  maxTokens: 16,
  stream: false,
});

describe.each([
  ["anthropic", anthropicAdapter("k")],
  ["gemini", geminiAdapter("k")],
])("%s returns one choice per call", (_, adapter) => {
  test("n absent or 1: a request; n = 2: skipped, so the pool tries another backend", () => {
    expect(adapter.chat!.buildChatRequest(input())).toBeDefined();
    expect(adapter.chat!.buildChatRequest(input(1))).toBeDefined();
    expect(adapter.chat!.buildChatRequest(input(2))).toBeUndefined();
  });
});

test("OpenAI-style backends pass n through", () => {
  const request = openAIAdapter("k").chat!.buildChatRequest(input(3))!;
  expect(JSON.parse(request.body).n).toBe(3);
});

describe("choicesRefusal", () => {
  const anthropic = { adapter: anthropicAdapter("k") };
  const gemini = { adapter: geminiAdapter("k") };
  const openai = { adapter: openAIAdapter("k") };

  test("a pool of one-choice backends refuses n > 1 with a 400 naming n", () => {
    const failure = choicesRefusal([anthropic, gemini], 2, "claude-3-5-haiku");
    expect(failure).toMatchObject({ code: "invalid_request", param: "n" });
    expect(failure!.message).toContain("at most 1 choice per request");
  });

  test("n = 1, or a pool with a backend that returns n choices: no refusal", () => {
    expect(choicesRefusal([anthropic], 1, "m")).toBeNull();
    expect(choicesRefusal([anthropic, openai], 4, "m")).toBeNull();
  });
});
