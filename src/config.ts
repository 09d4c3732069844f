/**
 * Start-up configuration: the environment and the optional pools file, validated by zod.
 * A bad setting is reported once per problem and the process exits non-zero before it binds
 * a port or opens a database.
 */
import { accessSync, constants, readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { z } from "zod";
import { ALERT_TEMPLATE_DEFAULT } from "./accountArea/sms.ts";
import { isCidr } from "./addresses.ts";
import { TOKENIZER_KEY_WINDOW_MS, TOKENIZER_MS_PER_KEY_MAX } from "./tokens/count.ts";

/** Entries TRUSTED_PROXIES may name. */
export const TRUSTED_PROXIES_MAX = 100;

/** Gateway processes one host may run (WORKERS): each holds a database pool and a NATS connection. */
export const WORKERS_MAX = 64;

const intFromEnv = (fallback: number, min: number, max: number) => z.coerce.number().int().min(min).max(max).default(fallback);

/** `true`/`1` or `false`/`0`, else the start is refused naming the variable. */
const booleanFromEnv = (fallback: boolean) =>
  z
    .enum(["true", "false", "1", "0"], { error: "true or false" })
    .default(fallback ? "true" : "false")
    .transform((v) => v === "true" || v === "1");

const listFromEnv = z
  .string()
  .default("")
  .transform((value) =>
    value
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean),
  );

/**
 * Every variable's description is its documentation: `bun run docs:config` writes
 * docs/configuration.md from this schema, and a test fails when the page is not current.
 */
