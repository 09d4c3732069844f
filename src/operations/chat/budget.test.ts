import { expect, test } from "bun:test";
import type { CatalogModel } from "../../catalog/catalog.ts";
import { isFailure } from "../../errors.ts";
import { FILE_ALLOWANCE_TOKENS, IMAGE_ALLOWANCE_TOKENS, TOOL_RESULT_ALLOWANCE_TOKENS } from "../../tokens/count.ts";
import { chatBudget, exactChatReserve, exactPromptTokens, type ChatBudget } from "./budget.ts";
import { chatRequest } from "./schema.ts";

const model: CatalogModel = {
  id: "m",
  operation: "chat",
  vendor: "v",
  contextWindow: 1_000_000,
  openWeight: false,
  listing: 1,
  createdS: 0,
  aliases: [],
  outputMax: null,
  capabilities: {
    streaming: true,
    tools: true,
    hosted_tools: [],
    reasoning: "none",
    reasoning_effort: false,
    images_in: true,
    images_out: false,
    audio_in: false,
    audio_out: false,
    cache: "none",
    image_tokens: false,
    context_1m: false,
  },
  successor: null,
  source: null,
  price: {
    versionId: 1,
    tomanPerUsd: 90_000n,
    tomanPer1m: new Map([
      ["input_token", 13_500n],
      ["output_token", 54_000n],
    ]),
  },
};
const body = (fields: Record<string, unknown>) =>
  chatRequest.parse({ model: "m", messages: [{ role: "user", content: "Hello, world!" }], max_tokens: 10, ...fields });
const bytes = (value: unknown) => Buffer.byteLength(JSON.stringify(value), "utf8");
const hello = { type: "text", text: "Hello, world!" };

test("the exact count: texts by o200k with OpenAI's template counts", async () => {
  expect(await exactPromptTokens(body({}))).toBe(10); // (3 + 4) + 3
});

test("the exact count gives images, audio and files the cheap bound's allowances, plus their data's bytes", async () => {
  const image = { type: "image_url", image_url: { url: "https://x.io/a.png" } };
  expect(await exactPromptTokens(body({ messages: [{ role: "user", content: [hello, image] }] }))).toBe(
    10 + IMAGE_ALLOWANCE_TOKENS + bytes(image.image_url),
  );
  const file = { type: "file", file: { filename: "a.pdf", file_data: "data:application/pdf;base64,AAAA" } };
  expect(await exactPromptTokens(body({ messages: [{ role: "user", content: [hello, file] }] }))).toBe(
    10 + FILE_ALLOWANCE_TOKENS + bytes(file.file),
  );
  const audio = { type: "input_audio", input_audio: { data: "AAAA", format: "wav" } };
  expect(await exactPromptTokens(body({ messages: [{ role: "user", content: [hello, audio] }] }))).toBe(
    10 + FILE_ALLOWANCE_TOKENS + bytes(audio.input_audio),
  );
});

test("the exact count bounds tools, functions, schemas, tool calls and names by their bytes", async () => {
  const tools = [{ type: "function", function: { name: "get", description: "Weather", parameters: { type: "object" } } }];
  const functions = [{ name: "old", parameters: { type: "object" } }];
  const format = { type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: { a: { type: "string" } } } } };
  const sent = body({ tools, functions, function_call: "auto", response_format: format, tool_choice: "auto" });
  expect(await exactPromptTokens(sent)).toBe(10 + bytes(tools) + bytes(functions) + "auto".length + bytes(format) + "auto".length);
  const calls = [{ id: "c1", type: "function", function: { name: "get", arguments: "{}" } }];
  const conversation = body({
    messages: [
      { role: "user", content: "Hello, world!", name: "ali" },
      { role: "assistant", content: null, tool_calls: calls },
      { role: "tool", tool_call_id: "c1", content: "Hello, world!" },
    ],
  });
  expect(await exactPromptTokens(conversation)).toBe(
    3 + (3 + 4 + "ali".length) + (3 + bytes(calls)) + (3 + 4 + "c1".length + TOOL_RESULT_ALLOWANCE_TOKENS),
  );
});

