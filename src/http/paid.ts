/**
 * Admission and settlement shared by every paid operation but chat (which keeps its own exact
 * token recount): reserve → call → settle.
 *
 *   admitPaid:  a small ticket to the key actor over the bus (ADMIT) with the reserve computed
 *               from the request (input bytes, images, characters, audio seconds); when the cheap
 *               reserve does not fit the wallet and the operation can price itself exactly, it
 *               asks once more with the exact reserve. A refusal (402/429) comes before any
 *               upstream call.
 *   settlePaid: the units actually used (SETTLE), once per admitted request, whatever happened;
 *               the key actor never bills more than the admitted reserve.
 *
 * Prices are toman per 1M units, so `units × price` is micro-toman exactly.
 */
import { ADMIT, SETTLE, type AdmitTicket, type RateInfo, type Settlement } from "../../actors/protocol.ts";
import type { SendOutcome } from "../../actors/pool/pool.ts";
import { partitionOf } from "../../actors/subjects.ts";
import type { CatalogModel } from "../catalog/catalog.ts";
import type { Operation } from "../catalog/seed.ts";
import { describe, fail, type Failure } from "../errors.ts";
import type { KeyRecord } from "../keys/store.ts";
import { observeRequest } from "../metrics/observe.ts";
import { readBounded } from "../providers/upstream.ts";
import type { EdgeDeps } from "./deps.ts";

/** HTTP-style status recorded for a request whose client went away before the end. */
export const STATUS_CLIENT_CLOSED = 499;

/** `x-ratelimit-*` headers, OpenAI's names, for the limits the key has. */
export function rateHeaders(rate: RateInfo | undefined): Record<string, string> {
  const headers: Record<string, string> = {};
  if (!rate) return headers;
  if (rate.limitRequests !== undefined) {
    headers["x-ratelimit-limit-requests"] = String(rate.limitRequests);
    headers["x-ratelimit-remaining-requests"] = String(rate.remainingRequests ?? 0);
    headers["x-ratelimit-reset-requests"] = `${rate.resetRequestsS ?? 0}s`;
  }
  if (rate.limitTokens !== undefined) {
    headers["x-ratelimit-limit-tokens"] = String(rate.limitTokens);
    headers["x-ratelimit-remaining-tokens"] = String(rate.remainingTokens ?? 0);
    headers["x-ratelimit-reset-tokens"] = `${rate.resetTokensS ?? 0}s`;
  }
  return headers;
}

/** The unit price of a model, or a 403 naming what is missing. */
export function unitPrice(model: CatalogModel, unit: string, param = "model"): bigint | Failure {
  const price = model.price.tomanPer1m.get(unit);
  if (price === undefined) return fail("model_forbidden", `${model.id} has no price for \`${unit}\` and cannot serve this request.`, { param });
  return price;
}

/** What to reserve: `units` of one priced unit (tokens, images, characters, seconds). */
export interface PaidReserve {
  requestId: string;
  key: KeyRecord;
  model: CatalogModel;
  operation: Exclude<Operation, "chat">;
  unit: string;
  pricePer1m: bigint;
  units: number;
  /** Tokens for the key's tokens-per-minute window (0 for operations not counted in tokens). */
  tokens: number;
  /** The units are exact (characters, images, seconds); false for a cheap upper bound. */
  exact: boolean;
  /** The exact units, when the cheap bound does not fit the wallet. */
  exactUnits?: () => Promise<number>;
}

export interface PaidAdmission extends PaidReserve {
  holdId: string;
  reserveMicro: bigint;
  headers: Record<string, string>;
  startedMs: number;
}

export type PaidAdmit = PaidAdmission | { failure: Failure; headers: Record<string, string> };

