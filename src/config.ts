/**
 * Start-up configuration: the environment and the optional pools file, validated by zod.
 * A bad setting is reported once per problem and the process exits non-zero before it binds
 * a port or opens a database.
 */
import { readFileSync } from "node:fs";
import { z } from "zod";

const intFromEnv = (fallback: number, min: number, max: number) =>
  z.coerce.number().int().min(min).max(max).default(fallback);

const listFromEnv = z
  .string()
  .default("")
  .transform((value) => value.split(",").map((s) => s.trim()).filter(Boolean));

export const envSchema = z.object({
  PORT: intFromEnv(8080, 0, 65535),
  HOST: z.string().min(1).default("127.0.0.1"),
  DATABASE_URL: z.string().url().optional(),
  DARVAZE_DATA: z.string().min(1).default("./.darvaze"),
  NATS_URL: z.string().min(1).optional(),
  /** Subjects start with `<prefix>.v1.`; a test run uses its own prefix to stay apart. */
  DARVAZE_SUBJECT_PREFIX: z.string().regex(/^[A-Za-z0-9_-]+$/, "letters, digits, _ and - only").default("gw"),
  ADMIN_TOKEN: z.string().min(16, "must be at least 16 characters"),
  DARVAZE_CONFIG: z.string().min(1).optional(),
  KEY_PREFIX: z.string().regex(/^[A-Za-z0-9_-]{1,16}$/, "1 to 16 letters, digits, _ or -").default("sk-dvz-"),
  KEY_PEPPER: z.string().min(32, "must be at least 32 characters (e.g. `openssl rand -hex 32`)"),
  /** Browser origins allowed to call /v1 with a key (default none: keys are for servers). */
  ALLOWED_ORIGINS: listFromEnv,
  BODY_BYTES_MAX: intFromEnv(32 * 1024 * 1024, 1024, 256 * 1024 * 1024),
  /**
   * The whole wait for an upstream's reply, all tries. A client waiting for a non-streamed reply
   * hears nothing meanwhile, and Bun's idle timeout (at most 255 s) must cover it and an image
   * download: hence the bound (src/http/listen.ts).
   */
  UPSTREAM_TIMEOUT_MS: intFromEnv(120_000, 100, 215_000),
  /** A stream whose upstream is silent this long gets a `: keep-alive` comment (and again after each interval). */
  STREAM_KEEPALIVE_MS: intFromEnv(15_000, 50, 240_000),
  /** A stream whose upstream is silent this long is ended with an error frame and the upstream aborted. */
  STREAM_STALL_MS: intFromEnv(60_000, 100, 3_600_000),
  LOG_LEVEL: z.enum(["debug", "info", "warn", "error"]).default("info"),
  /** Puts prompts and completions in the access log lines; off by default (they are the customers'). */
  LOG_MESSAGE_CONTENT: z
    .enum(["true", "false", "1", "0"], { error: "true or false" })
    .default("false")
    .transform((v) => v === "true" || v === "1"),
  /** How long a key actor's lease lives; a crashed node's leased money is back after this. */
  LEASE_TTL_MS: intFromEnv(10 * 60_000, 2_000, 24 * 3_600_000),
  /** Usage records are written in batches at most this long after a request ends: the most a crash loses. */
  USAGE_FLUSH_MS: intFromEnv(100, 1, 5_000),
  /** On SIGTERM, requests in flight get this long to finish before their connections are closed. */
  SHUTDOWN_DRAIN_MS: intFromEnv(30_000, 0, 600_000),
  /** How often pending holds past their deadline are closed. */
  HOLD_SWEEP_INTERVAL_MS: intFromEnv(10_000, 200, 600_000),
  /** A JSON document with the day's toman per USD; unset: rates are set by operators only. */
  RATE_SOURCE_URL: z.string().url().optional(),
  /** Dotted path to the number in that document, e.g. `data.usd.sell`. */
  RATE_SOURCE_PATH: z.string().min(1).default("toman_per_usd"),
  RATE_FETCH_INTERVAL_MS: intFromEnv(24 * 3_600_000, 60_000, 7 * 24 * 3_600_000),
  /** The origin clients reach the gateway at (behind a proxy), for the media URLs it hands out; unset: the request's own. */
  PUBLIC_URL: z.string().url().optional(),
  /** Resident-set growth in MiB after which the node runs a full garbage collection (src/memory.ts); 0: never. */
  GC_RSS_GROWTH_MIB: intFromEnv(64, 0, 65_536),
  /** How long a generated image stays downloadable at its /v1/media URL. */
  MEDIA_TTL_S: intFromEnv(3_600, 1, 7 * 24 * 3_600),
  /** Zarinpal's 36-character merchant id; unset: payments are off (operators top up by hand). */
  ZARINPAL_MERCHANT_ID: z
    .string()
    .regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, "must be Zarinpal's 36-character merchant id (UUID format)")
    .optional(),
  /** https://payment.zarinpal.com (production), https://sandbox.zarinpal.com, or a simulator (`bun run sim:pay`). */
  ZARINPAL_BASE_URL: z.string().url().default("https://payment.zarinpal.com"),
  /** The origin the payment provider sends customers back to (…/pay/zarinpal/callback); default PUBLIC_URL, else the listen address. */
  PAYMENT_CALLBACK_BASE: z.string().url().optional(),
  /** Where a customer lands after the callback, with `?topup=<id>&outcome=<…>`; default the built-in /pay/result page. */
  PAYMENT_RETURN_URL: z.string().url().optional(),
  /** Bounds on one top-up, whole toman (Zarinpal's own minimum is 10,000 rial = 1,000 toman). */
  TOPUP_TOMAN_MIN: intFromEnv(10_000, 1_000, 1_000_000_000),
  TOPUP_TOMAN_MAX: intFromEnv(50_000_000, 1_000, 1_000_000_000),
  /** A top-up not paid within this is expired by the reconciler. */
  TOPUP_TTL_MS: intFromEnv(30 * 60_000, 1_000, 24 * 3_600_000),
  /** Each call to the payment provider gets this long. */
  PAYMENT_TIMEOUT_MS: intFromEnv(10_000, 100, 120_000),
  /** How long one verify may hold a top-up; must exceed PAYMENT_TIMEOUT_MS. */
  PAYMENT_VERIFY_CLAIM_MS: intFromEnv(60_000, 200, 3_600_000),
  /** A waiting top-up with no news this long is asked about by the reconciler. */
  PAYMENT_STALE_MS: intFromEnv(2 * 60_000, 0, 24 * 3_600_000),
  /** How often the reconciler runs (0: only on demand). */
  RECONCILE_INTERVAL_MS: intFromEnv(3 * 60_000, 0, 24 * 3_600_000),
  /** Crash tests only: the process dies abruptly at this named point. */
  DARVAZE_FAULT: z.enum(["topup_after_verify"]).optional(),
}).superRefine((env, ctx) => {
  if (env.TOPUP_TOMAN_MAX < env.TOPUP_TOMAN_MIN) {
    ctx.addIssue({ code: "custom", path: ["TOPUP_TOMAN_MAX"], message: `must be at least TOPUP_TOMAN_MIN (${env.TOPUP_TOMAN_MIN})` });
  }
  if (env.PAYMENT_VERIFY_CLAIM_MS <= env.PAYMENT_TIMEOUT_MS) {
    ctx.addIssue({ code: "custom", path: ["PAYMENT_VERIFY_CLAIM_MS"], message: `must exceed PAYMENT_TIMEOUT_MS (${env.PAYMENT_TIMEOUT_MS}), so one verify ends before another may start` });
  }
});