test("the wallet-edge reserve is the exact count, never above the cheap bound", async () => {
  const image = { type: "image_url", image_url: { url: "https://x.io/a.png" } };
  const sent = body({ messages: [{ role: "user", content: [hello, image] }] });
  const budget = (await chatBudget(sent, model, { fairnessKey: "t", bodyBytes: () => bytes(sent) })) as ChatBudget;
  const exact = await exactChatReserve(sent, budget, "t");
  expect(exact.promptTokens).toBe(await exactPromptTokens(sent));
  expect(exact.promptTokens).toBeLessThanOrEqual(budget.promptTokensBound);
  expect(exact.reserveMicro).toBe(BigInt(exact.promptTokens) * 13_500n + 10n * 54_000n);
});

test("paid fields: refused without the pool's consent, priced by their percents with it", async () => {
  const refused = await chatBudget(body({ service_tier: "priority" }), model, { fairnessKey: "t" });
  expect(isFailure(refused) && [refused.code, refused.param]).toEqual(["invalid_request", "service_tier"]);
  const priced = (await chatBudget(body({ service_tier: "priority", web_search_options: {} }), model, {
    fairnessKey: "t",
    paidFields: { service_tier: { priority: { price_percent: 150 } }, web_search_options: { price_percent: 101 } },
  })) as ChatBudget;
  // 13,500 × 1.5 × 1.01 = 20,452.5 → 20,453; 54,000 × 1.5 × 1.01 = 81,810
  expect([priced.inputPricePer1m, priced.outputPricePer1m]).toEqual([20_453n, 81_810n]);
  const prediction = { type: "content", content: "Hello, world!" };
  const predicted = (await chatBudget(body({ prediction }), model, {
    fairnessKey: "t",
    paidFields: { prediction: { price_percent: 100 } },
  })) as ChatBudget;
  // the prediction's bytes are reserved at the output price on top of max_tokens
  expect(predicted.reserveMicro).toBe(BigInt(predicted.promptTokensBound) * 13_500n + BigInt(10 + bytes(prediction)) * 54_000n);
});

test("a limit the window cannot hold: refused, or on a lowering wire lowered to the room left, not below its floor", async () => {
  const small = { ...model, contextWindow: 20_000 };
  const asked = body({ max_tokens: 128_000 });
  const refused = await chatBudget(asked, small, { fairnessKey: "t" });
  expect(isFailure(refused) ? refused.code : refused).toBe("context_length_exceeded");

  const lowered = (await chatBudget(asked, small, { fairnessKey: "t", lowerToWindow: true })) as ChatBudget;
  expect(lowered.outputTokensMax).toBe(20_000 - (await exactPromptTokens(asked))); // the prompt counts 10
  expect(lowered.reserveMicro).toBe(BigInt(lowered.promptTokensBound) * 13_500n + BigInt(lowered.outputTokensMax) * 54_000n);
  const fitting = (await chatBudget(body({ max_tokens: 10 }), small, { fairnessKey: "t", lowerToWindow: true })) as ChatBudget;
  expect(fitting.outputTokensMax).toBe(10);

  // 17,000 tokens of prompt leave 3,000: under OUTPUT_TOKENS_WINDOW_MIN, so refused on any wire.
  const long = body({ max_tokens: 128_000, messages: [{ role: "user", content: " word".repeat(17_000) }] });
  const tooLong = await chatBudget(long, small, { fairnessKey: "t", lowerToWindow: true });
  expect(isFailure(tooLong) ? tooLong.code : tooLong).toBe("context_length_exceeded");
  const modest = body({ max_tokens: 2_000, messages: long.messages });
  expect(((await chatBudget(modest, small, { fairnessKey: "t", lowerToWindow: true })) as ChatBudget).outputTokensMax).toBe(2_000);
});

test("an image URL that shows no image type: Gemini may read a video or a PDF there, so its allowance is the context window", async () => {
  const gemini: CatalogModel = { ...model, id: "gemini-2.5-flash", vendor: "google", contextWindow: 1_048_576 };
  const part = (url: string) => ({ type: "image_url", image_url: { url } });
  const bound = async (m: CatalogModel, url: string) =>
    ((await chatBudget(body({ messages: [{ role: "user", content: [hello, part(url)] }] }), m, { fairnessKey: "t" })) as ChatBudget)
      .promptTokensBound;
  for (const url of ["https://x.io/talk.mp4", "https://x.io/paper.pdf", "https://x.io/media?id=7", "data:video/mp4;base64,AAAA"]) {
    expect([url, await bound(gemini, url)]).toEqual([url, gemini.contextWindow]); // never more input than the window
    expect(await bound(model, url)).toBeLessThan(IMAGE_ALLOWANCE_TOKENS + 300); // read as an image, or refused (the body's bytes besides)
  }
  expect(await bound(gemini, "https://x.io/a.png")).toBeLessThan(IMAGE_ALLOWANCE_TOKENS + 300);
  expect(await bound(gemini, "data:image/png;base64,AAAA")).toBeLessThan(IMAGE_ALLOWANCE_TOKENS + 300);
});

