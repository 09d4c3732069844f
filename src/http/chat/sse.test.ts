import { expect, test } from "bun:test";
import { fail } from "../../errors.ts";
import { chatFrameOf } from "../../wires/chat.ts";
import { chatSse } from "./sse.ts";

test("the relay's events as OpenAI's server-sent events", () => {
  expect(chatSse({ kind: "chunk", chunk: { choices: [] }, json: null })).toBe('data: {"choices":[]}\n\n');
  expect(chatSse({ kind: "usage", chunk: { choices: [] }, json: '{"choices":[] }' })).toBe('data: {"choices":[] }\n\n');
  expect(chatSse({ kind: "keepAlive" })).toBe(": keep-alive\n\n");
  expect(chatSse({ kind: "done" })).toBe("data: [DONE]\n\n");
  const error = chatSse({ kind: "error", failure: fail("upstream_error", "The upstream failed mid-stream: boom") });
  expect(JSON.parse(error.slice("data: ".length))).toMatchObject({ error: { message: "The upstream failed mid-stream: boom" } });
});

test("an upstream chunk the gateway cannot read as one goes to the chat wire as sent, and the translated wires skip it", () => {
  const event = { kind: "chunk", chunk: null, json: '{"choices":"none"}' } as const;
  expect(chatSse(event)).toBe('data: {"choices":"none"}\n\n');
  expect(chatFrameOf(event)).toBeNull();
  expect(chatFrameOf({ kind: "chunk", chunk: { choices: [] }, json: '{"choices":[]}' })).toEqual({ kind: "chunk", chunk: { choices: [] } });
});
