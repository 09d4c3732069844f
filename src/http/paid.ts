/**
 * What the HTTP routes of the paid operations other than chat share: the model of the
 * operation with its price and a pool where the caller's request may go, the recorded refusal,
 * and the bounded read of an upstream reply. Admission itself (the caller, the reserve, the
 * hold, the settlement) is src/admission, the one path of every paid operation.
 */
import type { PoolActor, SendOutcome } from "../../actors/pool/pool.ts";
import { type Caller, operationModel, recordRefusal, servingPool, unitPrice } from "../admission/admission.ts";
import type { CatalogModel } from "../catalog/catalog.ts";
import type { Operation } from "../catalog/seed.ts";
import { fail, type Failure, isFailure } from "../errors.ts";
import { readBounded } from "../providers/upstream.ts";
import type { EdgeDeps } from "./deps.ts";
import { failed } from "./guard.ts";

/** A paid operation's request, from its arrival: for the refusal it may be recorded as. */
export interface PaidContext {
  requestId: string;
  operation: Exclude<Operation, "chat">;
  startedMs: number;
}

/** The refusal of a request before any backend, recorded (metrics, access line) and answered. */
export function refused(
  deps: EdgeDeps,
  ctx: PaidContext,
  caller: Caller | null,
  failure: Failure,
  model: CatalogModel | null = null,
): Response {
  recordRefusal(deps, { ...ctx, keyId: caller?.key.id ?? null, model: model?.id ?? null }, failure);
  return failed(failure, ctx.requestId);
}

export interface PricedModel {
  model: CatalogModel;
  pricePer1m: bigint;
  pool: PoolActor;
}

/** The model (of this operation), its price for `unit` and a pool that may serve the caller. */
export function pricedModel(
  deps: EdgeDeps,
  caller: Caller,
  id: string,
  operation: Operation,
  unit: string | ((model: CatalogModel) => string | Failure),
): PricedModel | Failure {
  const model = operationModel(deps, id, operation);
  if (isFailure(model)) return model;
  const unitName = typeof unit === "string" ? unit : unit(model);
  if (isFailure(unitName)) return unitName;
  const pricePer1m = unitPrice(model, unitName);
  if (isFailure(pricePer1m)) return pricePer1m;
  const pool = servingPool(deps, model, caller.region);
  if (isFailure(pool)) return pool;
  return { model, pricePer1m, pool };
}

/**
 * Reads an accepted upstream reply to its end, within `bytesMax` (a larger reply is a 502, and
 * the upstream is aborted), and closes it.
 */
export async function readReplyBytes(sent: Extract<SendOutcome, { kind: "reply" }>, bytesMax: number): Promise<Uint8Array | Failure> {
  try {
    const { bytes, truncated } = await readBounded(sent.reply.response, bytesMax);
    if (truncated) {
      sent.reply.close("abandoned");
      return fail("upstream_error", `The upstream reply is larger than the limit of ${bytesMax} bytes.`);
    }
    sent.reply.close("done");
    return bytes;
  } catch (error) {
    sent.reply.close("failed");
    return fail("upstream_error", `The upstream reply broke off: ${(error as Error).message}`);
  }
}
