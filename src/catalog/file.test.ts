import { expect, test } from "bun:test";
import { Catalog } from "./catalog.ts";
import { CATALOG_FILE_PATH, entryOfPrices, entryPrices, parseCatalogFile } from "./file.ts";
import { parseUsd } from "./prices.ts";
import { REASONING_MODELS, takesReasoningEffort } from "./reasoning.ts";
import { SEED_MODELS } from "./seed.ts";

const fileText = await Bun.file(CATALOG_FILE_PATH).text();

/** The shipped file with one model's entry edited. */
function edited(id: string, edit: (entry: any) => void): string {
  const json = JSON.parse(fileText);
  edit(json.models.find((m: { id: string }) => m.id === id));
  return JSON.stringify(json);
}

test("the shipped file loads: the 37 published chat models and the clients' default models", () => {
  const ids = new Set(SEED_MODELS.map((m) => m.id));
  expect(SEED_MODELS.filter((m) => m.operation === "chat" && m.listing <= 37)).toHaveLength(37);
  for (const id of ["claude-opus-4-8", "claude-sonnet-5", "claude-haiku-4-5", "gpt-6.1-sol", "gpt-5.6-luna"])
    expect(ids.has(id), id).toBe(true);
});

test.each([
  ["claude-sonnet-5", "cache_write_1h_token"],
  ["gpt-4o", "cache_read_token"],
  ["gpt-image-1", "image_output_token"],
  ["tts-1", "character"],
])("a file without %s's %s price is refused, naming the model and the unit", (id, unit) => {
  const text = edited(id, (entry) => delete entry.usd_per_1m[unit]);
  expect(() => parseCatalogFile(text)).toThrow(`model ${id} reports ${unit} but has no price for it`);
});

test("a hosted tool without its per-call price is refused; with it the file loads", () => {
  const withTool = edited("gpt-4o", (entry) => entry.capabilities.hosted_tools.push("web_search"));
  expect(() => parseCatalogFile(withTool)).toThrow("model gpt-4o reports web_search_call but has no price for it");
  const priced = edited("gpt-4o", (entry) => {
    entry.capabilities.hosted_tools.push("web_search");
    entry.usd_per_1m.web_search_call = "10000";
  });
  expect(parseCatalogFile(priced).find((m) => m.id === "gpt-4o")!.usd_per_1m.web_search_call).toBe("10000");
  // Anthropic's web search, $10 per 1,000 searches, ships with every Claude model.
  expect(parseCatalogFile(edited("gpt-4o", () => {})).find((m) => m.id === "claude-sonnet-5")!.usd_per_1m.web_search_call).toBe("10000");
});

test("an alias naming two models, or a successor not in the catalog, is refused", () => {
  expect(() => parseCatalogFile(edited("gpt-4o", (entry) => entry.aliases.push("gpt-4o-mini")))).toThrow("gpt-4o-mini names both");
  expect(() => parseCatalogFile(edited("gpt-4o", (entry) => (entry.retired = { successor: "gpt-99" })))).toThrow(
    "model gpt-4o is retired for gpt-99, which is not in the catalog",
  );
});

const catalog = new Catalog(
  SEED_MODELS.map((m) => ({
    id: m.id,
    operation: m.operation,
    vendor: m.vendor,
    contextWindow: m.context_window,
    openWeight: m.open_weight,
    listing: m.listing,
    createdS: 0,
    aliases: m.aliases,
    outputMax: m.output_max,
    capabilities: m.capabilities,
    successor: m.id === "claude-3-5-haiku" ? "claude-haiku-4-5" : null,
    source: m.source,
  })),
  [],
);

test("every alias in the file resolves to its model; dated ids among them", () => {
  for (const m of SEED_MODELS) for (const alias of m.aliases) expect(catalog.lookup(alias), alias).toMatchObject({ model: { id: m.id } });
  expect(catalog.get("claude-sonnet-4-20250514")?.id).toBe("claude-sonnet-4");
  expect(catalog.get("gpt-4o-2024-08-06")?.id).toBe("gpt-4o");
  expect(catalog.get("claude-haiku-4-5-20251001")?.id).toBe("claude-haiku-4-5");
});

