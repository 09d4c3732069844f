/**
 * The operators' browser API under /operators/api, on a cookie of its own (`__Host-dvz_op`,
 * `dvz_op` on plain-http loopback; HttpOnly, SameSite=Strict), apart from the customers':
 *
 *   POST   /operators/api/sign-in       `{login, password, code}`: password and TOTP, then a new session
 *   GET    /operators/api/session       who is signed in, the CSRF token, until when money may move
 *   POST   /operators/api/sign-out
 *   POST   /operators/api/tokens        `{name}`: a personal token for `gw` and scripts, shown once
 *   DELETE /operators/api/tokens/{id}   revokes one of one's own tokens
 *   *      /operators/api/admin/...     the admin API (/admin/...) as the session's operator
 *
 * Every request is checked for its origin as the customers' console's are (console/guard.ts),
 * and every change after sign-in needs the session's CSRF token in `x-csrf-token`.
 */
import { Elysia } from "elysia";
import { z } from "zod";
import type { GatewayDeps } from "../../admission/deps.ts";
import { fail, isFailure, type Failure } from "../../errors.ts";
import { writeAudit } from "../../operators/audit.ts";
import { signIn } from "../../operators/signin.ts";
import {
  OPERATOR_SESSION_TTL_MS,
  operatorObject,
  type OperatorStore,
  type Operator,
  principalOf,
  type Principal,
} from "../../operators/store.ts";
import { newRequestId } from "../../operations/input.ts";
import { forwardAs, OPERATOR_FRESH_AUTH_MS } from "../admin/access.ts";
import { parseBody } from "../admin/body.ts";
import { tokenBody, tokenObject } from "../admin/operators.ts";
import { staticAsset } from "../console/assets.ts";
import { checkCsrf, checkSameOrigin, insecureLoopback, ownOrigin, readCookie } from "../console/guard.ts";
import { failed, json } from "../guard.ts";
import { clientAddressOf } from "../request.ts";

export const OPERATOR_COOKIE = "dvz_op";
const UI_DIR = new URL("./ui/", import.meta.url);
const UI_FILES = new Map<string, string>([
  ["index.html", "text/html; charset=utf-8"],
  ["operators.js", "text/javascript; charset=utf-8"],
  ["i18n.js", "text/javascript; charset=utf-8"],
  ["operators.css", "text/css; charset=utf-8"],
]);
const NO_PARSE = { parse: "none" as const };

const signInBody = z.strictObject({
  login: z.string().trim().min(1).max(100),
  password: z.string().min(1).max(200),
  code: z.string().trim().min(1).max(10),
});

function cookieName(origin: string): string {
  return insecureLoopback(origin) ? OPERATOR_COOKIE : `__Host-${OPERATOR_COOKIE}`;
}

function cookie(origin: string, token: string, maxAgeS: number): string {
  const secure = insecureLoopback(origin) ? "" : "; Secure";
  return `${cookieName(origin)}=${token}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAgeS}${secure}`;
}

interface Signed {
  operator: Operator;
  sessionId: string;
  who: Principal;
}

interface Ctx {
  deps: GatewayDeps;
  store: OperatorStore;
  csrfOf(sessionId: string): string;
  originOf(request: Request): string;
}

/** The session of a request, its origin checked (and its CSRF token, for a change). */
async function session(ctx: Ctx, request: Request): Promise<Signed | Failure> {
  const origin = ctx.originOf(request);
  const change = request.method !== "GET" && request.method !== "HEAD";
  const cross = checkSameOrigin(request, origin, change);
  if (cross) return cross;
  const found = await ctx.store.bySession(readCookie(request, cookieName(origin)));
  if (!found) return fail("session_required", "Sign in first (POST /operators/api/sign-in).");
  if (change) {
    const csrf = checkCsrf(request, ctx.csrfOf(found.sessionId));
    if (csrf) return csrf;
  }
  const who = principalOf(found.operator, "session", { signedInAtMs: found.signedInAtMs, address: clientAddressOf(request) });
  return { operator: found.operator, sessionId: found.sessionId, who };
}

function sessionView(ctx: Ctx, s: { operator: Operator; sessionId: string; signedInAtMs: number }) {
  return {
    object: "operator_session",
    operator: operatorObject(s.operator),
    csrf_token: ctx.csrfOf(s.sessionId),
    signed_in_at: new Date(s.signedInAtMs).toISOString(),
    money_until: new Date(s.signedInAtMs + OPERATOR_FRESH_AUTH_MS).toISOString(),
  };
}

