/**
 * /metrics as Prometheus reads it (parsed by a real text-format parser): its counters move by
 * exactly the traffic the test sends, its names follow the conventions, and no label carries a
 * key. Then the pool snapshots on `gw.v1.metrics.pools`, received over the bus (raw NATS when
 * NATS_URL is set): in-flight and tokens/s move under traffic, and a killed backend's breaker
 * opens within BREAKER_SEEN_MS_MAX.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "nats";
import OpenAI from "openai";
import parsePrometheusTextFormat, { type ParsedFamily } from "parse-prometheus-text-format";
import { POOL_SNAPSHOTS, poolSnapshot, type PoolSnapshot } from "../actors/protocol.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { ADMIN_TOKEN, services, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { untilValue } from "./until.ts";

/** A killed backend's breaker must show open in a snapshot within this time. */
const BREAKER_SEEN_MS_MAX = 15_000;
/** Under traffic, a snapshot must show in-flight and tokens/s within this time. */
const TRAFFIC_SEEN_MS_MAX = 10_000;

/**
 * The exposition parsed as typed families (which the parser checks line by line), plus every
 * series as a plain sample: the parser folds a labelled histogram's series into one unlabelled
 * entry, so its `_count` series are read from a second pass with the types left out.
 */
async function scrape(url: string): Promise<ParsedFamily[]> {
  const response = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  expect(response.status).toBe(200);
  expect(response.headers.get("content-type")).toContain("text/plain");
  const text = await response.text();
  const typed = parsePrometheusTextFormat(text);
  const plain = parsePrometheusTextFormat(text.replace(/^# TYPE .*$/gm, ""));
  return [...typed, ...plain.filter((f) => !typed.some((t) => t.name === f.name))];
}

/** The value of one series (`<name>_count` for a histogram's count), 0 when absent. */
function seriesValue(families: ParsedFamily[], name: string, labels: Record<string, string>): number {
  const family = families.find((f) => f.name === name && f.type !== "HISTOGRAM") ?? families.find((f) => f.name === `${name}_count`);
  const sample = family?.metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v));
  if (!sample) return 0;
  return Number(sample.value);
}

