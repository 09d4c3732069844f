/**
 * One backend schema behind both doors into a pool: the pools file (`DARVAZE_CONFIG`, read at
 * start) and `PUT /admin/pools/{model}`. The same backend is refused by both, naming the same
 * field; more than BACKENDS_PER_POOL_MAX backends is refused by both, never cut; a key is named
 * by its environment variable through either door, and the file's deprecated `${NAME}` form
 * reaches the upstream with the same key and a warning in the log.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { BACKENDS_PER_POOL_MAX, ConfigError, loadConfig } from "../src/config.ts";
import { createLogger } from "../src/log.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { SETUP_MS_MAX, startTestGateway, testEnv, type TestGateway } from "./helpers.ts";

/** Set through the pools file (deprecated key form) at start. */
const FILE_MODEL = "llama-3.3-70b-instruct";
/** Set through the admin API during the tests. */
const ADMIN_MODEL = "phi-4";
const KEY_ENV = "BACKENDS_TEST_UPSTREAM_KEY";
const UPSTREAM_KEY = "sk-backends-upstream";
/** backendSchema's default concurrency_max, which the pools file writes out. */
const POOL_BACKEND_CONCURRENCY_DEFAULT = 256;
const HELLO = [{ role: "user" as const, content: "Hello, world!" }];

const dir = mkdtempSync(join(tmpdir(), "darvaze-backends-"));
let fileCount = 0;
function poolsFile(pools: Record<string, unknown>): string {
  const path = join(dir, `pools-${++fileCount}.json`);
  writeFileSync(path, JSON.stringify({ pools }));
  return path;
}

/** What the pools file door says about one pool of these backends: each problem as [field, message]. */
function fileDoor(backends: unknown[]): [string, string][] {
  const path = poolsFile({ [ADMIN_MODEL]: { backends } });
  try {
    loadConfig(testEnv({ DARVAZE_SIMULATED_UPSTREAMS: undefined, DARVAZE_CONFIG: path }));
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    return error.problems.map((problem) => {
      const rest = problem.slice(`DARVAZE_CONFIG ${path}: pools.${ADMIN_MODEL}.`.length);
      const colon = rest.indexOf(": ");
      return [rest.slice(0, colon), rest.slice(colon + 2)];
    });
  }
  return [];
}

/** What the admin door says about the same backends: [status, param, message]. */
async function adminDoor(backends: unknown[]): Promise<[number, string | null, string]> {
  const reply = await t.admin("PUT", `/admin/pools/${ADMIN_MODEL}`, { backends });
  return [reply.status, reply.body?.error?.param ?? null, reply.body?.error?.message ?? ""];
}

let sim: Simulator;
let t: TestGateway;
let client: OpenAI;
const lines: string[] = [];

const backend = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  kind: "openai",
  url: `${sim.url}/v1`,
  region: "in-country",
  ...extra,
});

beforeAll(async () => {
  sim = await startSimulator({ apiKey: UPSTREAM_KEY, outputTokens: 3 });
  const file = poolsFile({ [FILE_MODEL]: { backends: [backend("from-file", { api_key: `\${${KEY_ENV}}` })] } });
  t = await startTestGateway({ DARVAZE_CONFIG: file, [KEY_ENV]: UPSTREAM_KEY }, { log: createLogger("debug", (line) => lines.push(line)) });
  const { key } = await t.fundedKey(100_000);
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sim?.stop();
}, SETUP_MS_MAX);

afterEach(() => {
  delete process.env[KEY_ENV];
});