async function signInRoute(ctx: Ctx, request: Request, requestId: string): Promise<Response> {
  const origin = ctx.originOf(request);
  const cross = checkSameOrigin(request, origin, true);
  if (cross) return failed(cross, requestId);
  const body = await parseBody(request, signInBody);
  if (isFailure(body)) return failed(body, requestId);
  const address = clientAddressOf(request) ?? "unknown";
  const operator = await signIn(ctx.deps.db, ctx.store, { ...body, address });
  if (isFailure(operator)) return failed(operator, requestId);
  const created = await ctx.store.createSession(operator.id, address);
  ctx.deps.log("info", "operator_signed_in", { operatorId: operator.id });
  return json(sessionView(ctx, { operator, sessionId: created.id, signedInAtMs: Date.now() }), requestId, 200, {
    "set-cookie": cookie(origin, created.token, OPERATOR_SESSION_TTL_MS / 1000),
  });
}

/** The admin route under /operators/api/admin/…, called as the session's operator. */
function forwarded(request: Request, signed: Signed, forward: (request: Request) => Promise<Response>): Promise<Response> {
  const url = new URL(request.url);
  url.pathname = url.pathname.replace(/^\/operators\/api\/admin\//, "/admin/");
  const inner = new Request(url.toString(), {
    method: request.method,
    headers: request.headers,
    body: request.body,
    duplex: "half",
  } as RequestInit);
  forwardAs(inner, signed.who);
  return forward(inner);
}

export function operatorRoutes(deps: GatewayDeps, store: OperatorStore, forward: (request: Request) => Promise<Response>) {
  const ctx: Ctx = {
    deps,
    store,
    csrfOf: (sessionId) => new Bun.CryptoHasher("sha256", deps.env.KEY_PEPPER).update(`operator-csrf:${sessionId}`).digest("base64url"),
    originOf: (request) => ownOrigin(request, deps.env.PUBLIC_URL),
  };
  const originOf = ctx.originOf;

  const signedIn =
    (handler: (request: Request, signed: Signed, requestId: string, params: Record<string, string>) => Promise<Response>) =>
    async ({ request, params }: { request: Request; params: Record<string, string> }) => {
      const requestId = newRequestId();
      const signed = await session(ctx, request);
      return isFailure(signed) ? failed(signed, requestId) : handler(request, signed, requestId, params);
    };

  return (
    new Elysia()
      // The console's pages: static files that hold no data; everything they show comes from /operators/api.
      .get("/operators", () => staticAsset(UI_DIR, UI_FILES, "index.html"))
      .get("/operators/", () => staticAsset(UI_DIR, UI_FILES, "index.html"))
      .get("/operators/assets/:file", ({ params }) => staticAsset(UI_DIR, UI_FILES, params.file))
      .post("/operators/api/sign-in", ({ request }) => signInRoute(ctx, request, newRequestId()), NO_PARSE)
      .get(
        "/operators/api/session",
        signedIn(async (_, s, requestId) => json(sessionView(ctx, { ...s, signedInAtMs: s.who.signedInAtMs! }), requestId)),
      )
      .post(
        "/operators/api/sign-out",
        signedIn(async (request, s, requestId) => {
          await store.endSession(s.sessionId);
          return json({ object: "sign_out" }, requestId, 200, { "set-cookie": cookie(originOf(request), "", 0) });
        }),
        NO_PARSE,
      )
      .post(
        "/operators/api/tokens",
        signedIn(async (request, s, requestId) => {
          const body = await parseBody(request, tokenBody);
          if (isFailure(body)) return failed(body, requestId);
          const { token, record } = await store.createToken(s.operator.id, body.name);
          await writeAudit(deps.db.orm, s.who, { action: "operator_token.create", target: s.operator.id, after: tokenObject(record) });
          return json({ ...tokenObject(record), token }, requestId, 201);
        }),
        NO_PARSE,
      )
      .delete(
        "/operators/api/tokens/:id",
        signedIn(async (_, s, requestId, params) => {
          const own = (await store.tokens(s.operator.id)).some((t) => t.id === params.id);
          const row = own ? await store.revokeToken(params.id!) : null;
          if (!row) return failed(fail("not_found", `No live token ${params.id} of yours.`), requestId);
          await writeAudit(deps.db.orm, s.who, { action: "operator_token.revoke", target: row.id, after: tokenObject(row) });
          return json(tokenObject(row), requestId);
        }),
      )
      .all(
        "/operators/api/admin/*",
        signedIn((request, s) => forwarded(request, s, forward)),
        NO_PARSE,
      )
  );
}