test("a limit above the model's output_max is refused with OpenAI's invalid_value, naming the field the body used", async () => {
  const capped = { ...model, id: "gpt-4o-mini", outputMax: 16_384 };
  const options = { fairnessKey: "k" };
  const refused = await chatBudget(body({ max_tokens: 100_000 }), capped, options);
  expect(refused).toEqual({
    code: "invalid_value",
    param: "max_tokens",
    message: "max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you provided 100000.",
  });
  const completion = await chatBudget(body({ max_tokens: undefined, max_completion_tokens: 16_385 }), capped, options);
  expect(isFailure(completion) && completion.param).toBe("max_completion_tokens");
  const atMax = await chatBudget(body({ max_tokens: 16_384 }), capped, options);
  expect(isFailure(atMax) ? atMax : atMax.outputTokensMax).toBe(16_384);
  // A wire's own words, as the Messages and Gemini wires give them.
  const worded = await chatBudget(body({ max_tokens: 20_000 }), capped, {
    ...options,
    outputLimitWording: (asked, max, id) => ({ param: "p", message: `${asked}/${max}/${id}` }),
  });
  expect(worded).toEqual({ code: "invalid_value", param: "p", message: "20000/16384/gpt-4o-mini" });
});

test("a default output limit stays within output_max", async () => {
  const capped = { ...model, outputMax: 8_192 };
  const streamed = await chatBudget(body({ max_tokens: undefined, stream: true }), capped, { fairnessKey: "k" });
  expect(isFailure(streamed) ? streamed : streamed.outputTokensMax).toBe(8_192);
  const whole = await chatBudget(body({ max_tokens: undefined }), capped, { fairnessKey: "k" });
  expect(isFailure(whole) ? whole : whole.outputTokensMax).toBe(4_096);
});

// A tier above 100 prompt tokens at twice the prices (Gemini 2.5 Pro's shape, scaled down).
const tiered: CatalogModel = {
  ...model,
  price: {
    ...model.price,
    tier: {
      aboveInputTokens: 100,
      tomanPer1m: new Map([
        ["input_token", 27_000n],
        ["output_token", 108_000n],
      ]),
    },
  },
};

test("a prompt whose bound is above the tier's threshold is reserved at the tier's prices, every token of it; below, at the standard ones", async () => {
  const short = (await chatBudget(body({}), tiered, { fairnessKey: "t" })) as ChatBudget;
  expect(short.promptTokensBound).toBeLessThanOrEqual(100);
  expect([short.inputPricePer1m, short.outputPricePer1m, short.promptTier]).toEqual([13_500n, 54_000n, undefined]);
  expect(short.reserveMicro).toBe(BigInt(short.promptTokensBound) * 13_500n + 10n * 54_000n);
  const long = (await chatBudget(body({ messages: [{ role: "user", content: "word ".repeat(200) }] }), tiered, {
    fairnessKey: "t",
  })) as ChatBudget;
  expect(long.promptTokensBound).toBeGreaterThan(100);
  expect([long.inputPricePer1m, long.outputPricePer1m]).toEqual([27_000n, 108_000n]);
  expect(long.reserveMicro).toBe(BigInt(long.promptTokensBound) * 27_000n + 10n * 108_000n);
  // The charge of a prompt that lands at or below the threshold takes the standard prices.
  expect(long.promptTier).toEqual({ aboveInputTokens: 100, belowPricesPer1m: model.price.tomanPer1m });
});

