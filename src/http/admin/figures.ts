/**
 * The admin API's reads for the operators' console (each in the role matrix, each with a `gw`
 * command): customers found by phone, name, account or key; an account's usage (the console's own
 * query and CSV), sessions and wallet movements; revenue over a window by model, vendor and
 * region; upstream anomalies by backend; and the overview. The queries live in
 * src/operators/queries.ts; amounts are exact micro-toman strings beside toman strings.
 */
import { Elysia } from "elysia";
import { z } from "zod";
import { jalaliMonthStart, tehranDayStart } from "../../accountArea/calendar.ts";
import type { AccountArea } from "../../accountArea/index.ts";
import { maskPhone } from "../../accountArea/phone.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import { microToToman } from "../../catalog/prices.ts";
import { fail, isFailure } from "../../errors.ts";
import { auditLedger } from "../../ledger/audit.ts";
import { deadLetterTotals } from "../../ledger/deadletter.ts";
import { accountExists } from "../../ledger/wallets.ts";
import {
  anomaliesOf,
  type CustomerHit,
  type Revenue,
  type RevenueGroup,
  revenueOf,
  SEARCH_CHARS_MAX,
  searchCustomers,
  walletDetail,
  type Window,
} from "../../operators/queries.ts";
import { batchQueueFigures } from "../../batches/store.ts";
import type { BatchWorker } from "../../batches/worker.ts";
import { readUsageQuery, sessionObject, usageCsv, usageList } from "../console/route.ts";
import { failed, json, zodFailure } from "../guard.ts";
import { previewModel } from "./catalog.ts";
import type { adminGuard } from "./guard.ts";

/**
 * A refund is a negative adjustment whose reference is this prefix and the top-up's id: the
 * reference is once per ledger, so a top-up is refunded once (the same again is a replay, another
 * amount a conflict), and the wallet view names the top-up it refunds.
 */
export const REFUND_REFERENCE_PREFIX = "refund-";

/**
 * The overview shows the ledger audit as run at most this long ago (the audit reads every
 * transfer, hold and record; an overview left open must not run it for each refresh);
 * `GET /admin/ledger/audit` always runs it afresh.
 */
export const OVERVIEW_AUDIT_FRESH_MS = 60_000;

/** Anomalies are read over this many days back unless `from` says otherwise. */
export const ANOMALY_WINDOW_DAYS_DEFAULT = 30;
const DAY_MS = 24 * 3_600_000;

const instant = z.iso.datetime({ offset: true }).transform((v) => new Date(v));
export const windowQuery = z.strictObject({ from: instant.optional(), to: instant.optional() });
export const searchQuery = z.strictObject({ q: z.string().trim().min(1).max(SEARCH_CHARS_MAX) });

/** An amount as every reply shows it: toman for reading, micro-toman exact. */
export function money(name: string, micro: bigint): Record<string, string> {
  return { [`${name}_toman`]: microToToman(micro), [`${name}_micro_toman`]: micro.toString() };
}

function groupObject(g: RevenueGroup) {
  return { key: g.key, requests: g.requests, errors: g.errors, ...money("revenue", g.billedMicro) };
}

export function revenueObject(w: Window, r: Revenue) {
  return {
    object: "revenue",
    from: w.from.toISOString(),
    to: w.to?.toISOString() ?? null,
    requests: r.requests,
    errors: r.errors,
    ...money("revenue", r.billedMicro),
    ...money("written_off", r.writtenOffMicro),
    ...money("ledger_usage", r.ledgerMicro),
    /** The records' Σ billed equals the ledger's usage transfers of the same window. */
    reconciled: r.billedMicro === r.ledgerMicro,
    by_model: r.byModel.map(groupObject),
    by_vendor: r.byVendor.map(groupObject),
    by_region: r.byRegion.map(groupObject),
  };
}

function customerObject(c: CustomerHit) {
  return {
    id: c.accountId,
    object: "customer",
    name: c.name,
    phone: c.phone,
    phone_masked: c.phone === null ? null : maskPhone(c.phone),
    matched: c.matched,
    ...money("balance", c.balanceMicro),
    ...money("held", c.heldMicro),
    created_at: c.createdAt.toISOString(),
  };
}

const queryOf = (request: Request) => Object.fromEntries(new URL(request.url).searchParams);

/** A backend's region as the pools declare it now; `unknown` for one no longer configured. */
function regionOf(deps: GatewayDeps) {
  return (model: string, backend: string | null) =>
    deps.pools.get(model)?.backends.find((b) => b.name === backend)?.config.region ?? "unknown";
}

