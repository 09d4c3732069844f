/**
 * A hostile upstream that answers every call with a redirect to a target it chose (another
 * country's server, an internal address): the gateway never follows it. Each operation fails
 * over to an honest backend when its pool has one, or fails with an OpenAI-shaped 502 and is not
 * billed; the pools' host metrics poll does not follow it either; the target is never reached,
 * and /metrics counts the redirects per backend and call.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { simToneWav } from "../src/sim/audio.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { ADMIN_TOKEN, balanceMicroOf, SETUP_MS_MAX, startTestGateway, type TestGateway, until, writePoolsFile } from "./helpers.ts";

/** The redirect the hostile upstream answers each path with (307/308 keep the method and body). */
const REDIRECT_BY_PATH: Record<string, number> = {
  "/v1/chat/completions": 307,
  "/v1/messages": 308,
  "/v1/embeddings": 307,
  "/v1/images/generations": 302,
  "/v1/audio/speech": 303,
  "/v1/audio/transcriptions": 307,
  "/metrics": 302,
};
const REDIRECT_OTHERS = 301;

let target: ReturnType<typeof Bun.serve>;
let hostile: ReturnType<typeof Bun.serve>;
let sim: Simulator;
let t: TestGateway;
let key: string;
let client: OpenAI;
/** Requests the redirects' target received: any is a redirect followed. */
const reached: string[] = [];

beforeAll(async () => {
  // What a followed redirect would have fetched: a plausible reply, so following it would succeed.
  target = Bun.serve({
    port: 0,
    fetch(req) {
      reached.push(`${req.method} ${new URL(req.url).pathname} ${req.headers.get("x-api-key") ?? ""}`);
      return Response.json({ id: "x", object: "chat.completion", created: 1, model: "m", choices: [] });
    },
  });
  hostile = Bun.serve({
    port: 0,
    fetch(req) {
      const { pathname, search } = new URL(req.url);
      const status = REDIRECT_BY_PATH[pathname] ?? REDIRECT_OTHERS;
      return new Response(null, { status, headers: { location: `${target.url.origin}${pathname}${search}` } });
    },
  });
  sim = await startSimulator({ ttftMs: 0, itlMs: 0, outputTokens: 4 });
  const backend = (kind: string, region = "abroad") => ({
    name: `hostile-${kind}`,
    kind,
    url: `${hostile.url.origin}/v1`,
    api_key_env: "HOSTILE_BACKEND_KEY",
    region,
  });
  const honest = { name: "sim", kind: "openai", url: `${sim.url}/v1`, region: "abroad" };
  const only = (b: object) => ({ backends: [b] });
  const pools = {
    "gpt-4o-mini": { backends: [backend("openai"), honest] },
    "gpt-4o": only(backend("openai")),
    "claude-3-5-haiku": only(backend("anthropic")),
    "gemini-2.0-flash": only(backend("gemini")),
    "text-embedding-3-small": only(backend("openai")),
    "dall-e-2": only(backend("openai")),
    "tts-1": only(backend("openai")),
    "whisper-1": only(backend("openai")),
  };
  t = await startTestGateway({ DARVAZE_CONFIG: writePoolsFile(pools), HOSTILE_BACKEND_KEY: "backend-secret" });
  ({ key } = await t.fundedKey(100_000));
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sim?.stop();
  hostile?.stop(true);
  target?.stop(true);
}, SETUP_MS_MAX);

const balanceMicro = () => balanceMicroOf(t.url, key);

/** The gateway's darvaze_backend_redirects_total samples, as `backend call` → count. */
async function redirectCounts(): Promise<Map<string, number>> {
  const text = (await (await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text()) as string;
  const counts = new Map<string, number>();
  for (const match of text.matchAll(/^darvaze_backend_redirects_total\{([^}]*)\} (\d+)/gm)) {
    const labels = Object.fromEntries([...match[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    counts.set(`${labels.model} ${labels.backend} ${labels.call}`, Number(match[2]));
  }
  return counts;
}

const wav = simToneWav(1);

const refusedCalls: [string, () => Promise<unknown>][] = [
  ["chat (openai)", () => client.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "national-id 1234" }] })],
  [
    "chat stream (openai)",
    async () => {
      const stream = await client.chat.completions.create({ model: "gpt-4o", stream: true, messages: [{ role: "user", content: "hi" }] });
      for await (const _ of stream);
    },
  ],
  ["chat (anthropic)", () => client.chat.completions.create({ model: "claude-3-5-haiku", messages: [{ role: "user", content: "hi" }] })],
  ["chat (gemini)", () => client.chat.completions.create({ model: "gemini-2.0-flash", messages: [{ role: "user", content: "hi" }] })],
  ["responses", () => client.responses.create({ model: "gpt-4o", input: "hi" })],
  ["embeddings", () => client.embeddings.create({ model: "text-embedding-3-small", input: "hi" })],
  ["images", () => client.images.generate({ model: "dall-e-2", prompt: "x", size: "256x256" })],
  ["speech", () => client.audio.speech.create({ model: "tts-1", voice: "alloy", input: "Hello" })],
  [
    "transcription",
    () => client.audio.transcriptions.create({ model: "whisper-1", file: new File([wav], "a.wav", { type: "audio/wav" }) }),
  ],
];

test.each(refusedCalls)("%s: a backend that only redirects gives a 502, not followed, nothing billed", async (_, call) => {
  const before = await balanceMicro();
  const error = await call().then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(OpenAI.APIError);
  const apiError = error as InstanceType<typeof OpenAI.APIError>;
  expect(apiError.status).toBe(502);
  expect(apiError.message).toContain("redirect");
  expect(reached).toEqual([]);
  expect(await balanceMicro()).toBe(before);
});

test("chat with an honest backend beside the hostile one is served by the honest one", async () => {
  const backend = t.gw.deps.pools.get("gpt-4o-mini")!.backends.find((b) => b.name === "hostile-openai")!;
  // The pick is random between two fresh backends: ask until the hostile one has been tried.
  await until(async () => {
    const reply = await client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });
    expect(reply.choices[0]!.message.content).toBeString();
    return backend.redirects.request > 0;
  });
  expect(reached).toEqual([]);
  const counts = await redirectCounts();
  expect(counts.get("gpt-4o-mini hostile-openai request")).toBeGreaterThanOrEqual(1);
});

test("the host metrics poll does not follow a redirect, and counts it", async () => {
  await until(async () => ((await redirectCounts()).get("gpt-4o hostile-openai metrics") ?? 0) >= 1, 10_000);
  expect(reached).toEqual([]);
});
