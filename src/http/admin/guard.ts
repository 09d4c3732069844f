/**
 * The one guard of every admin route: who the caller is, whether the role matrix lets their role
 * call this route, and, for a change, its audit row. A change's row holds the state before (where
 * there is one to read), the reply after (secrets taken out), the reason and the amount where money
 * moves; a support operator's adjustment is first checked against their daily ceiling.
 */
import type { GatewayDeps } from "../../admission/deps.ts";
import { backendSpec } from "../../config.ts";
import { type AuditEntry, type PendingAudit, withPendingAudit, writeAudit } from "../../operators/audit.ts";
import type { Permission } from "../../operators/roles.ts";
import { operatorObject, type OperatorStore, type Principal } from "../../operators/store.ts";
import { newRequestId } from "../../operations/input.ts";
import { fail } from "../../errors.ts";
import { failed } from "../guard.ts";
import { peekBody, permissionOf, principalFor, refusal, takeCeiling } from "./access.ts";
import { existingEntry } from "./catalog.ts";
import { adjustmentBody, keyObject } from "./route.ts";

export type AdminHandler = (
  request: Request,
  params: Record<string, string>,
  requestId: string,
  who: Principal,
) => Promise<Response> | Response;

interface Call {
  request: Request;
  params: Record<string, string>;
  requestId: string;
  who: Principal;
}

/** Fields that are secrets (shown once, or a backend's resolved key), at any depth: never kept in the audit. */
const SECRET_FIELDS = new Set(["key", "token", "otpauth_uri", "redirect_url", "api_key"]);

export function redacted(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redacted);
  if (typeof value !== "object" || value === null) return value;
  return Object.fromEntries(Object.entries(value).flatMap(([k, v]) => (SECRET_FIELDS.has(k) ? [] : [[k, redacted(v)]])));
}

/** The state a change starts from, for the changes that have one to read. */
async function beforeOf(deps: GatewayDeps, operators: OperatorStore, action: string, target: string | undefined): Promise<unknown> {
  if (target === undefined) return null;
  if (action.startsWith("key.") && action !== "key.create") {
    const key = await deps.keys.get(target);
    return key ? keyObject(key) : null;
  }
  if (action.startsWith("catalog.")) return (await existingEntry(deps, target)) ?? null;
  if (action === "pool.set") return deps.pools.get(target)?.backends.map((b) => backendSpec(b.config)) ?? null;
  if (action.startsWith("operator.")) {
    const operator = await operators.get(target);
    return operator ? operatorObject(operator) : null;
  }
  return null;
}

/** The signed amount a change moves: the body's for an adjustment or a top-up, the reply's for a completed payment. */
function amountOf(action: string, body: Record<string, unknown> | null, after: Record<string, unknown>): bigint | null {
  if (after.credited === false) return null;
  if (action === "topup.complete" && typeof after.amount_micro_toman === "string") return BigInt(after.amount_micro_toman);
  if ((action === "wallet.adjust" || action === "wallet.topup") && body) {
    const parsed = adjustmentBody.shape.amount_toman.safeParse(body.amount_toman);
    return parsed.success ? parsed.data : null;
  }
  return null;
}

function reasonOf(body: Record<string, unknown> | null): string | null {
  if (typeof body?.reason === "string") return body.reason.trim();
  // A manual top-up names its payment by reference: that is its reason.
  return typeof body?.reference === "string" ? `reference ${body.reference.trim()}` : null;
}

function targetOf(permission: Permission, call: Call, body: Record<string, unknown> | null, after: Record<string, unknown>): string {
  const param = permission.target === undefined ? undefined : call.params[permission.target];
  if (param !== undefined) return param; // decoded once, where the app reads every path (request.ts decodeParams)
  if (typeof body?.account_id === "string") return body.account_id;
  return after.id === undefined ? "-" : String(after.id);
}

async function audited(deps: GatewayDeps, operators: OperatorStore, permission: Permission, call: Call, handler: AdminHandler) {
  const action = permission.audit!;
  const body = await peekBody(call.request);
  let giveBack: (() => Promise<void>) | null = null;
  if (action === "wallet.adjust" && body) {
    const amount = adjustmentBody.shape.amount_toman.safeParse(body.amount_toman);
    const taken = amount.success ? await takeCeiling(deps, call.who, amount.data, new Date()) : null;
    if (taken && "code" in taken) return failed(taken, call.requestId);
    giveBack = taken?.giveBack ?? null;
  }
  const param = permission.target === undefined ? undefined : call.params[permission.target];
  const before = await beforeOf(deps, operators, action, param);
  const entryOf = (reply: unknown): AuditEntry => {
    const after = (typeof reply === "object" && reply !== null ? reply : {}) as Record<string, unknown>;
    return {
      action,
      target: targetOf(permission, call, body, after),
      before: redacted(before),
      after: redacted(after),
      reason: permission.money ? reasonOf(body) : typeof body?.reason === "string" ? body.reason : null,
      amountMicro: amountOf(action, body, after),
    };
  };
  // A change made in one transaction writes its row in it (auditWithin); the others' is written here, after.
  const pending: PendingAudit = { who: call.who, written: false, write: (tx, after) => writeAudit(tx, call.who, entryOf(after)) };
  let response: Response;
  try {
    response = await withPendingAudit(pending, async () => handler(call.request, call.params, call.requestId, call.who));
  } catch (error) {
    await giveBack?.();
    throw error;
  }
  if (response.status >= 300) {
    await giveBack?.();
    return response;
  }
  const reply = await response
    .clone()
    .json()
    .catch(() => null);
  // A repeated reference applied nothing: its room goes back.
  if ((reply as { credited?: unknown } | null)?.credited === false) await giveBack?.();
  if (!pending.written) await writeAudit(deps.db.orm, call.who, entryOf(reply));
  return response;
}

type RouteArgs = { request: Request; params: Record<string, string>; route: string };

/** Wraps an admin handler: the caller, the role matrix, and the audit of a change. */
export function adminGuard(deps: GatewayDeps, operators: OperatorStore) {
  return (handler: AdminHandler) =>
    async ({ request, params, route }: RouteArgs): Promise<Response> => {
      const requestId = newRequestId();
      const who = await principalFor(request, deps, operators);
      if (!who) {
        return failed(
          fail(
            "admin_unauthorized",
            "This admin endpoint needs `Authorization: Bearer <ADMIN_TOKEN>` or an operator's token (`dvz-op-…`).",
          ),
          requestId,
        );
      }
      const permission = permissionOf(request.method, route);
      const refused = refusal(who, permission, request.method, route, Date.now());
      if (refused) return failed(refused, requestId);
      const call = { request, params, requestId, who };
      if (!permission!.audit) return handler(request, params, requestId, who);
      return audited(deps, operators, permission!, call, handler);
    };
}