describe("the same backend through both doors", () => {
  /** Backends each door must refuse, and the field a refusal names (under `backends.0`). */
  const REFUSED: [string, Record<string, unknown>, string][] = [
    ["an unknown field", { timeout_ms: 5_000 }, "timeout_ms"],
    ["a URL that is not http(s)", { url: "file:///etc/passwd" }, "url"],
    ["a URL without a scheme", { url: "10.0.0.5:8000/v1" }, "url"],
    ["a weight of zero", { weight: 0 }, "weight"],
    ["a weight above its bound", { weight: 1_001 }, "weight"],
    ["a concurrency_max above its bound", { concurrency_max: 100_001 }, "concurrency_max"],
    ["a fractional concurrency_max", { concurrency_max: 1.5 }, "concurrency_max"],
    ["a name with a space", { name: "gpu 1" }, "name"],
    ["an unknown region", { region: "moon" }, "region"],
    ["an upstream_model too long", { upstream_model: "m".repeat(257) }, "upstream_model"],
    ["a variable name that is not one", { api_key_env: "OPENAI-KEY" }, "api_key_env"],
    ["a key written out", { api_key: "sk-live-123" }, "api_key"],
  ];

  for (const [what, change, field] of REFUSED) {
    test(`${what} is refused by both, naming ${field}`, async () => {
      const backends = [{ ...backend("a"), ...change }];
      const [status, param, message] = await adminDoor(backends);
      expect(status).toBe(400);
      expect(param).toBe(`backends.0.${field}`);
      const fromFile = fileDoor(backends);
      expect(fromFile.map(([at]) => at)).toEqual([`backends.0.${field}`]);
      // The file states the schema's message; the admin API wraps the same one (an unknown field
      // is named, not described, by both).
      if (field !== "timeout_ms") expect(message).toBe(`Invalid value for 'backends.0.${field}': ${fromFile[0]![1]}`);
    });
  }

  test("duplicate names are refused by both", async () => {
    const backends = [backend("a"), backend("a")];
    const [status, param, message] = await adminDoor(backends);
    expect([status, param]).toEqual([400, "backends"]);
    expect(fileDoor(backends)).toEqual([["backends", "backend names must be unique within a pool"]]);
    expect(message).toBe("Invalid value for 'backends': backend names must be unique within a pool");
  });

  test(`${BACKENDS_PER_POOL_MAX + 1} backends are refused by both, naming the limit; ${BACKENDS_PER_POOL_MAX} are taken whole`, async () => {
    const many = Array.from({ length: BACKENDS_PER_POOL_MAX + 1 }, (_, i) => backend(`b${i}`));
    const limit = `at most ${BACKENDS_PER_POOL_MAX} backends in a pool (BACKENDS_PER_POOL_MAX)`;
    expect(await adminDoor(many)).toEqual([400, "backends", `Invalid value for 'backends': ${limit}`]);
    expect(fileDoor(many)).toEqual([["backends", limit]]);

    const full = many.slice(0, BACKENDS_PER_POOL_MAX);
    expect(fileDoor(full)).toEqual([]);
    const [status] = await adminDoor(full);
    expect(status).toBe(200);
    expect(t.gw.deps.pools.get(ADMIN_MODEL)!.backends).toHaveLength(BACKENDS_PER_POOL_MAX);
  });
});

describe("a key named both ways", () => {
  test('the file\'s deprecated "api_key": "${NAME}" reaches the upstream with the key, and the log says what to write', async () => {
    const reply = await client.chat.completions.create({ model: FILE_MODEL, messages: HELLO, max_tokens: 3 });
    expect(reply.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(t.gw.deps.pools.get(FILE_MODEL)!.backends[0]!.config.api_key).toBe(UPSTREAM_KEY);
    const warnings = lines
      .map((line) => JSON.parse(line) as Record<string, string>)
      .filter((line) => line.event === "pools_file_deprecated");
    expect(warnings.map((w) => [w.level, w.note!.slice(w.note!.indexOf(": ") + 2)])).toEqual([
      ["warn", `pools.${FILE_MODEL}.backends.0: "api_key": "\${${KEY_ENV}}" is deprecated; write "api_key_env": "${KEY_ENV}"`],
    ]);
    expect(lines.join("")).not.toContain(UPSTREAM_KEY);
  });

  test("api_key_env through the admin API reaches the upstream with the same key; the ${NAME} form is the file's only", async () => {
    const deprecated = await adminDoor([backend("a", { api_key: `\${${KEY_ENV}}` })]);
    expect(deprecated.slice(0, 2)).toEqual([400, "backends.0.api_key"]);
    const unset = await adminDoor([backend("a", { api_key_env: KEY_ENV })]);
    expect(unset[0]).toBe(400);
    expect(unset[2]).toContain(`environment variable ${KEY_ENV} is not set`);

    process.env[KEY_ENV] = UPSTREAM_KEY;
    expect((await adminDoor([backend("a", { api_key_env: KEY_ENV })]))[0]).toBe(200);
    const before = sim.log.totals.requests;
    const reply = await client.chat.completions.create({ model: ADMIN_MODEL, messages: HELLO, max_tokens: 3 });
    expect(reply.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(sim.log.totals.requests).toBe(before + 1);
    expect(t.gw.deps.pools.get(ADMIN_MODEL)!.backends[0]!.config.api_key).toBe(
      t.gw.deps.pools.get(FILE_MODEL)!.backends[0]!.config.api_key,
    );
  });

  test("GET /admin/pools shows each pool as the pools file writes it (the key's variable, never the key), and a PUT of it unchanged is taken", async () => {
    const listed = await t.admin("GET", "/admin/pools");
    expect(JSON.stringify(listed.body)).not.toContain(UPSTREAM_KEY);
    const pool = listed.body.data.find((p: { model: string }) => p.model === FILE_MODEL);
    expect(pool.spec).toEqual({
      backends: [{ ...backend("from-file"), api_key_env: KEY_ENV, weight: 1, concurrency_max: POOL_BACKEND_CONCURRENCY_DEFAULT }],
    });
    process.env[KEY_ENV] = UPSTREAM_KEY;
    const put = await t.admin("PUT", `/admin/pools/${FILE_MODEL}`, pool.spec);
    expect(put.status).toBe(200);
    const again = (await t.admin("GET", "/admin/pools")).body.data.find((p: { model: string }) => p.model === FILE_MODEL);
    expect(again.spec).toEqual(pool.spec);
    expect(t.gw.deps.pools.get(FILE_MODEL)!.backends[0]!.config.api_key).toBe(UPSTREAM_KEY);
  });
});