export type Env = z.infer<typeof envSchema>;

export const backendSchema = z.object({
  name: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/),
  kind: z.enum(["openai", "anthropic", "gemini"]),
  url: z.string().url(),
  api_key: z.string().optional(),
  /** The model id the upstream knows; defaults to the catalog id. */
  upstream_model: z.string().min(1).optional(),
  region: z.enum(["in-country", "abroad"]),
  weight: z.number().positive().max(1000).default(1),
  concurrency_max: z.number().int().positive().max(100_000).default(256),
  /**
   * An `openai` backend that speaks OpenAI's Responses API: every chat request (whatever wire the
   * client used) is sent to its `/responses` natively, stateless, and its replies read back.
   */
  responses_api: z.boolean().optional(),
});

export type BackendConfig = z.infer<typeof backendSchema>;

export const poolsFileSchema = z.object({
  /** Backends for models without a pool of their own. */
  default_backends: z.array(backendSchema).default([]),
  pools: z.record(z.string(), z.object({ backends: z.array(backendSchema).min(1) })).default({}),
});

export type PoolsFile = z.infer<typeof poolsFileSchema>;

export interface Config {
  env: Env;
  pools: PoolsFile | null;
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
  }
}

/** Replaces `${NAME}` with the environment variable NAME; a missing variable is a problem. */
export function substituteEnv(text: string, env: Record<string, string | undefined>, problems: string[]): string {
  return text.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, name: string) => {
    const value = env[name];
    if (value === undefined) problems.push(`DARVAZE_CONFIG refers to \${${name}}, which is not set`);
    return value ?? "";
  });
}

function issuesToProblems(prefix: string, error: z.ZodError): string[] {
  return error.issues.map((issue) => `${prefix}${issue.path.join(".") || "(root)"}: ${issue.message}`);
}

export function loadPoolsFile(path: string, env: Record<string, string | undefined>): PoolsFile {
  const problems: string[] = [];
  let raw: string;
  try {
    raw = readFileSync(path, "utf8");
  } catch (error) {
    throw new ConfigError([`DARVAZE_CONFIG: cannot read ${path}: ${(error as Error).message}`]);
  }
  let json: unknown;
  try {
    json = JSON.parse(substituteEnv(raw, env, problems));
  } catch (error) {
    problems.push(`DARVAZE_CONFIG: ${path} is not valid JSON: ${(error as Error).message}`);
  }
  if (problems.length > 0) throw new ConfigError(problems);
  const parsed = poolsFileSchema.safeParse(json);
  if (!parsed.success) throw new ConfigError(issuesToProblems(`DARVAZE_CONFIG ${path}: `, parsed.error));
  return parsed.data;
}

/** Reads and validates the whole configuration; throws ConfigError listing every problem. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const parsed = envSchema.safeParse(env);
  if (!parsed.success) throw new ConfigError(issuesToProblems("", parsed.error));
  const pools = parsed.data.DARVAZE_CONFIG ? loadPoolsFile(parsed.data.DARVAZE_CONFIG, env) : null;
  return { env: parsed.data, pools };
}
