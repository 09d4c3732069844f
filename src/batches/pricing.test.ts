import { afterAll, beforeAll, expect, test } from "bun:test";
import type { PoolHost } from "../../actors/pool/host.ts";
import { openTestDb, SETUP_MS_MAX } from "../../test/helpers.ts";
import { type Catalog, loadCatalog } from "../catalog/catalog.ts";
import { inOnePiece } from "./lines.ts";
import {
  atBatchPriceLine,
  batchEstimate,
  batchOnlyRefusal,
  byCatalogModel,
  FILE_MODEL_NAMES_MAX,
  fromStoredLineModels,
  lineModels,
  type ModelLines,
  REFUSED_LINES_NAMED_MAX,
  toStoredLineModels,
} from "./pricing.ts";

let catalog: Catalog;
let close: (() => Promise<void>) | undefined;
beforeAll(async () => {
  const opened = await openTestDb();
  close = opened.close;
  catalog = await loadCatalog(opened.db);
}, SETUP_MS_MAX);
afterAll(() => close?.(), SETUP_MS_MAX);

/** gpt-4o-mini and deepseek-v3 served in the country, the rest abroad. */
const pools = {
  get: (id: string) => ({ hasRegion: (region: string) => region === "in-country" && ["gpt-4o-mini", "deepseek-v3"].includes(id) }),
} as unknown as PoolHost;

const line = (model: string) => JSON.stringify({ custom_id: "x", method: "POST", url: "/v1/chat/completions", body: { model } });
const bytes = (lines: string[]) => inOnePiece(new TextEncoder().encode(lines.join("\n")));
/** A model's lines at these numbers, as pricing counts them. */
const at = (...lines: number[]): ModelLines => ({ lines: lines.length, first: lines.slice(0, REFUSED_LINES_NAMED_MAX) });

test("the models of a file's lines by catalog id (an alias is its model), lines that are not JSON or name no model left to the validation", async () => {
  const models = await lineModels(
    bytes([line("gpt-4o-mini"), "not json", line("gpt-4o-mini-2024-07-18"), line("no-such-model"), line("deepseek-v3"), ""]),
  );
  expect(models).toEqual(
    new Map([
      ["gpt-4o-mini", at(1)],
      ["gpt-4o-mini-2024-07-18", at(3)],
      ["no-such-model", at(4)],
      ["deepseek-v3", at(5)],
    ]),
  );
  expect(await byCatalogModel(catalog, models)).toEqual(
    new Map([
      ["gpt-4o-mini", at(1, 3)],
      ["deepseek-v3", at(5)],
    ]),
  );
});

test("a file's models keep the count of every line and the first lines of each, across an alias; kept and read back the same", async () => {
  const names = Array.from({ length: 30 }, (_, i) => (i % 3 === 2 ? "gpt-4o-mini-2024-07-18" : "gpt-4o-mini"));
  const models = await lineModels(bytes(names.map(line)));
  expect(models.get("gpt-4o-mini")).toEqual({ lines: 20, first: [1, 2, 4, 5, 7, 8, 10, 11, 13, 14] });
  const byModel = await byCatalogModel(catalog, models);
  expect(byModel).toEqual(new Map([["gpt-4o-mini", { lines: 30, first: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] }]]));
  const kept = JSON.parse(JSON.stringify(toStoredLineModels(models)));
  expect(fromStoredLineModels(kept)).toEqual(models);
  // Not kept: too many names (create counts again), or a summary that is not one.
  const many = await lineModels(bytes(Array.from({ length: FILE_MODEL_NAMES_MAX + 1 }, (_, i) => line(`m${i}`))));
  expect(toStoredLineModels(many)).toBeNull();
  expect(fromStoredLineModels(null)).toBeNull();
  expect(fromStoredLineModels([{ model: "x", lines: 0, first: [] }])).toBeNull();
});

test("each model at the batch price only with a batch price and an in-country backend; the batch mixed; its estimate the prices billed", () => {
  const byModel = new Map([
    ["gpt-4o-mini", at(1)],
    ["deepseek-v3", at(2)],
    ["claude-3-5-haiku", at(3, 4)],
  ]);
  const estimate = batchEstimate({ catalog, pools }, byModel);
  expect(estimate.pricing).toBe("mixed");
  expect(estimate.models.map((m) => [m.model, m.lines, m.pricing, m.reason])).toEqual([
    ["claude-3-5-haiku", 2, "live", "no_in_country_backend"],
    ["deepseek-v3", 1, "live", "no_batch_price"],
    ["gpt-4o-mini", 1, "batch", undefined],
  ]);
  // $0.075, $0.3 and $0.0375 per 1M × 90,000: the batch prices; deepseek-v3's its list prices.
  expect(estimate.models[2]!.toman_per_1m).toEqual({ input_token: 6_750, output_token: 27_000, cache_read_token: 3_375 });
  expect(estimate.models[1]!.toman_per_1m).toEqual({ input_token: 24_300, output_token: 99_000 });
  expect(batchEstimate({ catalog, pools }, new Map([["gpt-4o-mini", at(1)]])).pricing).toBe("batch");
  expect(batchEstimate({ catalog, pools }, new Map([["deepseek-v3", at(1)]])).pricing).toBe("live");
  expect(batchEstimate({ catalog, pools }, new Map()).pricing).toBe("live");
});

test("batch-only refuses naming the live lines (the first of each model, and how many more), never the batch ones", () => {
  const many = Array.from({ length: REFUSED_LINES_NAMED_MAX + 5 }, (_, i) => i + 2);
  const byModel = new Map([
    ["gpt-4o-mini", at(1)],
    ["deepseek-v3", at(...many)],
  ]);
  const refused = batchOnlyRefusal(batchEstimate({ catalog, pools }, byModel), byModel);
  expect(refused?.code).toBe("invalid_request");
  expect(refused?.param).toBe("input_file_id");
  expect(refused?.message).toContain(
    `line ${many.slice(0, REFUSED_LINES_NAMED_MAX).join(", ")} and 5 more (deepseek-v3 has no batch price)`,
  );
  expect(refused?.message).not.toContain("gpt-4o-mini");
  const atBatch = new Map([["gpt-4o-mini", at(1, 2)]]);
  expect(batchOnlyRefusal(batchEstimate({ catalog, pools }, atBatch), atBatch)).toBeNull();
});

test("a line is at the batch price when its batch's estimate put its model there, by id or alias; a batch from before batch prices is live", () => {
  const estimate = batchEstimate(
    { catalog, pools },
    new Map([
      ["gpt-4o-mini", at(1)],
      ["deepseek-v3", at(2)],
    ]),
  );
  expect(atBatchPriceLine(estimate, catalog, { model: "gpt-4o-mini-2024-07-18" })).toBe(true);
  expect(atBatchPriceLine(estimate, catalog, { model: "deepseek-v3" })).toBe(false);
  expect(atBatchPriceLine(null, catalog, { model: "gpt-4o-mini" })).toBe(false);
  expect(atBatchPriceLine(estimate, catalog, { model: 42 })).toBe(false);
});
