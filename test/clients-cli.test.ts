/**
 * The coding agents users install, run as users run them against a gateway on the simulator:
 * Claude Code (`claude -p`, the Messages wire), Codex (`codex exec`, the Responses wire) and the
 * Gemini CLI (`gemini -p`, the Gemini wire), at the
 * versions pinned in package.json's devDependencies (raising one there reruns this suite on it).
 * Each run gets a fresh HOME (no user config leaks in) and a fresh funded key, so that the wallet's
 * move is that run's alone: it must equal the sum the usage records billed, and each record must
 * hold the simulator's own token counts × the model's prices.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import { CATALOG_FILE_PATH } from "../src/catalog/file.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { untilValue } from "./until.ts";

const BIN = join(import.meta.dir, "..", "node_modules", ".bin");
/** A CLI run's bound: a turn on the simulator takes seconds; a hung CLI fails the test, not the suite. */
const RUN_MS_MAX = 120_000;
const UPSTREAM_KEY = "upstream-secret";
/** Enough for every run of this suite at the prices below. */
const WALLET_TOMAN = 5_000_000;

/** Catalog models the CLIs ask for, each on the simulator route of its vendor. */
const CLAUDE_MODELS = ["claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-5-5"];
const OTHER_MODELS = ["gpt-4o-mini", "gpt-6.1-sol"];
/**
 * Catalog models the Gemini CLI asks for: those named, and those it sends with none named
 * (0.61.0: gemini-3.1-pro-preview answers and gemini-3.5-flash-lite routes; gemini-3.8-flash when
 * the router picks Flash, gemini-3-flash-preview for its checks).
 */
const GEMINI_MODELS = [
  "gemini-2.5-pro",
  "gemini-2.5-flash",
  "gemini-2.0-flash",
  "gemini-3.1-pro-preview",
  "gemini-3.5-flash-lite",
  "gemini-3.8-flash",
  "gemini-3-flash-preview",
];

let sim: Simulator;
let t: TestGateway;

/** A backend on the simulator's route of a vendor, serving `model`. */
const simBackend = (kind: "openai" | "anthropic" | "gemini", model: string) => ({
  name: `${kind}-sim`,
  kind,
  url: kind === "openai" ? `${sim.url}/v1` : sim.url,
  api_key_env: "DARVAZE_TEST_UPSTREAM_KEY",
  upstream_model: model,
  region: "abroad",
});

