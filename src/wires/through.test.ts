import { expect, spyOn, test } from "bun:test";
import type { RelayEvent } from "../operations/chat/events.ts";
import type { Relay } from "../operations/chat/relay.ts";
import { AnthropicStreamDecoder } from "../providers/anthropic/stream.ts";
import { OpenAIStreamDecoder } from "../providers/openai/stream.ts";
import { decodeAll, fixture } from "../../test/decoders.ts";
import type { ChatStreamDecoder } from "../providers/types.ts";
import { MessagesStream } from "./messages/stream.ts";
import { ResponsesStream } from "./responses/stream.ts";
import { wireBody, type WireStream } from "./through.ts";

const context = { requestId: "req1", model: "m", created: 1 };

/** A recorded stream through its decoder, as the relay queues it: its chunks' events, then the end. */
function decodedEvents(vendor: string, name: string, decoder: ChatStreamDecoder): RelayEvent[] {
  const piece = decodeAll(decoder, fixture(vendor, name), 64);
  const events: RelayEvent[] = piece.frames.map((frame) => ({ kind: "chunk", ...frame }));
  events.push({ kind: "done" });
  return events;
}

/** The body `wireBody` writes for these events, JSON.parse watched while it writes. */
async function written(events: RelayEvent[], wire: WireStream): Promise<{ text: string; parses: number }> {
  const batches = [events];
  const relay = {
    taken: () => batches.shift() ?? null,
    onNext: () => {},
    leave: () => {},
    done: Promise.resolve(),
    inputTokensAtStart: 7,
    hostedCallsBilled: 0,
  } as unknown as Relay;
  const parse = spyOn(JSON, "parse");
  const decoder = new TextDecoder();
  let text = "";
  try {
    for await (const bytes of wireBody(relay, wire)) text += decoder.decode(bytes);
    return { text, parses: parse.mock.calls.length };
  } finally {
    parse.mockRestore();
  }
}

test("an Anthropic backend's stream is written as Messages events from its chunks' values: nothing is parsed again", async () => {
  const events = decodedEvents("anthropic", "tool-use.sse", new AnthropicStreamDecoder(context));
  const { text, parses } = await written(events, new MessagesStream({ requestId: "req1", model: "claude" }, 3));
  expect(parses).toBe(0);
  expect(text).toContain("event: message_start\n");
  expect(text).toContain('"type":"input_json_delta"');
  expect(text.endsWith('event: message_stop\ndata: {"type":"message_stop"}\n\n')).toBe(true);
});

test("an OpenAI-compatible backend's stream is written as Responses events from the chunks its decoder parsed once", async () => {
  const events = decodedEvents("openai", "basic-usage.sse", new OpenAIStreamDecoder());
  const ctx = { requestId: "req1", model: "m", createdAt: 1, request: { model: "m" } as never, toolNames: new Map() };
  const { text, parses } = await written(events, new ResponsesStream(ctx, () => 2));
  expect(parses).toBe(0);
  expect(text).toContain("event: response.output_text.delta\n");
  expect(text).toContain("event: response.completed\n");
});
