/**
 * No input gets a 5xx: generated hostile values (huge sizes, odd and broken encodings, `%`,
 * `%00`, NUL, overlong UTF-8, numbers past int64, negative, floats, NaN-ish strings, deep JSON,
 * wrong types) in the path, the query and the body of every route the gateway lists, each sent
 * with the route's credentials (a funded key, the admin token, a console session with its CSRF
 * token) so that it reaches the handler. Every reply is below 500, and a 4xx is in the route's
 * error shape (OpenAI's, Anthropic's on the Messages wire, Google's on the Gemini wire).
 *
 * Bounded: HOSTILE_RUNS_PER_ROUTE cases per route (env HOSTILE_RUNS_PER_ROUTE), from one seed
 * printed at the start (env HOSTILE_SEED replays a run).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { cookieName } from "../src/http/console/guard.ts";
import { accountForPhone } from "../src/ledger/wallets.ts";
import { startZarinpalSim, type ZarinpalSim } from "../src/sim/zarinpal/server.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

/** Cases per route in CI; every route is covered, so a new route is too. */
export const HOSTILE_RUNS_PER_ROUTE = Number(process.env.HOSTILE_RUNS_PER_ROUTE ?? 12);
const SEED = Number(process.env.HOSTILE_SEED ?? Date.now() % 2 ** 31);
/** A request the gateway answers slower than this counts as a failure too: hostile input must fail fast. */
const REPLY_MS_MAX = 20_000;

const NASTY_STRINGS = [
  "",
  "%",
  "%25",
  "%00",
  "\u0000",
  "a\u0000b",
  "%ZZ",
  "%C0%AF",
  "%E0%80%AF",
  "%F4%90%80%80",
  "\uD800",
  "\uFFFE",
  "💥",
  "..",
  "../../etc/passwd",
  " ",
  "NaN",
  "Infinity",
  "-Infinity",
  "1e309",
  "-1",
  "0",
  "1.5",
  "9223372036854775807",
  "9223372036854775808",
  "-9223372036854775809",
  "18446744073709551616",
  "99999999999999999999999",
  "0x10",
  "null",
  "true",
  "[]",
  "{}",
  "<script>alert(1)</script>",
  "'; DROP TABLE accounts;--",
  "gpt-4o-mini",
  "models/gemini-2.0-flash:generateContent",
  "__proto__",
  "constructor",
  "toString",
  "hasOwnProperty",
  "2026-13-45",
  "x".repeat(5_000),
];
/** Numbers JSON can carry that the gateway's columns cannot: written into the body as they are. */
const RAW_NUMBERS = [
  "1e400",
  "-1e400",
  "18446744073709551616",
  "9223372036854775808",
  "-0",
  "1E+2",
  "0.0000000001",
  "123456789012345678901234567890",
];
const NASTY_NUMBERS = [2 ** 31, 2 ** 53 + 1, 2 ** 63, 1e308, -1, 0, 0.5, -2_147_483_649, 10_000_000_000, Number.MAX_SAFE_INTEGER];
/** Field names the gateway's bodies use: hostile values under them reach its schemas' checks. */
const FIELDS = [
  "name",
  "amount_toman",
  "reference",
  "reason",
  "concurrency_max",
  "rpm",
  "tpm",
  "monthly_spend_cap_toman",
  "residency",
  "allowed_models",
  "allowed_ips",
  "expires_at",
  "limits",
  "keys_max",
  "low_balance_threshold_toman",
  "toman_per_usd",
  "effective_at",
  "account_id",
  "model",
  "messages",
  "max_tokens",
  "max_completion_tokens",
  "stream",
  "input",
  "prompt",
  "n",
  "size",
  "voice",
  "response_format",
  "encoding_format",
  "contents",
  "generationConfig",
  "system",
  "tools",
  "backends",
  "usd_per_1m",
  "batch_usd_per_1m",
  "alias",
  "successor",
  "by",
  "phone",
  "code",
  "code_id",
];
/** Query names the gateway reads. */
const QUERY_NAMES = [
  "limit",
  "before",
  "from",
  "to",
  "key",
  "model",
  "state",
  "status",
  "account_id",
  "alt",
  "beta",
  "Authority",
  "Status",
  "topup",
  "outcome",
];

type Json = null | boolean | number | string | { raw: string } | Json[] | { [k: string]: Json };