export async function admitPaid(deps: EdgeDeps, r: PaidReserve): Promise<PaidAdmit> {
  const startedMs = performance.now();
  const subject = deps.subjects.keyAdmit(partitionOf(r.key.id));
  let units = r.units;
  let ticket: AdmitTicket = {
    keyId: r.key.id,
    requestId: r.requestId,
    model: r.model.id,
    reserveMicro: BigInt(units) * r.pricePer1m,
    reserveTokens: r.tokens,
    exact: r.exact,
  };
  try {
    let reply = await deps.bus.request(ADMIT, subject, ticket);
    if (!reply.ok && reply.exactNeeded && !r.exact && r.exactUnits) {
      units = Math.min(units, await r.exactUnits());
      const tokens = r.tokens > 0 ? units : 0;
      ticket = { ...ticket, reserveMicro: BigInt(units) * r.pricePer1m, reserveTokens: tokens, exact: true };
      reply = await deps.bus.request(ADMIT, subject, ticket);
    }
    const headers = rateHeaders(reply.rate);
    if (!reply.ok) {
      deps.metrics.refused(r.operation, r.model.id, describe(reply.failure.code as Failure["code"]).status);
      return { failure: reply.failure as Failure, headers };
    }
    return { ...r, units, holdId: reply.holdId, reserveMicro: ticket.reserveMicro, headers, startedMs };
  } catch (error) {
    deps.log("error", "admit_unreachable", { requestId: r.requestId, error: (error as Error).message });
    return { failure: fail("service_unavailable", "Admission is unavailable right now; try again shortly.", { retryAfterS: 1 }), headers: {} };
  }
}

/**
 * Settles the units used (0 when the upstream failed). Call once per admission: the key actor
 * posts by request id, so a second call would be refused, not billed twice.
 */
export async function settlePaid(deps: EdgeDeps, a: PaidAdmission, units: number, backend: string | null, status: number): Promise<bigint | null> {
  const settlement: Settlement = {
    keyId: a.key.id,
    requestId: a.requestId,
    holdId: a.holdId,
    reserveMicro: a.reserveMicro,
    model: a.model.id,
    operation: a.operation,
    backend,
    priceVersionId: a.model.price.versionId,
    inputUnits: BigInt(units),
    outputUnits: 0n,
    inputPricePer1m: a.pricePer1m,
    outputPricePer1m: 0n,
    status,
    durationMs: Math.round(performance.now() - a.startedMs),
  };
  try {
    const reply = await deps.bus.request(SETTLE, deps.subjects.keySettle(partitionOf(a.key.id)), settlement);
    if (!reply.ok) {
      deps.log("error", "settle_refused", { requestId: a.requestId, code: reply.failure.code });
      return null;
    }
    observeRequest(deps, {
      requestId: a.requestId,
      keyId: a.key.id,
      keyName: a.key.name,
      operation: a.operation,
      model: a.model.id,
      backend,
      status,
      durationMs: settlement.durationMs,
      inputTokens: a.tokens > 0 ? units : 0,
      outputTokens: 0,
      billedMicro: reply.billedMicro,
      meteredMicro: reply.meteredMicro,
    });
    return reply.billedMicro;
  } catch (error) {
    deps.log("error", "settle_unreachable", { requestId: a.requestId, error: (error as Error).message });
    return null;
  }
}

/** The catalog model for an operation, or the 404/400 a client expects. */
export function operationModel(deps: EdgeDeps, id: string, operation: Operation): CatalogModel | Failure {
  const model = deps.catalog.get(id);
  if (!model) return fail("model_not_found", `The model \`${id}\` does not exist or you do not have access to it.`, { param: "model" });
  if (model.operation !== operation) {
    return fail("invalid_request", `\`${model.id}\` is a ${model.operation} model, not a ${operation} model.`, { param: "model" });
  }
  return model;
}

/** `x-darvaze-residency`: undefined, or `in-country` (anything else is a 400). */
export function residencyOf(request: Request): "in-country" | undefined | Failure {
  const residency = request.headers.get("x-darvaze-residency");
  if (residency === null) return undefined;
  if (residency === "in-country") return residency;
  return fail("invalid_request", "x-darvaze-residency must be `in-country` when set.", { param: "x-darvaze-residency" });
}

/**
 * Reads an accepted upstream reply to its end, within `bytesMax` (a larger reply is a 502, and
 * the upstream is aborted), then frees the backend's slot.
 */
export async function readReplyBytes(sent: Extract<SendOutcome, { kind: "reply" }>, bytesMax: number): Promise<Uint8Array | Failure> {
  let complete = false;
  try {
    const { bytes, truncated } = await readBounded(sent.reply.response, bytesMax);
    if (truncated) return fail("upstream_error", `The upstream reply is larger than the limit of ${bytesMax} bytes.`);
    complete = true;
    return bytes;
  } catch (error) {
    return fail("upstream_error", `The upstream reply broke off: ${(error as Error).message}`);
  } finally {
    if (complete) sent.reply.finish();
    else sent.reply.abort();
    sent.release();
  }
}
