/**
 * The one sequence of every paid operation, whatever the transport:
 *
 *   caller (key, origin, residency) → prepare (body, model, price, pool, reserve) → admission
 *   (the key actor's slot and hold, or 402/429) → the upstream call → delivery, settled once.
 *
 * A refusal before admission is recorded here (metrics, access line; admission records its own).
 * After admission every request is settled exactly once: a failed call at zero units with the
 * status its client got, a delivered one by the operation (`deliver`: chat settles a stream at its
 * end). A call that throws is a gateway fault: logged, 500 `internal_error`, settled at zero.
 */
import type { Backend, PoolActor, PoolCall, SendOutcome } from "../../actors/pool/pool.ts";
import type { Admission } from "../admission/settlement.ts";
import { admit, recordRefusal } from "../admission/admit.ts";
import { type Caller, type Credentials, enter } from "../admission/caller.ts";
import { operationModel, servingPool, unitPrice } from "../admission/model.ts";
import type { Reserve } from "../admission/reserve.ts";
import type { UsedUnits } from "../admission/prices.ts";
import type { GatewayDeps } from "../admission/deps.ts";
import type { CatalogModel } from "../catalog/catalog.ts";
import type { Operation } from "../catalog/seed.ts";
import { describe, fail, type Failure, isFailure } from "../errors.ts";

/** A request refused, before or at admission or by its upstream: what its client is told. */
export interface Refused {
  kind: "refused";
  failure: Failure;
  headers: Record<string, string>;
}

/** A whole reply of an operation other than chat: JSON or text, or audio as the upstream sends it. */
export interface Reply {
  kind: "reply";
  contentType: string;
  body: string | Uint8Array | ReadableStream<Uint8Array>;
  headers: Record<string, string>;
}

/** What an operation other than chat came to, for a transport to encode. */
export type OperationResult = Refused | Reply;

/** What admission needs of a prepared request. */
export interface Prepared {
  model: CatalogModel;
  reserve: Reserve;
}

/** A refusal before admission; `model` when it was known, for the record. */
export interface Unprepared {
  failure: Failure;
  model?: CatalogModel;
}

/** An admitted request, during its call: `backend` is the one that served or failed it, for the settlement. */
export interface Admitted<P extends Prepared> {
  deps: GatewayDeps;
  requestId: string;
  caller: Caller;
  prepared: P;
  admission: Admission;
  backend: string | null;
}

/** The steps of one paid operation that differ between operations; `run` orders them. */
export interface PaidSteps<P extends Prepared, C, R> {
  operation: Operation;
  prepare(caller: Caller): Promise<P | Unprepared | Failure>;
  /** The upstream call: what delivery needs, or the failure the client gets (settled at zero here). */
  call(admitted: Admitted<P>): Promise<C | Failure>;
  /** The reply from a call that succeeded; it settles what was used. */
  deliver(called: C, admitted: Admitted<P>): Promise<R>;
}

/** One paid request through its whole sequence. */
export async function run<P extends Prepared, C extends object, R>(
  deps: GatewayDeps,
  request: { requestId: string; credentials: Credentials },
  steps: PaidSteps<P, C, R>,
): Promise<R | Refused> {
  const { requestId } = request;
  const { operation } = steps;
  const startedMs = performance.now();
  const refuse = (failure: Failure, keyId: string | null, model: CatalogModel | null): Refused => {
    recordRefusal(deps, { requestId, keyId, operation, model: model?.id ?? null, startedMs }, failure);
    return { kind: "refused", failure, headers: {} };
  };
  const caller = await enter(deps, request.credentials);
  if (isFailure(caller)) return refuse(caller, null, null);
  const prepared = await steps.prepare(caller);
  if (isFailure(prepared)) return refuse(prepared, caller.key.id, null);
  if ("failure" in prepared) return refuse(prepared.failure, caller.key.id, prepared.model ?? null);
  const admission = await admit(deps, { requestId, caller, model: prepared.model, operation, startedMs, reserve: prepared.reserve });
  if ("failure" in admission) return { kind: "refused", failure: admission.failure, headers: admission.headers };
  const admitted: Admitted<P> = { deps, requestId, caller, prepared, admission, backend: null };
  const called = await steps.call(admitted).catch((error: Error): Failure => {
    deps.log("error", "upstream_call_failed", { requestId, operation, error: error.message });
    return { ...fail("internal_error", "The gateway failed to call the upstream."), retryable: false };
  });
  if (isFailure(called)) return settledFailed(admitted, called);
  return steps.deliver(called, admitted);
}