test("a model that takes context-1m has its tier and long window only when the request asks for it", async () => {
  const claude = { ...tiered, contextWindow: 1_000, capabilities: { ...tiered.capabilities, context_1m: true } };
  const long = body({ messages: [{ role: "user", content: "word ".repeat(200) }], max_tokens: 10 });
  const without = await chatBudget(long, claude, { fairnessKey: "t" });
  // Without context-1m the window is the threshold: 100 tokens, which the prompt does not fit.
  expect(isFailure(without) && without.code).toBe("context_length_exceeded");
  const withBeta = (await chatBudget(long, claude, { fairnessKey: "t", context1m: true })) as ChatBudget;
  expect(withBeta.inputPricePer1m).toBe(27_000n);
  expect(withBeta.promptTier?.aboveInputTokens).toBe(100);
  // The beta itself, as Claude Code or the Messages wire sends it, asks for the same: priced at the tier, not refused.
  const asked = { ...long, anthropic: { betas: ["context-1m-2025-08-07"] } };
  const byBeta = (await chatBudget(asked, claude, { fairnessKey: "t" })) as ChatBudget;
  expect([byBeta.inputPricePer1m, byBeta.outputPricePer1m, byBeta.promptTier?.aboveInputTokens]).toEqual([27_000n, 108_000n, 100]);
});

test("the window counts everything sent: a small message with a huge tool description or schema is refused, one that fits passes", async () => {
  const small = { ...model, contextWindow: 20_000 };
  const description = " word".repeat(25_000); // 25,000 tokens: more than the window on its own
  const tools = [{ type: "function", function: { name: "get", description, parameters: { type: "object" } } }];
  const refused = await chatBudget(body({ tools }), small, { fairnessKey: "t" });
  expect(isFailure(refused) ? refused.code : refused).toBe("context_length_exceeded");
  const schema = { type: "object", properties: { a: { type: "string", description } } };
  const format = { type: "json_schema", json_schema: { name: "x", schema } };
  const refusedFormat = await chatBudget(body({ response_format: format }), small, { fairnessKey: "t" });
  expect(isFailure(refusedFormat) ? refusedFormat.code : refusedFormat).toBe("context_length_exceeded");
  // 10,000 tokens of description fit beside the message and its 10 tokens of output, and the room left is counted with them.
  const modest = [{ type: "function", function: { name: "get", description: " word".repeat(10_000), parameters: { type: "object" } } }];
  const admitted = (await chatBudget(body({ tools: modest, max_tokens: null }), small, { fairnessKey: "t" })) as ChatBudget;
  expect(admitted.outputTokensMax).toBeLessThanOrEqual(20_000 - 10_000);
  expect(admitted.outputTokensMax).toBeGreaterThan(0);
});

test("anthropic betas: an unknown or refused name is a 400 naming the header; context-1m only for a prompt that fits the standard window", async () => {
  const wide = { ...model, contextWindow: 1_000_000 };
  const betas = (names: string[], content = "Hello, world!") =>
    body({ anthropic: { betas: names }, messages: [{ role: "user", content }] });
  for (const name of ["not-a-beta-2030-01-01", "code-execution-2025-05-22"]) {
    const refused = await chatBudget(betas(["claude-code-20250219", name]), wide, { fairnessKey: "t" });
    expect(isFailure(refused) && [refused.code, refused.param, refused.message.includes(name)]).toEqual([
      "invalid_request",
      "anthropic-beta",
      true,
    ]);
  }
  expect(isFailure(await chatBudget(betas(["claude-code-20250219", "effort-2025-11-24"]), wide, { fairnessKey: "t" }))).toBe(false);
  expect(isFailure(await chatBudget(betas(["context-1m-2025-08-07"]), wide, { fairnessKey: "t" }))).toBe(false);
  // 150,000 tokens in 750,000 bytes: the byte bound passes 200K, the count proves it fits.
  const fits = " word".repeat(150_000);
  expect(isFailure(await chatBudget(betas(["context-1m-2025-08-07"], fits), wide, { fairnessKey: "t" }))).toBe(false);
  const long = " word".repeat(250_000);
  const tooLong = await chatBudget(betas(["context-1m-2025-08-07"], long), wide, { fairnessKey: "t" });
  expect(isFailure(tooLong) && [tooLong.code, tooLong.param]).toEqual(["invalid_request", "anthropic-beta"]);
  expect(isFailure(await chatBudget(betas([], long), wide, { fairnessKey: "t" }))).toBe(false); // the beta is what is refused
});
