/**
 * The catalog as clients and operators meet it, on one embedded gateway: every alias of the
 * shipped file resolves on every route; an operator adds a model with prices through the admin
 * API and its first request is billed at them, under the price version the change made; a
 * change that leaves a reported unit unpriced is refused naming the model and unit; a retired
 * model answers 410 naming its successor, in each wire's shape; an unknown one 404 naming the
 * closest ids. (The same across two nodes through `gw`: catalog-cluster.test.ts.)
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CATALOG_FILE_PATH } from "../src/catalog/file.ts";
import { SEED_MODELS } from "../src/catalog/seed.ts";
import type { Simulator } from "../src/sim/server.ts";
import { SETUP_MS_MAX, startSimGateway, type SimGateway, until } from "./helpers.ts";

const OUTPUT_TOKENS = 4;

function poolsFile(sim: Simulator): string {
  const path = join(mkdtempSync(join(tmpdir(), "darvaze-pools-")), "pools.json");
  writeFileSync(path, JSON.stringify({ default_backends: [{ name: "sim", kind: "openai", url: `${sim.url}/v1`, region: "abroad" }] }));
  return path;
}

let setup: SimGateway | undefined;
let key = "";

beforeAll(async () => {
  setup = await startSimGateway({ outputTokens: OUTPUT_TOKENS }, poolsFile, 200_000);
  ({ key } = await setup.t.fundedKey(200_000));
}, SETUP_MS_MAX);
afterAll(() => setup?.stop(), SETUP_MS_MAX);

/** One call on a route, as its clients send it (the Messages route with Anthropic's headers); `callerKey` defaults to the suite's key. */
async function call(
  route: "models" | "chat" | "responses" | "messages",
  model: string,
  callerKey = key,
): Promise<{ status: number; body: any; requestId: string }> {
  const url = setup!.t.url;
  const key = callerKey;
  const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };
  let response: Response;
  if (route === "models") response = await fetch(`${url}/v1/models/${encodeURIComponent(model)}`, { headers });
  else if (route === "chat")
    response = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers,
      body: JSON.stringify({ model, messages: [{ role: "user", content: "Hello" }], max_tokens: 16 }),
    });
  else if (route === "responses")
    response = await fetch(`${url}/v1/responses`, {
      method: "POST",
      headers,
      body: JSON.stringify({ model, input: "Hello", max_output_tokens: 16 }),
    });
  else
    response = await fetch(`${url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({ model, messages: [{ role: "user", content: "Hello" }], max_tokens: 16 }),
    });
  return { status: response.status, body: await response.json(), requestId: response.headers.get("x-request-id") ?? "" };
}

const ROUTES = ["models", "chat", "responses", "messages"] as const;
const chatAliases = SEED_MODELS.filter((m) => m.operation === "chat").flatMap((m) => m.aliases.map((alias) => [alias, m.id] as const));

describe("every alias on every route", () => {
  test("the file has the dated ids clients send", () => {
    const aliases = new Map(chatAliases);
    expect(aliases.get("claude-sonnet-4-20250514")).toBe("claude-sonnet-4");
    expect(aliases.get("gpt-4o-2024-08-06")).toBe("gpt-4o");
    expect(aliases.get("claude-haiku-4-5-20251001")).toBe("claude-haiku-4-5");
  });

  test.each(ROUTES)(
    "%s",
    async (route) => {
      const failures: string[] = [];
      for (const [alias, id] of chatAliases) {
        const reply = await call(route, alias);
        if (reply.status !== 200) failures.push(`${alias}: ${reply.status} ${JSON.stringify(reply.body)}`);
        else if (route === "models" && reply.body.id !== id) failures.push(`${alias}: named ${reply.body.id}`);
      }
      expect(failures).toEqual([]);
    },
    60_000,
  );

  test("a model's object lists its aliases, limits, capabilities and every price component", async () => {
    const reply = await call("models", "claude-sonnet-5");
    expect(reply.body).toMatchObject({
      id: "claude-sonnet-5",
      context_window: 1_000_000,
      output_max: 128_000,
      capabilities: { cache: "read_write", reasoning: "thinking_blocks" },
      // $2, $10, $0.20, $2.50, $4 per 1M × 90,000 toman per USD
      pricing: { input: 180_000, output: 900_000, cache_read: 18_000, cache_write: 225_000, cache_write_1h: 360_000, per: 1_000_000 },
    });
    const image = (await call("models", "gpt-image-1")).body;
    // $5, $10, $40 per 1M tokens; $0.011 per low-quality square image
    expect(image.pricing).toMatchObject({
      input: 450_000,
      image_input: 900_000,
      image_output: 3_600_000,
      per_image: { "1024x1024": { low: 990 } },
    });
  });
});

/** How long a usage record may take to be written on a busy machine (embedded: PGlite's worker). */
const USAGE_WAIT_MS_MAX = 20_000;

describe("operators change the catalog", () => {
  const acme = {
    operation: "chat",
    vendor: "acme",
    aliases: ["acme-1-2026-11-01", "acme-latest"],
    context_window: 64_000,
    output_max: 8_000,
    listing: 900,
    capabilities: { streaming: true, tools: true, reasoning: "none", images_in: false, cache: "read" },
    usd_per_1m: { input_token: "1.5", output_token: "7", cache_read_token: "0.15" },
    source: { pages: [], note: "a test model" },
    by: "operator-a",
  };

  test("a model added with prices is served at once, by id and alias, billed at its prices under the change's version", async () => {
    const { t } = setup!;
    const added = await t.admin("PUT", "/admin/catalog/models/acme-1", acme);
    expect(added.status).toBe(201);
    const version = added.body.price_version as number;

    // An account of its own: the account view lists the RECENT_USAGE_MAX records of highest id, and
    // records written in one batch are numbered in no set order, so on a slow machine, where the suite's
    // earlier requests and this one land in one batch, this record could fall outside the suite account's list.
    const own = await t.fundedKey(200_000);
    const reply = await call("chat", "acme-latest", own.key);
    expect(reply.status).toBe(200);
    let record: any;
    await t.gw.deps.writer.flush();
    await until(async () => {
      const account = await t.admin("GET", `/admin/accounts/${own.accountId}`);
      record = account.body.recent_usage.find((u: { request_id: string }) => u.request_id === reply.requestId);
      return record !== undefined;
    }, USAGE_WAIT_MS_MAX);
    // $1.5 and $7 per 1M × 90,000
    expect(record).toMatchObject({ model: "acme-1", price_version: version, prices_toman_per_1m: { input: "135000", output: "630000" } });
    expect(BigInt(record.billed_micro_toman)).toBe(BigInt(record.input_units) * 135_000n + BigInt(record.output_units) * 630_000n);

    const changes = await t.admin("GET", "/admin/catalog/changes?model=acme-1");
    expect(changes.body.data[0]).toMatchObject({
      model: "acme-1",
      action: "add",
      by: "admin_token",
      declared_by: "operator-a",
      price_version: version,
    });
  });

  test("a tier by prompt length: a prompt above its threshold is charged the tier's prices for every token, one below the standard ones; each record keeps its prices", async () => {
    const { t } = setup!;
    const tier = { above_input_tokens: 60, usd_per_1m: { input_token: "3", output_token: "14", cache_read_token: "0.3" } };
    const added = await t.admin("PUT", "/admin/catalog/models/acme-tiered", { ...acme, aliases: [], tier });
    expect(added.status).toBe(201);
    // $3 and $14 per 1M × 90,000; the threshold beside them.
    expect((await call("models", "acme-tiered")).body.pricing_tier).toEqual({
      above_input_tokens: 60,
      input: 270_000,
      output: 1_260_000,
      cache_read: 27_000,
    });
    const own = await t.fundedKey(200_000);
    const send = async (content: string) => {
      const response = await fetch(`${t.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${own.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "acme-tiered", messages: [{ role: "user", content }], max_tokens: 16 }),
      });
      expect(response.status).toBe(200);
      return response.headers.get("x-request-id")!;
    };
    // Its byte bound is above the threshold (reserved at the tier), its count below (charged the standard prices).
    const below = await send("word ".repeat(40));
    const above = await send("word ".repeat(100));
    const records = new Map<string, any>();
    await t.gw.deps.writer.flush();
    await until(async () => {
      const account = await t.admin("GET", `/admin/accounts/${own.accountId}`);
      for (const u of account.body.recent_usage) records.set(u.request_id, u);
      return records.has(below) && records.has(above);
    }, USAGE_WAIT_MS_MAX);
    const [short, long] = [records.get(below), records.get(above)];
    expect(Number(short.input_units)).toBeLessThanOrEqual(60);
    expect(short.prices_toman_per_1m).toMatchObject({ input: "135000", output: "630000" });
    expect(Number(long.input_units)).toBeGreaterThan(60);
    expect(long.prices_toman_per_1m).toMatchObject({ input: "270000", output: "1260000" });
    for (const record of [short, long])
      expect(BigInt(record.billed_micro_toman)).toBe(
        BigInt(record.input_units) * BigInt(record.prices_toman_per_1m.input) +
          BigInt(record.output_units) * BigInt(record.prices_toman_per_1m.output),
      );
  });

  test("a change that leaves a reported unit unpriced is refused, naming the model and the unit", async () => {
    const { cache_read_token: _, ...withoutCache } = acme.usd_per_1m;
    const refused = await setup!.t.admin("PUT", "/admin/catalog/models/acme-2", { ...acme, aliases: [], usd_per_1m: withoutCache });
    expect(refused.status).toBe(400);
    expect(refused.body.error.message).toContain("model acme-2 reports cache_read_token but has no price for it");
    expect((await call("models", "acme-2")).status).toBe(404);
  });

  test("an alias added resolves; a retired model answers 410 naming its successor on every route, in each wire's shape", async () => {
    const { t } = setup!;
    expect((await t.admin("POST", "/admin/catalog/models/acme-1/aliases", { alias: "acme", by: "operator-b" })).status).toBe(200);
    expect((await call("models", "acme")).body.id).toBe("acme-1");
    expect((await t.admin("POST", "/admin/catalog/models/acme-1/retire", { successor: "gpt-4o", by: "operator-b" })).status).toBe(200);
    for (const route of ROUTES) {
      const reply = await call(route, "acme-latest");
      expect(reply.status, route).toBe(410);
      const message: string = reply.body.error.message;
      expect(message, route).toContain("`gpt-4o`");
      if (route === "messages") expect(reply.body).toMatchObject({ type: "error", error: { type: "not_found_error" } });
      else expect(reply.body.error.code, route).toBe("model_retired");
    }
    const listed = await fetch(`${t.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.json() as any);
    expect(listed.data.some((m: { id: string }) => m.id === "acme-1")).toBe(false);
  });

  test("an unknown model answers 404 naming the closest catalog ids, on every route", async () => {
    for (const route of ROUTES) {
      const reply = await call(route, "claude-sonet-5");
      expect(reply.status, route).toBe(404);
      expect(reply.body.error.message, route).toContain("The closest models are `claude-sonnet-5`");
    }
  });
});

describe("token-priced image models", () => {
  // An account of their own, for the reason the catalog change above gives.
  let own = { key: "", accountId: "" };
  beforeAll(async () => {
    own = await setup!.t.fundedKey(200_000);
  });

  async function image(prompt: string): Promise<{ status: number; record: any }> {
    const response = await fetch(`${setup!.t.url}/v1/images/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${own.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-image-1", prompt, size: "1024x1024", quality: "low", response_format: "b64_json" }),
    });
    const requestId = response.headers.get("x-request-id")!;
    await response.arrayBuffer();
    let record: any;
    await setup!.t.gw.deps.writer.flush();
    await until(async () => {
      const account = await setup!.t.admin("GET", `/admin/accounts/${own.accountId}`);
      record = account.body.recent_usage.find((u: { request_id: string }) => u.request_id === requestId);
      return record !== undefined;
    }, USAGE_WAIT_MS_MAX);
    return { status: response.status, record };
  }

  test("gpt-image-1 is billed from the reply's usage: text input tokens and image output tokens at their own prices", async () => {
    const short = await image("A red kite over a green hill.");
    const long = await image("A red kite over a green hill, with every blade of grass drawn. ".repeat(470));
    expect([short.status, long.status]).toEqual([200, 200]);
    // $5 text input and $40 image output per 1M tokens × 90,000; a low-quality square image is 272 tokens.
    for (const { record } of [short, long]) {
      expect(record).toMatchObject({ output_units: "272", prices_toman_per_1m: { input: "450000", output: "3600000" } });
      expect(BigInt(record.billed_micro_toman)).toBe(BigInt(record.input_units) * 450_000n + 272n * 3_600_000n);
    }
    // The long prompt's text is billed: it costs more than the short one.
    expect(Number(long.record.input_units)).toBeGreaterThan(100 * Number(short.record.input_units));
  });
});