test("a retired model is found with its successor, by id and alias, and is not listed", () => {
  expect(catalog.lookup("claude-3-5-haiku-20241022")).toMatchObject({ kind: "retired", successor: "claude-haiku-4-5" });
  expect(catalog.get("claude-3-5-haiku")).toBeUndefined();
  expect(catalog.list().some((m) => m.id === "claude-3-5-haiku")).toBe(false);
  expect(catalog.listAll().some((m) => m.id === "claude-3-5-haiku")).toBe(true);
});

test("an unknown model is answered with the closest served ids", () => {
  expect(catalog.lookup("gpt-4o-mni")).toEqual({ kind: "unknown", suggestions: ["gpt-4o-mini", "gpt-4.1-mini", "gpt-4o"] });
  const typo = catalog.lookup("claude-sonet-5");
  expect(typo.kind === "unknown" && typo.suggestions[0]).toBe("claude-sonnet-5");
  expect(catalog.lookup("x".repeat(500))).toEqual({ kind: "unknown", suggestions: [] });
});

test("reasoning models are marked in the file; a dated id of one takes an effort", () => {
  for (const id of REASONING_MODELS) expect(catalog.lookup(id).kind === "unknown", id).toBe(false);
  expect(takesReasoningEffort("claude-sonnet-4-20250514")).toBe(true);
  expect(takesReasoningEffort("gpt-4o-mini")).toBe(false);
});

test("every chat model has an output_max, and says where it was read", () => {
  for (const m of SEED_MODELS.filter((e) => e.operation === "chat")) {
    expect(m.output_max, m.id).toBeGreaterThan(0);
    expect(m.output_max!, m.id).toBeLessThanOrEqual(m.context_window);
    expect(m.source.limits?.note.length ?? 0, m.id).toBeGreaterThan(0);
  }
  expect(SEED_MODELS.find((m) => m.id === "gpt-4o-mini")!.output_max).toBe(16_384);
});

test("an output_max above the window, or a limits source without its note, is refused", () => {
  expect(() => parseCatalogFile(edited("gpt-4o-mini", (entry) => (entry.output_max = 200_000)))).toThrow(
    "model gpt-4o-mini has output_max 200000 above its context_window 128000",
  );
  expect(() => parseCatalogFile(edited("gpt-4o-mini", (entry) => (entry.source.limits = { pages: [] })))).toThrow("source.limits.note");
  expect(() => parseCatalogFile(edited("gpt-4o-mini", (entry) => (entry.source.limits.extra = 1)))).toThrow("extra");
});

test("a tier without a threshold, without a price of a token unit, or beyond the window is refused; context-1m needs a tier", () => {
  const tierless = (edit: (tier: any) => void) => edited("gemini-2.5-pro", (entry) => edit(entry.tier));
  expect(() => parseCatalogFile(tierless((tier) => delete tier.above_input_tokens))).toThrow("tier.above_input_tokens");
  expect(() => parseCatalogFile(tierless((tier) => delete tier.usd_per_1m.cache_read_token))).toThrow(
    "model gemini-2.5-pro's tier has no price for cache_read_token",
  );
  expect(() => parseCatalogFile(tierless((tier) => (tier.usd_per_1m.web_search_call = "1")))).toThrow(
    "model gemini-2.5-pro's tier prices web_search_call, which is not one of its token units",
  );
  expect(() => parseCatalogFile(tierless((tier) => (tier.above_input_tokens = 1_000_000)))).toThrow("not within its window of 1000000");
  expect(() => parseCatalogFile(edited("claude-sonnet-4", (entry) => (entry.tier = null)))).toThrow(
    "model claude-sonnet-4 takes context-1m but has no tier",
  );
});