describe("/metrics", () => {
  let t: TestGateway;
  let key: string;
  let client: OpenAI;
  const MODEL = "gpt-4o-mini";

  beforeAll(async () => {
    t = await startTestGateway();
    ({ key } = await t.fundedKey(1000));
    client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
  }, SETUP_MS_MAX);
  afterAll(() => t.stop(), SETUP_MS_MAX);

  async function balanceMicro(): Promise<bigint> {
    const response = await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${key}` } });
    return BigInt(((await response.json()) as { balance_micro_toman: string }).balance_micro_toman);
  }

  test("needs the admin token", async () => {
    expect((await fetch(`${t.url}/metrics`)).status).toBe(401);
  });

  test("counters move by exactly the traffic sent", async () => {
    const balanceBefore = await balanceMicro();
    const before = await scrape(t.url);
    let input = 0;
    let output = 0;
    for (let i = 0; i < 3; i++) {
      const reply = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: `hello ${i}` }] });
      input += reply.usage!.prompt_tokens;
      output += reply.usage!.completion_tokens;
    }
    for (let i = 0; i < 2; i++) {
      const stream = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: "user", content: "stream" }],
        stream: true,
        stream_options: { include_usage: true },
      });
      for await (const chunk of stream) {
        if (chunk.usage) {
          input += chunk.usage.prompt_tokens;
          output += chunk.usage.completion_tokens;
        }
      }
    }
    const refused = await fetch(`${t.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: "Bearer sk-dvz-wrong" },
      body: "{}",
    });
    expect(refused.status).toBe(401);
    const spent = balanceBefore - (await balanceMicro());
    const after = await scrape(t.url);
    const delta = (name: string, labels: Record<string, string>) => seriesValue(after, name, labels) - seriesValue(before, name, labels);

    expect(delta("darvaze_requests_total", { operation: "chat", model: MODEL, backend: "sim", status: "200" })).toBe(5);
    expect(delta("darvaze_requests_total", { operation: "chat", model: "none", backend: "none", status: "401" })).toBe(1);
    expect(delta("darvaze_tokens_total", { model: MODEL, direction: "input" })).toBe(input);
    expect(delta("darvaze_tokens_total", { model: MODEL, direction: "output" })).toBe(output);
    expect(spent).toBeGreaterThan(0n);
    expect(delta("darvaze_cost_micro_toman_total", { model: MODEL })).toBe(Number(spent));
    expect(delta("darvaze_request_duration_seconds", { operation: "chat", model: MODEL })).toBe(5);
    expect(delta("darvaze_time_to_first_token_seconds", { model: MODEL, backend: "sim" })).toBe(2);
    expect(delta("darvaze_time_per_output_token_seconds", { model: MODEL, backend: "sim" })).toBe(2);
    expect(seriesValue(after, "darvaze_backend_breaker_state", { model: MODEL, backend: "sim", state: "closed" })).toBe(1);
    expect(seriesValue(after, "darvaze_backend_in_flight", { model: MODEL, backend: "sim" })).toBe(0);
    expect(seriesValue(after, "darvaze_holds_pending", {})).toBeGreaterThanOrEqual(1); // the key's lease
    expect(seriesValue(after, "darvaze_leases_open", {})).toBe(1);
    expect(seriesValue(after, "darvaze_key_in_flight", { key_class: "concurrency_le_32" })).toBe(0);
    expect(
      after
        .filter((f) => f.name.startsWith("darvaze_gc_forced_"))
        .map((f) => f.name)
        .sort(),
    ).toEqual([
      "darvaze_gc_forced_full_pause_seconds_total",
      "darvaze_gc_forced_full_total",
      "darvaze_gc_forced_pause_seconds_total",
      "darvaze_gc_forced_total",
    ]);
    expect(
      after
        .filter((f) => f.name.startsWith("darvaze_event_loop_"))
        .map((f) => f.name)
        .sort(),
    ).toEqual(["darvaze_event_loop_stall_max_seconds"]);
    if (services.natsUrl) {
      expect(seriesValue(after, "darvaze_nats_connected", {})).toBe(1);
      expect(after.some((f) => f.name === "darvaze_usage_log_lag_messages")).toBe(true);
    }
    const rateAdmissions = after
      .find((f) => f.name === "darvaze_key_rate_admissions")
      ?.metrics.map((m) => m.labels?.path)
      .sort();
    // In a cluster: every path, none taken (this key has no rpm, tpm or cap); alone: absent.
    if (services.natsUrl && services.databaseUrl) {
      expect(rateAdmissions).toEqual(["asked", "local", "owner"]);
      for (const path of rateAdmissions!) expect(seriesValue(after, "darvaze_key_rate_admissions", { path: path! })).toBe(0);
    } else expect(rateAdmissions ?? []).toEqual([]);
  });

  test("names follow the conventions and no label carries a key", async () => {
    const families = await scrape(t.url);
    expect(families.length).toBeGreaterThan(10);
    for (const f of families.filter((f) => f.type !== "UNTYPED")) {
      expect(f.name).toMatch(/^darvaze_[a-z_]+$/);
      if (f.type === "COUNTER") expect(f.name).toEndWith("_total");
      if (f.type === "HISTOGRAM") expect(f.name).toEndWith("_seconds");
      for (const m of f.metrics) for (const v of Object.values(m.labels ?? {})) expect(v).not.toContain("sk-dvz");
    }
    expect(JSON.stringify(families)).not.toContain(key);
  });
});