beforeAll(async () => {
  sim = await startSimulator({ apiKey: UPSTREAM_KEY, seed: 7, outputTokens: 12 });
  const path = join(mkdtempSync(join(tmpdir(), "darvaze-pools-")), "pools.json");
  const backend = simBackend;
  const pools = Object.fromEntries([
    ...CLAUDE_MODELS.map((m) => [m, { backends: [backend("anthropic", m)] }]),
    ...OTHER_MODELS.map((m) => [m, { backends: [backend("openai", m)] }]),
    ...GEMINI_MODELS.map((m) => [m, { backends: [backend("gemini", m)] }]),
  ]);
  writeFileSync(path, JSON.stringify({ pools }));
  t = await startTestGateway({ DARVAZE_CONFIG: path, DARVAZE_TEST_UPSTREAM_KEY: UPSTREAM_KEY });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sim?.stop();
}, SETUP_MS_MAX);

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a CLI from node_modules/.bin with only `env` (and PATH) set, in a fresh HOME. */
async function runCli(bin: string, args: string[], env: Record<string, string>, home: string): Promise<Run> {
  const child = Bun.spawn([join(BIN, bin), ...args], {
    cwd: home,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: home, ...env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    timeout: RUN_MS_MAX,
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr };
}

const freshHome = () => mkdtempSync(join(tmpdir(), "darvaze-client-home-"));

async function balanceMicro(key: string): Promise<bigint> {
  const response = await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${key}` } });
  return BigInt(((await response.json()) as { balance_micro_toman: string }).balance_micro_toman);
}

interface Billed {
  requestId: string;
  model: string;
  input: bigint;
  output: bigint;
  inputPrice: bigint;
  outputPrice: bigint;
  billed: bigint;
  status: number;
}

/** Where a run starts: the wallet's balance, and how many requests the simulator had served. */
interface RunStart {
  balanceMicro: bigint;
  served: number;
}

async function runStart(key: string): Promise<RunStart> {
  return { balanceMicro: await balanceMicro(key), served: sim.log.totals.requests };
}

/** Usage records are written after the reply ends (a stream settles at its end), so a CLI may exit before. */
const RECORDS_WAIT_MS_MAX = 30_000;

/**
 * The account's usage records, once every upstream call of the run (the simulator's entries since
 * `start`) has its record written.
 */
async function recordsOf(accountId: string, start: RunStart): Promise<Billed[]> {
  const calls = sim.log.entries().slice(start.served);
  const awaited = new Set(calls.map((entry) => entry.requestId ?? `(no request id, seq ${entry.seq})`));
  expect(awaited.size).toBeGreaterThan(0);
  const rows = await untilValue(
    async () => {
      await t.gw.deps.writer.flush();
      const rows = await t.gw.deps.db.rows<Record<string, unknown>>(
        sql`SELECT request_id, model, input_units, output_units, input_price_per_1m, output_price_per_1m, billed_micro, status
            FROM usage_records WHERE account_id = ${accountId} ORDER BY id`,
      );
      const recorded = new Set(rows.map((r) => String(r.request_id)));
      return [...awaited].every((id) => recorded.has(id)) ? rows : undefined;
    },
    { what: `the usage records of requests ${[...awaited].join(", ")}`, msMax: RECORDS_WAIT_MS_MAX, pollMs: 50 },
  );
  const audit = await t.admin("GET", "/admin/ledger/audit");
  expect(audit.body.ok).toBe(true);
  return rows.map((r) => ({
    requestId: String(r.request_id),
    model: String(r.model),
    input: BigInt(String(r.input_units)),
    output: BigInt(String(r.output_units)),
    inputPrice: BigInt(String(r.input_price_per_1m)),
    outputPrice: BigInt(String(r.output_price_per_1m)),
    billed: BigInt(String(r.billed_micro)),
    status: Number(r.status),
  }));
}

/**
 * The run's cost: the wallet moved by exactly what its usage records billed, and each record is
 * the simulator's logged tokens × the record's prices (the catalog's). Returns the records.
 */
async function expectCostAsRecorded(account: { accountId: string; key: string }, before: RunStart): Promise<Billed[]> {
  const records = await recordsOf(account.accountId, before);
  expect(records.length).toBeGreaterThan(0);
  for (const record of records) {
    const [entry] = sim.log.byRequestId(record.requestId);
    expect(entry, record.requestId).toBeDefined();
    expect([record.input, record.output]).toEqual([BigInt(entry!.promptTokens), BigInt(entry!.completionTokens)]);
    expect(record.billed).toBe(record.input * record.inputPrice + record.output * record.outputPrice);
  }
  const spent = before.balanceMicro - (await balanceMicro(account.key));
  expect(spent).toBe(records.reduce((sum, r) => sum + r.billed, 0n));
  return records;
}

/** `claude -p <prompt>` against the gateway, as docs/wires.md tells users to set it up. */
async function claude(key: string, prompt: string, extra: string[] = []): Promise<Run> {
  const env = { ANTHROPIC_BASE_URL: t.url, ANTHROPIC_API_KEY: key };
  return runCli("claude", ["-p", prompt, ...extra], env, freshHome());
}

/** `claude -p "say hi"` with `flags` on a fresh key holding `toman`: it answers, served by `model`, at the cost recorded. */
async function expectClaudeTurn(flags: string[], model: string, toman = WALLET_TOMAN): Promise<void> {
  const account = await t.fundedKey(toman);
  const before = await runStart(account.key);
  const run = await claude(account.key, "say hi", flags);
  expect(run, run.stderr).toMatchObject({ code: 0 });
  expect(run.stdout.trim().length).toBeGreaterThan(0);
  const records = await expectCostAsRecorded(account, before);
  expect(records.map((r) => [r.model, r.status])).toContainEqual([model, 200]);
}

describe("Claude Code", () => {
  test.each([
    ["no model flag", [], "claude-opus-5-5"],
    ["--model sonnet", ["--model", "sonnet"], "claude-sonnet-5-5"],
    ["--model opus", ["--model", "opus"], "claude-opus-5-5"],
    // Its window (100,000 tokens) is below the 128,000 output tokens Claude Code asks: the limit sent is lowered to the room left.
    ["--model haiku", ["--model", "haiku"], "claude-haiku-5-5"],
    ["--model gpt-4o-mini (not a Claude model)", ["--model", "gpt-4o-mini"], "gpt-4o-mini"],
  ])("%s: answers, and the run costs what the gateway recorded", (_name, flags, model) => expectClaudeTurn(flags, model), RUN_MS_MAX);
});

/** How long a user waits for Claude Code to report a wrong key: one request, no retries. */
const WRONG_KEY_MS_MAX = 10_000;

/** Request bodies a proxy keeps, at most: a CLI run sends a handful. */
const PROXY_BODIES_MAX = 64;

/** A pass-through in front of the gateway that counts the requests it forwards, by method and path, and keeps their JSON bodies. */
async function countingProxy(): Promise<{
  url: string;
  asked: (method: string, path: string) => number;
  bodies: Record<string, any>[];
  stop: () => void;
}> {
  const counts = new Map<string, number>();
  const bodies: Record<string, any>[] = [];
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(request) {
      const url = new URL(request.url);
      const key = `${request.method} ${url.pathname}`;
      counts.set(key, (counts.get(key) ?? 0) + 1);
      const body = request.method === "GET" || request.method === "HEAD" ? undefined : await request.arrayBuffer();
      if (body && bodies.length < PROXY_BODIES_MAX) bodies.push(JSON.parse(new TextDecoder().decode(body)));
      const headers = new Headers(request.headers);
      headers.delete("host");
      return fetch(t.url + url.pathname + url.search, { method: request.method, headers, body });
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    asked: (method, path) => counts.get(`${method} ${path}`) ?? 0,
    bodies,
    stop: () => server.stop(true),
  };
}

describe("Claude Code, more", () => {
  test(
    "a tool call: the tool's result goes back and the turn ends in text; every request billed as recorded",
    async () => {
      const account = await t.fundedKey(WALLET_TOMAN);
      const before = await runStart(account.key);
      // The simulator calls a tool the last user message names.
      const run = await claude(account.key, "Use the Read tool on the file notes.txt", ["--model", "sonnet"]);
      expect(run, run.stderr).toMatchObject({ code: 0 });
      const records = await expectCostAsRecorded(account, before);
      expect(records.length).toBeGreaterThanOrEqual(2);
    },
    RUN_MS_MAX,
  );

  test(
    "a wrong key: an authentication message within 10 s, after one request (no retries)",
    async () => {
      const proxy = await countingProxy();
      try {
        const env = { ANTHROPIC_BASE_URL: proxy.url, ANTHROPIC_API_KEY: "sk-dvz-wrong0000000000000000000000000000" };
        const startedMs = performance.now();
        const run = await runCli("claude", ["-p", "say hi", "--model", "sonnet"], env, freshHome());
        // The bound for the user (retries with backoff took minutes), not a speed figure.
        expect(performance.now() - startedMs).toBeLessThan(WRONG_KEY_MS_MAX);
        expect(run.code).not.toBe(0);
        expect(`${run.stdout}${run.stderr}`).toMatch(/auth|api key|401/i);
        expect(proxy.asked("POST", "/v1/messages")).toBe(1);
      } finally {
        proxy.stop();
      }
    },
    RUN_MS_MAX,
  );
});

/** The demo's suggested top-up: it covers a Claude Code turn's real cost, not the output limit Claude Code asks for. */
const SMALL_WALLET_TOMAN = 50_000;

// The limit sent upstream is lowered to what the hold covers (not below 4,096 tokens) rather than refused.
test("a wallet that covers a turn's real cost but not the requested output limit answers that turn", () =>
  expectClaudeTurn(["--model", "sonnet"], "claude-sonnet-5-5", SMALL_WALLET_TOMAN));

/** A HOME whose Codex config names only the gateway as the provider: no model, nothing else. */
function codexHome(baseUrl: string): string {
  const home = freshHome();
  mkdirSync(join(home, ".codex"));
  writeFileSync(
    join(home, ".codex", "config.toml"),
    `model_provider = "darvaze"

[model_providers.darvaze]
name = "Darvaze"
base_url = "${baseUrl}/v1"
env_key = "DARVAZE_API_KEY"
wire_api = "responses"
`,
  );
  return home;
}

async function codex(key: string, prompt: string, baseUrl = t.url, flags: string[] = []): Promise<Run> {
  return runCli("codex", ["exec", "--skip-git-repo-check", ...flags, prompt], { DARVAZE_API_KEY: key }, codexHome(baseUrl));
}

/** Codex 0.171.0's default model: no stored page prices it, so the shipped catalog does not have it. */
const CODEX_DEFAULT_MODEL = "gpt-6.2-sol";

describe("Codex", () => {
  test(
    "only a provider block, no model: its default model is not in the catalog, and the 404 it reports names the import path",
    async () => {
      const run = await codex((await t.fundedKey(WALLET_TOMAN)).key, "say hi");
      expect(run.code).not.toBe(0);
      expect(run.stderr).toContain(`The model \`${CODEX_DEFAULT_MODEL}\` is not in this gateway's catalog`);
      expect(run.stderr).toContain("`gw catalog import` (docs/catalog.md)");
    },
    RUN_MS_MAX,
  );

  test(
    "--model gpt-6.1-sol: answers, and the run costs what the gateway recorded",
    async () => {
      const account = await t.fundedKey(WALLET_TOMAN);
      const before = await runStart(account.key);
      const run = await codex(account.key, "say hi", t.url, ["--model", "gpt-6.1-sol"]);
      expect(run, run.stderr).toMatchObject({ code: 0 });
      const records = await expectCostAsRecorded(account, before);
      expect(records.map((r) => [r.model, r.status])).toContainEqual(["gpt-6.1-sol", 200]);
    },
    RUN_MS_MAX,
  );

  test(
    "an operator imports a catalog file adding the default model (this test's made-up prices): Codex with no model then answers, at the cost recorded",
    async () => {
      const shipped = JSON.parse(readFileSync(CATALOG_FILE_PATH, "utf8")) as { models: unknown[] };
      const added = {
        id: CODEX_DEFAULT_MODEL,
        operation: "chat",
        vendor: "openai",
        context_window: 400_000,
        output_max: 128_000,
        listing: 950,
        capabilities: { streaming: true, tools: true, reasoning: "hidden", reasoning_effort: true, images_in: true, cache: "read" },
        usd_per_1m: { input_token: "1.25", output_token: "10", cache_read_token: "0.125" },
        source: { pages: [], note: "made-up test prices" },
      };
      const imported = await t.admin("POST", "/admin/catalog/import", { models: [...shipped.models, added], apply: true, by: "test" });
      expect(imported.body).toMatchObject({ applied: true, changes: 1, diff: { added: [CODEX_DEFAULT_MODEL] } });
      // The admin door checks the backend's key variable on this (in-process) node.
      process.env.DARVAZE_TEST_UPSTREAM_KEY = UPSTREAM_KEY;
      const pool = await t.admin("PUT", `/admin/pools/${CODEX_DEFAULT_MODEL}`, { backends: [simBackend("openai", CODEX_DEFAULT_MODEL)] });
      expect(pool.status, JSON.stringify(pool.body)).toBe(200);

      const account = await t.fundedKey(WALLET_TOMAN);
      const before = await runStart(account.key);
      const run = await codex(account.key, "say hi");
      expect(run, run.stderr).toMatchObject({ code: 0 });
      const records = await expectCostAsRecorded(account, before);
      expect(records.map((r) => [r.model, r.status])).toContainEqual([CODEX_DEFAULT_MODEL, 200]);
    },
    RUN_MS_MAX,
  );

  test(
    "a call of a namespaced tool: Codex runs it, sends its output back, and the turn ends in text",
    async () => {
      const account = await t.fundedKey(WALLET_TOMAN);
      const before = await runStart(account.key);
      const proxy = await countingProxy();
      try {
        // The simulator calls the tool the prompt names, by the flat name the backend sees.
        const run = await codex(account.key, "call clock__sleep", proxy.url, ["--model", "gpt-6.1-sol"]);
        expect(run, run.stderr).toMatchObject({ code: 0 });
        const records = await expectCostAsRecorded(account, before);
        expect(records.length).toBeGreaterThanOrEqual(2);
        // Codex took the call as its own tool's (name and namespace restored) and sent its output back.
        const followUp = proxy.bodies[1]!.input as Record<string, unknown>[];
        const call = followUp.find((item) => item.type === "function_call");
        expect(call).toMatchObject({ name: "sleep", namespace: "clock" });
        expect(followUp).toContainEqual(expect.objectContaining({ type: "function_call_output", call_id: call!.call_id }));
      } finally {
        proxy.stop();
      }
    },
    RUN_MS_MAX,
  );
});

