/**
 * Money under pressure: a wallet that affords exactly N requests against 20·N concurrent ones
 * (one key, five keys on one wallet, two gateway processes), concurrency limits with slow and
 * failing requests, a rate change mid-flight, and the database refusing overspend on its own.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { openPostgres } from "../src/db/client.ts";
import { migrate } from "../src/db/migrate.ts";
import { randomBase62 } from "../src/ids.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { ADMIN_TOKEN, dropUsageStream, freshDatabase, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until, untilValue } from "./until.ts";
import { clusterEnv, spawnGateway, type GatewayProcess } from "./processes.ts";
import { describeWith } from "./services.ts";

const MODEL = "gpt-4o-mini"; // 13,500 toman/1M input tokens, 54,000 toman/1M output tokens
const HELLO = [{ role: "user", content: "Hello, world!" }];
// The simulator bills "Hello, world!" as 10 prompt tokens and, with max_tokens 10, 10 output
// tokens: 10 × 13,500 + 10 × 54,000 micro-toman.
const COST_MICRO = 675_000n;
const N = 50;
const BODY = JSON.stringify({ model: MODEL, messages: HELLO, max_tokens: 10 });

async function post(url: string, key: string, body = BODY, signal?: AbortSignal): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body,
    signal,
  });
}

/** Fires every request at once; returns the count of each status. */
async function burst(urls: string[], keys: string[], count: number): Promise<Record<number, number>> {
  const statuses = await Promise.all(
    Array.from({ length: count }, async (_, i) => {
      const response = await post(urls[i % urls.length]!, keys[i % keys.length]!);
      await response.arrayBuffer();
      return response.status;
    }),
  );
  const counts: Record<number, number> = {};
  for (const status of statuses) counts[status] = (counts[status] ?? 0) + 1;
  return counts;
}

async function adminAt(url: string, method: string, path: string, body?: unknown) {
  const response = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as any };
}

/** An account funded for exactly N requests, with `keys` keys on it. */
async function exactWallet(url: string, keys: number): Promise<{ accountId: string; keys: string[] }> {
  const account = await adminAt(url, "POST", "/admin/accounts", { name: "exact" });
  const micro = COST_MICRO * BigInt(N);
  await adminAt(url, "POST", `/admin/accounts/${account.body.id}/topups`, {
    amount_toman: `${micro / 1_000_000n}.${(micro % 1_000_000n).toString().padStart(6, "0")}`,
    reference: randomBase62(10),
  });
  const created = [];
  for (let i = 0; i < keys; i++) {
    const key = await adminAt(url, "POST", `/admin/accounts/${account.body.id}/keys`, { name: `k${i}`, concurrency_max: 10_000 });
    created.push(key.body.key as string);
  }
  return { accountId: account.body.id, keys: created };
}

async function expectSpentExactly(url: string, accountId: string, key: string) {
  const credits = (await (await fetch(`${url}/v1/credits`, { headers: { authorization: `Bearer ${key}` } })).json()) as {
    balance_micro_toman: string;
  };
  expect(credits.balance_micro_toman).toBe("0");
  const account = await adminAt(url, "GET", `/admin/accounts/${accountId}`);
  expect(account.body.balance_micro_toman).toBe("0");
  const audit = await adminAt(url, "GET", "/admin/ledger/audit");
  expect(audit.body.checks.filter((c: { ok: boolean }) => !c.ok)).toEqual([]);
}

describe("a wallet that affords exactly N requests", () => {
  let t: TestGateway;
  beforeAll(async () => {
    t = await startTestGateway();
  }, SETUP_MS_MAX);
  afterAll(async () => t.stop(), SETUP_MS_MAX);

  test(`one key, ${20 * N} concurrent requests: exactly ${N} succeed, the rest get 402`, async () => {
    const wallet = await exactWallet(t.url, 1);
    const counts = await burst([t.url], wallet.keys, 20 * N);
    expect(counts).toEqual({ 200: N, 402: 19 * N });
    await expectSpentExactly(t.url, wallet.accountId, wallet.keys[0]!);
  }, 60_000);

  test(`five keys on one wallet, ${20 * N} concurrent requests: exactly ${N} succeed`, async () => {
    const wallet = await exactWallet(t.url, 5);
    const counts = await burst([t.url], wallet.keys, 20 * N);
    expect(counts).toEqual({ 200: N, 402: 19 * N });
    await expectSpentExactly(t.url, wallet.accountId, wallet.keys[0]!);
  }, 60_000);
});

