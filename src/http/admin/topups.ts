/**
 * The operators' view of paid top-ups (src/payments): start one for an account (the reply has
 * the provider's payment page to send the customer to), list and show them with their state and
 * provider replies, complete or reject one in review, and run the reconciler now.
 */
import { z } from "zod";
import { microToToman } from "../../catalog/prices.ts";
import { fail, isFailure } from "../../errors.ts";
import { auditWithin } from "../../operators/audit.ts";
import type { Payments } from "../../payments/service.ts";
import { LIST_LIMIT_MAX, TOPUP_STATES, type Topup } from "../../payments/topups.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import { failed, json, zodFailure } from "../guard.ts";
import { parseBody } from "./body.ts";
import { amountToman } from "./route.ts";

export const startBody = z.strictObject({ account_id: z.string().trim().min(1).max(100), amount_toman: amountToman });
export const reason = z.string().trim().min(3).max(500);
const completeBody: z.ZodType<{ reason: string; reverse?: boolean }, unknown> = z.strictObject({ reason });
/** `reverse`: hand the payment back through the provider before closing the top-up. */
export const rejectBody: z.ZodType<{ reason: string; reverse?: boolean }, unknown> = z.strictObject({
  reason,
  reverse: z.boolean().optional(),
});
export const listQuery = z.object({
  state: z.enum(TOPUP_STATES).optional(),
  account_id: z.string().min(1).max(100).optional(),
  limit: z.coerce.number().int().min(1).max(LIST_LIMIT_MAX).default(50),
});

export function topupObject(t: Topup, options: { replies: boolean }) {
  return {
    id: t.id,
    object: "topup_payment",
    account_id: t.accountId,
    provider: t.provider,
    state: t.state,
    amount_toman: microToToman(t.amountMicro),
    amount_micro_toman: t.amountMicro.toString(),
    authority: t.authority,
    ref_id: t.refId,
    card_pan: t.cardPan,
    card_hash: t.cardHash,
    fee_toman: t.feeMicro === null ? null : microToToman(t.feeMicro),
    reason: t.reason,
    attempts: t.attempts,
    expires_at: t.expiresAt.toISOString(),
    verified_at: t.verifiedAt?.toISOString() ?? null,
    created_at: t.createdAt.toISOString(),
    updated_at: t.updatedAt.toISOString(),
    ...(options.replies ? { replies: t.replies } : {}),
  };
}

export class TopupsAdmin {
  constructor(private readonly deps: GatewayDeps) {}

  private get payments(): Payments | null {
    return this.deps.payments ?? null;
  }

  private disabled(requestId: string): Response {
    return failed(fail("service_unavailable", "Payments are not configured on this gateway (set ZARINPAL_MERCHANT_ID)."), requestId);
  }

  async start(request: Request, requestId: string): Promise<Response> {
    if (!this.payments) return this.disabled(requestId);
    const body = await parseBody(request, startBody);
    if (isFailure(body)) return failed(body, requestId);
    const started = await this.payments.topups.start(body.account_id, body.amount_toman);
    if (isFailure(started)) return failed(started, requestId);
    return json({ ...topupObject(started.topup, { replies: false }), redirect_url: started.redirectUrl }, requestId, 201);
  }

  async list(request: Request, requestId: string): Promise<Response> {
    if (!this.payments) return this.disabled(requestId);
    const query = listQuery.safeParse(Object.fromEntries(new URL(request.url).searchParams));
    if (!query.success) return failed(zodFailure(query.error), requestId);
    const rows = await this.payments.topups.list({ state: query.data.state, accountId: query.data.account_id, limit: query.data.limit });
    return json({ object: "list", data: rows.map((t) => topupObject(t, { replies: false })) }, requestId);
  }

  async show(id: string, requestId: string): Promise<Response> {
    if (!this.payments) return this.disabled(requestId);
    const row = await this.payments.topups.get(id);
    if (!row) return failed(fail("not_found", `No top-up ${id}.`), requestId);
    return json(topupObject(row, { replies: true }), requestId);
  }

  async review(request: Request, id: string, decision: "complete" | "reject", requestId: string): Promise<Response> {
    if (!this.payments) return this.disabled(requestId);
    const body = await parseBody(request, decision === "complete" ? completeBody : rejectBody);
    if (isFailure(body)) return failed(body, requestId);
    const choice = decision === "complete" ? ({ complete: true } as const) : ({ complete: false, reverse: body.reverse === true } as const);
    const row = await this.payments.topups.review(id, choice, body.reason, (tx, completed) =>
      auditWithin(tx, topupObject(completed, { replies: true })),
    );
    if (isFailure(row)) return failed(row, requestId);
    return json(topupObject(row, { replies: true }), requestId);
  }

  async reconcile(requestId: string): Promise<Response> {
    if (!this.payments) return this.disabled(requestId);
    return json({ object: "reconcile_report", ...(await this.payments.reconcile()) }, requestId);
  }
}
