/**
 * Who calls the admin API, and what they may do: the guard every /admin route goes through
 * (src/http/admin/route.ts wraps it). The caller is ADMIN_TOKEN (an owner, shown in the audit as
 * `admin_token`), an operator's personal token (`Bearer dvz-op-…`), or an operator's browser
 * session forwarded from /operators/api/admin (src/http/operators/route.ts). The role matrix
 * (src/operators/roles.ts) decides; a route missing from it is refused to everyone.
 */
import { timingSafeEqual } from "node:crypto";
import { tehranDayStart } from "../../accountArea/calendar.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import { microToToman } from "../../catalog/prices.ts";
import { fail, type Failure } from "../../errors.ts";
import { adjustRoomUsed, giveBackAdjustRoom, takeAdjustRoom } from "../../operators/ceiling.ts";
import { permissionOf, type Permission } from "../../operators/roles.ts";
import { type OperatorStore, type Principal, principalOf } from "../../operators/store.ts";
import { bearerToken, clientAddressOf, readJsonBodyText } from "../request.ts";
import { ADMIN_BODY_BYTES_MAX, ADMIN_BODY_DEPTH_MAX } from "./body.ts";

/** A browser session moves money only this soon after its sign-in. */
export const OPERATOR_FRESH_AUTH_MS = 10 * 60_000;

const digest = (s: string) => new Bun.CryptoHasher("sha256").update(s).digest();

export function adminAuthorized(request: Request, adminToken: string): boolean {
  const presented = bearerToken(request);
  // Compare digests so the comparison takes the same time whatever the lengths.
  return presented !== null && timingSafeEqual(digest(presented), digest(adminToken));
}

/** Requests forwarded from an operator's session, with the principal the session proved. */
const forwarded = new WeakMap<Request, Principal>();

export function forwardAs(request: Request, who: Principal): void {
  forwarded.set(request, who);
}

/** The caller of an admin request, or null when nothing it presented is good. */
export async function principalFor(request: Request, deps: GatewayDeps, operators: OperatorStore): Promise<Principal | null> {
  const passed = forwarded.get(request);
  if (passed) return passed;
  const address = clientAddressOf(request);
  if (adminAuthorized(request, deps.env.ADMIN_TOKEN)) {
    return {
      actor: "admin_token",
      role: "owner",
      via: "admin_token",
      tokenId: null,
      signedInAtMs: null,
      adjustDailyMaxMicro: null,
      address,
    };
  }
  const presented = bearerToken(request);
  const found = presented === null ? null : await operators.byToken(presented);
  return found ? principalOf(found.operator, "token", { tokenId: found.tokenId, address }) : null;
}

/** Refuses what the caller's role may not do here; null: go ahead. */
export function refusal(who: Principal, permission: Permission | undefined, method: string, route: string, nowMs: number): Failure | null {
  if (!permission) return fail("role_refused", `${method} ${route} is not in the role matrix: no one may call it.`);
  if (!permission.roles.includes(who.role)) {
    return fail("role_refused", `The ${who.role} role may not call ${method} ${route}; it needs one of: ${permission.roles.join(", ")}.`);
  }
  if (permission.money && who.via === "session" && nowMs - (who.signedInAtMs ?? 0) > OPERATOR_FRESH_AUTH_MS) {
    return fail(
      "fresh_sign_in_required",
      `Moving money needs a sign-in within the last ${OPERATOR_FRESH_AUTH_MS / 60_000} minutes: sign in again (POST /operators/api/sign-in).`,
    );
  }
  return null;
}

/** The JSON body of a change, read from a copy (the handler reads the request itself); null: none or not JSON. */
export async function peekBody(request: Request): Promise<Record<string, unknown> | null> {
  if (request.body === null) return null;
  const read = await readJsonBodyText(request.clone() as Request, { bytesMax: ADMIN_BODY_BYTES_MAX, depthMax: ADMIN_BODY_DEPTH_MAX });
  if ("code" in read) return null;
  const value = read.value;
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
}

/**
 * Takes a support operator's adjustment from their Tehran day's room: a refusal past the ceiling,
 * else what gives it back if the adjustment does not happen (null: no ceiling applies).
 */
export async function takeCeiling(
  deps: GatewayDeps,
  who: Principal,
  amountMicro: bigint,
  now: Date,
): Promise<Failure | { giveBack: () => Promise<void> } | null> {
  if (who.role !== "support" || who.adjustDailyMaxMicro === null) return null;
  const day = tehranDayStart(now);
  const magnitude = amountMicro < 0n ? -amountMicro : amountMicro;
  if (await takeAdjustRoom(deps.db, who.actor, day, magnitude, who.adjustDailyMaxMicro)) {
    return { giveBack: () => giveBackAdjustRoom(deps.db, who.actor, day, magnitude) };
  }
  const used = await adjustRoomUsed(deps.db, who.actor, day);
  return fail(
    "ceiling_exceeded",
    `This adjustment would take today's adjustments (Tehran day) to ${microToToman(used + magnitude)} toman, above this operator's ceiling of ${microToToman(who.adjustDailyMaxMicro)} toman.`,
  );
}

export { permissionOf };
