/**
 * Cache prices reach every price version: a catalog seeded before they existed gains them at the
 * next start-up, at each version's own rate, and a new rate copies them like any other unit.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { openTestDb, SETUP_MS_MAX } from "../../test/helpers.ts";
import type { Db } from "../db/client.ts";
import { operatorAudit } from "../db/schema.ts";
import { atBatchPrice, atBatchPrices, loadCatalog } from "./catalog.ts";
import { setRate } from "./rates.ts";
import { SEED_MODELS } from "./seed.ts";

let db: Db;
let close: (() => Promise<void>) | undefined;
beforeAll(async () => {
  ({ db, close } = await openTestDb());
}, SETUP_MS_MAX);
afterAll(() => close?.(), SETUP_MS_MAX);

/** The seed as it was before cache prices: input and output only. */
const withoutCache = SEED_MODELS.map((m) => ({
  ...m,
  usd_per_1m: Object.fromEntries(Object.entries(m.usd_per_1m).filter(([unit]) => !unit.startsWith("cache_"))),
}));

test("an older catalog gains the cache prices at start-up, and a new rate copies them", async () => {
  const before = await loadCatalog(db, withoutCache);
  expect(before.get("claude-sonnet-4")!.price.tomanPer1m.get("cache_write_token")).toBeUndefined();

  const after = await loadCatalog(db);
  const sonnet = after.get("claude-sonnet-4")!.price.tomanPer1m;
  // $0.30 and $3.75 × 90,000 toman per USD
  expect([sonnet.get("cache_read_token"), sonnet.get("cache_write_token")]).toEqual([27_000n, 337_500n]);
  expect(after.get("gpt-4o-mini")!.price.tomanPer1m.get("cache_read_token")).toBe(6_750n);
  expect(after.get("deepseek-v3")!.price.tomanPer1m.has("cache_read_token")).toBe(false);

  await setRate(db, { tomanPerUsd: 100_000n, effectiveAt: new Date(0) });
  const next = await loadCatalog(db);
  expect(next.get("claude-sonnet-4")!.price.tomanPer1m.get("cache_write_token")).toBe(375_000n);
});

test("the seed refreshes a model from the file unless the audit trail holds an operator's change of it", async () => {
  const id = "gpt-4o";
  const withWindow = (contextWindow: number) => SEED_MODELS.map((m) => (m.id === id ? { ...m, context_window: contextWindow } : m));
  expect((await loadCatalog(db, withWindow(111_000))).get(id)!.contextWindow).toBe(111_000);
  const row = (after: unknown) => ({ actor: "op-1", role: "finance", via: "token", action: "catalog.alias", target: id, after });
  // An alias the model already had changed nothing (no price version): the file still wins.
  await db.orm.insert(operatorAudit).values(row({ object: "catalog_change", action: "alias", price_version: null }));
  expect((await loadCatalog(db, withWindow(112_000))).get(id)!.contextWindow).toBe(112_000);
  await db.orm.insert(operatorAudit).values(row({ object: "catalog_change", action: "alias", price_version: 1 }));
  expect((await loadCatalog(db, withWindow(113_000))).get(id)!.contextWindow).toBe(112_000);
});

test("a model's batch prices load beside its prices; at the batch price each unit is its batch price where it has one, the rest as they are", async () => {
  const catalog = await loadCatalog(db);
  const mini = catalog.get("gpt-4o-mini")!;
  // $0.0375 and $0.3 per 1M × 100,000 (the rate of the test above)
  expect(mini.price.batch?.get("cache_read_token")).toBe(3_750n);
  const batch = atBatchPrice(mini)!;
  expect(batch.price.versionId).toBe(mini.price.versionId);
  expect([...batch.price.tomanPer1m]).toEqual([
    ["input_token", 7_500n],
    ["output_token", 30_000n],
    ["cache_read_token", 3_750n],
  ]);
  const sonnet = atBatchPrice(catalog.get("claude-sonnet-5")!)!.price.tomanPer1m;
  expect(sonnet.get("web_search_call")).toBe(catalog.get("claude-sonnet-5")!.price.tomanPer1m.get("web_search_call")); // no batch price: its own
  expect(sonnet.get("input_token")).toBe(100_000n);
  expect(atBatchPrice(catalog.get("deepseek-v3")!)).toBeNull();
  const view = atBatchPrices(catalog);
  expect(view.get("gpt-4o-mini")!.price.tomanPer1m.get("input_token")).toBe(7_500n);
  expect(view.get("deepseek-v3")!.price.tomanPer1m.get("input_token")).toBe(27_000n);
  expect(catalog.get("gpt-4o-mini")!.price.tomanPer1m.get("input_token")).toBe(15_000n); // the catalog itself unchanged
  // A batch price above the price (a seeded one beside an operator's lower price), or of a unit not priced, is not used.
  const odd = {
    ...mini,
    price: {
      ...mini.price,
      batch: new Map([
        ["input_token", 99_999n],
        ["character", 1n],
      ]),
    },
  };
  expect([...atBatchPrice(odd)!.price.tomanPer1m]).toEqual([...mini.price.tomanPer1m]);
});
