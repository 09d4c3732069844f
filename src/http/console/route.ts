/**
 * The account area: its pages at /console and the API they call at /console/api (documented in
 * docs/account-area.md). Cookie sessions, never API keys; every request is checked for its
 * origin (guard.ts), and every state change after sign-in needs the session's CSRF token.
 * Amounts go out as toman decimal strings and exact micro-toman strings.
 */
import type { SessionView } from "../../accountArea/sessions.ts";
import { batchesUnavailable, cancelBatch } from "../../batches/api.ts";
import { BATCHES_LIST_LIMIT_MAX, batchObject, listBatches } from "../../batches/store.ts";
import type { BatchWorker } from "../../batches/worker.ts";
import { Elysia } from "elysia";
import { z } from "zod";
import { KEY_EVENTS } from "../../../actors/protocol.ts";
import { microToToman } from "../../catalog/prices.ts";
import { balanceAlertState, LOW_BALANCE_SMS_DAILY_MAX, setLowBalanceThreshold } from "../../accountArea/balanceAlerts.ts";
import { jalaliMonthStart } from "../../accountArea/calendar.ts";
import type { AccountArea } from "../../accountArea/index.ts";
import { deviceOf } from "../../accountArea/device.ts";
import { maskPhone, normalisePhone } from "../../accountArea/phone.ts";
import { knownDeviceCookie, knownDeviceCookieName, knownDeviceOf, knownDeviceValue } from "../../accountArea/knownDevice.ts";
import type { Session } from "../../accountArea/sessions.ts";
import { TOPUP_LIST_MAX, TOPUP_PENDING_STATES, type TopUpView } from "../../accountArea/topups.ts";
import {
  dailySpend,
  spendByKey,
  USAGE_CSV_HEADER,
  USAGE_CSV_ROWS_MAX,
  USAGE_PAGE_MAX,
  usageCsvLine,
  usagePage,
  usageTotals,
  utcPeriods,
  type UsageFilter,
} from "../../accountArea/usage.ts";
import { fail, isFailure, type Failure } from "../../errors.ts";
import { fileNotFound, fileStream } from "../../files/files.ts";
import { keyRestrictionFields } from "../../keys/restrictions.ts";
import type { KeyLimits } from "../../keys/store.ts";
import { CONCURRENCY_MAX_DEFAULT } from "../../keys/accountLimits.ts";
import { getWallet, hasBeenFunded, accountForPhone } from "../../ledger/wallets.ts";
import { leaseFields, walletFields } from "../account/route.ts";
import { parseBody } from "../admin/body.ts";
import { alertBody, alertFields, amountToman, keyLimitFields, keyObject, limitsOf } from "../admin/route.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import { failed, json } from "../guard.ts";
import { clientAddressOf } from "../request.ts";
import { modelObject } from "../models/route.ts";
import { newRequestId } from "../../operations/input.ts";
import { consoleAsset, consoleFavicon } from "./assets.ts";
import { checkCsrf, checkSameOrigin, clearedCookie, cookieName, ownOrigin, readCookie, sessionCookie } from "./guard.ts";

export const CONSOLE_BODY_BYTES_MAX = 16 * 1024;
/** On a wrong sign-in code: how many tries the code has left. */
export const TRIES_LEFT_HEADER = "x-darvaze-tries-left";
/** Below this available balance the overview warns. */
export const LOW_BALANCE_MICRO = 50_000n * 1_000_000n;
/** A key may live at most this long. */
export const KEY_EXPIRY_MS_MAX = 5 * 366 * 24 * 3_600_000;
/** How long /console/api waits for this node's buffered usage before reading it. */
const USAGE_FLUSH_WAIT_MS = 1_000;

const phoneField = z
  .string()
  .max(64)
  .transform((value, ctx) => {
    const phone = normalisePhone(value);
    if (!phone) {
      ctx.addIssue({ code: "custom", message: "not an Iranian mobile number (09xx xxx xxxx)" });
      return z.NEVER;
    }
    return phone;
  });