export const envSchema = z
  .object({
    PORT: intFromEnv(8080, 0, 65535).describe(
      "HTTP port (`0`: any free port). One gateway per port: a second one on a busy port exits 1 at once, naming the port.",
    ),
    HOST: z.string().min(1).default("127.0.0.1").describe("Address to bind."),
    DATABASE_URL: z
      .string()
      .url()
      .optional()
      .describe("PostgreSQL URL. Unset: PGlite in `DARVAZE_DATA` (one process at a time; a second refuses to start)."),
    DARVAZE_DATA: z.string().min(1).default("./.darvaze").describe("The embedded data folder (PGlite, and the demo's generated secrets)."),
    PGLITE_THREAD: z
      .enum(["inline", "worker"])
      .default("worker")
      .describe(
        "Where the embedded database runs: `worker`, a thread of its own at a lower priority (PGLITE_WORKER_NICE), so that a commit never stops the requests in flight; or `inline`, on the request thread (each usage batch then stops every request for its commit: bench/RESULTS.md). A worker that dies is started again on the same folder, up to 5 deaths in a row; requests that need the database get 503 meanwhile (docs/runbook.md).",
      ),
    PGLITE_WORKER_NICE: z.coerce
      .number()
      .int()
      .min(0)
      .max(19)
      .default(10)
      .describe(
        "Nice value of the embedded database's worker thread (Linux): how far below the request thread it runs when both want the same core. 0: the same priority (requests wait out the worker's time slices); 19: requests first, but on a busy core the worker falls behind until the usage backpressure stops admissions (one connection's p99 21–28 ms against 8–9 ms at 10; bench/RESULTS.md).",
      ),
    NATS_URL: z
      .string()
      .min(1)
      .optional()
      .describe(
        "NATS servers of one cluster, comma-separated, all `nats://` or all `tls://` (`tls://` requires TLS). Unset: the in-process bus.",
      ),
    NATS_USER: z
      .string()
      .min(1)
      .optional()
      .describe("NATS user name; goes with `NATS_PASSWORD`. One kind of NATS credential at most (user, token, NKey seed or creds file)."),
    NATS_PASSWORD: z.string().min(1).optional().describe("NATS password; goes with `NATS_USER`."),
    NATS_TOKEN: z.string().min(1).optional().describe("NATS token."),
    NATS_NKEY_SEED: z
      .string()
      .regex(/^SU[A-Z2-7]{56}$/, "a user NKey seed: SU followed by 56 base32 characters")
      .optional()
      .describe("A user NKey seed (`SU…`), e.g. from `nsc` or `nk -gen user`."),
    NATS_CREDS_FILE: z.string().min(1).optional().describe("A `.creds` (JWT) file; must be readable."),
    NATS_TLS_CA_FILE: z
      .string()
      .min(1)
      .optional()
      .describe("TLS: the CA that signed the server's certificate. Any `NATS_TLS_*` file requires TLS; see docs/production.md."),
    NATS_TLS_CERT_FILE: z
      .string()
      .min(1)
      .optional()
      .describe("TLS: a client certificate, when the server verifies clients (mutual TLS); goes with `NATS_TLS_KEY_FILE`."),
    NATS_TLS_KEY_FILE: z.string().min(1).optional().describe("TLS: the client certificate's key; goes with `NATS_TLS_CERT_FILE`."),
    DARVAZE_SUBJECT_PREFIX: z
      .string()
      .regex(/^[A-Za-z0-9_-]+$/, "letters, digits, _ and - only")
      .default("gw")
      .describe("First token of every NATS subject (`gw.v1.…`), to keep deployments apart on one NATS; a test run uses its own."),
    ADMIN_TOKEN: z
      .string()
      .min(16, "must be at least 16 characters")
      .describe("Bearer token of the admin API. The demo generates one and keeps it in the data folder."),
    DARVAZE_CONFIG: z
      .string()
      .min(1)
      .optional()
      .describe(
        "The pools file (docs/routing.md): the upstreams to serve, each backend's key named by `api_key_env`, checked as `PUT /admin/pools/{model}` checks a pool (at most 64 backends each); any problem stops the start. Required: without it the gateway refuses to start, naming it (`bun run demo` serves simulated upstreams instead).",
      ),
    KEY_PREFIX: z
      .string()
      .regex(/^[A-Za-z0-9_-]{1,16}$/, "1 to 16 letters, digits, _ or -")
      .default("sk-dvz-")
      .describe("Prefix of issued keys."),
    KEY_PEPPER: z
      .string()
      .min(32, "must be at least 32 characters (e.g. `openssl rand -hex 32`)")
      .describe("Secret of the keyed hash under which API keys are stored. Changing it invalidates every key. The demo generates one."),
    ALLOWED_ORIGINS: listFromEnv.describe(
      "Comma-separated browser origins allowed to call /v1 with a key (default none: keys are for servers).",
    ),
    BODY_BYTES_MAX: intFromEnv(32 * 1024 * 1024, 1024, 256 * 1024 * 1024).describe("Largest request body; 413 `request_too_large` above."),
    JSON_DEPTH_MAX: intFromEnv(128, 8, 1024).describe(
      "Deepest nesting of arrays and objects a JSON request body may have (HTTP and NATS), checked on the raw bytes before parsing; 400 `invalid_request` in the wire's error shape above.",
    ),
    FREE_RPM: intFromEnv(120, 1, 100_000).describe(
      "Requests per minute a key may make to each unpriced endpoint that does work (POST /v1/messages/count_tokens, Gemini's :countTokens, GET /v1/key, GET /v1/credits, GET /v1/generations/{id}, and /v1/files and /v1/batches apiece: uploads, reads and polls), on each node; 429 `rate_limit_exceeded` with `retry-after` above. Apart from the key's paid `rpm`; the key's `concurrency_max` bounds these requests in flight too.",
    ),
    BATCH_PRICING: z
      .enum(["any", "batch_only"])
      .default("any")
      .describe(
        "Which batches this node takes: `any`, every batch (a line that cannot get the batch price runs at the live price, and the batch's `estimate` says so); `batch_only`, only a batch whose every line gets the batch price (its model has one and an in-country backend), any other refused at create with a 400 naming its lines (docs/batches.md#money).",
      ),
    UPSTREAM_TIMEOUT_MS: intFromEnv(120_000, 100, 215_000).describe(
      "The whole wait for an upstream's reply, all tries (headers, and the body of a whole, non-streamed reply); 504 after. A client waiting for a non-streamed reply hears nothing meanwhile, and Bun's idle timeout (at most 255 s) must cover it and an image download: hence the bound (docs/operations.md, Listening).",
    ),
    STREAM_KEEPALIVE_MS: intFromEnv(15_000, 50, 240_000).describe(
      "A stream whose upstream is silent this long gets a `: keep-alive` SSE comment, and again after each interval (clients ignore it; proxies see a live connection).",
    ),
    STREAM_STALL_MS: intFromEnv(60_000, 100, 3_600_000).describe(
      "A stream whose upstream is silent this long is ended with an `upstream_timeout` error frame and the upstream aborted.",
    ),
    LOG_LEVEL: z
      .enum(["debug", "info", "warn", "error"])
      .default("info")
      .describe(
        "Logs are JSON lines on stderr with ids, counts and timings; never keys, and no message content unless `LOG_MESSAGE_CONTENT` says so.",
      ),
    LOG_MESSAGE_CONTENT: booleanFromEnv(false).describe(
      "`true` adds each request's prompt and completion (up to 16,384 characters each) to its access line, and nowhere else. Off by default (they are the customers'): for debugging with the customer's consent only.",
    ),
    LEASE_TTL_MS: intFromEnv(10 * 60_000, 2_000, 24 * 3_600_000).describe(
      "Life of a lease (a node's hold on an account's wallet, which every key of the account on that node draws from); admission from it stops at half. A crashed node's leased money is back after this.",
    ),
    KEY_IDLE_MS: intFromEnv(30_000, 1_000, 3_600_000).describe(
      "An account with no request on a node for this long has that node give its leases back (the held money is the wallet's again); the idle sweep runs every 5 s, or this often when shorter. A failed give-back (the database away) is tried again by the next sweep.",
    ),
    USAGE_FLUSH_MS: intFromEnv(100, 1, 5_000).describe(
      "Usage records are written in batches at most this long after a request ends: the most a crash loses.",
    ),
    USAGE_STREAM_REPLICAS: intFromEnv(1, 1, 5).describe(
      "With NATS: copies of the usage stream, its dead letters and the batches' work queue JetStream keeps (1 on a single server; 3 on a cluster of three survives one server's loss). Nodes also keep their usage until PostgreSQL has it.",
    ),
    NATS_KV_REPLICAS: intFromEnv(1, 1, 5).describe(
      "With NATS and a database: copies JetStream keeps of the partition-lease and backend-quota buckets (KV); 3 on a cluster of three, with `USAGE_STREAM_REPLICAS=3`, so that losing one server moves no partition. Applies when a bucket is created: an existing bucket keeps its copies (docs/cluster.md, A NATS cluster).",
    ),
    USAGE_STREAM_MESSAGES_MAX: intFromEnv(10_000_000, 100, 1_000_000_000).describe(
      "With NATS: batch messages the usage stream keeps, the oldest dropped first (a node publishes again what was dropped unposted).",
    ),
    WORKERS: z
      .union([z.literal("auto"), z.coerce.number().int().min(1).max(WORKERS_MAX)])
      .default(1)
      .transform((value) => (value === "auto" ? Math.min(availableParallelism(), WORKERS_MAX) : value))
      .describe(
        `Gateway processes on this host (\`auto\`: one per core, at most ${WORKERS_MAX}), all on one port (SO_REUSEPORT: the kernel spreads connections over them), each a node of the cluster; \`bun run start\` supervises them (a worker that dies is started again; SIGTERM drains them all). Above 1 needs DATABASE_URL and NATS_URL, and a fixed PORT (docs/cluster.md, Every core of a host).`,
      ),
    WORKER_PORT_BASE: intFromEnv(0, 0, 65535).describe(
      "With WORKERS above 1: worker i also answers on port WORKER_PORT_BASE + i (its own `/metrics` and `/ready`, for scraping each worker); 0: PORT + 1.",
    ),
    DARVAZE_WORKER_INDEX: z.coerce
      .number()
      .int()
      .min(0)
      .max(WORKERS_MAX - 1)
      .optional()
      .describe("Set by `bun run start` for each worker it starts (WORKERS above 1), never by hand: this process is that worker."),
    SHUTDOWN_DRAIN_MS: intFromEnv(30_000, 0, 600_000).describe(
      "On SIGTERM, requests in flight get this long to finish before their connections are closed.",
    ),
    HOLD_SWEEP_INTERVAL_MS: intFromEnv(10_000, 200, 600_000).describe(
      "How often pending holds past their deadline (and its grace) are closed, and this node's open leases have their deadlines renewed.",
    ),
    HOLD_EXPIRY_GRACE_MS: intFromEnv(45_000, 0, 3_600_000).describe(
      "A hold whose node stopped renewing it stays pending this long past its deadline, so that usage the node published before it died is still billed from it (at least the usage stream's ack wait).",
    ),
    RATE_SOURCE_URL: z
      .string()
      .url()
      .optional()
      .describe("A JSON document with the day's toman per USD (docs/billing.md, Exchange rates). Unset: rates are set by operators only."),
    RATE_SOURCE_PATH: z
      .string()
      .min(1)
      .default("toman_per_usd")
      .describe("Dotted path to the number in that document, e.g. `data.usd.sell` or `rates.0.value`."),
    RATE_FETCH_INTERVAL_MS: intFromEnv(24 * 3_600_000, 60_000, 7 * 24 * 3_600_000).describe(
      "How often the rate is fetched (default a day).",
    ),
    CATALOG_IMPORT_URL: z
      .string()
      .url()
      .optional()
      .describe(
        "A catalog file (as src/catalog/models.json) pulled on a schedule: its diff against the catalog is recorded (GET /admin/catalog/import), never applied by itself (docs/catalog.md, Importing a catalog). https, or http to loopback. Unset: no pull.",
      ),
    CATALOG_IMPORT_INTERVAL_MS: intFromEnv(24 * 3_600_000, 60_000, 7 * 24 * 3_600_000).describe(
      "How often CATALOG_IMPORT_URL is pulled (default a day).",
    ),
    PUBLIC_URL: z
      .string()
      .url()
      .optional()
      .describe(
        "The origin clients reach the gateway at (e.g. behind a proxy), for the media URLs it hands out; unset: the request's own.",
      ),
    TRUSTED_PROXIES: listFromEnv
      .pipe(
        z
          .array(z.string().refine(isCidr, { error: (issue) => `\`${String(issue.input)}\` is no IPv4 or IPv6 address or CIDR block` }))
          .max(TRUSTED_PROXIES_MAX),
      )
      .describe(
        `The reverse proxies and load balancers in front of the gateway: addresses and CIDR blocks, IPv4 and IPv6, comma-separated (at most ${TRUSTED_PROXIES_MAX}), e.g. \`127.0.0.1,10.0.0.0/8\`. Only from one of them is \`X-Forwarded-For\` read (the client is its rightmost entry that is not a trusted proxy) and \`X-Forwarded-Proto\` (the client's scheme, for Secure cookies and the console's origin checks); from any other peer both are ignored. That one address is what key address allowlists, sign-in limits, sessions and the access lines of unpaid requests see (docs/production.md, Behind a proxy). Default none: the client is the TCP peer.`,
      ),
    START_REHEARSAL: booleanFromEnv(true).describe(
      "Before its port opens, the node serves a whole chat and a streamed one to itself (an account and a model of its own at zero prices, a loopback upstream; src/rehearsal.ts, docs/production.md), so that the first customer's request does not pay for the process's first runs: a fresh process's first chat took 31 ms embedded and 20 on NATS + PostgreSQL without it, 11 and 14 with it (medians of 5, bench/first-request.ts). Adds about 150 ms to the start; a rehearsal that fails is logged and the node starts anyway.",
    ),
    GC_RSS_GROWTH_MIB: intFromEnv(32, 0, 65_536).describe(
      "Resident-set growth in MiB (less the embedded database worker's heap growth, which that thread collects itself) after which the node runs a light garbage collection (a full marking, the heap swept lazily: 1–6 ms at 2,000–8,000 slow streams), checked each second (src/memory.ts); after 4 such steps without a full collection, a full one with the synchronous sweep (113–367 ms). 0: never. At 32, 8,000 slow streams held a minute on NATS + PostgreSQL peaked at 59 KiB a stream (64: 76 KiB), with a full collection about every 15 s instead of 30. What a slow stream keeps while it waits for its next token is promoted past the young generation, and the engine rarely collects the old one: 2,000 slow streams grew a node from 293 to 808 MiB in two minutes without the guard (`darvaze_gc_forced_*`, bench/RESULTS.md).",
    ),
    TOKENIZER_MS_PER_KEY: intFromEnv(TOKENIZER_MS_PER_KEY_MAX, 1, 600_000).describe(
      `Tokenizer time in ms one key may spend on exact prompt counts before admission per ${TOKENIZER_KEY_WINDOW_MS / 1000} s; beyond it that key's prompts are decided by their byte bounds alone until the window turns (never refused for it), so no key can hold the tokenizer threads (src/tokens/count.ts).`,
    ),
    MEDIA_TTL_S: intFromEnv(3_600, 1, 7 * 24 * 3_600).describe(
      "How long a generated image stays downloadable at its /v1/media URL (then 404, and the row is deleted).",
    ),
    SMS_SENDER: z
      .enum(["none", "log", "kavenegar"])
      .default("none")
      .describe(
        "How the account area sends sign-in codes: `kavenegar`, `log` (development: codes in the log), `none` (sign-in by code off). See docs/account-area.md.",
      ),
    KAVENEGAR_API_KEY: z.string().min(1).optional().describe("Kavenegar's API key; required when `SMS_SENDER=kavenegar`."),
    KAVENEGAR_TEMPLATE: z
      .string()
      .min(1)
      .default("darvaze-otp")
      .describe("The verify/lookup template registered with Kavenegar; its `%token` is the code."),
    KAVENEGAR_ALERT_TEMPLATE: z
      .string()
      .min(1)
      .default(ALERT_TEMPLATE_DEFAULT)
      .describe("The verify/lookup template of the low-balance alert; its `%token` is the balance in whole toman."),
    KAVENEGAR_URL: z
      .string()
      .url()
      .default("https://api.kavenegar.com")
      .describe("Kavenegar's API origin (a local one in tests: src/sim/sms.ts)."),
    SMS_DAILY_BUDGET_MAX: intFromEnv(5_000, 1, 10_000_000).describe(
      "SMS the gateway may send in a UTC day, every purpose and node together (src/accountArea/smsBudget.ts): past it, sign-in by code answers 503 until the next UTC day, `sms_budget_exhausted` is logged and `darvaze_sms_budget_exhausted` is 1 in /metrics. Bounds what a flood of sign-in requests from many addresses can cost.",
    ),
    CONSOLE_SECRET: z
      .string()
      .min(32, "must be at least 32 characters")
      .optional()
      .describe("Keys the sign-in codes' HMAC and the CSRF tokens; unset: derived from `KEY_PEPPER`."),
    CONSOLE_SESSION_IDLE_S: intFromEnv(2 * 3_600, 60, 30 * 24 * 3_600).describe("An account-area session ends after this long unused…"),
    CONSOLE_SESSION_TTL_S: intFromEnv(7 * 24 * 3_600, 300, 90 * 24 * 3_600).describe("…and this long after sign-in in any case."),
    ZARINPAL_MERCHANT_ID: z
      .string()
      .regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, "must be Zarinpal's 36-character merchant id (UUID format)")
      .optional()
      .describe(
        "Zarinpal's 36-character merchant id (UUID format); unset: payments are off (operators top up by hand). See docs/payments.md.",
      ),
    ZARINPAL_BASE_URL: z
      .string()
      .url()
      .default("https://payment.zarinpal.com")
      .describe(
        "https://payment.zarinpal.com (production), https://sandbox.zarinpal.com, or a simulator (`bun run sim:pay`, `http://127.0.0.1:P`).",
      ),
    PAYMENT_CALLBACK_BASE: z
      .string()
      .url()
      .optional()
      .describe(
        "The origin the payment provider sends customers back to (…/pay/zarinpal/callback); its domain must be the one registered with Zarinpal (error −14 otherwise). Default `PUBLIC_URL`, else the listen address.",
      ),
    PAYMENT_RETURN_URL: z
      .string()
      .refine(
        (v) => (v.startsWith("/") && !v.startsWith("//")) || URL.canParse(v),
        "an absolute URL, or a path (`/console/#/wallet`) on the callback base",
      )
      .optional()
      .describe(
        "Where a customer lands after the callback, with `?topup=<id>&outcome=<…>`: a URL, or a path on the callback base (the account area's is `/console/#/wallet`); default the built-in /pay/result page.",
      ),
    TOPUP_TOMAN_MIN: intFromEnv(10_000, 1_000, 1_000_000_000).describe(
      "Smallest top-up, whole toman (Zarinpal's own minimum is 10,000 rial = 1,000 toman).",
    ),
    TOPUP_TOMAN_MAX: intFromEnv(50_000_000, 1_000, 1_000_000_000).describe("Largest top-up, whole toman; at least `TOPUP_TOMAN_MIN`."),
    TOPUP_TTL_MS: intFromEnv(30 * 60_000, 1_000, 24 * 3_600_000).describe("A top-up not paid within this is expired by the reconciler."),
    PAYMENT_TIMEOUT_MS: intFromEnv(10_000, 100, 120_000).describe("Each call to the payment provider gets this long."),
    PAYMENT_VERIFY_CLAIM_MS: intFromEnv(60_000, 200, 3_600_000).describe(
      "How long one verify may hold a top-up; must exceed `PAYMENT_TIMEOUT_MS`, so one verify ends before another may start.",
    ),
    PAYMENT_STALE_MS: intFromEnv(2 * 60_000, 0, 24 * 3_600_000).describe(
      "A waiting top-up with no news this long is asked about by the reconciler.",
    ),
    PAYMENT_ASK_INTERVAL_MS: intFromEnv(10_000, 100, 10 * 60_000).describe(
      "Callbacks and customers' checks ask the payment provider about one top-up at most once in this long; in between they get its last answer.",
    ),
    RECONCILE_INTERVAL_MS: intFromEnv(3 * 60_000, 0, 24 * 3_600_000).describe("How often the reconciler runs (0: only on demand)."),
    DARVAZE_FAULT: z.enum(["topup_after_verify"]).optional().describe("Crash tests only: the process dies abruptly at this named point."),
  })
  .superRefine((env, ctx) => {
    checkNatsSettings(env, ctx);
    checkWorkers(env, ctx);
    if (env.SMS_SENDER === "kavenegar" && !env.KAVENEGAR_API_KEY) {
      ctx.addIssue({ code: "custom", path: ["KAVENEGAR_API_KEY"], message: "is required when SMS_SENDER=kavenegar" });
    }
    if (env.TOPUP_TOMAN_MAX < env.TOPUP_TOMAN_MIN) {
      ctx.addIssue({ code: "custom", path: ["TOPUP_TOMAN_MAX"], message: `must be at least TOPUP_TOMAN_MIN (${env.TOPUP_TOMAN_MIN})` });
    }
    if (env.PAYMENT_VERIFY_CLAIM_MS <= env.PAYMENT_TIMEOUT_MS) {
      ctx.addIssue({
        code: "custom",
        path: ["PAYMENT_VERIFY_CLAIM_MS"],
        message: `must exceed PAYMENT_TIMEOUT_MS (${env.PAYMENT_TIMEOUT_MS}), so one verify ends before another may start`,
      });
    }
  });