describe("pool snapshots on the bus", () => {
  const MODEL = "llama-3.3-70b-instruct";
  let a: Simulator;
  let b: Simulator;
  let t: TestGateway;
  let client: OpenAI;
  const snapshots: PoolSnapshot[] = [];
  let stopListening: () => void | Promise<void> = () => {};

  beforeAll(async () => {
    // Whole replies take ~0.5 s, so requests are in flight when a snapshot is taken.
    a = await startSimulator({ ttftMs: 300, itlMs: 10, outputTokens: 20 });
    b = await startSimulator({ ttftMs: 300, itlMs: 10, outputTokens: 20 });
    const backend = (name: string, sim: Simulator) => ({ name, kind: "openai", url: `${sim.url}/v1`, region: "in-country" });
    const file = join(mkdtempSync(join(tmpdir(), "darvaze-metrics-")), "pools.json");
    writeFileSync(file, JSON.stringify({ pools: { [MODEL]: { backends: [backend("a", a), backend("b", b)] } } }));
    t = await startTestGateway({ DARVAZE_CONFIG: file });
    const { key } = await t.fundedKey(5000);
    client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
    const subject = t.gw.deps.subjects.metricsPools;
    if (services.natsUrl) {
      // A raw NATS subscriber, as any operator tool would be.
      const nc = await connect({ servers: services.natsUrl });
      nc.subscribe(subject, { callback: (_, msg) => snapshots.push(poolSnapshot.parse(msg.json())) });
      stopListening = () => nc.close();
    } else {
      stopListening = t.gw.deps.bus.subscribe(POOL_SNAPSHOTS, subject, (s) => snapshots.push(poolSnapshot.parse(s)));
    }
  }, SETUP_MS_MAX);
  afterAll(async () => {
    await stopListening();
    await t.stop();
    await a.stop();
    await b.stop();
  }, SETUP_MS_MAX);

  /** Keeps `clients` requests going until `stop` resolves; returns the replies' statuses. */
  function traffic(clients: number, stop: Promise<unknown>): Promise<number[]> {
    let running = true;
    void stop.then(() => (running = false));
    const statuses: number[] = [];
    const one = async () => {
      while (running) {
        try {
          await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }] });
          statuses.push(200);
        } catch (error) {
          statuses.push((error as { status?: number }).status ?? 0);
        }
      }
    };
    return Promise.all(Array.from({ length: clients }, one)).then(() => statuses);
  }

  /** The first snapshot received from now on that `predicate` takes. */
  function snapshotWhere(what: string, predicate: (s: PoolSnapshot) => boolean, msMax: number): Promise<PoolSnapshot> {
    const from = snapshots.length;
    return untilValue(() => snapshots.slice(from).find(predicate), { what, msMax, pollMs: 50 });
  }

  test("in-flight and tokens/s move while traffic flows; a killed backend's breaker opens", async () => {
    const done = Promise.withResolvers<void>();
    const statuses = traffic(16, done.promise);
    try {
      const backendOf = (s: PoolSnapshot, name: string) => s.backends.find((x) => x.model === MODEL && x.backend === name);
      await snapshotWhere("backend a in flight", (s) => (backendOf(s, "a")?.inFlight ?? 0) > 0, TRAFFIC_SEEN_MS_MAX);
      const flowing = await snapshotWhere(
        "tokens and requests per second",
        (s) => (backendOf(s, "a")?.tokensPerS ?? 0) > 0 && (s.models.find((m) => m.model === MODEL)?.requestsPerS ?? 0) > 0,
        TRAFFIC_SEEN_MS_MAX,
      );
      expect(backendOf(flowing, "b")?.breaker).toBe("closed");
      expect(flowing.topKeys.length).toBe(1);

      const killedAtMs = performance.now();
      await b.stop();
      const open = await snapshotWhere("backend b's breaker open", (s) => backendOf(s, "b")?.breaker === "open", BREAKER_SEEN_MS_MAX);
      expect(performance.now() - killedAtMs).toBeLessThan(BREAKER_SEEN_MS_MAX);
      expect(backendOf(open, "a")?.breaker).toBe("closed");
    } finally {
      done.resolve();
    }
    // Every request was served: the pool retried the killed backend's on the other.
    expect((await statuses).filter((s) => s !== 200)).toEqual([]);
  }, 60_000);
});
