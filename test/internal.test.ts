/**
 * Internal services over NATS: the same operations as over HTTP, through the service framework,
 * with the stream's own flow control. Needs NATS (skipped loudly without NATS_URL).
 */
import { afterAll, beforeAll, expect } from "bun:test";
import { connect, type NatsConnection, type ServiceInfo, type ServiceStats } from "nats";
import OpenAI from "openai";
import { InternalClient, InternalError } from "../src/internal/client.ts";
import { simCompletion, simPromptText } from "../src/sim/text.ts";
import { simToneWav, simTranscriptWords } from "../src/sim/audio.ts";
import { balanceMicroOf, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { type Operation, OPERATIONS } from "../src/internal/wire.ts";
import { until, untilValue } from "./until.ts";
import { describeWith } from "./services.ts";

const HELLO = [{ role: "user" as const, content: "Hello, world!" }];
/** The suite's BODY_BYTES_MAX: a quarter of NATS's default payload limit (1 MiB). */
const BODY_BYTES_MAX = 262_144;

describeWith(["nats"], "operations over NATS", (it) => {
  let t: TestGateway;
  let nc: NatsConnection;
  let prefix: string;
  let funded: { accountId: string; keyId: string; key: string };
  let gw: InternalClient;
  const sim = () => t.sim!;
  const defaults = { ttftMs: 0, itlMs: 0, outputTokens: 16 };

  beforeAll(async () => {
    // A body limit below NATS's payload limit: a body between the two is refused by the gateway's own bound.
    t = await startTestGateway({ BODY_BYTES_MAX: String(BODY_BYTES_MAX) });
    prefix = t.gw.deps.env.DARVAZE_SUBJECT_PREFIX;
    nc = await connect({ servers: process.env.NATS_URL! });
    funded = await t.fundedKey(1000);
    gw = new InternalClient(nc, { apiKey: funded.key, prefix, stallMs: 10_000 });
  }, SETUP_MS_MAX);
  afterAll(async () => {
    await nc?.drain();
    await t?.stop();
  }, SETUP_MS_MAX);

  const simEntryBySeq = (chunkId: string) => {
    const seq = Number(chunkId.replace("chatcmpl-sim-", ""));
    return untilValue(
      () =>
        sim()
          .log.entries()
          .find((e) => e.seq === seq),
      { what: `the simulator's entry ${seq}` },
    );
  };

  it("$SRV.PING, $SRV.INFO and $SRV.STATS list the service and its operations", async () => {
    const client = nc.services.client();
    const ours = (subjects: string[]) => subjects.includes(`${prefix}.v1.chat.completions`);
    let info: ServiceInfo | undefined;
    for await (const i of await client.info("darvaze")) if (ours(i.endpoints.map((e) => e.subject))) info = i;
    expect(info?.name).toBe("darvaze");
    let pinged = false;
    for await (const p of await client.ping("darvaze", info!.id)) pinged ||= p.id === info!.id;
    expect(pinged).toBe(true);
    await gw.request("chat.completions", { model: "gpt-4o-mini", messages: HELLO, max_tokens: 3 });
    let stats: ServiceStats | undefined;
    for await (const s of await client.stats("darvaze", info!.id)) stats = s;
    const chat = stats!.endpoints!.find((e) => e.name === "chat_completions")!;
    expect(chat.num_requests).toBeGreaterThanOrEqual(1);
    expect(chat.data).toMatchObject({ streams_open: 0 });
  });

  it("a whole reply and an error come back as over HTTP", async () => {
    const reply = await gw.request("chat.completions", { model: "gpt-4o-mini", messages: HELLO, max_tokens: 5 });
    expect(reply.status).toBe(200);
    expect(reply.headers["x-request-id"]).toMatch(/^req_/);
    const body = reply.json<{ choices: { message: { content: string } }[] }>();
    expect(body.choices[0]!.message.content).toBe(simCompletion({ seed: 1, promptText: simPromptText(HELLO), tokens: 5 }).join(""));
    const bad = new InternalClient(nc, { apiKey: "sk-dvz-nope", prefix });
    const error = await bad.request("chat.completions", { model: "gpt-4o-mini", messages: HELLO }).catch((e) => e);
    expect(error).toBeInstanceOf(InternalError);
    expect([error.status, error.body.error.code]).toEqual([401, "invalid_api_key"]);
    const huge = "x".repeat((nc.info?.max_payload ?? 1_048_576) + 1);
    const tooLarge = await gw
      .request("chat.completions", { model: "gpt-4o-mini", messages: [{ role: "user", content: huge }] })
      .catch((e) => e);
    expect([tooLarge.status, tooLarge.body.error.code]).toEqual([413, "request_too_large"]);
    expect(tooLarge.message).toContain(String(nc.info?.max_payload));
  });

  it("a chat body over BODY_BYTES_MAX is refused over NATS with the 413 HTTP gives, nothing billed", async () => {
    const body = { model: "gpt-4o-mini", messages: [{ role: "user", content: "x".repeat(BODY_BYTES_MAX) }] };
    expect(JSON.stringify(body).length).toBeLessThan(nc.info?.max_payload ?? 1_048_576);
    const before = await balanceMicroOf(t.url, funded.key);
    const nats = await gw.request("chat.completions", body).catch((e) => e);
    const http = await fetch(`${t.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${funded.key}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    expect(http.status).toBe(413);
    expect(nats).toBeInstanceOf(InternalError);
    expect([nats.status, nats.body]).toEqual([413, await http.json()]);
    expect(nats.body.error.message).toContain(String(BODY_BYTES_MAX));
    expect(await balanceMicroOf(t.url, funded.key)).toBe(before);
  });

  it("embeddings, images, speech and transcription answer over NATS as over HTTP, billed the same", async () => {
    const rich = await t.fundedKey(100_000); // an image costs 1,440 toman
    const http = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: rich.key, maxRetries: 0 });
    const gw = new InternalClient(nc, { apiKey: rich.key, prefix });
    const balance = async () =>
      BigInt(
        (
          (await (await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${rich.key}` } })).json()) as {
            balance_micro_toman: string;
          }
        ).balance_micro_toman,
      );
    const spent = async (call: () => Promise<unknown>) => {
      const before = await balance();
      await call();
      return before - (await balance());
    };
    // Embeddings: the same vectors and usage, the same charge.
    const embedBody = { model: "text-embedding-3-small", input: ["Hello, world!", "naïve café"], encoding_format: "float" as const };
    const viaHttp = await http.embeddings.create(embedBody);
    let viaNats: typeof viaHttp | undefined;
    const natsCost = await spent(async () => (viaNats = (await gw.request("embeddings", embedBody)).json()));
    expect(viaNats!.data.map((d) => d.embedding)).toEqual(viaHttp.data.map((d) => d.embedding));
    expect(viaNats!.usage).toEqual(viaHttp.usage);
    expect(natsCost).toBe(await spent(() => http.embeddings.create(embedBody)));
    // A reply larger than one NATS message comes in parts and is joined whole.
    const many = {
      model: "text-embedding-3-small",
      input: Array.from({ length: 60 }, (_, i) => `line ${i}`),
      encoding_format: "float" as const,
    };
    const big = await gw.request("embeddings", many);
    expect(big.body.length).toBeGreaterThan(nc.info!.max_payload);
    expect(big.json<typeof viaHttp>().data.map((d) => d.embedding)).toEqual(
      (await http.embeddings.create(many)).data.map((d) => d.embedding),
    );
    // Images as b64_json: a PNG.
    const image = (
      await gw.request("images.generations", { model: "dall-e-2", prompt: "a green window", size: "256x256", response_format: "b64_json" })
    ).json<{ data: { b64_json: string }[] }>();
    expect(Buffer.from(image.data[0]!.b64_json, "base64").subarray(1, 4).toString()).toBe("PNG");
    // Speech: the audio bytes and their content type, as over HTTP.
    const speechBody = { model: "tts-1", voice: "alloy", input: "The gateway speaks.", response_format: "wav" };
    const speech = await gw.request("audio.speech", speechBody);
    expect(speech.headers["Content-Type"]).toBe("audio/wav");
    const httpSpeech = Buffer.from(
      await (await http.audio.speech.create(speechBody as Parameters<typeof http.audio.speech.create>[0])).arrayBuffer(),
    );
    expect(Buffer.from(speech.body).equals(httpSpeech)).toBe(true);
    // Transcription: multipart, as over HTTP.
    const form = new FormData();
    form.set("model", "whisper-1");
    form.set("file", new File([simToneWav(2.4)], "tone.wav", { type: "audio/wav" }));
    form.set("response_format", "text");
    const transcript = await gw.request("audio.transcriptions", form);
    expect(new TextDecoder().decode(transcript.body).trim()).toBe(`${simTranscriptWords(2.4).join(" ")}.`);
    // An unaffordable request is refused the same way over NATS.
    const poor = await t.fundedKey(1);
    const requests = sim().log.totals.requests;
    const refused = await new InternalClient(nc, { apiKey: poor.key, prefix })
      .request("images.generations", { model: "dall-e-2", prompt: "a green window", size: "256x256" })
      .catch((e) => e);
    expect(sim().log.totals.requests).toBe(requests);
    expect([refused.status, refused.body.error.code]).toEqual([402, "insufficient_quota"]);
  }, 30_000);

  it("every operation's whole reply carries x-darvaze-cost, the wallet's drop", async () => {
    const transcription = new FormData();
    transcription.set("model", "whisper-1");
    transcription.set("file", new File([simToneWav(1.5)], "tone.wav", { type: "audio/wav" }));
    // Typed by the operations the service serves: a new one without a request here fails to compile.
    const requests: Record<Operation, unknown> = {
      "chat.completions": { model: "gpt-4o-mini", messages: HELLO, max_tokens: 4 },
      embeddings: { model: "text-embedding-3-small", input: "Hello" },
      "images.generations": { model: "dall-e-2", prompt: "a dot", size: "256x256" },
      "audio.speech": { model: "tts-1", voice: "alloy", input: "Hello", response_format: "wav" },
      "audio.transcriptions": transcription,
    };
    // An image costs 1,440 toman: more than the suite's key holds.
    const rich = await t.fundedKey(10_000);
    const client = new InternalClient(nc, { apiKey: rich.key, prefix });
    for (const operation of OPERATIONS) {
      const before = await balanceMicroOf(t.url, rich.key);
      const reply = await client.request(operation, requests[operation]);
      const cost = reply.headers["x-darvaze-cost"];
      expect([operation, cost]).toEqual([operation, expect.stringMatching(/^[1-9]\d*$/)]);
      expect(before - (await balanceMicroOf(t.url, rich.key))).toBe(BigInt(cost!));
    }
  });

  it("a stream over NATS gets the same text and usage as over HTTP", async () => {
    Object.assign(sim().options, defaults, { outputTokens: 40 });
    const body = { model: "gpt-4o-mini", messages: HELLO, stream: true, stream_options: { include_usage: true } };
    const http = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: funded.key, maxRetries: 0 });
    let httpText = "";
    let httpUsage: unknown = null;
    for await (const chunk of await http.chat.completions.create({ ...body, stream: true })) {
      httpText += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage) httpUsage = chunk.usage;
    }
    let natsText = "";
    let natsUsage: unknown = null;
    for await (const chunk of gw.stream("chat.completions", body)) {
      natsText += chunk.choices[0]?.delta?.content ?? "";
      if (chunk.usage) natsUsage = chunk.usage;
    }
    expect(httpText.length).toBeGreaterThan(0);
    expect(natsText).toBe(httpText);
    expect(natsUsage).toEqual(httpUsage);
    expect(natsUsage).toMatchObject({ completion_tokens: 40 });
  });

  it("a slow NATS consumer with a small credit window loses no chunk", async () => {
    Object.assign(sim().options, defaults, { outputTokens: 300 });
    const slow = new InternalClient(nc, { apiKey: funded.key, prefix, creditWindow: 4, stallMs: 10_000 });
    let text = "";
    let chunks = 0;
    for await (const chunk of slow.stream("chat.completions", { model: "gpt-4o-mini", messages: HELLO, stream: true })) {
      text += chunk.choices[0]?.delta?.content ?? "";
      // A slow consumer is the behaviour under test: a pause on every chunk, and now and then a
      // stall far beyond the window.
      if (++chunks % 50 === 0) await Bun.sleep(100);
      else await Bun.sleep(1);
    }
    expect(text).toBe(simCompletion({ seed: 1, promptText: simPromptText(HELLO), tokens: 300 }).join(""));
    // The gateway did wait for credit: the window, not NATS, paced the stream.
    const client = nc.services.client();
    let waits = 0;
    for await (const s of await client.stats("darvaze")) {
      const chat = s.endpoints?.find((e) => e.subject === `${prefix}.v1.chat.completions`);
      if (chat) waits += (chat.data as { credit_waits: number }).credit_waits;
    }
    expect(waits).toBeGreaterThan(0);
  }, 60_000);

  it("leaving a NATS stream cancels it: the upstream is cut at once, the slot freed, billed what it generated until the cut within the allowance", async () => {
    Object.assign(sim().options, defaults, { outputTokens: 150, itlMs: 20 });
    let chunks = 0;
    let chunkId = "";
    let leftAt = 0;
    for await (const chunk of gw.stream("chat.completions", { model: "gpt-4o-mini", messages: HELLO, stream: true })) {
      chunkId = chunk.id;
      if (chunk.choices[0]?.delta?.content && ++chunks === 5) {
        leftAt = Date.now();
        break;
      }
    }
    const entry = await simEntryBySeq(chunkId);
    expect(entry.aborted).toBe(true); // the simulator saw its connection close
    expect(entry.completionTokens).toBeLessThan(150);
    expect(entry.endedAt).toBeGreaterThanOrEqual(leftAt);
    await until(() => t.gw.keyHost.inFlight(funded.keyId) === 0, { what: "the key's slot freed" });
    const usageRecord = async () => {
      await t.admin("GET", "/admin/ledger/audit"); // writes this node's pending usage
      const account = await t.admin("GET", `/admin/accounts/${funded.accountId}`);
      return account.body.recent_usage.find((u: { request_id: string }) => u.request_id === entry.requestId);
    };
    const record = await untilValue(usageRecord, { msMax: 10_000, what: `the usage record of ${entry.requestId}`, pollMs: 50 });
    expect(record.status).toBe(499);
    expect(Number(record.output_units)).toBeGreaterThanOrEqual(entry.completionTokens);
    expect(Number(record.output_units)).toBeLessThan(150);
  });
});
