/**
 * The scheduled catalog pull (CATALOG_IMPORT_URL): the gateway fetches the file, records its diff
 * against the catalog for GET /admin/catalog/import, and applies nothing by itself.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { CATALOG_FILE_PATH } from "../src/catalog/file.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { untilValue } from "./until.ts";

// A model no stored page prices: this test's own made-up prices.
const added = {
  id: "acme-pulled-1",
  operation: "chat",
  vendor: "acme",
  context_window: 64_000,
  listing: 970,
  capabilities: { streaming: true, tools: false, reasoning: "none", images_in: false },
  usd_per_1m: { input_token: "1", output_token: "2" },
  source: { pages: [], note: "made-up test prices" },
};

let source: ReturnType<typeof Bun.serve>;
let t: TestGateway;

beforeAll(async () => {
  const shipped = JSON.parse(readFileSync(CATALOG_FILE_PATH, "utf8")) as { models: unknown[] };
  source = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => Response.json({ models: [...shipped.models, added] }) });
  t = await startTestGateway({ CATALOG_IMPORT_URL: `http://127.0.0.1:${source.port}/models.json`, CATALOG_IMPORT_INTERVAL_MS: "60000" });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  source?.stop(true);
}, SETUP_MS_MAX);

test("the pull's diff is shown with its time and status, and nothing is applied", async () => {
  const pull = await untilValue(async () => (await t.admin("GET", "/admin/catalog/import")).body, {
    accept: (body: any) => body.lastSuccessAt !== null || body.lastError !== null,
  });
  expect(pull).toMatchObject({
    object: "catalog_pull",
    source: `http://127.0.0.1:${source.port}/models.json`,
    lastError: null,
    changes: 1,
  });
  expect(pull.diff.added).toEqual(["acme-pulled-1"]);
  expect(typeof pull.lastAttemptAt).toBe("string");
  const { key } = await t.fundedKey(1_000);
  const reply = await fetch(`${t.url}/v1/models/acme-pulled-1`, { headers: { authorization: `Bearer ${key}` } });
  expect(reply.status).toBe(404);
  expect((await t.admin("GET", "/admin/catalog/changes?model=acme-pulled-1")).body.data).toEqual([]);
});

test(
  "a gateway without CATALOG_IMPORT_URL shows no pull",
  async () => {
    const plain = await startTestGateway();
    try {
      expect((await plain.admin("GET", "/admin/catalog/import")).body).toEqual({ object: "catalog_pull", source: null });
    } finally {
      await plain.stop();
    }
  },
  SETUP_MS_MAX,
);