/** Today (Tehran) and this Jalali month, as the customers' console counts them; open-ended, so the newest record counts. */
export function periodsOf(now: Date): { today: Window; month: Window } {
  return { today: { from: tehranDayStart(now) }, month: { from: jalaliMonthStart(now).start } };
}

async function revenue(deps: GatewayDeps, w: Window) {
  await deps.writer.flush();
  return revenueOf(deps.db, w, regionOf(deps));
}

/** Every backend whose breaker is not closed, by model. */
function poolsInTrouble(deps: GatewayDeps) {
  const nowMs = performance.now();
  return deps.pools
    .all()
    .flatMap((pool) =>
      pool.backends
        .map((b) => ({ model: pool.model, backend: b.name, region: b.config.region, breaker: b.breaker.state(nowMs) }))
        .filter((b) => b.breaker !== "closed"),
    );
}

type LastAudit = { atMs: number; report: Awaited<ReturnType<typeof auditLedger>> } | null;

/**
 * The batch queue as the overview shows it: the database's figures (every node's work), the work
 * queue's depth (the cluster's with NATS), and the answering node's own part; null on a gateway
 * that runs no batches.
 */
async function batchQueue(deps: GatewayDeps, worker: BatchWorker | undefined) {
  if (!worker) return null;
  const db = await batchQueueFigures(deps.db);
  const node = worker.nodeFigures();
  return {
    open_batches: db.open,
    lines_queued: db.linesQueued,
    lines_running: db.linesRunning,
    oldest_open_batch_age_s: db.oldestOpenAt ? Math.max(0, Math.round((Date.now() - db.oldestOpenAt.getTime()) / 1000)) : null,
    queue_depth: await worker.queue.depth().catch(() => null),
    node: { lines_in_flight: node.linesInFlight, oldest_item_age_s: Math.round(node.oldestItemAgeS) },
  };
}

async function overview(
  deps: GatewayDeps,
  sources: { area: AccountArea | undefined; batches: BatchWorker | undefined },
  last: { audit: LastAudit },
  requestId: string,
): Promise<Response> {
  const { area } = sources;
  const periods = periodsOf(new Date());
  const today = await revenue(deps, periods.today);
  const month = await revenueOf(deps.db, periods.month, regionOf(deps));
  if (!last.audit || Date.now() - last.audit.atMs > OVERVIEW_AUDIT_FRESH_MS) {
    last.audit = { atMs: Date.now(), report: await auditLedger(deps.db, { holdExpiryGraceMs: deps.env.HOLD_EXPIRY_GRACE_MS }) };
  }
  const audit = last.audit.report;
  const dead = await deadLetterTotals(deps.db);
  const states = deps.payments ? await deps.payments.topups.countsByState() : null;
  return json(
    {
      object: "overview",
      today: revenueObject(periods.today, today),
      month: revenueObject(periods.month, month),
      ledger_audit: {
        ok: audit.ok,
        failed: audit.checks.filter((c) => !c.ok).map((c) => c.name),
        checked_at: new Date(last.audit.atMs).toISOString(),
      },
      dead_letters: { awaiting_replay: dead.dead, ...money("written_off", dead.writtenOffMicro) },
      sms_budget: area ? await area.smsBudget.today() : null,
      payments: states && {
        waiting: (states.created ?? 0) + (states.redirected ?? 0) + (states.verifying ?? 0),
        needs_review: states.needs_review ?? 0,
        by_state: states,
      },
      pools_in_trouble: poolsInTrouble(deps),
      batch_queue: await batchQueue(deps, sources.batches),
    },
    requestId,
  );
}

async function wallet(deps: GatewayDeps, accountId: string, requestId: string): Promise<Response> {
  if (!(await accountExists(deps.db, accountId))) return failed(fail("not_found", `No account ${accountId}.`), requestId);
  const detail = await walletDetail(deps.db, accountId);
  return json(
    {
      object: "wallet_detail",
      account_id: accountId,
      moves: detail.moves.map((m) => ({
        reference: m.reference,
        kind: m.kind,
        ...money("amount", m.amountMicro),
        reason: m.memo,
        refund_of: m.reference.startsWith(`adjustment:${REFUND_REFERENCE_PREFIX}`)
          ? m.reference.slice(`adjustment:${REFUND_REFERENCE_PREFIX}`.length)
          : null,
        at: m.createdAt.toISOString(),
      })),
      leases: detail.holds.map((h) => ({
        id: h.id,
        key_id: h.keyId,
        ...money("amount", h.amountMicro),
        ...money("posted", h.postedMicro),
        deadline: h.deadline.toISOString(),
        created_at: h.createdAt.toISOString(),
      })),
      alerts: detail.alerts.map((a) => ({
        id: a.id,
        ...money("balance", a.balanceMicro),
        ...money("threshold", a.thresholdMicro),
        status: a.status,
        reason: a.reason,
        at: a.createdAt.toISOString(),
      })),
    },
    requestId,
  );
}

