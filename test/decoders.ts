/** Test support for stream decoders: feed a recorded stream in network-sized pieces. */
import { readFileSync } from "node:fs";
import { chunkJson } from "../src/providers/chunk.ts";
import type { ChatStreamDecoder, StreamPiece } from "../src/providers/types.ts";

export function fixture(vendor: string, name: string): string {
  return readFileSync(new URL(`./fixtures/${vendor}/${name}`, import.meta.url), "utf8");
}

/** Feeds `text` in pieces of `size` characters and merges the pieces, as the relay sees them. */
export function decodeAll(decoder: ChatStreamDecoder, text: string, size: number): StreamPiece {
  const all: StreamPiece = { frames: [], done: false };
  for (let i = 0; i < text.length; i += size) {
    const piece = decoder.push(text.slice(i, i + size));
    all.frames.push(...piece.frames);
    all.usage = piece.usage ?? all.usage;
    all.error = piece.error ?? all.error;
    all.inputTokensAtStart ??= piece.inputTokensAtStart;
    all.done ||= piece.done;
  }
  return all;
}

/** The parsed `chat.completion.chunk`s of the decoded frames. */
export function chunksOf(piece: StreamPiece): {
  choices: { delta: Record<string, unknown>; finish_reason: string | null }[];
  usage?: unknown;
  id: string;
  object: string;
  model: string;
  created: number;
}[] {
  return piece.frames.map((f) => JSON.parse(chunkJson(f)));
}
