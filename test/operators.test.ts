/**
 * Operators as people: the role matrix on every admin route (enumerated from the app), sign-in
 * with password and TOTP, sessions and CSRF, fresh sign-in for money, support's daily ceiling,
 * personal tokens in the audit, and the audit table refusing UPDATE and DELETE.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { forwardAs } from "../src/http/admin/access.ts";
import { createApp } from "../src/http/app.ts";
import type { LiveHub } from "../src/metrics/live.ts";
import { OPERATOR_SIGNIN_FAILURES_PER_LOGIN_MAX } from "../src/operators/signin.ts";
import { OPERATOR_ROLES, PUBLIC_ROUTES, ROLE_MATRIX, type Role } from "../src/operators/roles.ts";
import type { Principal } from "../src/operators/store.ts";
import { base32Decode, hotp, totpStep } from "../src/operators/totp.ts";
import { ADMIN_TOKEN, SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

let t: TestGateway;

/** An owner whose actor the database cannot store (a NUL in text): the audit insert of their change fails. */
function unstorableOwner(): Principal {
  return { actor: "op\u0000x", role: "owner", via: "token", tokenId: null, signedInAtMs: null, adjustDailyMaxMicro: null, address: null };
}
const tokens = {} as Record<Role, string>;
const ids = {} as Record<Role, string>;
const PASSWORD = "correct horse battery";

