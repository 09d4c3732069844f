/**
 * The one sequence of every paid operation, whatever the transport:
 *
 *   caller (key, origin, residency) → body (the operation's schema) → model, price and pool →
 *   the operation's checks and reserve → admission (the key actor's slot and hold, or 402/429)
 *   → the upstream call → the reply read, settled once → the answer.
 *
 * An operation gives this sequence its parts (`PaidOperation`): how its body is read, which
 * model and unit it is priced by, its reserve, its call and its reading of the reply; it never
 * orders them. A refusal before admission is recorded here (metrics, access line; admission
 * records its own). After admission every request is settled exactly once, here: a reply at
 * the units it used (`settleUsed`; a stream at its end, through the same function), a failure
 * at zero units with the status its client got (`settledFailed`), or at the units the operation
 * bills for it (a client that hung up while its chat was generated). A call that throws is a
 * gateway fault: logged, 500 `internal_error`, settled at zero.
 */
import type { Backend, PoolCall, SendOutcome } from "../../actors/pool/pool.ts";
import { admit, recordRefusal } from "../admission/admit.ts";
import { type Caller, enter } from "../admission/caller.ts";
import type { GatewayDeps } from "../admission/deps.ts";
import { pricedModel, type PricedModel } from "../admission/model.ts";
import type { UsedUnits } from "../admission/prices.ts";
import type { Reserve } from "../admission/reserve.ts";
import type { Admission, Settled, SettleExtra } from "../admission/settlement.ts";
import type { CatalogModel } from "../catalog/catalog.ts";
import type { Operation } from "../catalog/seed.ts";
import { describe, fail, type Failure, isFailure } from "../errors.ts";
import type { OperationInput } from "./input.ts";
import type { OperationResult, Refused, Reply, Streamed, WholeResult } from "./result.ts";

export type { OperationResult, Refused, Reply, Streamed, WholeResult } from "./result.ts";

/**
 * What the paid sequence uses of the gateway's services: the caller's key, the catalog and
 * pools, admission and its settlement; an operation's parts take the part they need of it.
 */
export type PaidDeps = Pick<GatewayDeps, "env" | "keys" | "catalog" | "pools" | "bus" | "subjects" | "writer" | "metrics" | "log" | "db">;

/** What admission needs of a prepared request: the model it is priced by, its pool, its reserve. */
export interface Prepared extends PricedModel {
  reserve: Reserve;
}

/** A refusal before admission; `model` when it was known, for the record. */
export interface Unprepared {
  failure: Failure;
  model?: CatalogModel;
}

/** An admitted request, during its call: `backend` is the one that served or failed it, for the settlement. */
export interface Admitted<P extends Prepared> {
  deps: PaidDeps;
  requestId: string;
  caller: Caller;
  prepared: P;
  admission: Admission;
  backend: string | null;
}

/** What a request is settled at: the units it used, the status its client got, what the record needs beyond. */
export interface Bill {
  used: UsedUnits;
  status: number;
  extra?: SettleExtra;
}

/**
 * A reply read from a call that succeeded: the units it used, and the answer. `present` makes
 * the reply's value before the request is settled (a translation, or the operation's own shape):
 * one that fails settles the request at zero instead (`presented`).
 */
export interface Delivered<V> {
  used: UsedUnits;
  extra?: SettleExtra;
  present?: () => V | Failure;
  /** The answer once settled (`settled` null when the key actor could not be reached), from the presented value. */
  reply(settled: Settled | null, shown: V | undefined): Omit<Reply, "kind" | "headers">;
}

/** The parts of one paid operation, which `run` orders: its own, and pure where they can be. */
export interface PaidOperation<B, P extends Prepared, C, V = unknown, S extends Streamed = never> {
  operation: Operation;
  /** The body, read within the transport's bounds and checked by the operation's schema. */
  read(input: OperationInput): Promise<B | Failure>;
  /** The model the body names, and the unit its price is read for (chosen from the model when the body's fields decide it). */
  priced(body: B): { model: string; unit: string | ((model: CatalogModel) => string | Failure) };
  /** The operation's own checks and its reserve (the cost value). */
  prepare(body: B, priced: PricedModel, caller: Caller): Promise<P | Unprepared | Failure>;
  /** The upstream call: what delivery needs, or the failure the client gets. */
  call(admitted: Admitted<P>): Promise<C | Failure>;
  /** What a failed call is billed, when not zero (a client that hung up while its chat was generated). */
  billFailed?(admitted: Admitted<P>, failure: Failure): Promise<Bill | null>;
  /** The reply read: the units used and the answer, or a stream (settled at its end through `settleUsed`). */
  deliver(called: C, admitted: Admitted<P>): Promise<Delivered<V> | Refused | S>;
}