export type Env = z.infer<typeof envSchema>;

/** Several workers are nodes of one cluster on one fixed port: the embedded database is one process's folder. */
function checkWorkers(env: Pick<Env, "WORKERS" | "DATABASE_URL" | "NATS_URL" | "PORT">, ctx: z.RefinementCtx): void {
  if (env.WORKERS === 1) return;
  if (!env.DATABASE_URL || !env.NATS_URL) {
    const message = `is ${env.WORKERS}, but several workers need DATABASE_URL and NATS_URL: the embedded database (PGlite) is one process's folder and the in-process bus one process's memory`;
    ctx.addIssue({ code: "custom", path: ["WORKERS"], message });
  }
  if (env.PORT === 0) ctx.addIssue({ code: "custom", path: ["WORKERS"], message: "needs a fixed PORT: the workers share one port" });
}

type NatsEnv = Pick<
  Env,
  | "NATS_URL"
  | "NATS_USER"
  | "NATS_PASSWORD"
  | "NATS_TOKEN"
  | "NATS_NKEY_SEED"
  | "NATS_CREDS_FILE"
  | "NATS_TLS_CA_FILE"
  | "NATS_TLS_CERT_FILE"
  | "NATS_TLS_KEY_FILE"
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
    problem(
      env.NATS_TLS_CERT_FILE === undefined ? "NATS_TLS_CERT_FILE" : "NATS_TLS_KEY_FILE",
      "a client certificate needs its key, and the key its certificate",
    );
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
  const servers = env.NATS_URL.split(",")
    .map((url) => url.trim())
    .filter(Boolean);
  const auth: NatsSettings["auth"] =
    env.NATS_USER !== undefined && env.NATS_PASSWORD !== undefined
      ? { user: env.NATS_USER, pass: env.NATS_PASSWORD }
      : env.NATS_TOKEN !== undefined
        ? { token: env.NATS_TOKEN }
        : env.NATS_NKEY_SEED !== undefined
          ? { nkeySeed: env.NATS_NKEY_SEED }
          : env.NATS_CREDS_FILE !== undefined
            ? { credsFile: env.NATS_CREDS_FILE }
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