const nastyString = fc.oneof(fc.constantFrom(...NASTY_STRINGS), fc.string({ maxLength: 24 }), fc.string({ unit: "binary", maxLength: 24 }));
const leaf: fc.Arbitrary<Json> = fc.oneof(
  nastyString,
  fc.constantFrom(...NASTY_NUMBERS),
  fc.constantFrom(...RAW_NUMBERS).map((raw) => ({ raw })),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.boolean(),
  fc.constant(null),
);
const { value } = fc.letrec<{ value: Json }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    leaf,
    fc.array(tie("value"), { maxLength: 4 }),
    fc.dictionary(fc.oneof(fc.constantFrom(...FIELDS), nastyString), tie("value"), { maxKeys: 5 }),
  ),
}));

function serialise(v: Json): string {
  if (v !== null && typeof v === "object" && !Array.isArray(v) && typeof v.raw === "string" && Object.keys(v).length === 1) return v.raw;
  if (Array.isArray(v)) return `[${v.map(serialise).join(",")}]`;
  if (v !== null && typeof v === "object")
    return `{${Object.entries(v)
      .map(([k, x]) => `${JSON.stringify(k)}:${serialise(x as Json)}`)
      .join(",")}}`;
  return JSON.stringify(v) ?? "null";
}

const encoder = new TextEncoder();
/** Bodies no serialiser makes: broken or overlong UTF-8, deep nesting, truncation, huge. */
const RAW_BODIES: Uint8Array[] = [
  new Uint8Array([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xc0, 0xaf, 0x22, 0x7d]), // {"a":"<overlong />"}
  new Uint8Array([0xff, 0xfe, 0x00, 0x00]),
  new Uint8Array([0x7b, 0x22, 0x6e, 0x61, 0x6d, 0x65, 0x22, 0x3a, 0x22, 0xed, 0xa0, 0x80, 0x22, 0x7d]), // a lone surrogate's UTF-8
  encoder.encode("[".repeat(100_000)),
  encoder.encode(`${'{"a":'.repeat(5_000)}1${"}".repeat(5_000)}`),
  encoder.encode('{"name":'),
  encoder.encode(""),
  encoder.encode("\u0000"),
  encoder.encode(`{"name":"${"x".repeat(300_000)}"}`),
  encoder.encode('{"messages":[{"role":"user","content":"\\u0000"}],"model":"gpt-4o-mini"}'),
];
const body: fc.Arbitrary<Uint8Array> = fc.oneof(
  fc.dictionary(fc.constantFrom(...FIELDS), value, { minKeys: 1, maxKeys: 6 }).map((v) => encoder.encode(serialise(v))),
  value.map((v) => encoder.encode(serialise(v))),
  fc.constantFrom(...RAW_BODIES),
);
/**
 * A valid body of each route: a case may replace one of its values (at any depth) with a hostile
 * one, drop it, or add an unknown field, so that the hostile value reaches the check past the
 * schema's first refusal.
 */
const SAMPLES: Record<string, Json> = {
  "POST /v1/chat/completions": { model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }], max_tokens: 5, stream: false },
  "POST /v1/responses": { model: "gpt-4o-mini", input: "hi", max_output_tokens: 16 },
  "POST /v1/messages": { model: "claude-sonnet-4", max_tokens: 5, messages: [{ role: "user", content: "hi" }] },
  "POST /v1/messages/count_tokens": { model: "claude-sonnet-4", messages: [{ role: "user", content: "hi" }] },
  "POST /v1/embeddings": { model: "text-embedding-3-small", input: ["hi", "there"] },
  "POST /v1/images/generations": { model: "dall-e-2", prompt: "a gate", size: "256x256", n: 1 },
  "POST /v1/audio/speech": { model: "tts-1", input: "hi", voice: "alloy" },
  "POST /v1beta/models/*": { contents: [{ role: "user", parts: [{ text: "hi" }] }], generationConfig: { maxOutputTokens: 5 } },
  "POST /v1/models/*": { contents: [{ role: "user", parts: [{ text: "hi" }] }] },
  "POST /admin/accounts": { name: "hostile" },
  "PATCH /admin/accounts/:id": { limits: { concurrency_max: 10, rpm: 100, keys_max: 60 }, low_balance_threshold_toman: 10 },
  "POST /admin/accounts/:id/topups": { amount_toman: 10, reference: "hostile-topup" },
  "POST /admin/accounts/:id/keys": { name: "k", concurrency_max: 2, rpm: 10, tpm: 1_000, monthly_spend_cap_toman: "5.5" },
  "POST /admin/accounts/:id/adjustments": { amount_toman: "-1", reason: "hostile", reference: "hostile-adjust" },
  "PATCH /admin/keys/:id": { rpm: 100, tpm: null, allowed_ips: ["127.0.0.1/32"], allowed_models: ["gpt-4o-mini"] },
  "POST /admin/rates": { toman_per_usd: 95_000 },
  "POST /admin/topups": { account_id: "acc_x", amount_toman: 1_000 },
  "POST /admin/topups/:id/complete": { reason: "hostile" },
  "POST /admin/topups/:id/reject": { reason: "hostile", reverse: false },
  "POST /admin/catalog/models/:model/aliases": { alias: "hostile-alias", by: "hostile" },
  "POST /admin/catalog/models/:model/retire": { successor: "gpt-4o-mini", by: "hostile" },
  "POST /console/api/keys": { name: "k", rpm: 10, expires_at: "2030-01-01T00:00:00Z" },
  "PATCH /console/api/keys/:id": { allowed_models: ["gpt-4o-mini"] },
  "PUT /console/api/alert": { low_balance_threshold_toman: 10 },
  "POST /console/api/topups": { amount_toman: 10_000 },
  "POST /console/api/otp": { phone: "09120000098" },
  "POST /console/api/sign-in": { phone: "09120000098", code_id: "otp_x", code: "123456" },
};