const otpBody = z.strictObject({ phone: phoneField });
/** `code_id`: the id `POST /console/api/otp` answered with; a code is tried only by whoever asked for it. */
const signInBody = z.strictObject({ phone: phoneField, code_id: z.string().max(64), code: z.string().max(32) });
const createKeyBody = z.strictObject({
  name: z.string().trim().min(1).max(100),
  ...keyLimitFields,
  expires_at: z.iso.datetime({ offset: true }).nullable().optional(),
});
/** A change of one key's allowlists: each list replaced, or cleared by null; the admin API's bounds. */
const keyRestrictionsBody = z
  .strictObject(keyRestrictionFields)
  .refine((body) => body.allowed_models !== undefined || body.allowed_ips !== undefined, "name allowed_models or allowed_ips");
const topUpBody = z.strictObject({ amount_toman: amountToman });
const dateParam = z
  .string()
  .max(40)
  .refine((v) => !Number.isNaN(Date.parse(v)), "a date (YYYY-MM-DD) or an ISO time")
  .transform((v) => new Date(v));
const usageQuery = z.object({
  key: z.string().max(64).optional(),
  model: z.string().max(200).optional(),
  from: dateParam.optional(),
  /** Inclusive when a plain date: the whole day counts. */
  to: z.string().max(40).optional(),
  limit: z.coerce.number().int().min(1).max(USAGE_PAGE_MAX).default(50),
  before: z
    .string()
    .regex(/^\d{1,18}$/)
    .optional(),
});

function usageFilter(query: z.infer<typeof usageQuery>): UsageFilter | Failure {
  let to: Date | undefined;
  if (query.to) {
    const plainDate = /^\d{4}-\d{2}-\d{2}$/.test(query.to);
    const parsed = Date.parse(query.to);
    if (Number.isNaN(parsed)) return fail("invalid_request", "Invalid value for 'to': a date (YYYY-MM-DD) or an ISO time", { param: "to" });
    to = new Date(plainDate ? parsed + 24 * 3_600_000 : parsed);
  }
  return { keyId: query.key || undefined, model: query.model || undefined, from: query.from, to };
}

/** A top-up as the console shows it: `cancelled` when its customer cancelled on the payment page (nothing to check). */
function topUpObject(t: TopUpView) {
  return {
    id: t.id,
    object: "topup",
    amount_toman: microToToman(t.amountMicro),
    amount_micro_toman: t.amountMicro.toString(),
    state: t.cancelled ? "cancelled" : t.state,
    pending: !t.cancelled && TOPUP_PENDING_STATES.includes(t.state),
    ref_id: t.refId,
    card_pan: t.cardPan,
    reason: t.reason,
    created_at: t.createdAt.toISOString(),
    verified_at: t.verifiedAt?.toISOString() ?? null,
  };
}

interface Ctx {
  request: Request;
  params: Record<string, string>;
  query: Record<string, string | undefined>;
}

type RouteCtx = Ctx & { requestId: string; origin: string };
/** A signed-in handler: gets the session; state changes have passed the CSRF check. */
type Handler = (session: Session, ctx: RouteCtx) => Promise<Response> | Response;

/** What every group of console routes is built with: the origin and session guards and the session reply. */
interface Guards {
  /** Origin-checked, no session (sign-in, pricing). */
  open(change: boolean, handler: (ctx: RouteCtx) => Promise<Response> | Response): (ctx: Ctx) => Promise<Response>;
  /** Checks origin (and for changes the CSRF token), finds the session, runs the handler. */
  signedIn(change: boolean, handler: Handler): (ctx: Ctx) => Promise<Response>;
  sessionReply(
    session: { id: string; accountId: string; phone: string | null },
    requestId: string,
    headers?: Record<string, string>,
  ): Response;
}