async function sessions(deps: GatewayDeps, area: AccountArea | undefined, accountId: string, requestId: string): Promise<Response> {
  if (!(await accountExists(deps.db, accountId))) return failed(fail("not_found", `No account ${accountId}.`), requestId);
  const listed = area ? await area.sessions.list(accountId) : [];
  return json({ object: "list", data: listed.map((s) => sessionObject(s, null)) }, requestId);
}

async function accountUsage(deps: GatewayDeps, request: Request, accountId: string, requestId: string, csv: boolean) {
  const asked = readUsageQuery(queryOf(request));
  if (isFailure(asked)) return failed(asked, requestId);
  if (!(await accountExists(deps.db, accountId))) return failed(fail("not_found", `No account ${accountId}.`), requestId);
  return csv ? usageCsv(deps, accountId, asked.filter, requestId) : usageList(deps, accountId, asked, requestId);
}

/** The console's admin reads, as a plugin for the app. */
export function figureRoutes(
  deps: GatewayDeps,
  asAdmin: ReturnType<typeof adminGuard>,
  area: AccountArea | undefined,
  batches?: BatchWorker,
) {
  const last: { audit: LastAudit } = { audit: null };
  return new Elysia()
    .get(
      "/admin/customers",
      asAdmin(async (request, _, requestId) => {
        const query = searchQuery.safeParse(queryOf(request));
        if (!query.success) return failed(zodFailure(query.error), requestId);
        const q = query.data.q;
        const hits = await searchCustomers(deps.db, q, { prefix: deps.env.KEY_PREFIX, pepper: deps.env.KEY_PEPPER });
        return json({ object: "list", data: hits.map(customerObject) }, requestId);
      }),
    )
    .get(
      "/admin/accounts/:id/usage",
      asAdmin((request, params, requestId) => accountUsage(deps, request, params.id!, requestId, false)),
    )
    .get(
      "/admin/accounts/:id/usage.csv",
      asAdmin((request, params, requestId) => accountUsage(deps, request, params.id!, requestId, true)),
    )
    .get(
      "/admin/accounts/:id/sessions",
      asAdmin((_, params, requestId) => sessions(deps, area, params.id!, requestId)),
    )
    .get(
      "/admin/accounts/:id/wallet",
      asAdmin((_, params, requestId) => wallet(deps, params.id!, requestId)),
    )
    .get(
      "/admin/revenue",
      asAdmin(async (request, _, requestId) => {
        const query = windowQuery.safeParse(queryOf(request));
        if (!query.success) return failed(zodFailure(query.error), requestId);
        const w: Window = { from: query.data.from ?? periodsOf(new Date()).today.from, to: query.data.to };
        return json(revenueObject(w, await revenue(deps, w)), requestId);
      }),
    )
    .get(
      "/admin/anomalies",
      asAdmin(async (request, _, requestId) => {
        const query = windowQuery.safeParse(queryOf(request));
        if (!query.success) return failed(zodFailure(query.error), requestId);
        const w: Window = { from: query.data.from ?? new Date(Date.now() - ANOMALY_WINDOW_DAYS_DEFAULT * DAY_MS), to: query.data.to };
        await deps.writer.flush();
        const rows = await anomaliesOf(deps.db, w);
        return json(
          {
            object: "list",
            from: w.from.toISOString(),
            to: w.to?.toISOString() ?? null,
            data: rows.map((r) => ({
              backend: r.backend,
              model: r.model,
              anomaly: r.anomaly,
              requests: r.requests,
              last_at: r.lastAt.toISOString(),
            })),
          },
          requestId,
        );
      }),
    )
    .get(
      "/admin/overview",
      asAdmin((_, __, requestId) => overview(deps, { area, batches }, last, requestId)),
    )
    .post(
      "/admin/catalog/models/:model/preview",
      asAdmin((request, params, requestId) => previewModel(deps, request, params.model!, requestId)),
      { parse: "none" },
    );
}