type Step = string | number;
/** Every place in a value: its path. */
function placesOf(v: Json, at: Step[] = []): Step[][] {
  const places: Step[][] = at.length > 0 ? [at] : [];
  if (Array.isArray(v)) for (const [i, x] of v.entries()) places.push(...placesOf(x, [...at, i]));
  else if (v !== null && typeof v === "object" && !("raw" in v))
    for (const [k, x] of Object.entries(v)) places.push(...placesOf(x, [...at, k]));
  return places;
}

/** `sample` with the value at `place` replaced (or dropped: `undefined`). */
function replaced(sample: Json, place: Step[], by: Json | undefined): Json {
  const copy = structuredClone(sample) as any;
  let parent = copy;
  for (const step of place.slice(0, -1)) parent = parent[step];
  const last = place.at(-1)!;
  if (by === undefined) {
    if (Array.isArray(parent)) parent.splice(Number(last), 1);
    else delete parent[last];
  } else parent[last] = by;
  return copy;
}

function mutated(sample: Json): fc.Arbitrary<Json> {
  const places = placesOf(sample);
  return fc.oneof(
    fc.tuple(fc.constantFrom(...places), value).map(([place, v]) => replaced(sample, place, v)),
    fc.constantFrom(...places).map((place) => replaced(sample, place, undefined)),
    fc.tuple(nastyString, value).map(([k, v]) => ({ ...(sample as Record<string, Json>), [k]: v })),
  );
}

/**
 * A path segment: percent-encoded hostile text, or raw broken encodings. Never empty, `.` or `..`:
 * the URL would then name another path (no route, or the parent's), not this route's.
 */
const segment = fc
  .oneof(
    nastyString.map((s) => encodeURIComponent(s.replace(/[\uD800-\uDFFF]/g, "?"))),
    fc.constantFrom("%", "%25", "%00", "%ZZ", "%C0%AF", "%E0%80%AF", "%ED%A0%80", "a%2Fb", "x".repeat(3_000), "req_%25", "gpt-4o-mini%25"),
  )
  .map((s) => (s === "" || s === "." || s === ".." ? "x" : s));
const query = fc.array(fc.tuple(fc.oneof(fc.constantFrom(...QUERY_NAMES), nastyString), fc.oneof(nastyString, segment)), { maxLength: 4 });

interface Case {
  segments: string[];
  query: [string, string][];
  body: Uint8Array | null;
  contentType: string;
}

/** The error shape each wire answers in. */
function wireOf(method: string, path: string, c: Case): "openai" | "anthropic" | "google" | "page" {
  if (path.startsWith("/v1/messages")) return "anthropic";
  if (path.startsWith("/v1beta/") || (method === "POST" && path.startsWith("/v1/models/"))) return "google";
  // A Gemini client lists models on /v1 too, its key in `?key=`.
  if (path.startsWith("/v1/models") && c.query.some(([name]) => name === "key")) return "google";
  if (path.startsWith("/pay/") || path === "/" || path === "/api/hello" || path === "/health" || path === "/ready") return "page";
  return "openai";
}

function inShape(wire: ReturnType<typeof wireOf>, parsed: any): boolean {
  const e = parsed?.error;
  switch (wire) {
    case "openai":
      return typeof e?.message === "string" && typeof e?.type === "string" && "param" in e && "code" in e;
    case "anthropic":
      return parsed?.type === "error" && typeof e?.type === "string" && typeof e?.message === "string";
    case "google":
      return typeof e?.code === "number" && typeof e?.message === "string" && typeof e?.status === "string";
    case "page":
      return true;
  }
}

