/**
 * Start-up configuration: the environment and the optional pools file, validated by zod.
 * A bad setting is reported once per problem and the process exits non-zero before it binds
 * a port or opens a database.
 */
import { accessSync, constants, readFileSync } from "node:fs";
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
  /** Comma-separated `nats://` or `tls://` URLs of one cluster; `tls://` requires TLS. */
  NATS_URL: z.string().min(1).optional(),
  /** NATS credentials: one of user/password, token, NKey seed, or a `.creds` (JWT) file. */
  NATS_USER: z.string().min(1).optional(),
  NATS_PASSWORD: z.string().min(1).optional(),
  NATS_TOKEN: z.string().min(1).optional(),
  /** A user NKey seed (`SU…`), e.g. from `nsc` or `nk -gen user`. */
  NATS_NKEY_SEED: z.string().regex(/^SU[A-Z2-7]{56}$/, "a user NKey seed: SU followed by 56 base32 characters").optional(),
  NATS_CREDS_FILE: z.string().min(1).optional(),
  /** TLS: the CA that signed the server's certificate, and a client certificate when the server verifies clients. */
  NATS_TLS_CA_FILE: z.string().min(1).optional(),
  NATS_TLS_CERT_FILE: z.string().min(1).optional(),
  NATS_TLS_KEY_FILE: z.string().min(1).optional(),
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
  /**
   * With NATS: copies of the usage stream JetStream keeps (1 on a single server; 3 on a cluster of
   * three survives one server's loss). Nodes also keep their usage until PostgreSQL has it.
   */
  USAGE_STREAM_REPLICAS: intFromEnv(1, 1, 5),
  /** With NATS: messages the usage stream keeps (oldest dropped first; one is a node's batch). */
  USAGE_STREAM_MESSAGES_MAX: intFromEnv(10_000_000, 100, 1_000_000_000),
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
  /** How the account area sends sign-in codes: `kavenegar`, `log` (development: codes in the log), `none`. */
  SMS_SENDER: z.enum(["none", "log", "kavenegar"]).default("none"),
  KAVENEGAR_API_KEY: z.string().min(1).optional(),
  /** The verify/lookup template registered with Kavenegar; its `%token` is the code. */
  KAVENEGAR_TEMPLATE: z.string().min(1).default("darvaze-otp"),
  KAVENEGAR_URL: z.string().url().default("https://api.kavenegar.com"),
  /** Keys the sign-in codes' HMAC and the CSRF tokens; unset: derived from KEY_PEPPER. */
  CONSOLE_SECRET: z.string().min(32, "must be at least 32 characters").optional(),
  /** An account-area session ends after this long unused… */
  CONSOLE_SESSION_IDLE_S: intFromEnv(2 * 3_600, 60, 30 * 24 * 3_600),
  /** …and this long after sign-in in any case. */
  CONSOLE_SESSION_TTL_S: intFromEnv(7 * 24 * 3_600, 300, 90 * 24 * 3_600),
  /** Zarinpal's 36-character merchant id; unset: payments are off (operators top up by hand). */
  ZARINPAL_MERCHANT_ID: z
    .string()
    .regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, "must be Zarinpal's 36-character merchant id (UUID format)")
    .optional(),
  /** https://payment.zarinpal.com (production), https://sandbox.zarinpal.com, or a simulator (`bun run sim:pay`). */
  ZARINPAL_BASE_URL: z.string().url().default("https://payment.zarinpal.com"),
  /** The origin the payment provider sends customers back to (…/pay/zarinpal/callback); default PUBLIC_URL, else the listen address. */
  PAYMENT_CALLBACK_BASE: z.string().url().optional(),
  /** Where a customer lands after the callback, with `?topup=<id>&outcome=<…>`: a URL, or a path on the callback base; default the built-in /pay/result page. */
  PAYMENT_RETURN_URL: z
    .string()
    .refine((v) => (v.startsWith("/") && !v.startsWith("//")) || URL.canParse(v), "an absolute URL, or a path (`/console/#/wallet`) on the callback base")
    .optional(),
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
  checkNatsSettings(env, ctx);
  if (env.SMS_SENDER === "kavenegar" && !env.KAVENEGAR_API_KEY) {
    ctx.addIssue({ code: "custom", path: ["KAVENEGAR_API_KEY"], message: "is required when SMS_SENDER=kavenegar" });
  }
  if (env.TOPUP_TOMAN_MAX < env.TOPUP_TOMAN_MIN) {
    ctx.addIssue({ code: "custom", path: ["TOPUP_TOMAN_MAX"], message: `must be at least TOPUP_TOMAN_MIN (${env.TOPUP_TOMAN_MIN})` });
  }
  if (env.PAYMENT_VERIFY_CLAIM_MS <= env.PAYMENT_TIMEOUT_MS) {
    ctx.addIssue({ code: "custom", path: ["PAYMENT_VERIFY_CLAIM_MS"], message: `must exceed PAYMENT_TIMEOUT_MS (${env.PAYMENT_TIMEOUT_MS}), so one verify ends before another may start` });
  }
});

export type Env = z.infer<typeof envSchema>;

type NatsEnv = Pick<
  Env,
  "NATS_URL" | "NATS_USER" | "NATS_PASSWORD" | "NATS_TOKEN" | "NATS_NKEY_SEED" | "NATS_CREDS_FILE" | "NATS_TLS_CA_FILE" | "NATS_TLS_CERT_FILE" | "NATS_TLS_KEY_FILE"
>;

