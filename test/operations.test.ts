/**
 * Embeddings, images, speech and transcription through the official `openai` client against a
 * gateway on the embedded simulator: replies match what the simulator made, and every call is
 * billed exactly (hand-computed constants, the simulator's log, the usage record).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { simEmbedding } from "../src/sim/embeddings.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

/** Toman per 1M units at the seed rate (USD × 90,000): micro-toman per unit. */
const EMBEDDING_MICRO_PER_TOKEN = 1_800n; // text-embedding-3-small, $0.02/1M

let t: TestGateway;
let key: string;
let accountId: string;
let client: OpenAI;

beforeAll(async () => {
  t = await startTestGateway({ MEDIA_TTL_S: "2" });
  ({ key, accountId } = await t.fundedKey(1000));
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
}, SETUP_MS_MAX);
afterAll(async () => t.stop(), SETUP_MS_MAX);

async function balanceMicro(apiKey = key): Promise<bigint> {
  const response = await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${apiKey}` } });
  return BigInt(((await response.json()) as { balance_micro_toman: string }).balance_micro_toman);
}

/** The gateway's usage record and the simulator's log entry of one request. */
async function billing(requestId: string) {
  const account = await t.admin("GET", `/admin/accounts/${accountId}`);
  const record = account.body.recent_usage.find((u: { request_id: string }) => u.request_id === requestId);
  const sim = t.gw.simulator!.log.byRequestId(requestId);
  return { record, sim };
}

describe("embeddings", () => {
  test("the default (base64, decoded by the client) returns the simulator's vectors, billed per token", async () => {
    const before = await balanceMicro();
    const { data, response } = await client.embeddings
      .create({ model: "text-embedding-3-small", input: ["Hello, world!", "naïve café"] })
      .withResponse();
    expect(data.data.map((d) => d.embedding)).toEqual([
      simEmbedding("text-embedding-3-small", "Hello, world!"),
      simEmbedding("text-embedding-3-small", "naïve café"),
    ]);
    // Simulator tokens: Hello , world ! = 4; naïve café = 2.
    expect(data.usage).toEqual({ prompt_tokens: 6, total_tokens: 6 });
    expect(before - (await balanceMicro())).toBe(6n * EMBEDDING_MICRO_PER_TOKEN);
    const { record, sim } = await billing(response.headers.get("x-request-id")!);
    expect(sim.map((e) => [e.operation, e.units])).toEqual([["embeddings", 6]]);
    expect(record).toMatchObject({ input_units: "6", billed_micro_toman: (6n * EMBEDDING_MICRO_PER_TOKEN).toString(), status: 200 });
  });

  test("float encoding and dimensions pass through; token arrays are billed by their length", async () => {
    const floats = await client.embeddings.create({ model: "text-embedding-3-small", input: "Hello", encoding_format: "float", dimensions: 8 });
    expect(floats.data[0]!.embedding).toEqual(simEmbedding("text-embedding-3-small", "Hello", 8));
    const before = await balanceMicro();
    const tokens = await client.embeddings.create({ model: "text-embedding-3-small", input: [[1, 2, 3], [4, 5]], encoding_format: "float" });
    expect(tokens.data[1]!.embedding).toEqual(simEmbedding("text-embedding-3-small", [4, 5]));
    expect(tokens.usage.prompt_tokens).toBe(5);
    expect(before - (await balanceMicro())).toBe(5n * EMBEDDING_MICRO_PER_TOKEN);
  });

  test("an empty input or a chat model is a 400 naming the field", async () => {
    const empty = await client.embeddings.create({ model: "text-embedding-3-small", input: "" }).catch((e) => e);
    expect(empty).toBeInstanceOf(OpenAI.BadRequestError);
    expect(empty.param).toBe("input");
    const chat = await client.embeddings.create({ model: "gpt-4o-mini", input: "x" }).catch((e) => e);
    expect([chat.status, chat.param]).toEqual([400, "model"]);
  });
});