/** One paid request through its whole sequence (an operation whose reply is whole comes to a WholeResult). */
export function run<B, P extends Prepared, C extends object, V>(
  deps: PaidDeps,
  input: OperationInput,
  op: PaidOperation<B, P, C, V>,
): Promise<WholeResult>;
export function run<B, P extends Prepared, C extends object, V>(
  deps: PaidDeps,
  input: OperationInput,
  op: PaidOperation<B, P, C, V, Streamed>,
): Promise<OperationResult>;
export async function run<B, P extends Prepared, C extends object, V>(
  deps: PaidDeps,
  input: OperationInput,
  op: PaidOperation<B, P, C, V, Streamed>,
): Promise<OperationResult> {
  const { requestId } = input;
  const { operation } = op;
  const startedMs = performance.now();
  const refuse = (failure: Failure, keyId: string | null, model: CatalogModel | null): Refused => {
    recordRefusal(deps, { requestId, keyId, operation, model: model?.id ?? null, startedMs }, failure);
    return { kind: "refused", failure, headers: {} };
  };
  const caller = await enter(deps, input.credentials);
  if (isFailure(caller)) return refuse(caller, null, null);
  const body = await op.read(input);
  if (isFailure(body)) return refuse(body, caller.key.id, null);
  const named = op.priced(body);
  const priced = pricedModel(deps, caller, named.model, operation, named.unit);
  if (isFailure(priced)) return refuse(priced, caller.key.id, null);
  const prepared = await op.prepare(body, priced, caller);
  if (isFailure(prepared)) return refuse(prepared, caller.key.id, null);
  if ("failure" in prepared) return refuse(prepared.failure, caller.key.id, prepared.model ?? null);
  const admission = await admit(deps, { requestId, caller, model: prepared.model, operation, startedMs, reserve: prepared.reserve });
  if ("failure" in admission) return { kind: "refused", failure: admission.failure, headers: admission.headers };
  const admitted: Admitted<P> = { deps, requestId, caller, prepared, admission, backend: null };
  const called = await op.call(admitted).catch((error: Error): Failure => {
    deps.log("error", "upstream_call_failed", { requestId, operation, error: error.message });
    return { ...fail("internal_error", "The gateway failed to call the upstream."), retryable: false };
  });
  if (isFailure(called)) {
    const bill = await op.billFailed?.(admitted, called);
    if (bill) await settleUsed(admitted, bill);
    return settledFailed(admitted, called);
  }
  const delivered = await op.deliver(called, admitted);
  if ("kind" in delivered) return delivered;
  const shown = delivered.present ? await presented(admitted, delivered.present) : undefined;
  if (isRefused(shown)) return shown;
  const settled = await settleUsed(admitted, { used: delivered.used, status: 200, extra: delivered.extra });
  return { kind: "reply", ...delivered.reply(settled, shown), headers: admission.headers };
}

/**
 * Settles an admitted request at the units it used: the one settlement of a request that got
 * its reply (whole, or a stream at its end) or was billed for its call. Only the first counts.
 */
export function settleUsed(admitted: Admitted<Prepared>, bill: Bill): Promise<Settled | null> {
  return admitted.admission.settle(bill.used, admitted.backend, bill.status, bill.extra);
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

/** An accepted reply read whole, from the backend that sent it. */
export interface WholeReply {
  backend: Backend;
  bytes: Uint8Array;
}

/**
 * Sends an admitted request to its pool and reads the reply whole within `bytesMax` (the pool
 * tries another backend when a reply breaks off); notes the backend for the settlement.
 */
export async function sendWhole(admitted: Admitted<Prepared>, build: PoolCall["build"], bytesMax: number): Promise<WholeReply | Failure> {
  const { prepared, requestId, caller } = admitted;
  const read = await prepared.pool.sendWhole({ requestId, region: caller.region, build }, bytesMax);
  admitted.backend = read.backend?.name ?? null;
  return read.kind === "failed" ? read.failure : { backend: read.backend, bytes: read.bytes };
}

/** Sends an admitted request to its pool, its reply left to read; notes the backend for the settlement. */
export async function send(
  admitted: Admitted<Prepared>,
  build: PoolCall["build"],
): Promise<Extract<SendOutcome, { kind: "reply" }> | Failure> {
  const { prepared, requestId, caller } = admitted;
  const sent = await prepared.pool.send({ requestId, region: caller.region, build });
  admitted.backend = sent.backend?.name ?? null;
  return sent.kind === "failed" ? sent.failure : sent;
}