describe("importing a catalog file", () => {
  // A model no stored page prices (Codex's default): the prices are this test's own, made up.
  const sol = {
    id: "gpt-6.2-sol",
    operation: "chat",
    vendor: "openai",
    aliases: [],
    context_window: 400_000,
    output_max: 128_000,
    listing: 950,
    capabilities: { streaming: true, tools: true, reasoning: "hidden", reasoning_effort: true, images_in: true, cache: "read" },
    usd_per_1m: { input_token: "1.25", output_token: "10", cache_read_token: "0.125" },
    source: { pages: [], note: "made-up test prices" },
  };
  const shipped = () => (JSON.parse(readFileSync(CATALOG_FILE_PATH, "utf8")) as { models: { id: string; aliases: string[] }[] }).models;
  const importing = (models: object[], extra: object = {}) =>
    setup!.t.admin("POST", "/admin/catalog/import", { models, by: "operator-i", ...extra });

  test("a file adding a model: the diff first (nothing applied), then applied as one version, then served; the same file again applies nothing", async () => {
    const { t } = setup!;
    const before = await call("chat", sol.id);
    expect(before.status).toBe(404);
    expect(before.body.error.message).toContain("`gw catalog import` (docs/catalog.md)");

    const dry = await importing([...shipped(), sol]);
    expect(dry.status).toBe(200);
    expect(dry.body).toMatchObject({ applied: false, price_version: null, changes: 1 });
    expect(dry.body.diff.added).toEqual([sol.id]);
    expect(dry.body.diff.prices).toContainEqual({ model: sol.id, unit: "output_token", old: null, new: "10" });
    expect(dry.body.diff).toMatchObject({ limits: [], aliases: [], retired: [], changed: [] });
    expect((await call("chat", sol.id)).status).toBe(404);

    const applied = await importing([...shipped(), sol], { apply: true });
    expect(applied.body).toMatchObject({ applied: true, changes: 1 });
    expect(typeof applied.body.price_version).toBe("number");
    expect((await call("chat", sol.id)).status).toBe(200);
    const audit = await t.admin("GET", `/admin/catalog/changes?model=${sol.id}`);
    expect(audit.body.data[0]).toMatchObject({
      action: "add",
      by: "admin_token",
      declared_by: "operator-i",
      price_version: applied.body.price_version,
    });

    const again = await importing([...shipped(), sol], { apply: true });
    expect(again.body).toMatchObject({ applied: false, price_version: null, changes: 0 });
    expect(again.body.diff).toMatchObject({ added: [], prices: [], limits: [], aliases: [], retired: [], changed: [] });
  });

  test("several models changed in one import are one price version, a row each in the audit; a model left out is only listed as absent", async () => {
    const { t } = setup!;
    const models = shipped().filter((m) => m.id !== "gpt-4o-mini");
    const gpt4o = models.find((m) => m.id === "gpt-4o")!;
    const changed = [
      ...models.map((m) => (m.id === "gpt-4o" ? { ...gpt4o, aliases: [...gpt4o.aliases, "gpt-4o-imported"] } : m)),
      { ...sol, usd_per_1m: { ...sol.usd_per_1m, input_token: "2" }, context_window: 300_000 },
    ];
    const dry = await importing(changed);
    expect(dry.body.diff.prices).toEqual([{ model: sol.id, unit: "input_token", old: "1.25", new: "2" }]);
    expect(dry.body.diff.limits).toEqual([{ model: sol.id, field: "context_window", old: 400_000, new: 300_000 }]);
    expect(dry.body.diff.aliases).toEqual([{ model: "gpt-4o", added: ["gpt-4o-imported"], removed: [] }]);
    expect(dry.body.diff.absent).toContain("gpt-4o-mini");

    const applied = await importing(changed, { apply: true });
    expect(applied.body).toMatchObject({ applied: true, changes: 2 });
    const version = applied.body.price_version;
    const audit = (await t.admin("GET", "/admin/catalog/changes")).body.data.filter((c: any) => c.price_version === version);
    expect(audit.map((c: any) => [c.model, c.action]).sort()).toEqual([
      ["gpt-4o", "alias"],
      [sol.id, "change"],
    ]);
    // The audit trail holds a row per model, with its entry before, and no second row for the import itself.
    const rows = (await t.admin("GET", "/admin/audit?action=catalog.import")).body.data;
    const ofImport = rows.filter((r: any) => r.after?.price_version === version);
    expect(ofImport.map((r: any) => r.target).sort()).toEqual(["gpt-4o", sol.id].sort());
    expect(ofImport.find((r: any) => r.target === "gpt-4o").before.aliases).not.toContain("gpt-4o-imported");
    expect(rows.filter((r: any) => r.after?.object === "catalog_import" && r.after.applied)).toEqual([]);
    expect((await call("models", "gpt-4o-imported")).body.id).toBe("gpt-4o");
    expect((await call("chat", "gpt-4o-mini")).status).toBe(200);
  });

  test("a file the catalog refuses, or a URL not fetched, is a 400 naming why; a loopback URL is fetched", async () => {
    const { cache_read_token: _, ...unpriced } = sol.usd_per_1m;
    const refused = await importing([{ ...sol, usd_per_1m: unpriced }]);
    expect(refused.status).toBe(400);
    expect(refused.body.error.message).toContain("model gpt-6.2-sol reports cache_read_token but has no price for it");
    const insecure = await setup!.t.admin("POST", "/admin/catalog/import", { url: "http://catalog.example/models.json" });
    expect(insecure.status).toBe(400);
    expect(insecure.body.error.message).toContain("https");
    const both = await setup!.t.admin("POST", "/admin/catalog/import", { url: "https://catalog.example/m.json", models: [sol] });
    expect(both.status).toBe(400);

    const server = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch: (request) =>
        new URL(request.url).pathname === "/moved"
          ? Response.redirect("https://catalog.example/models.json", 302)
          : Response.json({ models: [...shipped(), sol] }),
    });
    try {
      const fetched = await setup!.t.admin("POST", "/admin/catalog/import", { url: `http://127.0.0.1:${server.port}/models.json` });
      expect(fetched.status).toBe(200);
      expect(fetched.body).toMatchObject({ applied: false });
      expect(fetched.body.diff.aliases).toEqual([{ model: "gpt-4o", added: [], removed: ["gpt-4o-imported"] }]);
      const moved = await setup!.t.admin("POST", "/admin/catalog/import", { url: `http://127.0.0.1:${server.port}/moved` });
      expect(moved.status).toBe(400);
      expect(moved.body.error.message).toContain("redirect");
    } finally {
      server.stop(true);
    }
  });
});