test("the tiers the vendors bill replace windows held at the tier's threshold", () => {
  const byId = new Map(SEED_MODELS.map((m) => [m.id, m]));
  expect(byId.get("gpt-6.1-sol")).toMatchObject({ context_window: 1_050_000, tier: { above_input_tokens: 272_000 } });
  expect(byId.get("claude-haiku-5-5")).toMatchObject({
    context_window: 1_000_000,
    output_max: 128_000,
    tier: { above_input_tokens: 100_000 },
  });
  expect(byId.get("gemini-3.1-pro-preview")).toMatchObject({ context_window: 1_048_576, tier: { above_input_tokens: 200_000 } });
  expect(byId.get("claude-sonnet-4")).toMatchObject({ capabilities: { context_1m: true }, tier: { above_input_tokens: 200_000 } });
  expect(entryOfPrices(Object.fromEntries(entryPrices(byId.get("gemini-2.5-pro")!)))).toEqual({
    usd_per_1m: byId.get("gemini-2.5-pro")!.usd_per_1m,
    tier: byId.get("gemini-2.5-pro")!.tier,
    batch_usd_per_1m: null,
  });
});

test("a USD price past the static ceiling is refused where the file is read, naming the unit", () => {
  const entry = { ...SEED_MODELS[0]!, usd_per_1m: { ...SEED_MODELS[0]!.usd_per_1m, input_token: "99999999999999999999999" } };
  expect(() => parseCatalogFile(JSON.stringify({ models: [entry] }), "test.json")).toThrow(/input_token/);
});

test("OpenAI's and Anthropic's chat and embeddings models have batch prices of exactly half each token price, their batch pages among their sources", () => {
  const pages = {
    openai: "https://platform.openai.com/docs/guides/batch",
    anthropic: "https://docs.claude.com/en/docs/build-with-claude/batch-processing",
  };
  let priced = 0;
  for (const m of SEED_MODELS) {
    const page = pages[m.vendor as keyof typeof pages];
    if (!page || m.tier || (m.operation !== "chat" && m.operation !== "embeddings")) {
      expect(m.batch_usd_per_1m, m.id).toBeNull(); // open-weight, tiered and other vendors' models: the operator's to set
      continue;
    }
    priced++;
    const tokens = Object.entries(m.usd_per_1m).filter(([unit]) => unit.endsWith("_token"));
    expect(Object.keys(m.batch_usd_per_1m ?? {}).sort(), m.id).toEqual(tokens.map(([unit]) => unit).sort());
    for (const [unit, usd] of tokens) expect(parseUsd(m.batch_usd_per_1m![unit]!) * 2n, `${m.id} ${unit}`).toBe(parseUsd(usd));
    expect(
      m.source.pages.map((p) => p.url),
      m.id,
    ).toContain(page);
  }
  expect(priced).toBeGreaterThanOrEqual(18);
});

test("a batch price above the live price, of a unit the model does not price, or on a tiered model is refused, naming the model and the unit", () => {
  const refused =
    (edit: (entry: any) => void, id = "deepseek-v3") =>
    () =>
      parseCatalogFile(edited(id, edit), "test.json");
  expect(refused((e) => (e.batch_usd_per_1m = { input_token: "0.28" }))).toThrow(
    "model deepseek-v3's batch price of input_token, USD 0.28, is above its price of USD 0.27 (batch_usd_per_1m.input_token)",
  );
  expect(refused((e) => (e.batch_usd_per_1m = { cache_read_token: "0.01" }))).toThrow(
    "model deepseek-v3's batch price names cache_read_token, which it does not price (batch_usd_per_1m.cache_read_token)",
  );
  expect(refused((e) => (e.batch_usd_per_1m = { input_token: "0.5" }), "gemini-2.5-pro")).toThrow(
    "model gemini-2.5-pro has a price tier and a batch price",
  );
  expect(() =>
    parseCatalogFile(
      edited("deepseek-v3", (e) => (e.batch_usd_per_1m = { input_token: "0.27" })),
      "test.json",
    ),
  ).not.toThrow();
});