function consoleGuards(deps: GatewayDeps, area: AccountArea): Guards {
  const open: Guards["open"] = (change, handler) => async (ctx) => {
    const requestId = newRequestId();
    const own = ownOrigin(ctx.request, deps.env.PUBLIC_URL);
    const refused = checkSameOrigin(ctx.request, own, change);
    if (refused) return failed(refused, requestId);
    return handler({ ...ctx, requestId, origin: own });
  };
  const signedIn: Guards["signedIn"] = (change, handler) =>
    open(change, async (ctx) => {
      const session = await area.sessions.lookup(readCookie(ctx.request, cookieName(ctx.origin)));
      if (!session)
        return failed(
          fail("session_required", "Sign in to the account area first (your session has ended or never began)."),
          ctx.requestId,
        );
      if (change) {
        const csrf = checkCsrf(ctx.request, area.sessions.csrfToken(session.id));
        if (csrf) return failed(csrf, ctx.requestId);
      }
      return handler(session, ctx);
    });
  const sessionReply: Guards["sessionReply"] = (session, requestId, headers = {}) =>
    json(
      {
        object: "session",
        session_id: session.id,
        account_id: session.accountId,
        phone: session.phone,
        csrf_token: area.sessions.csrfToken(session.id),
        idle_timeout_s: area.sessions.idleMs / 1000,
      },
      requestId,
      200,
      headers,
    );
  return { open, signedIn, sessionReply };
}

const clientAddress = (ctx: Ctx) => clientAddressOf(ctx.request) ?? "unknown";

/** `batches`: the node's batch worker, for a batch's cancel (absent: the cancel answers 503). */
export function consoleRoutes(deps: GatewayDeps, area: AccountArea, batches?: BatchWorker) {
  const guards = consoleGuards(deps, area);
  return new Elysia()
    .get("/console", () => consoleAsset("index.html"))
    .get("/console/", () => consoleAsset("index.html"))
    .get("/console/assets/:file", ({ params }) => consoleAsset(params.file))
    .get("/console/favicon.ico", () => consoleFavicon())
    .use(signInRoutes(deps, area, guards))
    .use(sessionRoutes(area, guards))
    .use(walletRoutes(deps, area, guards))
    .use(keyRoutes(deps, guards))
    .use(keyChangeRoutes(deps, guards))
    .use(usageRoutes(deps, guards))
    .use(batchRoutes(deps, guards, batches));
}

function signInRoutes(deps: GatewayDeps, area: AccountArea, { open, sessionReply }: Guards) {
  return new Elysia()
    .post(
      "/console/api/otp",
      open(true, async (ctx) => {
        const body = await parseBody(ctx.request, otpBody, CONSOLE_BODY_BYTES_MAX);
        if (isFailure(body)) return failed(body, ctx.requestId);
        const device = knownDeviceOf(area.secret, body.phone, readCookie(ctx.request, knownDeviceCookieName(ctx.origin)), Date.now());
        const sent = await area.otp.send(body.phone, clientAddress(ctx), device);
        if (isFailure(sent)) return failed(sent, ctx.requestId);
        return json(
          { object: "otp", phone: body.phone, code_id: sent.codeId, expires_in_s: sent.expiresInS, resend_in_s: sent.resendInS },
          ctx.requestId,
          202,
        );
      }),
      { parse: "none" },
    )
    .post(
      "/console/api/sign-in",
      open(true, async (ctx) => {
        const body = await parseBody(ctx.request, signInBody, CONSOLE_BODY_BYTES_MAX);
        if (isFailure(body)) return failed(body, ctx.requestId);
        const wrong = await area.otp.verify(body.phone, body.code_id, body.code);
        // The page says how many tries are left in its own language.
        if (wrong)
          return failed(wrong, ctx.requestId, wrong.triesLeft === undefined ? {} : { [TRIES_LEFT_HEADER]: String(wrong.triesLeft) });
        const account = await accountForPhone(deps.db, body.phone);
        // A new session id at every sign-in; the one this browser came with ends.
        const previous = await area.sessions.lookup(readCookie(ctx.request, cookieName(ctx.origin)));
        if (previous) await area.sessions.revoke(previous.accountId, previous.id);
        const created = await area.sessions.create(account.id, {
          userAgent: ctx.request.headers.get("user-agent"),
          clientAddress: clientAddress(ctx),
        });
        deps.log("info", "console_signed_in", { accountId: account.id, phone: maskPhone(body.phone), newAccount: account.created });
        // This browser is now a known device of the phone: its later code requests have a cap of their own.
        const deviceCookie = readCookie(ctx.request, knownDeviceCookieName(ctx.origin));
        const deviceId = knownDeviceOf(area.secret, body.phone, deviceCookie, Date.now()) ?? undefined;
        const reply = sessionReply({ id: created.id, accountId: account.id, phone: body.phone }, ctx.requestId, {
          "set-cookie": sessionCookie(ctx.origin, created.token, deps.env.CONSOLE_SESSION_TTL_S),
        });
        reply.headers.append("set-cookie", knownDeviceCookie(ctx.origin, knownDeviceValue(area.secret, body.phone, Date.now(), deviceId)));
        return reply;
      }),
      { parse: "none" },
    );
}

