import { describe, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { nkeys } from "nats";
import { natsConnectionOptions } from "./bus/nats.ts";
import { BACKENDS_PER_POOL_MAX, ConfigError, loadConfig, loadPoolsFile, natsSettings, poolSchema, resolveBackends } from "./config.ts";

const required = { ADMIN_TOKEN: "a".repeat(16), KEY_PEPPER: "p".repeat(32) };

function problems(env: Record<string, string | undefined>): string[] {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
}

describe("environment", () => {
  test("defaults", () => {
    const { env, pools } = loadConfig(required);
    expect(env).toMatchObject({ PORT: 8080, HOST: "127.0.0.1", DARVAZE_DATA: "./.darvaze", KEY_PREFIX: "sk-dvz-", ALLOWED_ORIGINS: [] });
    expect(env.DATABASE_URL).toBeUndefined();
    expect(env.NATS_URL).toBeUndefined();
    expect(pools).toBeNull();
  });

  test("lists one problem per bad setting", () => {
    const found = problems({ PORT: "http", ADMIN_TOKEN: "short", DATABASE_URL: "not a url" });
    expect(found.some((p) => p.startsWith("PORT:"))).toBe(true);
    expect(found.some((p) => p.startsWith("ADMIN_TOKEN:") && p.includes("16"))).toBe(true);
    expect(found.some((p) => p.startsWith("KEY_PEPPER:"))).toBe(true);
    expect(found.some((p) => p.startsWith("DATABASE_URL:"))).toBe(true);
  });

  test("payments: off without a merchant id; the merchant id, bounds and claim are checked at start", () => {
    const { env } = loadConfig(required);
    expect(env.ZARINPAL_MERCHANT_ID).toBeUndefined();
    expect(env.ZARINPAL_BASE_URL).toBe("https://payment.zarinpal.com");
    expect(loadConfig({ ...required, ZARINPAL_MERCHANT_ID: "1344b5d4-0048-11e8-94db-005056a205be" }).env.ZARINPAL_MERCHANT_ID).toBe(
      "1344b5d4-0048-11e8-94db-005056a205be",
    );
    expect(problems({ ...required, ZARINPAL_MERCHANT_ID: "1344b5d4004811e894db005056a205be" })[0]).toStartWith(
      "ZARINPAL_MERCHANT_ID: must be Zarinpal's 36-character merchant id",
    );
    expect(problems({ ...required, TOPUP_TOMAN_MIN: "500" })[0]).toStartWith("TOPUP_TOMAN_MIN:");
    expect(problems({ ...required, TOPUP_TOMAN_MIN: "20000", TOPUP_TOMAN_MAX: "10000" })).toEqual([
      "TOPUP_TOMAN_MAX: must be at least TOPUP_TOMAN_MIN (20000)",
    ]);
    expect(problems({ ...required, PAYMENT_TIMEOUT_MS: "5000", PAYMENT_VERIFY_CLAIM_MS: "5000" })[0]).toStartWith(
      "PAYMENT_VERIFY_CLAIM_MS: must exceed PAYMENT_TIMEOUT_MS",
    );
    expect(problems({ ...required, ZARINPAL_BASE_URL: "payment.zarinpal.com" })[0]).toStartWith("ZARINPAL_BASE_URL:");
    expect(problems({ ...required, DARVAZE_FAULT: "anywhere" })[0]).toStartWith("DARVAZE_FAULT:");
  });

  test("allowed origins are a comma-separated list", () => {
    expect(loadConfig({ ...required, ALLOWED_ORIGINS: "https://a.example, https://b.example" }).env.ALLOWED_ORIGINS).toEqual([
      "https://a.example",
      "https://b.example",
    ]);
  });
});

describe("pools file", () => {
  const dir = mkdtempSync(join(tmpdir(), "darvaze-config-"));
  const write = (name: string, value: unknown) => {
    const path = join(dir, name);
    writeFileSync(path, typeof value === "string" ? value : JSON.stringify(value));
    return path;
  };
  const bare = required;
  const gpu = { name: "gpu-1", kind: "openai", url: "http://10.0.0.5:8000/v1", region: "in-country" };
  const poolOf = (backend: Record<string, unknown>) => ({ pools: { "llama-3.3-70b-instruct": { backends: [backend] } } });

  test("api_key_env names the key's variable; backend defaults apply", () => {
    const path = write("ok.json", poolOf({ ...gpu, api_key_env: "GPU_KEY" }));
    const file = loadPoolsFile(path, { GPU_KEY: "s3cret" });
    expect(file.pools["llama-3.3-70b-instruct"]!.backends[0]).toEqual({
      ...gpu,
      kind: "openai",
      region: "in-country",
      api_key_env: "GPU_KEY",
      api_key: "s3cret",
      weight: 1,
      concurrency_max: 256,
    } as never);
    expect(file.deprecated).toEqual([]);
  });

  test('the deprecated "api_key": "${NAME}" is read as api_key_env NAME, with a note for the log', () => {
    const path = write("deprecated.json", poolOf({ ...gpu, api_key: "${GPU_KEY}" }));
    const file = loadPoolsFile(path, { GPU_KEY: "s3cret" });
    const canonical = loadPoolsFile(write("canonical.json", poolOf({ ...gpu, api_key_env: "GPU_KEY" })), { GPU_KEY: "s3cret" });
    expect(file.pools).toEqual(canonical.pools);
    expect(file.deprecated).toEqual([
      `DARVAZE_CONFIG ${path}: pools.llama-3.3-70b-instruct.backends.0: "api_key": "\${GPU_KEY}" is deprecated; write "api_key_env": "GPU_KEY"`,
    ]);
    const defaults = write("deprecated-defaults.json", { default_backends: [{ ...gpu, api_key: "${GPU_KEY}" }] });
    expect(loadPoolsFile(defaults, { GPU_KEY: "s3cret" })).toMatchObject({
      default_backends: [{ name: "gpu-1", api_key: "s3cret" }],
      deprecated: [
        `DARVAZE_CONFIG ${defaults}: default_backends.0: "api_key": "\${GPU_KEY}" is deprecated; write "api_key_env": "GPU_KEY"`,
      ],
    });
    // Only a whole-value reference is read as a variable's name; anything else is a key written out.
    expect(
      problems({ ...bare, DARVAZE_CONFIG: write("partial.json", poolOf({ ...gpu, api_key: "Bearer ${GPU_KEY}" })), GPU_KEY: "s" })[0],
    ).toContain("backends.0.api_key: a key is never sent or stored");
  });

  test("a key written in the file, or named both ways, is refused as the admin API refuses it", () => {
    const refusal = 'a key is never sent or stored: name the environment variable that holds it with "api_key_env"';
    const literal = write("literal.json", poolOf({ ...gpu, api_key: "sk-live-123" }));
    expect(problems({ ...bare, DARVAZE_CONFIG: literal })).toEqual([
      `DARVAZE_CONFIG ${literal}: pools.llama-3.3-70b-instruct.backends.0.api_key: ${refusal}`,
    ]);
    const both = write("both.json", poolOf({ ...gpu, api_key: "${GPU_KEY}", api_key_env: "GPU_KEY" }));
    expect(problems({ ...bare, DARVAZE_CONFIG: both, GPU_KEY: "s3cret" })).toEqual([
      `DARVAZE_CONFIG ${both}: pools.llama-3.3-70b-instruct.backends.0.api_key: ${refusal}`,
    ]);
  });

  test("a missing key variable is a problem naming the pool, the backend and the variable", () => {
    const path = write("missing.json", poolOf({ ...gpu, api_key_env: "GPU_KEY" }));
    expect(problems({ ...bare, DARVAZE_CONFIG: path })).toEqual([
      `DARVAZE_CONFIG ${path}: pool llama-3.3-70b-instruct: backend gpu-1: environment variable GPU_KEY is not set`,
    ]);
  });

  test(`more than ${BACKENDS_PER_POOL_MAX} backends is refused naming the pool, never cut`, () => {
    const many = Array.from({ length: BACKENDS_PER_POOL_MAX + 1 }, (_, i) => ({ ...gpu, name: `gpu-${i}` }));
    const path = write("many.json", { pools: { "llama-3.3-70b-instruct": { backends: many } } });
    expect(problems({ ...bare, DARVAZE_CONFIG: path })).toEqual([
      `DARVAZE_CONFIG ${path}: pools.llama-3.3-70b-instruct.backends: at most ${BACKENDS_PER_POOL_MAX} backends in a pool (BACKENDS_PER_POOL_MAX)`,
    ]);
    const defaults = write("many-defaults.json", { default_backends: many });
    expect(problems({ ...bare, DARVAZE_CONFIG: defaults })).toEqual([
      `DARVAZE_CONFIG ${defaults}: default_backends: at most ${BACKENDS_PER_POOL_MAX} backends in a pool (BACKENDS_PER_POOL_MAX)`,
    ]);
    const full = write("full.json", { pools: { "llama-3.3-70b-instruct": { backends: many.slice(0, BACKENDS_PER_POOL_MAX) } } });
    expect(loadPoolsFile(full, {}).pools["llama-3.3-70b-instruct"]!.backends).toHaveLength(BACKENDS_PER_POOL_MAX);
  });

  test("unknown fields, URLs other than http(s), duplicate names and out-of-bound numbers are problems", () => {
    expect(problems({ ...required, DARVAZE_CONFIG: write("bad.json", "{") })[0]).toContain("not valid JSON");
    const bad = write("backend.json", {
      pools: {
        m: { backends: [{ name: "x", kind: "openai", url: "nope", region: "mars", timeout_ms: 5, weight: 0, concurrency_max: 100_001 }] },
        n: { backends: [gpu, { ...gpu, url: "file:///etc/passwd" }] },
      },
      extra: true,
    });
    expect(problems({ ...bare, DARVAZE_CONFIG: bad }).map((p) => p.slice(`DARVAZE_CONFIG ${bad}: `.length).split(":")[0])).toEqual([
      "pools.m.backends.0.url",
      "pools.m.backends.0.region",
      "pools.m.backends.0.weight",
      "pools.m.backends.0.concurrency_max",
      "pools.m.backends.0.timeout_ms",
      "pools.n.backends.1.url",
      "pools.n.backends",
      "extra",
    ]);
    expect(problems({ ...required, DARVAZE_CONFIG: join(dir, "absent.json") })[0]).toContain("cannot read");
  });

  test("the admin API's pool is the same schema: a key named by variable, resolved per node", () => {
    const pool = poolSchema.parse({ backends: [{ ...gpu, api_key_env: "A_KEY" }] });
    expect(resolveBackends(pool.backends, { A_KEY: "sk-1" })).toEqual({
      backends: [{ ...gpu, kind: "openai", region: "in-country", weight: 1, concurrency_max: 256, api_key_env: "A_KEY", api_key: "sk-1" }],
      problems: [],
    });
    expect(resolveBackends(pool.backends, {}).problems).toEqual(["backend gpu-1: environment variable A_KEY is not set"]);
    expect(poolSchema.safeParse({ backends: [{ ...gpu, api_key: "sk-1" }] }).success).toBe(false);
    expect(poolSchema.safeParse({ backends: [] }).success).toBe(false);
  });
});

describe("NATS credentials and TLS", () => {
  const dir = mkdtempSync(join(tmpdir(), "darvaze-nats-config-"));
  const ca = join(dir, "ca.pem");
  writeFileSync(ca, "not checked here: the TLS handshake checks it");
  const nats = { ...required, NATS_URL: "tls://nats-1:4222,tls://nats-2:4222" };

  test("user and password over tls:// become the connection's settings", () => {
    const { env } = loadConfig({ ...nats, NATS_USER: "gateway", NATS_PASSWORD: "secret", NATS_TLS_CA_FILE: ca });
    expect(natsSettings(env)).toEqual({
      servers: ["tls://nats-1:4222", "tls://nats-2:4222"],
      auth: { user: "gateway", pass: "secret" },
      tls: { caFile: ca },
    });
    expect(natsSettings(loadConfig({ ...required, NATS_URL: "nats://n:4222", NATS_TOKEN: "t" }).env)).toEqual({
      servers: ["nats://n:4222"],
      auth: { token: "t" },
      tls: null,
    });
    expect(natsSettings(loadConfig(required).env)).toBeNull();
  });

  test("each bad combination is a clear problem at start", () => {
    const seed = `SU${"A".repeat(56)}`;
    expect(problems({ ...nats, NATS_USER: "gateway" })).toEqual(["NATS_PASSWORD: NATS_USER and NATS_PASSWORD go together"]);
    expect(problems({ ...nats, NATS_TOKEN: "t", NATS_NKEY_SEED: seed })[0]).toContain("only one NATS credential may be set");
    expect(problems({ ...nats, NATS_NKEY_SEED: "SAxyz" })[0]).toStartWith("NATS_NKEY_SEED: a user NKey seed");
    expect(problems({ ...nats, NATS_CREDS_FILE: join(dir, "missing.creds") })[0]).toMatch(/^NATS_CREDS_FILE: cannot read .*ENOENT/);
    expect(problems({ ...nats, NATS_TLS_CERT_FILE: ca })).toEqual([
      "NATS_TLS_KEY_FILE: a client certificate needs its key, and the key its certificate",
    ]);
    expect(problems({ ...required, NATS_TOKEN: "t" })).toEqual(["NATS_TOKEN: is set but NATS_URL is not"]);
    expect(problems({ ...required, NATS_URL: "nats://a:4222,tls://b:4222" })[0]).toContain("mixes nats:// and tls://");
    expect(problems({ ...required, NATS_URL: "http://a:4222" })[0]).toContain("scheme http://");
  });

  test("an NKey seed becomes an authenticator, and TLS is required", () => {
    const seed = new TextDecoder().decode(nkeys.createUser().getSeed());
    const options = natsConnectionOptions(natsSettings(loadConfig({ ...nats, NATS_NKEY_SEED: seed }).env)!, "n");
    expect(typeof options.authenticator).toBe("function");
    expect(options.tls).toEqual({});
  });
});