/** Backends in one pool (and in `default_backends`): a longer list is refused, never cut. */
export const BACKENDS_PER_POOL_MAX = 64;
/** The longest backend `url` taken. */
const BACKEND_URL_CHARS_MAX = 2_048;
/** The longest model id a pool is named by or sends upstream (`upstream_model`). */
const MODEL_ID_CHARS_MAX = 256;

/** An environment variable's name, as `api_key_env` takes it. */
const ENV_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

const backendUrl = z.string().max(BACKEND_URL_CHARS_MAX).refine(isHttpUrl, "an http:// or https:// URL");

function isHttpUrl(text: string): boolean {
  const url = URL.parse(text);
  return url !== null && (url.protocol === "http:" || url.protocol === "https:") && url.hostname !== "";
}

/**
 * One backend, as the pools file, `PUT /admin/pools/{model}`, the `pools` table and `gw pools
 * set` all take it. The secret is never part of it: `api_key_env` names the environment variable
 * that holds the key, and each node reads it from its own environment (resolveBackends).
 */
export const backendSchema = z.strictObject({
  name: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, "1 to 64 of A-Z a-z 0-9 . _ -"),
  kind: z.enum(["openai", "anthropic", "gemini"]),
  url: backendUrl,
  /** The environment variable that holds the backend's key on every node. */
  api_key_env: z.string().regex(ENV_NAME_PATTERN, "an environment variable name").optional(),
  /** Refused with a message saying what to write instead: keys are never sent, stored or written in files. */
  api_key: z.never({ error: 'a key is never sent or stored: name the environment variable that holds it with "api_key_env"' }).optional(),
  /** The model id the upstream knows; defaults to the catalog id. */
  upstream_model: z.string().min(1).max(MODEL_ID_CHARS_MAX).optional(),
  region: z.enum(["in-country", "abroad"]),
  weight: z.number().positive().max(1000).default(1),
  concurrency_max: z.number().int().positive().max(100_000).default(256),
  /**
   * An `openai` backend that speaks OpenAI's Responses API: every chat request (whatever wire the
   * client used) is sent to its `/responses` natively, stateless, and its replies read back.
   */
  responses_api: z.boolean().optional(),
});

