/**
 * Every paid operation by its catalog name (src/catalog/file.ts `OPERATIONS`), with the function
 * that serves it on the paid sequence of run.ts: what a transport serves, by name.
 */
import type { Operation } from "../catalog/seed.ts";
import { createSpeech } from "./audio/speech.ts";
import { createTranscription } from "./audio/transcription.ts";
import { chat } from "./chat/chat.ts";
import { createEmbeddings } from "./embeddings/embeddings.ts";
import { createImages } from "./images/images.ts";
import type { OperationInput } from "./input.ts";
import type { OperationResult } from "./result.ts";
import type { PaidDeps } from "./run.ts";

/** One paid operation for one request: its input from any transport, the gateway's services. */
export type PaidHandler = (input: OperationInput, deps: PaidDeps) => Promise<OperationResult>;

export const PAID_OPERATIONS: Readonly<Record<Operation, PaidHandler>> = {
  chat: (input, deps) => chat(input, deps),
  embeddings: (input, deps) => createEmbeddings(input, deps),
  images: createImages,
  speech: createSpeech,
  transcription: createTranscription,
};