/** A request that failed after admission: settled at zero units with the status its client gets. */
async function settledFailed(admitted: Admitted<Prepared>, failure: Failure): Promise<Refused> {
  const { admission } = admitted;
  await admission.settle({ input: 0, output: 0 }, admitted.backend, describe(failure.code).status);
  return { kind: "refused", failure, headers: admission.headers };
}

/**
 * A whole reply as its wire presents it (a translation, or the operation's own shape), made
 * before the request is settled, so that no reply is billed and then fails: a translation that
 * returns a failure or throws settles the request as failed, at zero units (docs/billing.md,
 * "A reply that cannot be presented"), and its client gets that failure.
 */
export async function presented<V>(admitted: Admitted<Prepared>, present: () => V | Failure): Promise<V | Refused> {
  let value: V | Failure;
  try {
    value = present();
  } catch (error) {
    admitted.deps.log("error", "reply_present_failed", { requestId: admitted.requestId, error: (error as Error).message });
    value = fail("internal_error", "The gateway failed to present the reply; nothing was charged.");
  }
  if (!isFailure(value)) return value;
  admitted.deps.log("warn", "reply_unpresentable", { requestId: admitted.requestId, backend: admitted.backend, code: value.code });
  return settledFailed(admitted, value);
}

/** Whether `run`'s result is a refusal (a `presented` one included). */
export function isRefused(value: unknown): value is Refused {
  return typeof value === "object" && value !== null && (value as { kind?: unknown }).kind === "refused";
}

/** A model of `operation`, its price per 1M of `unit`, and a pool that may serve the caller. */
export interface PricedModel {
  model: CatalogModel;
  pricePer1m: bigint;
  pool: PoolActor;
}

/** The model (of this operation), its price for `unit` and a pool that may serve the caller. */
export function pricedModel(
  deps: GatewayDeps,
  caller: Caller,
  id: string,
  operation: Operation,
  unit: string | ((model: CatalogModel) => string | Failure),
): PricedModel | Failure {
  const model = operationModel(deps, id, operation, caller.key);
  if (isFailure(model)) return model;
  const unitName = typeof unit === "string" ? unit : unit(model);
  if (isFailure(unitName)) return unitName;
  const pricePer1m = unitPrice(model, unitName);
  if (isFailure(pricePer1m)) return pricePer1m;
  const pool = servingPool(deps, model, caller.region);
  if (isFailure(pool)) return pool;
  return { model, pricePer1m, pool };
}

/** An accepted reply read whole, from the backend that sent it. */
export interface WholeReply {
  backend: Backend;
  bytes: Uint8Array;
}

/**
 * Sends an admitted request to its pool and reads the reply whole within `bytesMax` (the pool
 * tries another backend when a reply breaks off); notes the backend for the settlement.
 */
export async function sendWhole(
  admitted: Admitted<Prepared & { pool: PoolActor }>,
  build: PoolCall["build"],
  bytesMax: number,
): Promise<WholeReply | Failure> {
  const { prepared, requestId, caller } = admitted;
  const read = await prepared.pool.sendWhole({ requestId, region: caller.region, build }, bytesMax);
  admitted.backend = read.backend?.name ?? null;
  return read.kind === "failed" ? read.failure : { backend: read.backend, bytes: read.bytes };
}

/** Sends an admitted request to its pool, its reply left to read; notes the backend for the settlement. */
export async function send(
  admitted: Admitted<Prepared & { pool: PoolActor }>,
  build: PoolCall["build"],
): Promise<Extract<SendOutcome, { kind: "reply" }> | Failure> {
  const { prepared, requestId, caller } = admitted;
  const sent = await prepared.pool.send({ requestId, region: caller.region, build });
  admitted.backend = sent.backend?.name ?? null;
  return sent.kind === "failed" ? sent.failure : sent;
}

/** A whole reply's delivery: settled at `used` with 200, then the reply the settlement may show. */
export async function settledReply(
  admitted: Admitted<Prepared>,
  used: UsedUnits,
  reply: (settled: Awaited<ReturnType<Admission["settle"]>>) => Omit<Reply, "kind" | "headers">,
): Promise<Reply> {
  const settled = await admitted.admission.settle(used, admitted.backend, 200);
  return { kind: "reply", ...reply(settled), headers: admitted.admission.headers };
}