/** Credentials and TLS make sense only together with NATS_URL, one method at a time, files readable. */
function checkNatsSettings(env: NatsEnv, ctx: z.RefinementCtx): void {
  const problem = (path: keyof NatsEnv, message: string) => ctx.addIssue({ code: "custom", path: [path], message });
  const methods = (["NATS_USER", "NATS_TOKEN", "NATS_NKEY_SEED", "NATS_CREDS_FILE"] as const).filter((name) => env[name] !== undefined);
  const tlsFiles = (["NATS_TLS_CA_FILE", "NATS_TLS_CERT_FILE", "NATS_TLS_KEY_FILE"] as const).filter((name) => env[name] !== undefined);
  if (!env.NATS_URL) {
    for (const name of [...methods, ...tlsFiles]) problem(name, "is set but NATS_URL is not");
    return;
  }
  if (methods.length > 1) problem(methods[1]!, `only one NATS credential may be set, found ${methods.join(" and ")}`);
  if ((env.NATS_USER === undefined) !== (env.NATS_PASSWORD === undefined)) {
    problem(env.NATS_USER === undefined ? "NATS_USER" : "NATS_PASSWORD", "NATS_USER and NATS_PASSWORD go together");
  }
  if ((env.NATS_TLS_CERT_FILE === undefined) !== (env.NATS_TLS_KEY_FILE === undefined)) {
    problem(env.NATS_TLS_CERT_FILE === undefined ? "NATS_TLS_CERT_FILE" : "NATS_TLS_KEY_FILE", "a client certificate needs its key, and the key its certificate");
  }
  for (const name of ["NATS_CREDS_FILE", ...tlsFiles] as const) {
    const path = env[name];
    if (path === undefined) continue;
    try {
      accessSync(path, constants.R_OK);
    } catch (error) {
      problem(name, `cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
    }
  }
  const schemes = env.NATS_URL.split(",").map((url) => /^([a-z]+):\/\//i.exec(url.trim())?.[1]?.toLowerCase() ?? "nats");
  const bad = schemes.find((scheme) => scheme !== "nats" && scheme !== "tls");
  if (bad) problem("NATS_URL", `scheme ${bad}:// is not nats:// or tls://`);
  if (new Set(schemes).size > 1) problem("NATS_URL", "mixes nats:// and tls:// URLs: one cluster is either TLS or not");
}

/** What a NATS connection needs besides its URL, from the environment (validated there). */
export interface NatsSettings {
  servers: string[];
  auth: { user: string; pass: string } | { token: string } | { nkeySeed: string } | { credsFile: string } | null;
  /** Null: plain TCP, unless the server demands TLS. */
  tls: { caFile?: string; certFile?: string; keyFile?: string } | null;
}

/**
 * The NATS settings of a validated environment; null without NATS_URL.
 * @example natsSettings(loadConfig().env) // { servers: ["tls://nats:4222"], auth: { credsFile: "/run/gw.creds" }, tls: {} }
 */
export function natsSettings(env: NatsEnv): NatsSettings | null {
  if (!env.NATS_URL) return null;
  const servers = env.NATS_URL.split(",").map((url) => url.trim()).filter(Boolean);
  const auth: NatsSettings["auth"] =
    env.NATS_USER !== undefined && env.NATS_PASSWORD !== undefined ? { user: env.NATS_USER, pass: env.NATS_PASSWORD }
    : env.NATS_TOKEN !== undefined ? { token: env.NATS_TOKEN }
    : env.NATS_NKEY_SEED !== undefined ? { nkeySeed: env.NATS_NKEY_SEED }
    : env.NATS_CREDS_FILE !== undefined ? { credsFile: env.NATS_CREDS_FILE }
    : null;
  const wantsTls = servers.some((url) => url.toLowerCase().startsWith("tls://")) || Boolean(env.NATS_TLS_CA_FILE || env.NATS_TLS_CERT_FILE);
  const tls = wantsTls
    ? {
        ...(env.NATS_TLS_CA_FILE ? { caFile: env.NATS_TLS_CA_FILE } : {}),
        ...(env.NATS_TLS_CERT_FILE ? { certFile: env.NATS_TLS_CERT_FILE, keyFile: env.NATS_TLS_KEY_FILE } : {}),
      }
    : null;
  return { servers, auth, tls };
}

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

/** A share of the model's token prices, in percent: 200 bills twice the list price. */
const pricedField = z.strictObject({ price_percent: z.number().int().min(1).max(10_000) });

/**
 * Chat fields that change the upstream's price or keep customer data, refused unless a pool
 * enables them, and how each is priced (src/http/chat/paidFields.ts). `store` has no price of its
 * own; each other field, when used, multiplies the request's token prices by its percent.
 */
export const paidFieldsSchema = z.strictObject({
  /** `store: true`: the vendor keeps the conversation in the operator's account. */
  store: z.boolean().optional(),
  /** Each `service_tier` other than auto/default that may be asked for, with its price. */
  service_tier: z.strictObject({ flex: pricedField, scale: pricedField, priority: pricedField, fast: pricedField }).partial().optional(),
  /** Predicted outputs: rejected predicted tokens are billed by the vendor as output. */
  prediction: pricedField.optional(),
  /** The vendor's web search, which it bills per call on top of the tokens. */
  web_search_options: pricedField.optional(),
  /** Audio output (`audio`, or `modalities` with "audio"), billed by vendors above text. */
  audio: pricedField.optional(),
});

export type PaidFields = z.infer<typeof paidFieldsSchema>;

export const poolsFileSchema = z.object({
  /** Backends for models without a pool of their own. */
  default_backends: z.array(backendSchema).default([]),
  pools: z.record(z.string(), z.object({ backends: z.array(backendSchema).min(1), paid_fields: paidFieldsSchema.optional() })).default({}),
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