function sessionRoutes(area: AccountArea, { signedIn, sessionReply }: Guards) {
  return new Elysia()
    .get(
      "/console/api/session",
      signedIn(false, (session, ctx) => sessionReply(session, ctx.requestId)),
    )
    .post(
      "/console/api/sign-out",
      signedIn(true, async (session, ctx) => {
        await area.sessions.revoke(session.accountId, session.id);
        return json({ object: "sign_out", sessions_ended: 1 }, ctx.requestId, 200, { "set-cookie": clearedCookie(ctx.origin) });
      }),
    )
    .post(
      "/console/api/sign-out-everywhere",
      signedIn(true, async (session, ctx) => {
        const ended = await area.sessions.revokeAll(session.accountId);
        return json({ object: "sign_out", sessions_ended: ended }, ctx.requestId, 200, { "set-cookie": clearedCookie(ctx.origin) });
      }),
    )
    .get(
      "/console/api/sessions",
      signedIn(false, async (session, ctx) => {
        const list = await area.sessions.list(session.accountId);
        return json({ object: "list", data: list.map((s) => sessionObject(s, session.id)) }, ctx.requestId);
      }),
    )
    .delete(
      "/console/api/sessions/:id",
      signedIn(true, async (session, ctx) => {
        const ended = await area.sessions.revoke(session.accountId, ctx.params.id!);
        if (!ended) return failed(fail("not_found", `No session ${ctx.params.id}.`), ctx.requestId);
        const headers: Record<string, string> = ctx.params.id === session.id ? { "set-cookie": clearedCookie(ctx.origin) } : {};
        return json({ object: "session", id: ctx.params.id, ended: true }, ctx.requestId, 200, headers);
      }),
    );
}

/** Spend since `from`, as the overview shows it. */
function spentSince(totals: { billedMicro: bigint; requests: number }, from: Date, timezone: string) {
  return {
    from: from.toISOString(),
    timezone,
    spent_toman: microToToman(totals.billedMicro),
    spent_micro_toman: totals.billedMicro.toString(),
    requests: totals.requests,
  };
}

async function overviewObject(deps: GatewayDeps, session: Session) {
  const { db } = deps;
  await deps.writer.flushWithin(USAGE_FLUSH_WAIT_MS);
  const wallet = (await getWallet(db, session.accountId))!;
  const now = new Date();
  const { dayStart, monthStart } = utcPeriods(now);
  const today = await usageTotals(db, session.accountId, { from: dayStart });
  const month = await usageTotals(db, session.accountId, { from: monthStart });
  const jalali = jalaliMonthStart(now);
  const jalaliMonth = await usageTotals(db, session.accountId, { from: jalali.start });
  const available = wallet.balanceMicro - wallet.heldMicro;
  const alert = await balanceAlertState(db, session.accountId);
  return {
    object: "overview",
    account_id: session.accountId,
    phone: session.phone,
    ...walletFields(wallet),
    ...(await leaseFields(deps, session.accountId, wallet)),
    funded: await hasBeenFunded(db, session.accountId),
    low_balance: available < LOW_BALANCE_MICRO,
    low_balance_toman: microToToman(LOW_BALANCE_MICRO),
    ...alertFields(alert.thresholdMicro),
    /** The balance is below the customer's own threshold: the banner stays until it is above it again. */
    balance_alert: alert.below,
    alert_sms_daily_max: LOW_BALANCE_SMS_DAILY_MAX,
    today: spentSince(today, dayStart, "UTC"),
    month: spentSince(month, monthStart, "UTC"),
    jalali_month: { ...spentSince(jalaliMonth, jalali.start, "Asia/Tehran"), year: jalali.year, month: jalali.month },
  };
}

