/**
 * Anthropic's Message Batches over HTTP (/v1/messages/batches): the request decoded, the
 * operation called (src/batches/messages.ts), its object or Anthropic's error encoded.
 */
import type { GatewayDeps } from "../../admission/deps.ts";
import type { FreeGate } from "../../admission/free.ts";
import { fail, type Failure, isFailure } from "../../errors.ts";
import type { KeyRecord } from "../../keys/store.ts";
import { createMessageBatch, findMessageBatch, messageBatchList, messageBatchObject, messageBatchResults } from "../../batches/messages.ts";
import type { BatchWorker } from "../../batches/worker.ts";
import { jsonLimits, newRequestId } from "../../operations/input.ts";
import { callerOf } from "../guard.ts";
import { anthropicFailed } from "../messages/route.ts";
import { readJsonBodyText } from "../request.ts";

type Handler = (args: { request: Request; params: Record<string, string> }) => Promise<Response>;
type Work = (worker: BatchWorker, key: KeyRecord, request: Request, params: Record<string, string>) => Promise<unknown>;

const headers = (requestId: string) => ({ "content-type": "application/json", "x-request-id": requestId, "request-id": requestId });

/** The routes' handlers: the key (Anthropic's `x-api-key` or a Bearer), the free gate, Anthropic's error shape. */
export function messageBatchRoutes(deps: GatewayDeps, worker: BatchWorker | null, gate: FreeGate): Record<string, Handler> {
  const originOf = (request: Request) => deps.env.PUBLIC_URL ?? new URL(request.url).origin;
  const guarded =
    (work: Work): Handler =>
    async ({ request, params }) => {
      const requestId = newRequestId();
      const caller = await callerOf(request, deps);
      if (isFailure(caller)) return anthropicFailed(caller, requestId);
      if (!worker) return anthropicFailed(fail("service_unavailable", "Batches are not running on this node."), requestId);
      const release = gate.enter(caller.key, "batches");
      if (isFailure(release)) return anthropicFailed(release, requestId);
      try {
        const value = await work(worker, caller.key, request, params);
        if (isFailure(value)) return anthropicFailed(value as Failure, requestId);
        if (typeof value === "string") {
          return new Response(value, { headers: { ...headers(requestId), "content-type": "application/binary" } });
        }
        return new Response(JSON.stringify(value), { headers: headers(requestId) });
      } finally {
        release();
      }
    };
  return {
    create: guarded(async (w, key, request) => {
      const body = await readJsonBodyText(request, jsonLimits(deps.env));
      return isFailure(body) ? body : createMessageBatch(w, key, body.value, originOf(request));
    }),
    list: guarded((w, key, request) =>
      messageBatchList(w, key.accountId, Object.fromEntries(new URL(request.url).searchParams), originOf(request)),
    ),
    get: guarded(async (w, key, request, params) => {
      const batch = await findMessageBatch(w, key.accountId, params.id!);
      return isFailure(batch) ? batch : messageBatchObject(batch, originOf(request));
    }),
    cancel: guarded(async (w, key, request, params) => {
      const batch = await findMessageBatch(w, key.accountId, params.id!);
      if (isFailure(batch)) return batch;
      const cancelled = await w.cancel(key.accountId, batch.id);
      return isFailure(cancelled) ? cancelled : messageBatchObject(cancelled, originOf(request));
    }),
    results: guarded((w, key, _, params) => messageBatchResults(w, key.accountId, params.id!)),
  };
}
