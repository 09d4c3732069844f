/**
 * Routing through the whole gateway with the official client: pools changed at run time,
 * failing and rate-limited backends, a backend killed mid-run, residency, and the estimates the
 * stream relay reports. Every pool here is set with PUT /admin/pools, as an operator would.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { eq } from "drizzle-orm";
import OpenAI from "openai";
import { TPOT_MS_NEUTRAL, TTFT_MS_NEUTRAL } from "../actors/pool/backend.ts";
import { savePool } from "../actors/pool/savedPools.ts";
import { pools as poolsTable } from "../src/db/schema.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";

const MODEL = "llama-3.3-70b-instruct";
const HELLO = [{ role: "user" as const, content: "Hello, world!" }];

let t: TestGateway;
let client: OpenAI;
let key: string;
const started: Simulator[] = [];

async function sim(options: Parameters<typeof startSimulator>[0] = {}): Promise<Simulator> {
  const s = await startSimulator({ outputTokens: 5, ...options });
  started.push(s);
  return s;
}

const backend = (name: string, s: Simulator, extra: Record<string, unknown> = {}) => ({
  name,
  kind: "openai",
  url: `${s.url}/v1`,
  region: "in-country",
  ...extra,
});

async function setPool(backends: unknown[]): Promise<void> {
  const reply = await t.admin("PUT", `/admin/pools/${MODEL}`, { backends });
  expect(reply.status).toBe(200);
}

/** `requests` non-stream requests, `workers` at a time; every one must succeed. */
async function run(requests: number, workers: number, c: OpenAI = client, onDone?: (done: number) => void): Promise<void> {
  let next = 0;
  let done = 0;
  const worker = async () => {
    while (next < requests) {
      next++;
      const reply = await c.chat.completions.create({ model: MODEL, messages: HELLO, max_tokens: 5 });
      expect(reply.choices[0]!.message.content!.length).toBeGreaterThan(0);
      onDone?.(++done);
    }
  };
  await Promise.all(Array.from({ length: workers }, worker));
}

beforeAll(async () => {
  t = await startTestGateway();
  ({ key } = await t.fundedKey(100_000));
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t.stop();
  await Promise.all(started.map((s) => s.stop()));
}, SETUP_MS_MAX);

afterEach(() => {
  delete process.env.ROUTING_TEST_SIM_KEY;
});

describe("pools changed at run time", () => {
  test("PUT /admin/pools/{model} validates, keeps secrets out of the database, applies at once, and GET shows the estimates", async () => {
    const a = await sim({ apiKey: "sk-upstream-secret" });
    const bad = await t.admin("PUT", `/admin/pools/${MODEL}`, { backends: [{ ...backend("a", a), region: "moon" }] });
    expect([bad.status, bad.body.error.code]).toEqual([400, "invalid_request"]);
    const secretInBody = await t.admin("PUT", `/admin/pools/${MODEL}`, {
      backends: [{ ...backend("a", a), api_key: "sk-upstream-secret" }],
    });
    expect(secretInBody.status).toBe(400);
    const dup = await t.admin("PUT", `/admin/pools/${MODEL}`, { backends: [backend("a", a), backend("a", a)] });
    expect(dup.status).toBe(400);
    const unset = await t.admin("PUT", `/admin/pools/${MODEL}`, {
      backends: [{ ...backend("a", a), api_key_env: "ROUTING_TEST_SIM_KEY" }],
    });
    expect(unset.status).toBe(400);
    expect(unset.body.error.message).toContain("ROUTING_TEST_SIM_KEY is not set");
    const unknown = await t.admin("PUT", "/admin/pools/no-such-model", { backends: [backend("a", a)] });
    expect(unknown.status).toBe(404);

    process.env.ROUTING_TEST_SIM_KEY = "sk-upstream-secret";
    await setPool([{ ...backend("a", a), api_key_env: "ROUTING_TEST_SIM_KEY", weight: 2, concurrency_max: 7 }]);
    const [row] = await t.gw.deps.db.orm.select().from(poolsTable).where(eq(poolsTable.model, MODEL));
    expect(JSON.stringify(row!.backends)).toContain("ROUTING_TEST_SIM_KEY");
    expect(JSON.stringify(row!.backends)).not.toContain("sk-upstream-secret");

    await run(3, 1); // the simulator requires the key: it was read from the environment
    expect(a.log.totals.requests).toBe(3);
    const shown = (await t.admin("GET", "/admin/pools")).body.data.find((p: { model: string }) => p.model === MODEL);
    expect(shown.backends).toHaveLength(1);
    expect(shown.backends[0]).toMatchObject({
      name: "a",
      weight: 2,
      concurrency_max: 7,
      concurrency_limit: 7,
      in_flight: 0,
      breaker: "closed",
      requests: 3,
      failures: 0,
    });
    expect(shown.backends[0].ttft_ms).toBeGreaterThan(0);
    expect(shown.backends[0].tpot_ms).toBeGreaterThan(0);
  });

  test("a backend that did not change keeps its state; a row another node wrote is applied here within about a second", async () => {
    const a = await sim();
    const b = await sim();
    await setPool([backend("a", a)]);
    await run(4, 1);
    const pool = t.gw.deps.pools.get(MODEL)!;
    const before = pool.backends[0]!;
    expect(before.requests).toBe(4);
    // Written straight to the table, as another node would, with no event on this node's bus.
    const writtenAt = performance.now();
    await savePool(t.gw.deps.db, MODEL, [
      { name: "a", kind: "openai", url: `${a.url}/v1`, region: "in-country", weight: 1, concurrency_max: 256 },
      { name: "b", kind: "openai", url: `${b.url}/v1`, region: "in-country", weight: 1, concurrency_max: 256 },
    ]);
    await until(() => pool.backends.length === 2, { msMax: 10_000, what: "the second backend applied", pollMs: 25 });
    const tookMs = performance.now() - writtenAt;
    console.log(`pools: a change written by another node applied after ${tookMs.toFixed(0)} ms`);
    expect(pool.backends.map((x) => x.name)).toEqual(["a", "b"]);
    expect(tookMs).toBeLessThan(3_000); // one poll interval, with room for a loaded machine
    expect(pool.backends[0]).toBe(before);
    expect(pool.backends[0]!.requests).toBe(4);
  });
});