function walletRoutes(deps: GatewayDeps, area: AccountArea, { signedIn }: Guards) {
  const { db } = deps;
  return new Elysia()
    .get(
      "/console/api/overview",
      signedIn(false, async (session, ctx) => json(await overviewObject(deps, session), ctx.requestId)),
    )
    .put(
      "/console/api/alert",
      signedIn(true, async (session, ctx) => {
        const body = await parseBody(ctx.request, alertBody, CONSOLE_BODY_BYTES_MAX);
        if (isFailure(body)) return failed(body, ctx.requestId);
        await setLowBalanceThreshold(db, session.accountId, body.low_balance_threshold_toman);
        const alert = await balanceAlertState(db, session.accountId);
        return json({ object: "alert", ...alertFields(alert.thresholdMicro), balance_alert: alert.below }, ctx.requestId);
      }),
      { parse: "none" },
    )
    .get(
      "/console/api/topups",
      signedIn(false, async (session, ctx) => {
        const list = await area.topUps.list(session.accountId, TOPUP_LIST_MAX);
        return json({ object: "list", payments_available: area.topUps.available, data: list.map(topUpObject) }, ctx.requestId);
      }),
    )
    .post(
      "/console/api/topups",
      signedIn(true, async (session, ctx) => {
        const body = await parseBody(ctx.request, topUpBody, CONSOLE_BODY_BYTES_MAX);
        if (isFailure(body)) return failed(body, ctx.requestId);
        const started = await area.topUps.start(session.accountId, body.amount_toman, `${ctx.origin}/console/#/wallet`, clientAddress(ctx));
        if (isFailure(started)) return failed(started, ctx.requestId);
        return json({ object: "topup", id: started.id, payment_url: started.paymentUrl }, ctx.requestId, 201);
      }),
      { parse: "none" },
    )
    .get(
      "/console/api/topups/:id",
      signedIn(false, async (session, ctx) => {
        const topUp = await area.topUps.get(session.accountId, ctx.params.id!);
        return topUp ? json(topUpObject(topUp), ctx.requestId) : failed(fail("not_found", `No top-up ${ctx.params.id}.`), ctx.requestId);
      }),
    )
    .get(
      "/console/api/receipts/:id",
      signedIn(false, async (session, ctx) => {
        // Only a paid top-up of this account has a receipt; anything else is not found.
        const topUp = await area.topUps.get(session.accountId, ctx.params.id!);
        if (topUp?.state !== "verified") return failed(fail("not_found", `No receipt ${ctx.params.id}.`), ctx.requestId);
        return json({ ...topUpObject(topUp), object: "receipt", phone: session.phone }, ctx.requestId);
      }),
    )
    .post(
      "/console/api/topups/:id/check",
      signedIn(true, async (session, ctx) => {
        const topUp = await area.topUps.check(session.accountId, ctx.params.id!);
        return isFailure(topUp) ? failed(topUp, ctx.requestId) : json(topUpObject(topUp), ctx.requestId);
      }),
    );
}

/**
 * A console key's limits within its account's ceilings (src/keys/accountLimits.ts): a value above
 * one is a 400 naming the field and the ceiling; a limit not given is the ceiling, so no key
 * created here is unlimited where the operator set a ceiling.
 */
async function withinCeilings(deps: GatewayDeps, accountId: string, asked: KeyLimits): Promise<KeyLimits | Failure> {
  const limits = await deps.keys.accountLimits(accountId);
  if (!limits) return fail("not_found", `No account ${accountId}.`);
  const ceilings = [
    ["concurrency_max", asked.concurrencyMax, limits.keyConcurrencyMax],
    ["rpm", asked.rpm, limits.keyRpmMax],
    ["tpm", asked.tpm, limits.keyTpmMax],
  ] as const;
  for (const [param, value, ceiling] of ceilings) {
    if (typeof value === "number" && value > ceiling) {
      return fail("invalid_request", `${param} may be at most ${ceiling} for a key of this account (the operator's ceiling).`, { param });
    }
  }
  return {
    ...asked,
    concurrencyMax: Math.min(asked.concurrencyMax ?? CONCURRENCY_MAX_DEFAULT, limits.keyConcurrencyMax),
    rpm: asked.rpm ?? limits.keyRpmMax,
    tpm: asked.tpm ?? limits.keyTpmMax,
  };
}