/** A backend as declared: its key named, not held. */
export type BackendSpec = z.infer<typeof backendSchema>;

/** A backend as a pool runs it: the declared fields (the key's variable named) with the key read from the environment. */
export type BackendConfig = Omit<BackendSpec, "api_key"> & { api_key?: string };

/** A running backend as the pools file writes it (a `PUT /admin/pools/{model}` body takes it back): its key's variable, never the key. */
export function backendSpec({ api_key: _, ...spec }: BackendConfig): BackendSpec {
  return spec;
}

const backendListSchema = z
  .array(backendSchema)
  .max(BACKENDS_PER_POOL_MAX, `at most ${BACKENDS_PER_POOL_MAX} backends in a pool (BACKENDS_PER_POOL_MAX)`)
  .refine((list) => new Set(list.map((b) => b.name)).size === list.length, "backend names must be unique within a pool");

/** A share of the model's token prices, in percent: 200 bills twice the list price. */
const pricedField = z.strictObject({ price_percent: z.number().int().min(1).max(10_000) });

/**
 * Chat fields that change the upstream's price or keep customer data, refused unless a pool
 * enables them, and how each is priced (src/operations/chat/paidFields.ts). `store` has no price of its
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

/** One model's pool, as the pools file and `PUT /admin/pools/{model}` take it. */
export const poolSchema = z.strictObject({
  backends: backendListSchema.min(1, "a pool needs at least one backend"),
  /** Chat fields the pool enables, with their prices. */
  paid_fields: paidFieldsSchema.optional(),
});