/**
 * `gemini -p <prompt>` against the gateway, as docs/wires.md tells users to set it up: the key and
 * base URL in the environment, the API-key sign-in chosen in settings.json (the CLI asks for a
 * sign-in method otherwise), and the folder trusted (a headless run refuses an untrusted one).
 */
async function gemini(key: string, prompt: string, extra: string[] = [], extraEnv: Record<string, string> = {}): Promise<Run> {
  const home = freshHome();
  mkdirSync(join(home, ".gemini"));
  writeFileSync(join(home, ".gemini", "settings.json"), JSON.stringify({ security: { auth: { selectedType: "gemini-api-key" } } }));
  const env = { GOOGLE_GEMINI_BASE_URL: t.url, GEMINI_API_KEY: key, GEMINI_CLI_TRUST_WORKSPACE: "true", NO_COLOR: "1", ...extraEnv };
  return runCli("gemini", ["-p", prompt, ...extra], env, home);
}

describe("Gemini CLI", () => {
  test.each([
    // With no model named, the CLI's router (gemini-3.5-flash-lite, answered in its JSON schema)
    // scores "say hi" as simple and sends the turn to its Flash model.
    ["no model named (the CLI's default)", [], {}, "gemini-3.8-flash"],
    ["GEMINI_MODEL=gemini-2.5-pro", [], { GEMINI_MODEL: "gemini-2.5-pro" }, "gemini-2.5-pro"],
    ["-m gemini-2.5-flash", ["-m", "gemini-2.5-flash"], {}, "gemini-2.5-flash"],
    ["-m gpt-4o-mini (not a Gemini model)", ["-m", "gpt-4o-mini"], {}, "gpt-4o-mini"],
  ])(
    "%s: answers, and the run costs what the gateway recorded",
    async (_name, flags, env, model) => {
      const account = await t.fundedKey(WALLET_TOMAN);
      const before = await runStart(account.key);
      const run = await gemini(account.key, "say hi", flags, env);
      expect(run, run.stderr).toMatchObject({ code: 0 });
      expect(run.stdout.trim().length).toBeGreaterThan(0);
      const records = await expectCostAsRecorded(account, before);
      expect(records.map((r) => [r.model, r.status])).toContainEqual([model, 200]);
    },
    RUN_MS_MAX,
  );

  test(
    "a tool call: the CLI runs its tool, sends the functionResponse back, and the turn ends in text; every request billed as recorded",
    async () => {
      const account = await t.fundedKey(WALLET_TOMAN);
      const before = await runStart(account.key);
      const proxy = await countingProxy();
      try {
        // The simulator calls a tool the last user message names.
        const prompt = "Use the read_file tool on the file notes.txt";
        const run = await gemini(account.key, prompt, ["-m", "gemini-2.5-flash"], { GOOGLE_GEMINI_BASE_URL: proxy.url });
        expect(run, run.stderr).toMatchObject({ code: 0 });
        const parts = proxy.bodies.flatMap((b) => (b.contents ?? []).flatMap((c: { parts?: unknown[] }) => c.parts ?? []));
        expect(parts.some((p: Record<string, unknown>) => p.functionResponse)).toBe(true);
      } finally {
        proxy.stop();
      }
      const records = await expectCostAsRecorded(account, before);
      expect(records.length).toBeGreaterThanOrEqual(2);
    },
    RUN_MS_MAX,
  );

  test(
    "a model not in the catalog: the 404 the CLI reports names the closest models",
    async () => {
      const run = await gemini((await t.fundedKey(WALLET_TOMAN)).key, "say hi", ["-m", "gemini-9-ultra"]);
      expect(run.code).not.toBe(0);
      expect(run.stderr).toContain("The closest models are");
    },
    RUN_MS_MAX,
  );

  test(
    "a wrong key: the CLI reports the refusal and exits non-zero",
    async () => {
      const run = await gemini("sk-dvz-not-a-key", "say hi", ["-m", "gemini-2.5-flash"]);
      expect(run.code).not.toBe(0);
      expect(run.stdout + run.stderr).toContain("401");
    },
    RUN_MS_MAX,
  );
});