describeWith(["nats", "postgres"], "two gateway processes on one NATS and one PostgreSQL", (it) => {
  let sim: Simulator;
  let nodes: GatewayProcess[] = [];
  let drop: (() => Promise<void>) | undefined;
  let prefix = "";
  beforeAll(async () => {
    sim = await startSimulator({});
    const database = (await freshDatabase())!;
    drop = database.drop;
    const env = clusterEnv(database.url, sim);
    prefix = env.DARVAZE_SUBJECT_PREFIX!;
    nodes = [await spawnGateway(env)];
    nodes.push(await spawnGateway(env)); // after the first, so migrations are not racing the test
  }, SETUP_MS_MAX);
  afterAll(async () => {
    for (const node of nodes) await node.kill("SIGKILL");
    await sim.stop();
    await drop?.();
    await dropUsageStream(prefix);
  }, SETUP_MS_MAX);

  it(`five keys, ${20 * N} requests spread over both nodes: exactly ${N} succeed`, async () => {
    const urls = nodes.map((n) => n.url);
    const wallet = await exactWallet(urls[0]!, 5);
    const counts = await burst(urls, wallet.keys, 20 * N);
    expect(counts).toEqual({ 200: N, 402: 19 * N });
    // Each node writes its own usage; ask both so that both have flushed.
    await fetch(`${urls[1]}/v1/credits`, { headers: { authorization: `Bearer ${wallet.keys[0]}` } });
    await expectSpentExactly(urls[0]!, wallet.accountId, wallet.keys[0]!);
  }, 60_000);
});

describe("concurrency limits and slots", () => {
  let t: TestGateway;
  beforeAll(async () => {
    t = await startTestGateway();
  }, SETUP_MS_MAX);
  afterAll(async () => t.stop(), SETUP_MS_MAX);

  test("concurrency_max 4 and 100 concurrent slow requests: never more than 4 upstream, the rest 429", async () => {
    const sim = t.sim!;
    sim.options.itlMs = 10;
    sim.log.clear();
    const { key } = await t.fundedKey(1000, { concurrency_max: 4 });
    const responses = await Promise.all(Array.from({ length: 100 }, () => post(t.url, key)));
    const statuses = responses.map((r) => r.status);
    expect(sim.log.inFlightMax).toBeLessThanOrEqual(4);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(4);
    expect(statuses.filter((s) => s !== 200).every((s) => s === 429)).toBe(true);
    const refused = responses.find((r) => r.status === 429)!;
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("concurrency_limit_exceeded");
    sim.options.itlMs = 0;
  }, 60_000);

  test("1,000 mixed requests with upstream errors, stalls, streams and client aborts leak no slot", async () => {
    const sim = t.sim!;
    const { key, keyId } = await t.fundedKey(100_000, { concurrency_max: 16 });
    sim.options.failRate = 0.2;
    sim.options.itlMs = 2;
    const bodies = [
      BODY,
      JSON.stringify({ model: MODEL, messages: HELLO, max_tokens: 10, stream: true }),
      JSON.stringify({ model: MODEL, messages: HELLO, max_tokens: 10, stream: true, stream_options: { include_usage: true } }),
    ];
    let sent = 0;
    const worker = async () => {
      while (sent < 1000) {
        const i = sent++;
        const controller = new AbortController();
        if (i % 5 === 0) setTimeout(() => controller.abort(), 1 + (i % 7));
        try {
          const response = await post(t.url, key, bodies[i % bodies.length], controller.signal);
          await response.arrayBuffer();
        } catch {}
      }
    };
    await Promise.all(Array.from({ length: 24 }, worker));
    sim.options.failRate = 0;
    sim.options.itlMs = 0;
    await until(() => t.gw.keyHost.inFlight(keyId) === 0, { what: "every slot of the key freed" });
    // The upstream failed a fifth of the time, so its breaker may stay open a moment longer (503
    // no_healthy_backend): not what this test is about. Once one request passes, all 16 slots must.
    await until(async () => (await post(t.url, key)).status !== 503, { msMax: 10_000, what: "a request past the breaker", pollMs: 100 });
    const all = await Promise.all(Array.from({ length: 16 }, () => post(t.url, key)));
    expect(all.map((r) => r.status)).toEqual(Array(16).fill(200));
    const audit = await t.admin("GET", "/admin/ledger/audit");
    expect(audit.body.ok).toBe(true);
  }, 60_000);
});

