/**
 * The official Python clients, pinned at their current versions and run with their defaults, only
 * the base URL and the key changed (test/python/*.py, one script a library): every call a customer
 * would make, checked in Python; then the costs the replies told, summed, against the wallet's drop,
 * to the micro-toman. Python and pip come from the machine; where they are missing these tests are
 * skipped loudly with a count, and CI fails a pass that ran none (DARVAZE_PYTHON_TESTS_LOG).
 */
import { appendFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { BATCH_POLL_MS } from "./batchPoll.ts";
import { balanceMicroOf, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import {
  PYTHON_INSTALL_MS_MAX,
  PYTHON_SCRIPT_MS_MAX,
  pythonClients,
  pythonMissing,
  runClientScript,
  type ScriptLine,
} from "./python/environment.ts";
import { until } from "./until.ts";

/** Each script and the checks it must report, in its order. */
const SCRIPTS: Record<string, string[]> = {
  "sdk_openai.py": [
    "chat",
    "chat stream with usage",
    "chat tools",
    "chat parse with pydantic",
    "chat async",
    "embeddings (base64 by default)",
    "images url",
    "images b64_json",
    "speech streamed to a file",
    "transcription of a WAV",
    "responses",
    "responses stream",
    "models",
    "error: wrong key, no retries",
    "error: unknown model",
    "error: max_tokens over the limit",
  ],
  "sdk_anthropic.py": [
    "create",
    "stream",
    "tools",
    "count_tokens",
    "error: wrong key, no retries",
    "error: unknown model",
    "error: max_tokens over the limit",
  ],
  "sdk_genai.py": [
    "generate_content",
    "stream",
    "automatic function calling",
    "embed_content",
    "count_tokens",
    "error: wrong key",
    "error: unknown model",
  ],
  "sdk_langchain.py": ["invoke", "stream", "structured output"],
  "sdk_openai_batches.py": ["chat batch: files.create, batches.create, poll, files.content", "embeddings batch", "cancel mid-batch"],
};
/**
 * The simulator's time to a first token while a script runs: a batch's lines must be slow enough
 * that its cancel lands mid-batch (30 lines, 2 of an account's at a time: about 4.5 s in all).
 */
const SIM_TTFT_MS: Record<string, number> = { "sdk_openai_batches.py": 300 };
const FUNDS_TOMAN = 1_000_000;
/** How long the wallet may take to show every settled request (group commit, the usage log on NATS). */
const WALLET_SETTLE_MS_MAX = 30_000;

const missing = pythonMissing();
const suite = missing ? describe.skip : describe;
if (missing) {
  const count = Object.keys(SCRIPTS).length;
  process.stderr.write(`\n*** SKIPPED ${count} test(s) in "Python clients": ${missing} ***\n\n`);
}

suite("Python clients", () => {
  let t: TestGateway;
  let python: string;

  beforeAll(async () => {
    [python, t] = await Promise.all([pythonClients(), startTestGateway()]);
  }, PYTHON_INSTALL_MS_MAX);
  afterAll(async () => t?.stop(), SETUP_MS_MAX);

  for (const [script, expected] of Object.entries(SCRIPTS)) {
    test(
      script,
      async () => {
        const log = process.env.DARVAZE_PYTHON_TESTS_LOG;
        if (log) appendFileSync(log, `${script}\n`);
        const { key } = await t.fundedKey(FUNDS_TOMAN);
        const before = await balanceMicroOf(t.url, key);
        t.sim!.options.ttftMs = SIM_TTFT_MS[script] ?? 0;
        const run = await runClientScript(python, script, {
          DARVAZE_GATEWAY_URL: t.url,
          DARVAZE_KEY: key,
          DARVAZE_BATCH_POLL_MS: String(BATCH_POLL_MS),
        }).finally(() => {
          t.sim!.options.ttftMs = 0;
        });
        const checks = run.lines.filter((line): line is Extract<ScriptLine, { kind: "check" }> => line.kind === "check");
        const failed = checks.filter((check) => !check.ok).map((check) => `${check.name}: ${check.error}\n${check.detail}`);
        expect(failed, run.rest).toEqual([]);
        expect(
          checks.map((check) => check.name),
          run.rest,
        ).toEqual(expected);
        expect(run.lines.at(-1)?.kind, run.rest).toBe("done");
        expect(run.exitCode, run.rest).toBe(0);
        let told = 0n;
        for (const check of checks) if (check.ok) told += BigInt(check.cost_micro);
        expect(told).toBeGreaterThan(0n);
        // Every reply told what its request was billed: over the run they add up to the wallet's drop.
        await until(async () => before - (await balanceMicroOf(t.url, key)) === told, {
          msMax: WALLET_SETTLE_MS_MAX,
          what: `the wallet's drop to equal the ${told} micro-toman the replies told`,
          pollMs: 100,
        });
      },
      PYTHON_SCRIPT_MS_MAX + WALLET_SETTLE_MS_MAX,
    );
  }
});