describe("failing backends", () => {
  test("a backend that always fails and one that always answers 429 get under 5% of traffic after warm-up, and no request fails", async () => {
    const good1 = await sim({ ttftMs: 10 });
    const good2 = await sim({ ttftMs: 10 });
    const failing = await sim({ failRate: 1 });
    const limited = await sim({ rateLimitRate: 1 });
    await setPool([backend("good1", good1), backend("good2", good2), backend("failing", failing), backend("limited", limited)]);
    await run(40, 4); // warm-up
    for (const s of [good1, good2, failing, limited]) s.log.clear();
    await run(300, 4);
    const tries = (s: Simulator) => s.log.totals.requests;
    const all = tries(good1) + tries(good2) + tries(failing) + tries(limited);
    console.log(
      `failing: of ${all} upstream tries for 300 requests, the failing backend got ${tries(failing)}, the 429 one ${tries(limited)}`,
    );
    expect(tries(failing) / 300).toBeLessThan(0.05);
    expect(tries(limited) / 300).toBeLessThan(0.05);
    expect(tries(good1) + tries(good2)).toBe(300);
  }, 60_000);

  test("with one of three backends killed mid-run, no non-streaming request fails", async () => {
    const sims = [await sim({ ttftMs: 30 }), await sim({ ttftMs: 30 }), await sim({ ttftMs: 30 })];
    await setPool(sims.map((s, i) => backend(`k${i}`, s)));
    let killed = false;
    await run(300, 8, client, (done) => {
      if (done === 100 && !killed) {
        killed = true;
        void sims[1]!.stop();
      }
    });
    expect(killed).toBe(true);
    const served = sims.map((s) => s.log.entries().filter((e) => e.status === 200).length);
    console.log(`killed: 300 of 300 succeeded; served per backend ${served.join(", ")} (the middle one killed after 100)`);
    expect(served[0]! + served[2]!).toBeGreaterThan(150);
  }, 60_000);
});