async function call(method: string, path: string, options: { token?: string; body?: unknown; headers?: Record<string, string> } = {}) {
  const response = await fetch(t.url + path, {
    method,
    headers: {
      "content-type": "application/json",
      ...(options.token ? { authorization: `Bearer ${options.token}` } : {}),
      ...options.headers,
    },
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  if (response.headers.get("content-type")?.includes("event-stream")) {
    await response.body?.cancel();
    return { status: response.status, body: null, headers: response.headers };
  }
  const text = await response.text();
  const isJson = response.headers.get("content-type")?.includes("json");
  return { status: response.status, body: text && isJson ? JSON.parse(text) : null, headers: response.headers };
}

/** Adds an operator with ADMIN_TOKEN; returns its id and TOTP secret. */
async function addOperator(login: string, role: Role, extra: Record<string, unknown> = {}) {
  const made = await t.admin("POST", "/admin/operators", { login, name: login, role, password: PASSWORD, ...extra });
  expect(made.status).toBe(201);
  return { id: made.body.id as string, secret: new URL(made.body.otpauth_uri).searchParams.get("secret")! };
}

const codeAt = (secret: string, step: number) => hotp(base32Decode(secret), step);

beforeAll(async () => {
  t = await startTestGateway();
  for (const role of OPERATOR_ROLES) {
    const { id } = await addOperator(`matrix-${role}`, role);
    ids[role] = id;
    const token = await t.admin("POST", `/admin/operators/${id}/tokens`, { name: "matrix" });
    expect(token.status).toBe(201);
    tokens[role] = token.body.token;
  }
}, SETUP_MS_MAX);
afterAll(() => t?.stop(), SETUP_MS_MAX);

describe("the role matrix", () => {
  test("every admin route of the app is in the matrix, and every entry is a route", () => {
    const app = createApp(t.gw.deps, { live: {} as LiveHub, console: t.gw.console });
    const admin = app.routes.filter((r) => r.path.startsWith("/admin") || r.path === "/metrics").map((r) => `${r.method} ${r.path}`);
    expect(admin.length).toBeGreaterThan(30);
    expect(admin.filter((route) => !(route in ROLE_MATRIX) && !PUBLIC_ROUTES.has(route))).toEqual([]);
    expect(Object.keys(ROLE_MATRIX).filter((route) => !admin.includes(route))).toEqual([]);
  });

  test("the policy: viewers only read, support changes only adjustments and key revocations, operators and audit are the owner's", () => {
    const allowed = (role: Role) => Object.keys(ROLE_MATRIX).filter((route) => ROLE_MATRIX[route]!.roles.includes(role));
    expect(allowed("viewer").filter((route) => !route.startsWith("GET "))).toEqual([]);
    expect(allowed("support").filter((route) => !route.startsWith("GET "))).toEqual([
      "POST /admin/accounts/:id/adjustments",
      "DELETE /admin/keys/:id",
    ]);
    expect(Object.keys(ROLE_MATRIX).filter((route) => ROLE_MATRIX[route]!.roles.join() === "owner")).toEqual([
      "PUT /admin/pools/:model",
      ...Object.keys(ROLE_MATRIX).filter((route) => /\/admin\/(operators|operator-tokens|audit)/.test(route)),
    ]);
    expect(allowed("owner")).toEqual(Object.keys(ROLE_MATRIX));
    // The console's reads are every role's; a price preview is finance's, who make the change it previews.
    const reads = [
      "customers",
      "accounts/:id/usage",
      "accounts/:id/usage.csv",
      "accounts/:id/sessions",
      "accounts/:id/wallet",
      "revenue",
      "anomalies",
      "overview",
    ];
    for (const read of reads) expect({ read, roles: ROLE_MATRIX[`GET /admin/${read}`]?.roles }).toEqual({ read, roles: OPERATOR_ROLES });
    expect(ROLE_MATRIX["POST /admin/catalog/models/:model/preview"]).toEqual({ roles: ["owner", "finance"] });
    // Money routes, each with a reason.
    expect(Object.keys(ROLE_MATRIX).filter((route) => ROLE_MATRIX[route]!.money)).toEqual([
      "POST /admin/accounts/:id/topups",
      "POST /admin/accounts/:id/adjustments",
      "POST /admin/topups/:id/complete",
      "POST /admin/topups/:id/reject",
    ]);
  });

  const routes = Object.entries(ROLE_MATRIX).map(([route, permission]) => {
    const [method, pattern] = route.split(" ") as [string, string];
    return { method, path: pattern.replace(/:[a-z]+/g, "no-such-thing"), permission };
  });

  test.each(routes)("$method $path: refused roles get 403 role_refused, allowed ones pass", async ({ method, path, permission }) => {
    const body = method === "GET" || method === "DELETE" ? undefined : {};
    for (const role of OPERATOR_ROLES) {
      const reply = await call(method, path, { token: tokens[role], body });
      if (permission.roles.includes(role)) {
        expect({ role, status: reply.status, code: reply.body?.error?.code }).not.toMatchObject({ code: "role_refused" });
        expect(reply.status).not.toBe(401);
      } else {
        expect({ role, status: reply.status, code: reply.body?.error?.code }).toEqual({ role, status: 403, code: "role_refused" });
      }
    }
    expect(reply401(await call(method, path, { token: "dvz-op-0000000000000000000000000000000000000000", body }))).toBe(true);
  });
});

const reply401 = (reply: { status: number; body: any }) => reply.status === 401 && reply.body.error.code === "admin_unauthorized";

describe("signing in", () => {
  const headers = () => ({ origin: t.url });
  const signIn = (login: string, code: string, password = PASSWORD) =>
    call("POST", "/operators/api/sign-in", { body: { login, password, code }, headers: headers() });

  test("password and TOTP give a session on a cookie of its own; a code is good once; a wrong one is refused", async () => {
    const { secret } = await addOperator("sara", "finance");
    const step = totpStep(Date.now());
    const signed = await signIn("sara", codeAt(secret, step));
    expect(signed.status).toBe(200);
    const cookie = signed.headers.get("set-cookie")!;
    expect(cookie).toMatch(/^dvz_op=[A-Za-z0-9]{43}; Path=\/; HttpOnly; SameSite=Strict/);
    expect(signed.body.operator).toMatchObject({ login: "sara", role: "finance" });
    expect(signed.body.operator.password_hash).toBeUndefined();
    expect((await signIn("sara", codeAt(secret, step))).body.error.code).toBe("code_invalid"); // replayed
    expect((await signIn("sara", codeAt(secret, step + 1), "wrong password")).body.error.code).toBe("code_invalid");
    expect((await signIn("sara", codeAt(secret, step - 5))).body.error.code).toBe("code_invalid");

    const session = cookie.split(";")[0]!;
    const me = await call("GET", "/operators/api/session", { headers: { cookie: session } });
    expect(me.status).toBe(200);
    expect(me.body.operator.login).toBe("sara");
    // The customers' console does not take it, and /admin does not take the cookie.
    expect((await call("GET", "/console/api/session", { headers: { cookie: session } })).status).toBe(401);
    expect((await call("GET", "/admin/rates", { headers: { cookie: session } })).status).toBe(401);
    // Through /operators/api/admin: reads as the operator; a change needs the CSRF token.
    expect((await call("GET", "/operators/api/admin/rates", { headers: { cookie: session } })).status).toBe(200);
    expect((await call("GET", "/operators/api/admin/audit", { headers: { cookie: session } })).body.error.code).toBe("role_refused");
    const account = { body: { name: "by session" }, headers: { cookie: session, origin: t.url } };
    expect((await call("POST", "/operators/api/admin/accounts", account)).body.error.code).toBe("cross_site_refused");
    const made = await call("POST", "/operators/api/admin/accounts", {
      ...account,
      headers: { ...account.headers, "x-csrf-token": me.body.csrf_token },
    });
    expect(made.status).toBe(201);
    const audit = await t.admin("GET", `/admin/audit?action=account.create&target=${made.body.id}`);
    expect(audit.body.data[0]).toMatchObject({ actor: me.body.operator.id, role: "finance", via: "session", address: "127.0.0.1" });
  });

  test("moving money asks for a sign-in within OPERATOR_FRESH_AUTH_MS", async () => {
    const { secret } = await addOperator("fara", "finance");
    const signed = await signIn("fara", codeAt(secret, totpStep(Date.now())));
    const session = signed.headers.get("set-cookie")!.split(";")[0]!;
    const { accountId } = await t.fundedKey(100);
    const adjust = () =>
      call("POST", `/operators/api/admin/accounts/${accountId}/adjustments`, {
        body: { amount_toman: 5, reason: "goodwill", reference: `fresh-${Math.random()}` },
        headers: { cookie: session, origin: t.url, "x-csrf-token": signed.body.csrf_token },
      });
    expect((await adjust()).status).toBe(201);
    await t.gw.deps.db.rows(
      sql`UPDATE operator_sessions SET created_at = now() - interval '11 minutes' WHERE operator_id = ${signed.body.operator.id}`,
    );
    const stale = await adjust();
    expect({ status: stale.status, code: stale.body.error.code }).toEqual({ status: 401, code: "fresh_sign_in_required" });
    // Reads still go.
    expect((await call("GET", `/operators/api/admin/accounts/${accountId}`, { headers: { cookie: session } })).status).toBe(200);
  });

  test("an operator mints and revokes their own token from a session; signing out ends the session", async () => {
    const { secret } = await addOperator("vera", "viewer");
    const signed = await signIn("vera", codeAt(secret, totpStep(Date.now())));
    const headers = { cookie: signed.headers.get("set-cookie")!.split(";")[0]!, origin: t.url, "x-csrf-token": signed.body.csrf_token };
    const minted = await call("POST", "/operators/api/tokens", { body: { name: "laptop" }, headers });
    expect(minted.status).toBe(201);
    expect((await call("GET", "/admin/rates", { token: minted.body.token })).status).toBe(200);
    expect((await call("POST", "/admin/rates", { token: minted.body.token, body: { toman_per_usd: 1 } })).body.error.code).toBe(
      "role_refused",
    );
    const row = (await t.admin("GET", `/admin/audit?action=operator_token.create&actor=${signed.body.operator.id}`)).body.data[0];
    expect(row).toMatchObject({ via: "session", target: signed.body.operator.id });
    expect(row.after.token).toBeUndefined();
    expect((await call("DELETE", `/operators/api/tokens/${minted.body.id}`, { headers })).status).toBe(200);
    expect((await call("GET", "/admin/rates", { token: minted.body.token })).status).toBe(401);
    expect((await call("POST", "/operators/api/sign-out", { headers })).status).toBe(200);
    expect((await call("GET", "/operators/api/session", { headers })).body.error.code).toBe("session_required");
  });

  test(`after ${OPERATOR_SIGNIN_FAILURES_PER_LOGIN_MAX} failures the login is locked, even for a right code`, async () => {
    const { secret } = await addOperator("lock", "viewer");
    const step = totpStep(Date.now());
    for (let i = 0; i < OPERATOR_SIGNIN_FAILURES_PER_LOGIN_MAX; i++) expect((await signIn("lock", "000000", "nope")).status).toBe(400);
    const locked = await signIn("lock", codeAt(secret, step));
    expect({ status: locked.status, code: locked.body.error.code }).toEqual({ status: 429, code: "sign_in_limited" });
  });
});

describe("money and the audit", () => {
  test("a support operator adjusts up to their ceiling per Tehran day, every customer together", async () => {
    const { id } = await addOperator("sam", "support", { adjust_daily_max_toman: 1000 });
    const token = (await t.admin("POST", `/admin/operators/${id}/tokens`, { name: "script" })).body;
    const a = await t.fundedKey(5000);
    const b = await t.fundedKey(5000);
    const adjust = (account: string, amount: number, reason = "refund of a failed call") =>
      call("POST", `/admin/accounts/${account}/adjustments`, {
        token: token.token,
        body: { amount_toman: amount, reason, reference: `sam-${Math.random()}` },
      });
    expect((await adjust(a.accountId, 600)).status).toBe(201);
    expect((await adjust(b.accountId, -300)).status).toBe(201);
    const over = await adjust(a.accountId, 200);
    expect({ status: over.status, code: over.body.error.code }).toEqual({ status: 403, code: "ceiling_exceeded" });
    expect((await adjust(b.accountId, 100)).status).toBe(201); // exactly the ceiling
    expect((await call("POST", "/admin/rates", { token: token.token, body: { toman_per_usd: 1 } })).body.error.code).toBe("role_refused");

    const rows = (await t.admin("GET", `/admin/audit?actor=${id}&action=wallet`)).body.data;
    expect(rows.map((r: any) => r.amount_micro_toman)).toEqual(["100000000", "-300000000", "600000000"]);
    expect(rows[2]).toMatchObject({
      role: "support",
      via: "token",
      token_id: token.id,
      target: a.accountId,
      reason: "refund of a failed call",
    });
    expect(rows[2].after.amount_toman).toBe("600");
  });

  test("adjustments at once cannot pass the ceiling together; one that fails gives its room back", async () => {
    const { id } = await addOperator("sue", "support", { adjust_daily_max_toman: 1000 });
    const token = (await t.admin("POST", `/admin/operators/${id}/tokens`, { name: "burst" })).body.token;
    const a = await t.fundedKey(5000);
    const adjust = (account: string, amount: number) =>
      call("POST", `/admin/accounts/${account}/adjustments`, {
        token,
        body: { amount_toman: amount, reason: "burst", reference: `sue-${Math.random()}` },
      });
    expect((await adjust("acct_missing", 1000)).status).toBe(404);
    const burst = await Promise.all(Array.from({ length: 5 }, () => adjust(a.accountId, 300)));
    expect(burst.map((r) => r.status).sort()).toEqual([201, 201, 201, 403, 403]);
    expect((await adjust(a.accountId, 100)).status).toBe(201);
    expect((await adjust(a.accountId, 1)).body.error.code).toBe("ceiling_exceeded");
  });

  test("a reason is required where money moves: an adjustment without one is a 400 and leaves no row", async () => {
    const a = await t.fundedKey(10);
    const refused = await t.admin("POST", `/admin/accounts/${a.accountId}/adjustments`, { amount_toman: 1, reference: "no-reason" });
    expect(refused.status).toBe(400);
    expect((await t.admin("GET", `/admin/audit?action=wallet.adjust&target=${a.accountId}`)).body.data).toEqual([]);
  });

  test("ADMIN_TOKEN shows as the token; key creation is audited without the key; before and after are kept", async () => {
    const a = await t.fundedKey(10);
    const created = (await t.admin("GET", `/admin/audit?action=key.create&target=${a.accountId}`)).body.data[0];
    expect(created).toMatchObject({ actor: "admin_token", role: "owner", via: "admin_token" });
    expect(created.after.key).toBeUndefined();
    expect(created.after.id).toBe(a.keyId);
    await t.admin("PATCH", `/admin/keys/${a.keyId}`, { rpm: 7 });
    const limits = (await t.admin("GET", `/admin/audit?action=key.limits&target=${a.keyId}`)).body.data[0];
    expect([limits.before.rpm, limits.after.rpm]).toEqual([null, 7]);
    const topup = (await t.admin("GET", `/admin/audit?action=wallet.topup&target=${a.accountId}`)).body.data[0];
    expect(topup.amount_micro_toman).toBe("10000000");
  });

  test("catalog changes are in the audit with who, before and after", async () => {
    const entry = (await t.admin("GET", "/admin/catalog")).body.data.find((e: any) => e.id === "gpt-4o-mini");
    const { id: _, ...rest } = entry;
    const changed = await call("PUT", "/admin/catalog/models/gpt-4o-mini", {
      token: tokens.finance,
      body: { ...rest, context_window: entry.context_window - 1, by: "finance-script" },
    });
    expect(changed.status).toBe(200);
    const rows = (await t.admin("GET", "/admin/audit?action=catalog&target=gpt-4o-mini")).body.data;
    const version = changed.body.price_version;
    // Exactly one row, written in the change's transaction: the guard writes no second one.
    const ofChange = rows.filter((r: any) => r.after?.price_version === version);
    expect(ofChange).toHaveLength(1);
    const [row] = ofChange;
    expect(row).toMatchObject({ actor: ids.finance, action: "catalog.put", role: "finance", via: "token" });
    expect(row.after).toMatchObject({ object: "catalog_change", action: "change", by: "finance-script" });
    expect(row.after.model.context_window - row.before.context_window).toBe(-1);
    // The catalog's history is that row.
    const history = (await t.admin("GET", "/admin/catalog/changes?model=gpt-4o-mini")).body.data;
    expect(history[0]).toMatchObject({
      id: Number(row.id),
      model: "gpt-4o-mini",
      action: "change",
      by: ids.finance,
      declared_by: "finance-script",
      price_version: version,
      at: row.at,
    });
    expect(history[0].entry.context_window).toBe(entry.context_window - 1);
    expect(history[0].before.context_window).toBe(entry.context_window);
    expect(history.filter((c: any) => c.price_version === version)).toHaveLength(1);
  });

  test("a money change and its audit row commit together: a row the database refuses undoes the change", async () => {
    const a = await t.fundedKey(10);
    const app = createApp(t.gw.deps, { live: {} as LiveHub, console: t.gw.console });
    const who = unstorableOwner();
    const attempt = async (path: string, body: unknown) => {
      const request = new Request(`http://localhost${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      forwardAs(request, who);
      return (await app.handle(request)).status;
    };
    expect(
      await attempt(`/admin/accounts/${a.accountId}/adjustments`, { amount_toman: 5, reason: "unrecorded", reference: "tx-adjust" }),
    ).toBe(500);
    expect(await attempt(`/admin/accounts/${a.accountId}/topups`, { amount_toman: 5, reference: "tx-topup" })).toBe(500);
    const account = await t.admin("GET", `/admin/accounts/${a.accountId}`);
    expect(account.body.balance_micro_toman).toBe("10000000");
    const transfers = await t.gw.deps.db.rows(
      sql`SELECT 1 FROM ledger_transfers WHERE reference IN ('adjustment:tx-adjust', 'topup:tx-topup')`,
    );
    expect(transfers).toEqual([]);
    // The same change by an actor the database can store is applied, with its row.
    who.actor = "admin_token";
    expect(
      await attempt(`/admin/accounts/${a.accountId}/adjustments`, { amount_toman: 5, reason: "recorded", reference: "tx-adjust" }),
    ).toBe(201);
    const rows = (await t.admin("GET", `/admin/audit?action=wallet.adjust&target=${a.accountId}`)).body.data;
    expect(rows.map((r: any) => [r.reason, r.after.balance_micro_toman])).toEqual([["recorded", "15000000"]]);
  });

  test("a catalog change and its audit row commit together: a row the database refuses undoes the change", async () => {
    const app = createApp(t.gw.deps, { live: {} as LiveHub, console: t.gw.console });
    const entry = (await t.admin("GET", "/admin/catalog")).body.data.find((e: any) => e.id === "gpt-4o");
    const { id: _, ...rest } = entry;
    const versionBefore = t.gw.deps.catalog.currentVersion()?.versionId;
    const who = unstorableOwner();
    const put = async (contextWindow: number) => {
      const request = new Request("http://localhost/admin/catalog/models/gpt-4o", {
        method: "PUT",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ ...rest, context_window: contextWindow }),
      });
      forwardAs(request, who);
      return (await app.handle(request)).status;
    };
    expect(await put(entry.context_window - 7)).toBe(500);
    const after = (await t.admin("GET", "/admin/catalog")).body;
    expect(after.data.find((e: any) => e.id === "gpt-4o").context_window).toBe(entry.context_window);
    expect(after.price_version).toBe(versionBefore);
    const stored = await t.gw.deps.db.rows<{ n: number }>(
      sql`SELECT count(*)::int AS n FROM models WHERE id = 'gpt-4o' AND context_window = ${entry.context_window - 7}`,
    );
    expect(stored[0]!.n).toBe(0);
    // The same change by an actor the database can store is applied, with its one row.
    who.actor = "admin_token";
    expect(await put(entry.context_window - 7)).toBe(200);
    const history = (await t.admin("GET", "/admin/catalog/changes?model=gpt-4o")).body.data;
    expect(history[0]).toMatchObject({ model: "gpt-4o", action: "change", by: "admin_token" });
    expect(history[0].entry.context_window).toBe(entry.context_window - 7);
  });

  test("the audit table refuses UPDATE and DELETE", async () => {
    const count = async () => (await t.gw.deps.db.rows<{ n: number }>(sql`SELECT count(*)::int AS n FROM operator_audit`))[0]!.n;
    const before = await count();
    expect(before).toBeGreaterThan(0);
    const refusal = (statement: ReturnType<typeof sql>) =>
      t.gw.deps.db.rows(statement).then(
        () => "done",
        (error: Error & { cause?: Error }) => String(error.cause?.message ?? error.message),
      );
    expect(await refusal(sql`UPDATE operator_audit SET reason = 'rewritten'`)).toContain("append-only: UPDATE refused");
    expect(await refusal(sql`DELETE FROM operator_audit`)).toContain("append-only: DELETE refused");
    expect(await count()).toBe(before);
  });
});

describe("gw operators and gw audit", () => {
  const gw = async (args: string[], token = ADMIN_TOKEN) => {
    const child = Bun.spawn(["bun", "run", "src/cli/gw.ts", ...args], {
      cwd: `${import.meta.dir}/..`,
      env: { ...process.env, GW_URL: t.url, ADMIN_TOKEN: token },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    return { code, stdout, stderr };
  };

  test("the first owner made with ADMIN_TOKEN signs in; a personal token is attributed; role and remove take effect", async () => {
    const added = await gw(["operators", "add", "Owner.One", "owner", "--name", "Owner One"]);
    expect(added.code).toBe(0);
    const id = added.stdout.match(/^operator (op_\w+)/)![1]!;
    const password = added.stdout.match(/ {2}password {2}(\S+)/)![1]!;
    const secret = new URL(added.stdout.match(/ {2}totp {6}(\S+)/)![1]!).searchParams.get("secret")!;
    const signed = await call("POST", "/operators/api/sign-in", {
      body: { login: "owner.one", password, code: codeAt(secret, totpStep(Date.now())) },
      headers: { origin: t.url },
    });
    expect(signed.status).toBe(200);

    const minted = await gw(["operators", "token", "create", id, "--name", "ci"]);
    expect(minted.code).toBe(0);
    const token = minted.stdout.match(/dvz-op-\w+/)![0];
    expect((await gw(["accounts", "create", "made by ci"], token)).code).toBe(0);
    const audit = await gw(["audit", "--actor", id, "--action", "account.create", "--json"]);
    expect(JSON.parse(audit.stdout).data[0]).toMatchObject({ actor: id, via: "token", role: "owner" });
    expect((await gw(["audit", "--actor", id])).stdout).toContain("account.create");
    expect((await gw(["operators", "list"])).stdout).toContain("owner.one");

    expect((await gw(["operators", "role", id, "viewer"])).code).toBe(0);
    const refused = await gw(["accounts", "create", "no longer"], token);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("role_refused");
    expect((await gw(["operators", "remove", id])).code).toBe(0);
    expect((await gw(["rates", "show"], token)).stderr).toContain("admin_unauthorized");
    expect((await gw(["operators", "add", "x", "boss", "--name", "X"])).code).toBe(2);
  }, 60_000);
});
