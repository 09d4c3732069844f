import { describe, expect, test } from "bun:test";
import { responseProblems, streamEventProblems } from "../../../../test/openaiSchema.ts";
import { sseEvents } from "../../../../test/wireFixtures.ts";
import { chunksOf, decodeAll, fixture as recorded } from "../../../../test/decoders.ts";
import type { ReplyContext } from "../../types.ts";
import { chatToResponsesRequest } from "./request.ts";
import { responsesToOpenAIResponse } from "./response.ts";
import { ResponsesStreamDecoder } from "./stream.ts";

const context: ReplyContext = { requestId: "req_1", model: "gpt-4.1", created: 1_756_302_124 };
const fixture = (name: string) => recorded("openai", name);

test.each(["responses-text.sse", "responses-function-call.sse", "responses-incomplete.sse", "responses-failed.sse"])(
  "the recorded %s is the spec's wire",
  (name) => {
    for (const { data } of sseEvents(fixture(name))) expect(streamEventProblems(data as { type: string })).toEqual([]);
  },
);

describe("chatToResponsesRequest", () => {
  test("a chat conversation as Responses input items, the budget as max_output_tokens, stateless", () => {
    const request = chatToResponsesRequest(
      {
        body: {
          model: "gpt-4.1",
          messages: [
            { role: "system", content: "Be brief." },
            {
              role: "user",
              content: [
                { type: "text", text: "Weather?" },
                { type: "image_url", image_url: { url: "https://x/y.png", detail: "low" } },
              ],
            },
            {
              role: "assistant",
              content: null,
              tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Tehran"}' } }],
            },
            { role: "tool", tool_call_id: "call_1", content: "18" },
          ],
          tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object" } } }],
          tool_choice: "required",
          reasoning_effort: "high",
          response_format: { type: "json_schema", json_schema: { name: "w", schema: { type: "object" }, strict: true } },
        },
        upstreamModel: "gpt-4.1-2025-04-14",
        maxTokens: 512,
        stream: true,
      },
      "sk-up",
    );
    expect(request.path).toBe("/responses");
    expect(request.headers.authorization).toBe("Bearer sk-up");
    expect(JSON.parse(request.body)).toEqual({
      model: "gpt-4.1-2025-04-14",
      input: [
        { role: "system", content: "Be brief." },
        {
          role: "user",
          content: [
            { type: "input_text", text: "Weather?" },
            { type: "input_image", image_url: "https://x/y.png", detail: "low" },
          ],
        },
        { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Tehran"}' },
        { type: "function_call_output", call_id: "call_1", output: "18" },
      ],
      max_output_tokens: 512,
      store: false,
      stream: true,
      tools: [{ type: "function", name: "get_weather", parameters: { type: "object" }, strict: false }],
      tool_choice: "required",
      reasoning: { effort: "high" },
      text: { format: { type: "json_schema", name: "w", schema: { type: "object" }, strict: true } },
    });
  });
});

describe("responsesToOpenAIResponse", () => {
  test("the completed response of the recorded stream: a chat completion with its usage", () => {
    const response = sseEvents(fixture("responses-function-call.sse")).at(-1)!.data.response;
    expect(responseProblems(response)).toEqual([]);
    const reply = responsesToOpenAIResponse(JSON.stringify(response), context);
    if ("code" in reply) throw new Error(reply.message);
    expect(reply.usage).toEqual({ input: 61, output: 15 });
    expect(JSON.parse(reply.body).choices[0]).toMatchObject({
      message: {
        content: null,
        tool_calls: [{ id: "call_Q2x9", type: "function", function: { name: "get_weather", arguments: '{"city":"Tehran"}' } }],
      },
      finish_reason: "tool_calls",
    });
  });

  test("a failed response is an upstream error", () => {
    const response = sseEvents(fixture("responses-failed.sse")).at(-1)!.data.response;
    expect(responsesToOpenAIResponse(JSON.stringify(response), context)).toMatchObject({ code: "upstream_error", retryable: true });
  });
});

/** A fixture pushed in pieces of `size` characters, as the relay reads it. */
function decode(name: string, size: number) {
  const piece = decodeAll(new ResponsesStreamDecoder(context), fixture(name), size);
  return {
    frames: piece.frames,
    chunks: chunksOf(piece) as any[],
    end: { done: piece.done, error: piece.error?.message, usage: piece.usage },
  };
}

describe("ResponsesStreamDecoder", () => {
  test.each([7, 100_000])("text in pieces of %d characters: content chunks, finish stop, the usage chunk", (size) => {
    const { frames, chunks, end } = decode("responses-text.sse", size);
    expect(frames.map((f) => f.text).join("")).toBe("Hello! How can I help?");
    expect(chunks.flatMap((c) => c.choices.map((ch: any) => ch.finish_reason)).filter(Boolean)).toEqual(["stop"]);
    expect(frames.at(-1)).toMatchObject({ usageOnly: true, usage: { input: 12, output: 8 } });
    expect(end).toMatchObject({ done: true, usage: { input: 12, output: 8 } });
  });

  test("a function call: the call opens with its id and name, its arguments arrive in pieces, finish tool_calls", () => {
    const { chunks } = decode("responses-function-call.sse", 50);
    const calls = chunks.flatMap((c) => c.choices.flatMap((ch: any) => ch.delta.tool_calls ?? []));
    expect(calls[0]).toEqual({ index: 0, id: "call_Q2x9", type: "function", function: { name: "get_weather", arguments: "" } });
    expect(calls.map((c: any) => c.function.arguments).join("")).toBe('{"city":"Tehran"}');
    expect(chunks.flatMap((c) => c.choices.map((ch: any) => ch.finish_reason)).filter(Boolean)).toEqual(["tool_calls"]);
  });

  test("metered text: the call's name and arguments, as a whole reply's are counted", () => {
    const { frames } = decode("responses-function-call.sse", 50);
    expect(frames.map((f) => f.text).join("")).toBe('get_weather{"city":"Tehran"}');
  });

  test("a refusal and a reasoning summary reach the client as refusal and reasoning_content, and are metered", () => {
    const events = [
      { type: "response.created", response: { id: "resp_r" } },
      { type: "response.reasoning_summary_text.delta", item_id: "rs_1", output_index: 0, summary_index: 0, delta: "Weighing the ask." },
      { type: "response.refusal.delta", item_id: "msg_1", output_index: 1, content_index: 0, delta: "I can't help " },
      { type: "response.refusal.delta", item_id: "msg_1", output_index: 1, content_index: 0, delta: "with that." },
    ];
    const text = events.map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join("");
    const piece = decodeAll(new ResponsesStreamDecoder(context), text, 9);
    const deltas = (chunksOf(piece) as any[]).flatMap((c) => c.choices.map((ch: any) => ch.delta));
    const joined = (field: string) => deltas.flatMap((d) => d[field] ?? []).join("");
    expect(joined("refusal")).toBe("I can't help with that.");
    expect(joined("reasoning_content")).toBe("Weighing the ask.");
    expect(piece.frames.map((f) => f.text).join("")).toBe("Weighing the ask.I can't help with that.");
  });

  test("incomplete at max_output_tokens: finish length", () => {
    const { chunks, end } = decode("responses-incomplete.sse", 1_000);
    expect(chunks.flatMap((c) => c.choices.map((ch: any) => ch.finish_reason)).filter(Boolean)).toEqual(["length"]);
    expect(end.done).toBe(true);
  });

  test("response.failed mid-stream: the text so far, then an upstream error", () => {
    const { frames, end } = decode("responses-failed.sse", 1_000);
    expect(frames.map((f) => f.text).join("")).toBe("Hel");
    expect(end).toMatchObject({ done: false, error: "The upstream failed mid-stream: The model failed to generate a response." });
  });
});