export type PoolSpec = z.infer<typeof poolSchema>;

export const poolsFileSchema = z.strictObject({
  /** Backends for models without a pool of their own. */
  default_backends: backendListSchema.default([]),
  pools: z.record(z.string().min(1).max(MODEL_ID_CHARS_MAX), poolSchema).default({}),
});

/** The pools file with every backend's key read from the environment. */
export interface PoolsFile {
  default_backends: BackendConfig[];
  pools: Record<string, { backends: BackendConfig[]; paid_fields?: PaidFields }>;
  /** What the file says in a deprecated form, for the log (one line each). */
  deprecated?: string[];
}

export interface Config {
  env: Env;
  pools: PoolsFile | null;
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
  }
}

/**
 * The backends with their keys read from `env`; a named variable that is unset is a problem.
 * @example resolveBackends([{ ...spec, api_key_env: "OPENAI_API_KEY" }], process.env) // { backends: [{ ...spec, api_key: "sk-…" }], problems: [] }
 */
export function resolveBackends(
  specs: BackendSpec[],
  env: Record<string, string | undefined>,
): { backends: BackendConfig[]; problems: string[] } {
  const problems: string[] = [];
  const backends = specs.map(({ api_key: _, ...rest }) => {
    const apiKey = rest.api_key_env === undefined ? undefined : env[rest.api_key_env];
    if (rest.api_key_env !== undefined && apiKey === undefined)
      problems.push(`backend ${rest.name}: environment variable ${rest.api_key_env} is not set`);
    return { ...rest, ...(apiKey !== undefined ? { api_key: apiKey } : {}) };
  });
  return { backends, problems };
}