/** The session's account's key `id`; another account's key is as unknown as a missing one. */
async function ownedKey(deps: GatewayDeps, session: Session, id: string) {
  const owned = await deps.keys.get(id);
  return owned && owned.accountId === session.accountId ? owned : fail("not_found", `No key ${id}.`);
}

/** Changes to one of the account's own keys: its allowlists, its revocation. */
function keyChangeRoutes(deps: GatewayDeps, { signedIn }: Guards) {
  return new Elysia()
    .patch(
      "/console/api/keys/:id",
      signedIn(true, async (session, ctx) => {
        const body = await parseBody(ctx.request, keyRestrictionsBody, CONSOLE_BODY_BYTES_MAX);
        if (isFailure(body)) return failed(body, ctx.requestId);
        const owned = await ownedKey(deps, session, ctx.params.id!);
        if (isFailure(owned)) return failed(owned, ctx.requestId);
        const record = await deps.keys.setLimits(owned.id, limitsOf(body));
        deps.bus.publish(KEY_EVENTS, deps.subjects.keyEvents, { keyId: owned.id, kind: "limits_changed" });
        deps.log("info", "key_restrictions_changed", { keyId: owned.id, by: "console" });
        const { account_id: _, ...shown } = keyObject(record!);
        return json(shown, ctx.requestId);
      }),
      { parse: "none" },
    )
    .delete(
      "/console/api/keys/:id",
      signedIn(true, async (session, ctx) => {
        const owned = await ownedKey(deps, session, ctx.params.id!);
        if (isFailure(owned)) return failed(owned, ctx.requestId);
        const record = await deps.keys.revoke(owned.id);
        deps.bus.publish(KEY_EVENTS, deps.subjects.keyEvents, { keyId: owned.id, kind: "revoked" });
        deps.log("info", "key_revoked", { keyId: owned.id, by: "console" });
        const { account_id: _, ...shown } = keyObject(record!);
        return json(shown, ctx.requestId);
      }),
    );
}