describe("residency", () => {
  test("with in-country required (key setting or header) no request reaches an abroad backend; 503 when none is up", async () => {
    const home = await sim({ ttftMs: 5 });
    const away = await sim({ ttftMs: 5 });
    await setPool([backend("home", home), backend("away", away, { region: "abroad" })]);
    const { key: residentKey, keyId } = await t.fundedKey(1_000, { residency: "in-country" });
    const resident = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: residentKey, maxRetries: 0 });
    const shown = await t.admin("GET", `/admin/accounts/${(await t.gw.deps.keys.get(keyId))!.accountId}`);
    expect(shown.body.keys[0].residency).toBe("in-country");
    const header = new OpenAI({
      baseURL: `${t.url}/v1`,
      apiKey: key,
      maxRetries: 0,
      defaultHeaders: { "x-darvaze-residency": "in-country" },
    });

    await run(30, 3, resident);
    await run(30, 3, header);
    expect(away.log.totals.requests).toBe(0);
    expect(home.log.totals.requests).toBe(60);
    await run(30, 3); // without the requirement both regions serve
    expect(away.log.totals.requests).toBeGreaterThan(0);

    await home.stop();
    const balance = async () => {
      const reply = await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${residentKey}` } });
      return BigInt(((await reply.json()) as { balance_micro_toman: string }).balance_micro_toman);
    };
    const before = await balance();
    for (const c of [resident, header]) {
      const error = await c.chat.completions.create({ model: MODEL, messages: HELLO, max_tokens: 5 }).catch((e) => e);
      expect(error).toBeInstanceOf(OpenAI.APIError);
      expect([error.status, error.code]).toEqual([503, "no_healthy_backend"]);
      expect(error.message).toContain("in-country");
    }
    expect(await balance()).toBe(before);
    expect(away.log.totals.requests).toBeGreaterThan(0);
    const awayBefore = away.log.totals.requests;
    await setPool([backend("away", away, { region: "abroad" })]);
    const none = await resident.chat.completions.create({ model: MODEL, messages: HELLO, max_tokens: 5 }).catch((e) => e);
    expect([none.status, none.code]).toEqual([503, "no_healthy_backend"]);
    expect(away.log.totals.requests).toBe(awayBefore);
  }, 60_000);
});

describe("what streams teach the pool", () => {
  test("the relay reports time to first token and time per token: the pool tells a slow generator from a fast one", async () => {
    const quick = await sim({ ttftMs: 40, itlMs: 2, outputTokens: 20 });
    const slow = await sim({ ttftMs: 40, itlMs: 30, outputTokens: 20 });
    await setPool([backend("quick", quick), backend("slow", slow)]);
    const pool = t.gw.deps.pools.get(MODEL)!;
    // Both get streams: pin each in turn by filling the other's limit.
    for (const [target, other] of [
      [0, 1],
      [1, 0],
    ] as const) {
      pool.backends[other]!.concurrencyLimit = 0;
      for (let i = 0; i < 3; i++) {
        let text = "";
        for await (const chunk of await client.chat.completions.create({ model: MODEL, messages: HELLO, max_tokens: 20, stream: true }))
          text += chunk.choices[0]?.delta?.content ?? "";
        expect(text.length).toBeGreaterThan(0);
      }
      pool.backends[other]!.concurrencyLimit = pool.backends[other]!.config.concurrency_max;
      expect(pool.backends[target]!.inFlight).toBe(0);
    }
    const shown = (await t.admin("GET", "/admin/pools")).body.data.find((p: { model: string }) => p.model === MODEL).backends;
    const [q, s] = shown;
    console.log(`streams: quick ttft ${q.ttft_ms} ms tpot ${q.tpot_ms} ms; slow ttft ${s.ttft_ms} ms tpot ${s.tpot_ms} ms`);
    // Both started at the neutral 250 ms / 20 ms and moved towards what they measured (40 ms to
    // the first token; 2 and 30 ms per token): a slower sample is taken at once, a faster one
    // pulls the estimate down over the decay time.
    for (const x of [q, s]) {
      expect(x.ttft_ms).toBeGreaterThanOrEqual(30);
      expect(x.ttft_ms).toBeLessThan(TTFT_MS_NEUTRAL);
    }
    expect(s.tpot_ms).toBeGreaterThanOrEqual(25);
    expect(q.tpot_ms).toBeLessThan(TPOT_MS_NEUTRAL);
    const metrics = await (await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
    const tpot = Number(new RegExp(`^darvaze_backend_tpot_ms\\{model="${MODEL}",backend="slow"\\} (\\S+)$`, "m").exec(metrics)?.[1]);
    expect(tpot).toBeCloseTo(s.tpot_ms, 0);
  }, 60_000);
});
