/**
 * The one role matrix: every admin endpoint (method and route pattern, as the app registers it)
 * and the roles it admits. The admin guard (src/http/admin/route.ts) refuses a route that has no
 * entry, for everyone; a test enumerates the app's routes against this table.
 *
 *   owner    everything, and the operators and the audit trail
 *   finance  money: top-ups, adjustments, refunds, rates, prices, receipts; key limits
 *   support  reads every customer; adjustments up to their own daily ceiling; revokes keys
 *   viewer   reads
 *
 * `audit` names the change a route makes (one audit row per success); `money` routes move money:
 * a reason is required, and a browser session must have signed in within OPERATOR_FRESH_AUTH_MS.
 */
import { OPERATOR_ROLES } from "../db/schema.ts";

export type Role = (typeof OPERATOR_ROLES)[number];
export { OPERATOR_ROLES };

export interface Permission {
  roles: readonly Role[];
  /** The audit action of a change; absent for reads. */
  audit?: string;
  /** The route parameter the change is about (the audit's target); absent: the body's or none. */
  target?: string;
  money?: boolean;
}

const ALL: readonly Role[] = OPERATOR_ROLES;
const OWNER: readonly Role[] = ["owner"];
const FINANCE: readonly Role[] = ["owner", "finance"];
const SUPPORT: readonly Role[] = ["owner", "finance", "support"];

/** Static pages that carry no data (the dashboard reads its data with a token): no credential. */
export const PUBLIC_ROUTES: ReadonlySet<string> = new Set(["GET /admin/dashboard", "GET /admin/dashboard/:file"]);

export const ROLE_MATRIX: Readonly<Record<string, Permission>> = {
  "GET /metrics": { roles: ALL },
  "POST /admin/accounts": { roles: FINANCE, audit: "account.create" },
  "GET /admin/accounts/:id": { roles: ALL },
  "PATCH /admin/accounts/:id": { roles: FINANCE, audit: "account.settings", target: "id" },
  "POST /admin/accounts/:id/topups": { roles: FINANCE, audit: "wallet.topup", target: "id", money: true },
  "POST /admin/accounts/:id/adjustments": { roles: SUPPORT, audit: "wallet.adjust", target: "id", money: true },
  "POST /admin/accounts/:id/keys": { roles: FINANCE, audit: "key.create", target: "id" },
  "PATCH /admin/keys/:id": { roles: FINANCE, audit: "key.limits", target: "id" },
  "DELETE /admin/keys/:id": { roles: SUPPORT, audit: "key.revoke", target: "id" },
  "GET /admin/pools": { roles: ALL },
  "GET /admin/pools/live": { roles: ALL },
  "PUT /admin/pools/:model": { roles: OWNER, audit: "pool.set", target: "model" },
  "GET /admin/catalog": { roles: ALL },
  "GET /admin/catalog/changes": { roles: ALL },
  "GET /admin/catalog/import": { roles: ALL },
  // A dry run (the diff alone) is recorded too: who looked at which catalog file, and what it would change.
  "POST /admin/catalog/import": { roles: FINANCE, audit: "catalog.import" },
  "PUT /admin/catalog/models/:model": { roles: FINANCE, audit: "catalog.put", target: "model" },
  "POST /admin/catalog/models/:model/aliases": { roles: FINANCE, audit: "catalog.alias", target: "model" },
  "POST /admin/catalog/models/:model/retire": { roles: FINANCE, audit: "catalog.retire", target: "model" },
  "POST /admin/rates": { roles: FINANCE, audit: "rate.set" },
  "GET /admin/rates": { roles: ALL },
  "GET /admin/ledger/audit": { roles: ALL },
  "POST /admin/topups": { roles: FINANCE, audit: "topup.start" },
  "GET /admin/topups": { roles: ALL },
  "POST /admin/topups/reconcile": { roles: FINANCE, audit: "topup.reconcile" },
  "GET /admin/topups/:id": { roles: ALL },
  "POST /admin/topups/:id/complete": { roles: FINANCE, audit: "topup.complete", target: "id", money: true },
  "POST /admin/topups/:id/reject": { roles: FINANCE, audit: "topup.reject", target: "id", money: true },
  "GET /admin/usage/dead-letters": { roles: ALL },
  "POST /admin/usage/dead-letters/:id/replay": { roles: FINANCE, audit: "dead_letter.replay", target: "id" },
  "GET /admin/operators": { roles: OWNER },
  "POST /admin/operators": { roles: OWNER, audit: "operator.add" },
  "PATCH /admin/operators/:id": { roles: OWNER, audit: "operator.change", target: "id" },
  "DELETE /admin/operators/:id": { roles: OWNER, audit: "operator.remove", target: "id" },
  "POST /admin/operators/:id/tokens": { roles: OWNER, audit: "operator_token.create", target: "id" },
  "DELETE /admin/operator-tokens/:id": { roles: OWNER, audit: "operator_token.revoke", target: "id" },
  "GET /admin/audit": { roles: OWNER },
  // The operators' console's reads (src/http/admin/figures.ts).
  "GET /admin/customers": { roles: ALL },
  "GET /admin/accounts/:id/usage": { roles: ALL },
  "GET /admin/accounts/:id/usage.csv": { roles: ALL },
  "GET /admin/accounts/:id/sessions": { roles: ALL },
  "GET /admin/accounts/:id/wallet": { roles: ALL },
  "GET /admin/revenue": { roles: ALL },
  "GET /admin/anomalies": { roles: ALL },
  "GET /admin/overview": { roles: ALL },
  // A preview changes nothing; it is finance's, who make the change it previews.
  "POST /admin/catalog/models/:model/preview": { roles: FINANCE },
};

/** The permission of a route, by method and pattern; undefined: not in the matrix (refused). */
export function permissionOf(method: string, route: string): Permission | undefined {
  return ROLE_MATRIX[`${method.toUpperCase()} ${route}`];
}

export function isRole(value: string): value is Role {
  return (OPERATOR_ROLES as readonly string[]).includes(value);
}
