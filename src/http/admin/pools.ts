/**
 * GET /admin/pools: every model's backends as this node sees them (estimates, in-flight, limit,
 * breaker, host queue), and beside them `spec`, the pool as the pools file writes it (each
 * backend's `api_key_env`, never a key), which a PUT takes back unchanged. PUT /admin/pools/{model}: replaces a model's backends, checked by the
 * pools file's own schema (`poolSchema`, src/config.ts), saved to the `pools` table, applied on
 * this node at once and announced to every other node.
 */
import { POOL_EVENTS } from "../../../actors/protocol.ts";
import type { Backend } from "../../../actors/pool/backend.ts";
import { savePool } from "../../../actors/pool/savedPools.ts";
import { servedModel } from "../../admission/model.ts";
import { backendSpec, poolSchema, resolveBackends } from "../../config.ts";
import { fail, isFailure } from "../../errors.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import { failed, json } from "../guard.ts";
import { parseBody } from "./body.ts";

const round = (ms: number) => Math.round(ms * 10) / 10;

export function backendView(b: Backend, nowMs: number) {
  const host = b.freshHost(nowMs);
  return {
    name: b.name,
    kind: b.config.kind,
    url: b.config.url,
    region: b.config.region,
    weight: b.config.weight,
    concurrency_max: b.config.concurrency_max,
    /** This node's limit (its share of concurrency_max). */
    concurrency_limit: b.concurrencyLimit,
    in_flight: b.inFlight,
    ttft_ms: round(b.ttft.value),
    tpot_ms: round(b.tpot.value),
    /** ttft_ms again, under the name a reader that knows one latency estimate per backend reads. */
    latency_ewma_ms: round(b.ttft.value),
    breaker: b.breaker.state(nowMs),
    host: host ? { waiting: host.waiting, running: host.running, kv_cache_usage: host.kvCacheUsage } : null,
    requests: b.requests,
    failures: b.failures,
  };
}

export function poolsView(deps: GatewayDeps, requestId: string): Response {
  const nowMs = performance.now();
  return json(
    {
      object: "list",
      node: deps.pools.node,
      data: deps.pools.all().map((pool) => ({
        model: pool.model,
        backends: pool.backends.map((b) => backendView(b, nowMs)),
        paid_fields: pool.paidFields ?? null,
        spec: {
          backends: pool.backends.map((b) => backendSpec(b.config)),
          ...(pool.paidFields ? { paid_fields: pool.paidFields } : {}),
        },
      })),
    },
    requestId,
  );
}

export async function setPool(deps: GatewayDeps, request: Request, model: string, requestId: string): Promise<Response> {
  const body = await parseBody(request, poolSchema);
  if (isFailure(body)) return failed(body, requestId);
  const served = servedModel(deps.catalog, model);
  if (isFailure(served)) return failed(served, requestId);
  if (served.id !== model) {
    return failed(
      fail("invalid_request", `\`${model}\` is an alias of \`${served.id}\`: set the pool of \`${served.id}\`.`, { param: "model" }),
      requestId,
    );
  }
  const { backends, problems } = resolveBackends(body.backends, process.env);
  if (problems.length > 0) return failed(fail("invalid_request", `${problems.join("; ")} on this node.`, { param: "backends" }), requestId);
  const row = await savePool(deps.db, model, body.backends, body.paid_fields);
  deps.pools.apply(model, backends, row.paidFields);
  deps.pools.markApplied(row);
  deps.bus.publish(POOL_EVENTS, deps.subjects.poolEvents, { model });
  deps.log("info", "pool_set", { model, backends: backends.map((b) => b.name) });
  const pool = deps.pools.get(model)!;
  const nowMs = performance.now();
  return json(
    {
      object: "pool",
      model,
      updated_at: row.updatedAt.toISOString(),
      backends: pool.backends.map((b) => backendView(b, nowMs)),
      paid_fields: pool.paidFields ?? null,
    },
    requestId,
  );
}