describe("exchange rates", () => {
  let t: TestGateway;
  beforeAll(async () => {
    t = await startTestGateway();
  }, SETUP_MS_MAX);
  afterAll(async () => t.stop(), SETUP_MS_MAX);

  test("a request admitted before a rate change pays the old prices; one after it, the new", async () => {
    const sim = t.sim!;
    const { key, accountId } = await t.fundedKey(1000);
    sim.options.itlMs = 30;
    const before = post(t.url, key, JSON.stringify({ model: MODEL, messages: HELLO, max_tokens: 10, stream: true }));
    await until(() => sim.log.inFlight > 0, { what: "the first request admitted and streaming" });
    const rate = await t.admin("POST", "/admin/rates", { toman_per_usd: 100_000 });
    expect(rate.status).toBe(201);
    sim.options.itlMs = 0;
    const after = await post(t.url, key);
    expect(after.status).toBe(200);
    await (await before).text();
    const models = (await (await fetch(`${t.url}/v1/models/${MODEL}`, { headers: { authorization: `Bearer ${key}` } })).json()) as {
      pricing: { input: number; output: number; price_version: number };
    };
    // USD 0.15 and 0.6 per 1M × 100,000 toman per USD.
    expect(models.pricing).toMatchObject({ input: 15_000, output: 60_000, price_version: rate.body.id });
    await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${key}` } });
    const usage = (await t.admin("GET", `/admin/accounts/${accountId}`)).body.recent_usage as {
      price_version: number;
      billed_micro_toman: string;
      status: number;
    }[];
    const byVersion = Object.fromEntries(usage.map((u) => [u.price_version, u.billed_micro_toman]));
    expect(byVersion).toEqual({ 1: "675000", [rate.body.id]: "750000" }); // 10 × 15,000 + 10 × 60,000
    const rates = await t.admin("GET", "/admin/rates");
    expect(rates.body.current).toMatchObject({ id: rate.body.id, toman_per_usd: 100_000 });
  }, 30_000);
});

describeWith(["postgres"], "the database alone refuses overspend", (it) => {
  const WORKERS = 8;
  const ATTEMPTS = 60;
  const HOLD_MICRO = 7_919n;
  const BALANCE_MICRO = 100_000n; // 12 holds fit, 480 are attempted

  /** Code that forgot every check: unconditional holds and posts from many connections. */
  async function careless(url: string): Promise<{ available: bigint; overPosted: number }> {
    const connections = await Promise.all(Array.from({ length: WORKERS }, () => openPostgres(url)));
    try {
      await Promise.all(
        connections.map(async (db, w) => {
          for (let i = 0; i < ATTEMPTS; i++) {
            const id = `h-${w}-${i}`;
            try {
              await db.orm.transaction(async (tx) => {
                await tx.execute(sql`UPDATE wallets SET held_micro = held_micro + ${HOLD_MICRO} WHERE account_id = 'acc'`);
                await tx.execute(sql`INSERT INTO holds (id, account_id, key_id, request_id, amount_micro, status, deadline)
                                     VALUES (${id}, 'acc', 'k', ${id}, ${HOLD_MICRO}, 'pending', now() + interval '1 hour')`);
              });
            } catch {}
            try {
              await db.rows(sql`UPDATE holds SET posted_micro = posted_micro + ${HOLD_MICRO + 1n} WHERE id = ${id}`);
            } catch {}
          }
        }),
      );
      const [wallet] = await connections[0]!.rows<{ available: unknown }>(sql`SELECT balance_micro - held_micro AS available FROM wallets`);
      const [over] = await connections[0]!.rows<{ n: unknown }>(sql`SELECT count(*) AS n FROM holds WHERE posted_micro > amount_micro`);
      return { available: BigInt(String(wallet!.available)), overPosted: Number(over!.n) };
    } finally {
      await Promise.all(connections.map((db) => db.close()));
    }
  }

  async function freshWallet(dropChecks: boolean) {
    const database = (await freshDatabase())!;
    const db = await openPostgres(database.url);
    await migrate(db);
    await db.rows(sql`INSERT INTO accounts (id, name) VALUES ('acc', 'a')`);
    await db.rows(sql`INSERT INTO wallets (account_id, balance_micro) VALUES ('acc', ${BALANCE_MICRO})`);
    if (dropChecks) {
      await db.rows(sql`ALTER TABLE wallets DROP CONSTRAINT wallets_available_non_negative`);
      await db.rows(sql`ALTER TABLE holds DROP CONSTRAINT holds_posted_within_amount`);
    }
    await db.close();
    return database;
  }

  it("concurrent careless holds and posts never drive available below zero or posts above holds", async () => {
    const database = await freshWallet(false);
    try {
      const result = await careless(database.url);
      expect(result.available).toBeGreaterThanOrEqual(0n);
      expect(result.overPosted).toBe(0);
    } finally {
      await database.drop();
    }
  }, 60_000);

  it("control: with the CHECKs dropped, the same workload overspends (so the test above can fail)", async () => {
    const database = await freshWallet(true);
    try {
      const result = await careless(database.url);
      expect(result.available).toBeLessThan(0n);
      expect(result.overPosted).toBeGreaterThan(0);
    } finally {
      await database.drop();
    }
  }, 60_000);
});

describe("per-key limits", () => {
  let t: TestGateway;
  beforeAll(async () => {
    t = await startTestGateway();
  }, SETUP_MS_MAX);
  afterAll(async () => t.stop(), SETUP_MS_MAX);

  test("requests per minute: the fourth of rpm 3 is 429 with retry-after and x-ratelimit headers", async () => {
    const { key } = await t.fundedKey(100, { rpm: 3 });
    const replies = [];
    for (let i = 0; i < 4; i++) replies.push(await post(t.url, key));
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 429]);
    expect(replies[0]!.headers.get("x-ratelimit-limit-requests")).toBe("3");
    expect(replies[2]!.headers.get("x-ratelimit-remaining-requests")).toBe("0");
    const refused = replies[3]!;
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(Number(refused.headers.get("retry-after"))).toBeLessThanOrEqual(60);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("rate_limit_exceeded");
  });

  test("tokens per minute count what requests reserve, then what they used", async () => {
    // Each request reserves its prompt bound (29) + max_tokens (10) and uses 10 + 10 = 20.
    const { key } = await t.fundedKey(100, { tpm: 100 });
    const statuses = [];
    for (let i = 0; i < 6; i++) statuses.push((await post(t.url, key)).status);
    // 20 + 20 + 20 + 20 = 80 used; the fifth would reach 80 + 39 > 100.
    expect(statuses).toEqual([200, 200, 200, 200, 429, 429]);
    const tooBig = await post(t.url, key, JSON.stringify({ model: MODEL, messages: HELLO, max_tokens: 500 }));
    expect(tooBig.status).toBe(429);
    expect(((await tooBig.json()) as { error: { param: string } }).error.param).toBe("max_tokens");
  });

  test("a monthly spend cap refuses with 402 once the month's charges would pass it", async () => {
    // Cap 2 toman: each request reserves 0.9315 toman (29 × 13,500 + 10 × 54,000) and costs 0.675.
    const { key, keyId } = await t.fundedKey(100, { monthly_spend_cap_toman: 2 });
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await post(t.url, key)).status);
    expect(statuses).toEqual([200, 200, 402, 402]); // 1.35 spent; 1.35 + 0.9315 > 2
    const lifted = await t.admin("PATCH", `/admin/keys/${keyId}`, { monthly_spend_cap_toman: null });
    expect(lifted.body.monthly_spend_cap_toman).toBeNull();
    expect((await post(t.url, key)).status).toBe(200);
  });
});

describe("exchange rate inputs", () => {
  let t: TestGateway;
  beforeAll(async () => {
    t = await startTestGateway();
  }, SETUP_MS_MAX);
  afterAll(async () => t.stop(), SETUP_MS_MAX);

  test("a rate effective before the newest version is refused; a future one waits for its time", async () => {
    const past = await t.admin("POST", "/admin/rates", { toman_per_usd: 95_000, effective_at: "1969-12-31T00:00:00Z" });
    expect([past.status, past.body.error.param]).toEqual([400, "effective_at"]);
    const later = new Date(Date.now() + 3_600_000).toISOString();
    const future = await t.admin("POST", "/admin/rates", { toman_per_usd: 95_000, effective_at: later });
    expect(future.status).toBe(201);
    const rates = await t.admin("GET", "/admin/rates");
    expect(rates.body.current.toman_per_usd).toBe(90_000);
    expect(rates.body.versions.at(-1)).toMatchObject({ id: future.body.id, toman_per_usd: 95_000 });
  });

  test("the rate fetcher applies a fetched rate and reports a bad source without changing the rate", async () => {
    const { RateFetcher } = await import("../src/catalog/rates.ts");
    const { reloadCatalog } = await import("../src/catalog/catalog.ts");
    let answer: unknown = { data: { usd: { sell: "91000" } } };
    const source = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => Response.json(answer) });
    try {
      const { db, catalog } = t.gw.deps;
      const fetcher = new RateFetcher(
        db,
        { url: `http://127.0.0.1:${source.port}/rate`, path: "data.usd.sell", intervalMs: 3_600_000 },
        () => catalog.currentVersion()?.tomanPerUsd,
        () => reloadCatalog(db, catalog),
        () => {},
      );
      await fetcher.fetchOnce();
      expect(fetcher.status.lastError).toBeNull();
      expect(catalog.currentVersion()?.tomanPerUsd).toBe(91_000n);
      answer = { data: { usd: { sell: "900000" } } }; // ten times: implausible
      await fetcher.fetchOnce();
      expect(fetcher.status.lastError).toContain("implausibly far");
      answer = { nothing: true };
      await fetcher.fetchOnce();
      expect(fetcher.status.lastError).toContain("no positive number at data.usd.sell");
      expect(catalog.currentVersion()?.tomanPerUsd).toBe(91_000n);
    } finally {
      source.stop(true);
    }
  });
});

