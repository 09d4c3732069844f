/**
 * The operators and the audit trail, for owners (the role matrix says so):
 *
 *   GET    /admin/operators                   the live operators
 *   POST   /admin/operators                   `{login, name, role, password, adjust_daily_max_toman?}`: 201, with the
 *                                             TOTP secret as an otpauth:// URI, shown this once
 *   PATCH  /admin/operators/{id}              `{role?, name?, adjust_daily_max_toman?}`
 *   DELETE /admin/operators/{id}              removes them, their tokens and sessions
 *   POST   /admin/operators/{id}/tokens       `{name}`: a personal token `dvz-op-…`, shown this once
 *   DELETE /admin/operator-tokens/{id}        revokes one
 *   GET    /admin/audit?actor=&action=&target=&from=&to=&limit=
 */
import { z } from "zod";
import type { GatewayDeps } from "../../admission/deps.ts";
import { fail, isFailure } from "../../errors.ts";
import { AUDIT_LISTED_MAX, auditObject, searchAudit } from "../../operators/audit.ts";
import { OPERATOR_ROLES } from "../../operators/roles.ts";
import { operatorObject, type OperatorStore } from "../../operators/store.ts";
import { otpauthUri } from "../../operators/totp.ts";
import { failed, json, zodFailure } from "../guard.ts";
import { parseBody } from "./body.ts";
import { amountToman } from "./route.ts";

/** Passwords shorter than this are refused: the second factor is no reason for a weak first. */
export const OPERATOR_PASSWORD_CHARS_MIN = 12;
export const OPERATOR_PASSWORD_CHARS_MAX = 200;

const role = z.enum(OPERATOR_ROLES);
const login = z
  .string()
  .trim()
  .regex(/^[a-zA-Z0-9._@-]{2,100}$/, "2 to 100 letters, digits or . _ @ -");
const name = z.string().trim().min(1).max(200);
export const addOperatorBody = z.strictObject({
  login,
  name,
  role,
  password: z.string().min(OPERATOR_PASSWORD_CHARS_MIN).max(OPERATOR_PASSWORD_CHARS_MAX),
  adjust_daily_max_toman: amountToman.optional(),
});
export const changeOperatorBody = z
  .strictObject({ role: role.optional(), name: name.optional(), adjust_daily_max_toman: amountToman.optional() })
  .refine((b) => Object.values(b).some((v) => v !== undefined), "name at least one of role, name, adjust_daily_max_toman");
export const tokenBody = z.strictObject({ name });
export const auditQuery = z.strictObject({
  actor: z.string().min(1).max(100).optional(),
  action: z.string().min(1).max(100).optional(),
  target: z.string().min(1).max(300).optional(),
  from: z.iso.datetime({ offset: true }).optional(),
  to: z.iso.datetime({ offset: true }).optional(),
  limit: z.coerce.number().int().min(1).max(AUDIT_LISTED_MAX).default(100),
});

const lastOwner = () => fail("invalid_request", "This is the last owner: make another owner first.");

export function tokenObject(t: { id: string; operatorId: string; name: string; display: string; createdAt: Date; revokedAt: Date | null }) {
  return {
    id: t.id,
    object: "operator_token",
    operator_id: t.operatorId,
    name: t.name,
    display: t.display,
    created_at: t.createdAt.toISOString(),
    revoked_at: t.revokedAt?.toISOString() ?? null,
  };
}

export class OperatorsAdmin {
  constructor(
    private readonly deps: GatewayDeps,
    readonly store: OperatorStore,
  ) {}

  async list(requestId: string): Promise<Response> {
    return json({ object: "list", data: (await this.store.list()).map(operatorObject) }, requestId);
  }

  async add(request: Request, requestId: string): Promise<Response> {
    const body = await parseBody(request, addOperatorBody);
    if (isFailure(body)) return failed(body, requestId);
    const made = await this.store.add({ ...body, adjustDailyMaxMicro: body.adjust_daily_max_toman });
    if (!made) return failed(fail("invalid_request", `An operator signs in as ${body.login} already.`, { param: "login" }), requestId);
    this.deps.log("info", "operator_added", { operatorId: made.operator.id, role: body.role });
    return json({ ...operatorObject(made.operator), otpauth_uri: otpauthUri(made.secret, made.operator.login) }, requestId, 201);
  }

  async change(request: Request, id: string, requestId: string): Promise<Response> {
    const body = await parseBody(request, changeOperatorBody);
    if (isFailure(body)) return failed(body, requestId);
    const row = await this.store.change(id, { role: body.role, name: body.name, adjustDailyMaxMicro: body.adjust_daily_max_toman });
    if (row === "last_owner") return failed(lastOwner(), requestId);
    return row ? json(operatorObject(row), requestId) : failed(fail("not_found", `No operator ${id}.`), requestId);
  }

  async remove(id: string, requestId: string): Promise<Response> {
    const row = await this.store.remove(id);
    if (row === "last_owner") return failed(lastOwner(), requestId);
    return row ? json(operatorObject(row), requestId) : failed(fail("not_found", `No operator ${id}.`), requestId);
  }

  async createToken(request: Request, operatorId: string, requestId: string): Promise<Response> {
    const body = await parseBody(request, tokenBody);
    if (isFailure(body)) return failed(body, requestId);
    if (!(await this.store.get(operatorId))) return failed(fail("not_found", `No operator ${operatorId}.`), requestId);
    const { token, record } = await this.store.createToken(operatorId, body.name);
    return json({ ...tokenObject(record), token }, requestId, 201);
  }

  async revokeToken(id: string, requestId: string): Promise<Response> {
    const row = await this.store.revokeToken(id);
    return row ? json(tokenObject(row), requestId) : failed(fail("not_found", `No live operator token ${id}.`), requestId);
  }

  async audit(request: Request, requestId: string): Promise<Response> {
    const query = auditQuery.safeParse(Object.fromEntries(new URL(request.url).searchParams));
    if (!query.success) return failed(zodFailure(query.error), requestId);
    const { from, to, ...rest } = query.data;
    const rows = await searchAudit(this.deps.db, {
      ...rest,
      from: from === undefined ? undefined : new Date(from),
      to: to === undefined ? undefined : new Date(to),
    });
    return json({ object: "list", data: rows.map(auditObject) }, requestId);
  }
}
