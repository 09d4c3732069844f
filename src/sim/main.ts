/**
 * Runs the simulator as a process, for the demo and load tests:
 *
 *   bun run src/sim/main.ts --port 9100 --ttft-ms 30 --itl-ms 5 --fail-rate 0 --seed 1 --output-tokens 16
 *
 * A bad flag or value prints why and exits 2.
 */
import { parseArgs } from "node:util";
import { startSimulator, SimOptionsSchema, type SimOptions } from "./server.ts";

const usage = `usage: bun run src/sim/main.ts [flags]
  --port N                 listen port (0 = ephemeral; default 0)
  --seed N                 output and failure seed (default 1)
  --ttft-ms N              wait before the first token (default 0)
  --itl-ms N               wait between tokens (default 0)
  --output-tokens N        tokens per reply without max_tokens (default 16)
  --fail-rate R            share of requests answered 500, 0..1 (default 0)
  --rate-limit-rate R      share of requests answered 429, 0..1 (default 0)
  --fail-after-chunks N    streams: drop the connection after N content chunks
  --stall-after-chunks N   streams: go silent after N content chunks
  --concurrency N          serve N requests at once, queue the rest (default no limit)
  --omit-usage             never report usage
  --usage-scale X          report usage as the true figures times X (an upstream that lies); the log keeps the truth
  --cancel-bills B         sent | all: what the log bills for a request its caller cancelled (default sent)
  --api-key KEY            require the key (Bearer, x-api-key or x-goog-api-key by flavor)
  --flavor F               openai | anthropic | gemini | all: wire formats served (default all)
  --thought-tokens N       gemini: thinking tokens reported per reply (default 0)
  --help                   show this text`;

/** CLI flag → option key, for flags that take a number. */
const numberFlags = {
  port: "port",
  seed: "seed",
  "ttft-ms": "ttftMs",
  "itl-ms": "itlMs",
  "output-tokens": "outputTokens",
  "fail-rate": "failRate",
  "rate-limit-rate": "rateLimitRate",
  "fail-after-chunks": "failAfterChunks",
  "stall-after-chunks": "stallAfterChunks",
  "thought-tokens": "thoughtTokens",
  "cache-read-tokens": "cacheReadTokens",
  "cache-write-tokens": "cacheWriteTokens",
  "cache-write-1h-tokens": "cacheWrite1hTokens",
  "web-search-calls": "webSearchCalls",
  "web-search-result-tokens": "webSearchResultTokens",
  "usage-scale": "usageScale",
  concurrency: "concurrency",
} as const satisfies Record<string, keyof SimOptions>;

class UsageError extends Error {}

/**
 * Parses argv into validated options; throws UsageError on anything wrong.
 * @example optionsFromArgs(["--itl-ms", "5"]).itlMs // 5
 */
export function optionsFromArgs(args: string[]): SimOptions {
  let parsed: ReturnType<typeof parseFlags>;
  try {
    parsed = parseFlags(args);
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  const raw: Record<string, unknown> = {};
  for (const [flag, key] of Object.entries(numberFlags)) {
    const value = parsed.values[flag as keyof typeof numberFlags];
    if (value === undefined) continue;
    const number = Number(value);
    if (value.trim() === "" || !Number.isFinite(number)) throw new UsageError(`--${flag}: not a number: ${value}`);
    raw[key] = number;
  }
  if (parsed.values["omit-usage"]) raw.omitUsage = true;
  if (parsed.values["api-key"] !== undefined) raw.apiKey = parsed.values["api-key"];
  if (parsed.values.flavor !== undefined) raw.flavor = parsed.values.flavor;
  if (parsed.values["cancel-bills"] !== undefined) raw.cancelBills = parsed.values["cancel-bills"];
  const result = SimOptionsSchema.safeParse(raw);
  if (!result.success) {
    const issue = result.error.issues[0];
    throw new UsageError(`${flagOf(issue?.path[0])}: ${issue?.message ?? "invalid"}`);
  }
  return result.data;
}

/** The CLI flag that sets an option key, for error messages. */
function flagOf(key: PropertyKey | undefined): string {
  if (key === "omitUsage") return "--omit-usage";
  if (key === "apiKey") return "--api-key";
  if (key === "flavor") return "--flavor";
  if (key === "cancelBills") return "--cancel-bills";
  const entry = Object.entries(numberFlags).find(([, optionKey]) => optionKey === key);
  return entry ? `--${entry[0]}` : String(key);
}

function parseFlags(args: string[]) {
  const stringFlag = { type: "string" } as const;
  return parseArgs({
    args,
    strict: true,
    allowPositionals: false,
    options: {
      port: stringFlag,
      seed: stringFlag,
      "ttft-ms": stringFlag,
      "itl-ms": stringFlag,
      "output-tokens": stringFlag,
      "fail-rate": stringFlag,
      "rate-limit-rate": stringFlag,
      concurrency: stringFlag,
      "fail-after-chunks": stringFlag,
      "stall-after-chunks": stringFlag,
      "thought-tokens": stringFlag,
      "cache-read-tokens": stringFlag,
      "cache-write-tokens": stringFlag,
      "cache-write-1h-tokens": stringFlag,
      "web-search-calls": stringFlag,
      "web-search-result-tokens": stringFlag,
      "usage-scale": stringFlag,
      "cancel-bills": stringFlag,
      "api-key": stringFlag,
      flavor: stringFlag,
      "omit-usage": { type: "boolean" },
      help: { type: "boolean" },
    },
  });
}

async function main(args: string[]): Promise<void> {
  if (args.includes("--help")) {
    console.log(usage);
    return;
  }
  let options: SimOptions;
  try {
    options = optionsFromArgs(args);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    console.error(`simulator: ${error.message}\n${usage}`);
    process.exit(2);
  }
  const sim = await startSimulator(options).catch((error: unknown) => {
    // The simulator imports nothing from the gateway: the one check it shares is this code.
    if ((error as { code?: unknown } | null)?.code !== "EADDRINUSE") throw error;
    console.error(`simulator: port ${options.port} is in use (another simulator?); pass a free --port`);
    process.exit(1);
  });
  console.log(`simulator listening on ${sim.url}`);
  const shutdown = async () => {
    await sim.stop();
    process.exit(0);
  };
  process.once("SIGINT", shutdown);
  process.once("SIGTERM", shutdown);
}

if (import.meta.main) await main(process.argv.slice(2));