function keyRoutes(deps: GatewayDeps, { open, signedIn }: Guards) {
  const { db } = deps;
  return new Elysia()
    .get(
      "/console/api/keys",
      signedIn(false, async (session, ctx) => {
        await deps.writer.flushWithin(USAGE_FLUSH_WAIT_MS);
        await deps.keys.lastUse.flush(db).catch(() => {}); // this node's notes; others' within LAST_USE_FLUSH_MS
        const keys = await deps.keys.listForAccount(session.accountId);
        const spent = await spendByKey(db, session.accountId);
        return json(
          {
            object: "list",
            funded: await hasBeenFunded(db, session.accountId),
            data: keys.map((k) => {
              const { account_id: _, ...key } = keyObject(k.record);
              const micro = spent.get(k.record.id) ?? 0n;
              return {
                ...key,
                last_used_at: k.lastUsedAt?.toISOString() ?? null,
                spent_toman: microToToman(micro),
                spent_micro_toman: micro.toString(),
              };
            }),
          },
          ctx.requestId,
        );
      }),
    )
    .post(
      "/console/api/keys",
      signedIn(true, async (session, ctx) => {
        const body = await parseBody(ctx.request, createKeyBody, CONSOLE_BODY_BYTES_MAX);
        if (isFailure(body)) return failed(body, ctx.requestId);
        if (!(await hasBeenFunded(db, session.accountId))) {
          return failed(
            fail("wallet_not_funded", "Top up your wallet first: keys can be created once the wallet has been funded."),
            ctx.requestId,
          );
        }
        const expiresAt = body.expires_at ? new Date(body.expires_at) : null;
        if (expiresAt && (expiresAt.getTime() <= Date.now() || expiresAt.getTime() > Date.now() + KEY_EXPIRY_MS_MAX)) {
          return failed(
            fail("invalid_request", "expires_at must be in the future and within 5 years.", { param: "expires_at" }),
            ctx.requestId,
          );
        }
        const ceiled = await withinCeilings(deps, session.accountId, limitsOf(body));
        if (isFailure(ceiled)) return failed(ceiled, ctx.requestId);
        const issued = await deps.keys.issue(session.accountId, body.name, { ...ceiled, expiresAt });
        if (isFailure(issued)) return failed(issued, ctx.requestId);
        const { key, record } = issued;
        deps.log("info", "key_created", { keyId: record.id, accountId: session.accountId, by: "console" });
        const { account_id: _, ...shown } = keyObject(record);
        const base = `${deps.env.PUBLIC_URL ?? ctx.origin}/v1`;
        return json({ ...shown, key, exports: [`export OPENAI_BASE_URL=${base}`, `export OPENAI_API_KEY=${key}`] }, ctx.requestId, 201, {
          "cache-control": "no-store",
        });
      }),
      { parse: "none" },
    )
    .get(
      "/console/api/pricing",
      open(false, (ctx) => {
        const version = deps.catalog.currentVersion();
        return json(
          {
            object: "pricing",
            price_version: version?.versionId ?? null,
            toman_per_usd: version ? Number(version.tomanPerUsd) : null,
            rate_effective_at: version ? new Date(version.effectiveAtMs).toISOString() : null,
            data: deps.catalog.list().map((m) => modelObject(m, deps.pools)),
          },
          ctx.requestId,
        );
      }),
    );
}

/** The usage filter a query asks for, or why it is invalid. */
export function readUsageQuery(
  query: Record<string, string | undefined>,
): { query: z.infer<typeof usageQuery>; filter: UsageFilter } | Failure {
  const parsed = usageQuery.safeParse(query);
  if (!parsed.success) return fail("invalid_request", parsed.error.issues[0]!.message, { param: parsed.error.issues[0]!.path.join(".") });
  const filter = usageFilter(parsed.data);
  return isFailure(filter) ? filter : { query: parsed.data, filter };
}

function usageRowObject(r: Awaited<ReturnType<typeof usagePage>>[number]) {
  return {
    id: r.id.toString(),
    request_id: r.requestId,
    created_at: r.createdAt.toISOString(),
    key_id: r.keyId,
    key_name: r.keyName,
    model: r.model,
    operation: r.operation,
    input_units: r.inputUnits.toString(),
    output_units: r.outputUnits.toString(),
    cost_toman: microToToman(r.billedMicro),
    cost_micro_toman: r.billedMicro.toString(),
    status: r.status,
    duration_ms: r.durationMs,
    /** The batch whose line this was (and the line), or null for a live request. */
    batch_id: r.batchId,
    batch_line: r.batchLine,
  };
}

/** A session as the console lists it (and the operators' console, which has no current one). */
export function sessionObject(s: SessionView, currentId: string | null) {
  return {
    id: s.id,
    current: s.id === currentId,
    user_agent: s.userAgent,
    device: deviceOf(s.userAgent),
    client_address: s.clientAddress,
    created_at: s.createdAt.toISOString(),
    last_used_at: s.lastUsedAt.toISOString(),
    expires_at: s.expiresAt.toISOString(),
  };
}