const MERCHANT = "1344b5d4-0048-11e8-94db-005056a205be";

let zarinpal: ZarinpalSim;
let t: TestGateway;
let key: string;
let keyId: string;
let accountId: string;
let origin: string;

beforeAll(async () => {
  // Payments configured, so that their routes are walked too (unconfigured, they answer 503 by design).
  zarinpal = await startZarinpalSim({ merchantIds: [MERCHANT] });
  t = await startTestGateway({ ZARINPAL_MERCHANT_ID: MERCHANT, ZARINPAL_BASE_URL: zarinpal.url, RECONCILE_INTERVAL_MS: "0" });
  origin = new URL(t.url).origin;
  ({ id: accountId } = await accountForPhone(t.gw.deps.db, "+989120000099"));
  await t.admin("POST", `/admin/accounts/${accountId}/topups`, { amount_toman: 1_000_000, reference: "hostile" });
  const created = await t.admin("POST", `/admin/accounts/${accountId}/keys`, { name: "hostile", concurrency_max: 64 });
  ({ key, id: keyId } = created.body);
  console.log(`hostile inputs: seed ${SEED}, ${HOSTILE_RUNS_PER_ROUTE} cases per route (HOSTILE_SEED=${SEED} replays)`);
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await zarinpal?.stop();
}, SETUP_MS_MAX);

/** The route's credentials: the key on /v1 (Google's header on its wire), the admin token, a fresh console session. */
async function credentials(path: string): Promise<Record<string, string>> {
  if (path.startsWith("/admin") || path === "/metrics") return { authorization: "Bearer test-admin-token-0123456789" };
  if (path.startsWith("/console")) {
    const session = await t.gw.console.sessions.create(accountId, { userAgent: "hostile", clientAddress: "127.0.0.1" });
    return {
      origin,
      "sec-fetch-site": "same-origin",
      cookie: `${cookieName(origin)}=${session.token}`,
      "x-csrf-token": t.gw.console.sessions.csrfToken(session.id),
    };
  }
  if (path.startsWith("/v1beta")) return { "x-goog-api-key": key };
  return { authorization: `Bearer ${key}` };
}

function urlOf(path: string, c: Case): string {
  let i = 0;
  const filled = path.replace(/:[A-Za-z_]+|\*/g, () => c.segments[i++] ?? "x");
  const q = c.query.map(([k, v]) => `${encodeURIComponent(k.replace(/[\uD800-\uDFFF]/g, "?"))}=${v}`).join("&");
  return `${t.url}${filled}${q ? `?${q}` : ""}`;
}

async function send(method: string, path: string, c: Case): Promise<{ status: number; text: string; contentType: string }> {
  const headers: Record<string, string> = { ...(await credentials(path)), "content-type": c.contentType };
  const hasBody = method !== "GET" && method !== "HEAD" && c.body !== null;
  const response = await fetch(urlOf(path, c), {
    method,
    headers,
    body: hasBody ? c.body : undefined,
    redirect: "manual",
    signal: AbortSignal.timeout(REPLY_MS_MAX),
  });
  return {
    status: response.status,
    text: method === "HEAD" ? "" : await response.text(),
    contentType: response.headers.get("content-type") ?? "",
  };
}

/** Ids that name something real on the route's path, so that a case may get past the lookup. */
function realSegments(path: string): string[] {
  if (path.startsWith("/admin/accounts/")) return [accountId];
  if (path.startsWith("/admin/keys/") || path.startsWith("/console/api/keys/")) return [keyId];
  if (path.includes("/catalog/models/")) return ["gpt-4o-mini"];
  if (path.startsWith("/v1beta/models/") || path.startsWith("/v1/models/")) return ["gemini-2.0-flash:generateContent", "gpt-4o-mini"];
  return ["x"];
}

const caseOf = (method: string, path: string, params: number): fc.Arbitrary<Case> => {
  const sample = SAMPLES[`${method} ${path}`];
  const bodies =
    sample === undefined
      ? body
      : fc.oneof(
          body,
          mutated(sample).map((v) => encoder.encode(serialise(v))),
        );
  const segments = fc.oneof(
    fc.array(segment, { minLength: params, maxLength: params }),
    fc.constantFrom(...realSegments(path)).map((real) => Array.from({ length: params }, () => real)),
  );
  return fc.record({
    segments,
    query,
    body: fc.option(bodies, { freq: 6 }),
    contentType: fc.constantFrom(
      "application/json",
      "application/json",
      "application/json",
      "text/plain",
      "multipart/form-data; boundary=x",
    ),
  });
};

