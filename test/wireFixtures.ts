/**
 * Recorded streams as the translating wires receive them, for their unit tests: a chat SSE
 * fixture (OpenAI's own chunks, which the relay passes on untouched) read as relay frames, or a
 * vendor's fixture run through its adapter's decoder first (the chunks the relay would queue).
 */
import { chatChunkOf } from "../src/providers/chunk.ts";
import { decodeAll, fixture } from "./decoders.ts";
import type { ChatStreamDecoder } from "../src/providers/types.ts";
import { chatFrameOf, type ChatFrame } from "../src/wires/chat.ts";

/** Characters per network piece when a fixture is decoded. */
const PIECE_CHARS = 64;

/** A chat SSE fixture's frames (`test/fixtures/<vendor>/<name>`): its chunks, then the end. */
export function chatFixtureFrames(vendor: string, name: string): ChatFrame[] {
  const frames: ChatFrame[] = [];
  for (const block of fixture(vendor, name).split("\n\n")) {
    if (!block.startsWith("data: ")) continue;
    const data = block.slice("data: ".length).trim();
    const frame =
      data === "[DONE]" ? { kind: "done" as const } : chatFrameOf({ kind: "chunk", chunk: chatChunkOf(JSON.parse(data)), json: data });
    if (frame) frames.push(frame);
  }
  return frames;
}

/** A vendor's SSE fixture through its decoder: the chat frames, then the end (or its error). */
export function decodedFixtureFrames(vendor: string, name: string, decoder: ChatStreamDecoder): ChatFrame[] {
  const piece = decodeAll(decoder, fixture(vendor, name), PIECE_CHARS);
  const frames: ChatFrame[] = [];
  for (const frame of piece.frames) {
    const read = chatFrameOf({ kind: "chunk", ...frame });
    if (read) frames.push(read);
  }
  if (piece.error) frames.push({ kind: "error", failure: piece.error });
  else if (piece.done) frames.push({ kind: "done" });
  return frames;
}

/** `event: <type>` / `data: <json>` text as its events' JSON, in order. */
export function sseEvents(text: string): { event: string | null; data: Record<string, unknown> }[] {
  return text
    .split("\n\n")
    .filter((block) => block.includes("data: "))
    .map((block) => {
      const event = /^event: (.*)$/m.exec(block)?.[1] ?? null;
      return { event, data: JSON.parse(/^data: (.*)$/m.exec(block)![1]!) as Record<string, unknown> };
    });
}