describeWith(["postgres"], "when the database refuses writes", (it) => {
  let t: TestGateway;
  beforeAll(async () => {
    // The in-process bus: usage goes straight to PostgreSQL (with NATS it would wait in JetStream).
    t = await startTestGateway({ NATS_URL: undefined });
  }, SETUP_MS_MAX);
  afterAll(async () => t.stop(), SETUP_MS_MAX);

  it("new requests get 503 instead of being served unbilled, and every served one is billed once it recovers", async () => {
    const { key, keyId } = await t.fundedKey(1000);
    const db = t.gw.deps.db;
    let served = 0;
    expect((await post(t.url, key)).status).toBe(200);
    served++;
    await db.rows(sql`ALTER TABLE usage_records RENAME TO usage_records_away`);
    const refusal = async () => {
      const response = await post(t.url, key);
      if (response.status === 200) served++;
      return response.status === 200 ? undefined : response;
    };
    const refused = await untilValue(refusal, { what: "a request refused", pollMs: 10 });
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("service_unavailable");
    await db.rows(sql`ALTER TABLE usage_records_away RENAME TO usage_records`);
    await until(async () => (await post(t.url, key)).status === 200, { msMax: 10_000, what: "a request served again", pollMs: 50 });
    served++;
    await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${key}` } });
    const [row] = await db.rows<{ n: unknown }>(sql`SELECT count(*) AS n FROM usage_records WHERE key_id = ${keyId}`);
    expect(Number(row!.n)).toBe(served);
    const audit = await t.admin("GET", "/admin/ledger/audit");
    expect(audit.body.ok).toBe(true);
  }, 30_000);
});