/** A request on the suite's gateway with the route's credentials; the reply's status and JSON. */
async function probe(method: string, path: string, body?: string | Uint8Array, contentType = "application/json") {
  const response = await fetch(t.url + path, { method, headers: { ...(await credentials(path)), "content-type": contentType }, body });
  const text = await response.text();
  let parsed: any = null;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: response.status, body: parsed };
}

describe("inputs that were 5xx", () => {
  test("each is a 4xx in its route's shape, naming what is wrong", async () => {
    const huge = await probe("POST", `/admin/accounts/${accountId}/keys`, JSON.stringify({ name: "k", tpm: 10_000_000_000 }));
    expect(huge.status).toBe(400);
    expect(huge.body.error.param).toBe("tpm");
    expect((await probe("GET", "/v1/generations/req_%25")).body.error.code).toBe("not_found");
    expect((await probe("GET", "/v1/models/gpt-4o-mini%25")).body.error.code).toBe("model_not_found");
    const replay = await probe("POST", "/admin/usage/dead-letters/9223372036854775808/replay");
    expect(replay.status).toBe(404);
    const nul = await probe("GET", "/admin/accounts/a%00b");
    expect(nul.status).toBe(400);
    expect(nul.body.error.param).toBe("path");
    expect((await probe("GET", "/console/assets/__proto__")).status).toBe(404);
    expect((await probe("GET", "/admin/dashboard/toString")).status).toBe(404);
    const parsed = await probe("DELETE", `/console/api/keys/${keyId}x`, "--x\r\nbroken", "multipart/form-data; boundary=x");
    expect(parsed.status).toBe(400);
    expect(parsed.body.error.code).toBe("invalid_json");

    // Prices past the bound: the catalog's USD ceiling, then the ledger's int8 at the current rate; a rate that would take a model past it.
    const entry = (await probe("GET", "/admin/catalog")).body.data.find((m: { id: string }) => m.id === "gpt-4o-mini");
    const { id: _, ...rest } = entry;
    for (const usd of ["99999999999999999999999", "20000"]) {
      const priced = { ...rest, usd_per_1m: { ...rest.usd_per_1m, input_token: usd } };
      const refused = await probe("PUT", "/admin/catalog/models/gpt-4o-mini", JSON.stringify(priced));
      expect(refused.status).toBe(400);
      expect(refused.body.error.message).toContain("input_token");
    }
    const rate = await probe("POST", "/admin/rates", JSON.stringify({ toman_per_usd: 100_000_000 }));
    expect(rate.status).toBe(400);
    expect(rate.body.error.param).toBe("toman_per_usd");
    expect(rate.body.error.message).toContain("above the bound");
  });
});

describe("hostile inputs", () => {
  test("every route answers every hostile path, query and body below 500, a 4xx in the route's error shape", async () => {
    // Live streams (SSE) never end by themselves; everything else the app lists is walked.
    const routes = t.gw.routes.filter((r) => !r.path.endsWith("/live") && r.method !== "ALL" && r.method !== "WS");
    expect(routes.length).toBeGreaterThan(60);
    const methods = new Set(routes.map((r) => r.method));
    expect([...methods].sort()).toEqual(expect.arrayContaining(["DELETE", "GET", "PATCH", "POST", "PUT"]));
    const failures: string[] = [];
    let index = 0;
    for (const route of routes) {
      const params = (route.path.match(/:[A-Za-z_]+|\*/g) ?? []).length;
      await fc
        .assert(
          fc.asyncProperty(caseOf(route.method, route.path, params), async (c) => {
            let reply: Awaited<ReturnType<typeof send>>;
            try {
              reply = await send(route.method, route.path, c);
            } catch (error) {
              failures.push(`${route.method} ${urlOf(route.path, c).slice(t.url.length, t.url.length + 200)} → no reply: ${String(error)}`);
              return false;
            }
            let parsed: unknown = null;
            try {
              parsed = JSON.parse(reply.text);
            } catch {}
            const wire = wireOf(route.method, route.path, c);
            const bad = reply.status >= 500 || (reply.status >= 400 && reply.contentType.includes("json") && !inShape(wire, parsed));
            if (bad) {
              const shown = `${route.method} ${urlOf(route.path, c).slice(t.url.length, t.url.length + 200)} → ${reply.status} ${reply.text.slice(0, 200)}`;
              failures.push(shown);
            }
            return !bad;
          }),
          { seed: SEED + index++, numRuns: HOSTILE_RUNS_PER_ROUTE, endOnFailure: true },
        )
        .catch(() => {}); // every route is walked; the failures are listed together below
    }
    expect(failures).toEqual([]);
  }, 600_000);
});