/** The pools file's deprecated way to name a key's variable, read for files written that way: `"api_key": "${NAME}"` means `"api_key_env": "NAME"`. */
const KEY_REFERENCE_DEPRECATED = /^\$\{([A-Za-z_][A-Za-z0-9_]{0,127})\}$/;

/**
 * Rewrites each backend's deprecated `api_key: "${NAME}"` into `api_key_env: "NAME"` in the
 * parsed file, noting each. Any other `api_key` (a key written out, or beside `api_key_env`) is
 * left for the schema to refuse, in the words the admin API uses.
 */
function upgradeKeyReferences(json: unknown, notes: string[]): void {
  if (!isRecord(json)) return;
  const lists: [string, unknown][] = [["default_backends", json.default_backends]];
  if (isRecord(json.pools)) {
    for (const [model, pool] of Object.entries(json.pools))
      lists.push([`pools.${model}.backends`, isRecord(pool) ? pool.backends : undefined]);
  }
  for (const [where, list] of lists) {
    if (!Array.isArray(list)) continue;
    list.forEach((backend: unknown, i) => {
      if (!isRecord(backend) || "api_key_env" in backend || typeof backend.api_key !== "string") return;
      const name = KEY_REFERENCE_DEPRECATED.exec(backend.api_key)?.[1];
      if (name === undefined) return;
      delete backend.api_key;
      backend.api_key_env = name;
      notes.push(`${where}.${i}: "api_key": "\${${name}}" is deprecated; write "api_key_env": "${name}"`);
    });
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function issuesToProblems(prefix: string, error: z.ZodError): string[] {
  return error.issues.map((issue) => {
    const path = [...issue.path, ...(issue.code === "unrecognized_keys" ? [issue.keys.join(", ")] : [])].join(".") || "(root)";
    return `${prefix}${path}: ${issue.message}`;
  });
}

/** The file's backends with their keys read from `env`; an unset variable is a problem naming the pool. */
function resolvePoolsFile(spec: z.infer<typeof poolsFileSchema>, env: Record<string, string | undefined>, problems: string[]): PoolsFile {
  const resolve = (where: string, specs: BackendSpec[]) => {
    const resolved = resolveBackends(specs, env);
    for (const problem of resolved.problems) problems.push(`${where}: ${problem}`);
    return resolved.backends;
  };
  const pools: PoolsFile["pools"] = {};
  for (const [model, pool] of Object.entries(spec.pools)) {
    pools[model] = { backends: resolve(`pool ${model}`, pool.backends), ...(pool.paid_fields ? { paid_fields: pool.paid_fields } : {}) };
  }
  return { default_backends: resolve("default_backends", spec.default_backends), pools };
}

/**
 * Reads, checks and resolves the pools file; throws ConfigError listing every problem, each
 * naming its pool. The deprecated forms it read are returned in `deprecated`, for the log.
 */
export function loadPoolsFile(path: string, env: Record<string, string | undefined>): PoolsFile {
  let raw: string;
  try {
    raw = readFileSync(path, "utf8");
  } catch (error) {
    throw new ConfigError([`DARVAZE_CONFIG: cannot read ${path}: ${(error as Error).message}`]);
  }
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch (error) {
    throw new ConfigError([`DARVAZE_CONFIG: ${path} is not valid JSON: ${(error as Error).message}`]);
  }
  const prefix = `DARVAZE_CONFIG ${path}: `;
  const deprecated: string[] = [];
  const problems: string[] = [];
  upgradeKeyReferences(json, deprecated);
  const parsed = poolsFileSchema.safeParse(json);
  if (!parsed.success) problems.push(...issuesToProblems("", parsed.error));
  const file = parsed.success ? resolvePoolsFile(parsed.data, env, problems) : null;
  if (problems.length > 0 || !file) throw new ConfigError(problems.map((p) => prefix + p));
  return { ...file, deprecated: deprecated.map((note) => prefix + note) };
}

/** Reads and validates the whole configuration; throws ConfigError listing every problem. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const parsed = envSchema.safeParse(env);
  if (!parsed.success) throw new ConfigError(issuesToProblems("", parsed.error));
  const pools = parsed.data.DARVAZE_CONFIG ? loadPoolsFile(parsed.data.DARVAZE_CONFIG, env) : null;
  return { env: parsed.data, pools };
}