/** An account's usage page, totals and daily spend as a reply (the console's, and the operators' for any account). */
export async function usageList(
  deps: GatewayDeps,
  accountId: string,
  asked: { query: z.infer<typeof usageQuery>; filter: UsageFilter },
  requestId: string,
) {
  const { query, filter } = asked;
  await deps.writer.flushWithin(USAGE_FLUSH_WAIT_MS);
  const rows = await usagePage(deps.db, accountId, filter, {
    limit: query.limit,
    beforeId: query.before ? BigInt(query.before) : undefined,
  });
  const totals = await usageTotals(deps.db, accountId, filter);
  const daily = await dailySpend(deps.db, accountId, filter);
  return json(
    {
      object: "list",
      data: rows.map(usageRowObject),
      next_before: rows.length === query.limit ? rows.at(-1)!.id.toString() : null,
      totals: {
        requests: totals.requests,
        input_units: totals.inputUnits.toString(),
        output_units: totals.outputUnits.toString(),
        cost_toman: microToToman(totals.billedMicro),
        cost_micro_toman: totals.billedMicro.toString(),
      },
      daily: daily.map((d) => ({
        day: d.day,
        cost_toman: microToToman(d.billedMicro),
        cost_micro_toman: d.billedMicro.toString(),
        requests: d.requests,
      })),
    },
    requestId,
  );
}

/** An account's usage as CSV, at most USAGE_CSV_ROWS_MAX rows. */
export async function usageCsv(deps: GatewayDeps, accountId: string, filter: UsageFilter, requestId: string): Promise<Response> {
  await deps.writer.flushWithin(USAGE_FLUSH_WAIT_MS);
  const rows = await usagePage(deps.db, accountId, filter, { limit: USAGE_CSV_ROWS_MAX });
  const body = `${[USAGE_CSV_HEADER.join(","), ...rows.map(usageCsvLine)].join("\r\n")}\r\n`;
  return new Response(body, {
    headers: {
      "content-type": "text/csv; charset=utf-8",
      "content-disposition": `attachment; filename="darvaze-usage-${new Date().toISOString().slice(0, 10)}.csv"`,
      "x-request-id": requestId,
      "cache-control": "no-store",
    },
  });
}

/**
 * The account's batches and their files: a file's bytes for the session's own account only
 * (another account's id is not found, as on /v1/files), always as a download, never shown inline.
 */
function batchRoutes(deps: GatewayDeps, { signedIn }: Guards, worker: BatchWorker | undefined) {
  return (
    new Elysia()
      .get(
        "/console/api/batches",
        signedIn(false, async (session, ctx) => {
          const { data } = await listBatches(deps.db, session.accountId, { limit: BATCHES_LIST_LIMIT_MAX });
          return json({ object: "list", data: data.map(batchObject) }, ctx.requestId);
        }),
      )
      // The cancel of POST /v1/batches/{id}/cancel, for the session's own account (another's batch is not found).
      .post(
        "/console/api/batches/:id/cancel",
        signedIn(true, async (session, ctx) => {
          if (!worker) return failed(batchesUnavailable(), ctx.requestId);
          const batch = await cancelBatch(worker, session.accountId, ctx.params.id!);
          return isFailure(batch) ? failed(batch, ctx.requestId) : json(batch, ctx.requestId);
        }),
        { parse: "none" },
      )
      .get(
        "/console/api/files/:id/content",
        signedIn(false, async (session, ctx) => {
          const id = ctx.params.id!;
          const sent = await fileStream(deps.db, session.accountId, id);
          if (!sent) return failed(fileNotFound(id), ctx.requestId);
          return new Response(sent.body, {
            headers: {
              "content-type": "application/octet-stream",
              "content-length": String(sent.bytes),
              // The id is the file's own (file-<base62>, checked by findFile): safe in the header.
              "content-disposition": `attachment; filename="${id}.jsonl"`,
              "x-content-type-options": "nosniff",
              "cache-control": "no-store",
              "x-request-id": ctx.requestId,
            },
          });
        }),
      )
  );
}

function usageRoutes(deps: GatewayDeps, { signedIn }: Guards) {
  return new Elysia()
    .get(
      "/console/api/usage",
      signedIn(false, async (session, ctx) => {
        const asked = readUsageQuery(ctx.query);
        return isFailure(asked) ? failed(asked, ctx.requestId) : usageList(deps, session.accountId, asked, ctx.requestId);
      }),
    )
    .get(
      "/console/api/usage.csv",
      signedIn(false, async (session, ctx) => {
        const asked = readUsageQuery(ctx.query);
        return isFailure(asked) ? failed(asked, ctx.requestId) : usageCsv(deps, session.accountId, asked.filter, ctx.requestId);
      }),
    );
}
