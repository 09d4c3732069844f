/**
 * Pools across two gateway processes on one NATS and one PostgreSQL: a pool changed on one node
 * reaches the other within a second, and the other learns the backends' speeds from the first
 * one's traffic without sending any.
 */
import { afterAll, beforeAll, expect } from "bun:test";
import OpenAI from "openai";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { dropUsageStream, freshDatabase, SETUP_MS_MAX, until } from "./helpers.ts";
import { untilValue } from "./until.ts";
import { clusterEnv, nodeAdmin, spawnGateway, type GatewayProcess } from "./processes.ts";
import { describeWith } from "./services.ts";

const MODEL = "llama-3.3-70b-instruct";

const admin = nodeAdmin;

async function backendsOn(url: string): Promise<{ name: string; ttft_ms: number; requests: number }[]> {
  const reply = await admin(url, "GET", "/admin/pools");
  return reply.body.data.find((p: { model: string }) => p.model === MODEL).backends;
}

describeWith(["nats", "postgres"], "pools on two gateway processes", (it) => {
  let base: Simulator;
  let fast: Simulator;
  let slow: Simulator;
  let nodes: GatewayProcess[] = [];
  let drop: (() => Promise<void>) | undefined;
  let prefix = "";
  beforeAll(async () => {
    base = await startSimulator({});
    fast = await startSimulator({ ttftMs: 20, outputTokens: 4 });
    slow = await startSimulator({ ttftMs: 600, outputTokens: 4 });
    const database = (await freshDatabase())!;
    drop = database.drop;
    const env = clusterEnv(database.url, base);
    prefix = env.DARVAZE_SUBJECT_PREFIX!;
    nodes = [await spawnGateway(env)];
    nodes.push(await spawnGateway(env));
  }, SETUP_MS_MAX);
  afterAll(async () => {
    for (const node of nodes) await node.kill("SIGKILL");
    for (const s of [base, fast, slow]) await s.stop();
    await drop?.();
    await dropUsageStream(prefix);
  }, SETUP_MS_MAX);

  it("a pool set on one node is applied on the other within a second", async () => {
    const [one, two] = nodes.map((n) => n.url) as [string, string];
    const backends = [
      { name: "fast", kind: "openai", url: `${fast.url}/v1`, region: "in-country" },
      { name: "slow", kind: "openai", url: `${slow.url}/v1`, region: "in-country" },
    ];
    const setAt = performance.now();
    expect((await admin(one, "PUT", `/admin/pools/${MODEL}`, { backends })).status).toBe(200);
    const names = await untilValue(async () => (await backendsOn(two)).map((b) => b.name), {
      accept: (seen) => seen.length === 2,
      msMax: 10_000,
      what: "both backends on the other node",
      pollMs: 20,
    });
    const tookMs = performance.now() - setAt;
    console.log(`cluster: the other node applied the pool after ${tookMs.toFixed(0)} ms`);
    expect(names).toEqual(["fast", "slow"]);
    expect(tookMs).toBeLessThan(1_500);
  }, 30_000);

  it("the other node learns the backends' speeds from this node's traffic", async () => {
    const [one, two] = nodes.map((n) => n.url) as [string, string];
    const account = await admin(one, "POST", "/admin/accounts", { name: "stats" });
    await admin(one, "POST", `/admin/accounts/${account.body.id}/topups`, { amount_toman: 1000, reference: "stats-topup" });
    const key = await admin(one, "POST", `/admin/accounts/${account.body.id}/keys`, { name: "k" });
    const client = new OpenAI({ baseURL: `${one}/v1`, apiKey: key.body.key, maxRetries: 0 });
    // Enough traffic for the slow backend to be tried several times.
    const deadline = performance.now() + 8_000;
    while (performance.now() < deadline && slow.log.totals.requests < 3) {
      await Promise.all(
        Array.from({ length: 4 }, () =>
          client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 4 }),
        ),
      );
    }
    // The estimate arrives with a sharing interval: wait for it (bounded), not for a guessed time.
    let slowSeen: Awaited<ReturnType<typeof backendsOn>>[number] | undefined;
    await until(async () => {
      slowSeen = (await backendsOn(two)).find((b) => b.name === "slow");
      return (slowSeen?.ttft_ms ?? 0) > 300;
    }, 10_000);
    if (!slowSeen) throw new Error("slow backend not listed");
    console.log(`cluster: with no traffic of its own the other node estimates slow at ${slowSeen.ttft_ms} ms to the first token`);
    expect(slowSeen.requests).toBe(0);
    expect(slowSeen.ttft_ms).toBeGreaterThan(300); // neutral is 250; the host takes 600
  }, 30_000);
});
