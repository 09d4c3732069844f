/**
 * /v1/files and /v1/batches over HTTP: the request decoded, the operation called
 * (src/files/api.ts, src/batches/api.ts), its object or error encoded.
 */
import type { GatewayDeps } from "../../admission/deps.ts";
import type { KeyRecord } from "../../keys/store.ts";
import { batchById, batchesUnavailable, batchList, cancelBatch, createBatch } from "../../batches/api.ts";
import type { BatchWorker } from "../../batches/worker.ts";
import { FILE_FORM_BYTES_MAX, fileList, uploadFile } from "../../files/api.ts";
import { deleteFile, fileNotFound, fileObject, fileStream, findFile } from "../../files/files.ts";
import { jsonLimits } from "../../operations/input.ts";
import { failed, isFailure, json } from "../guard.ts";
import { httpInput, readJsonBodyText } from "../request.ts";

type Handler = (key: KeyRecord, requestId: string, request: Request, params: Record<string, string>) => Promise<Response>;

const reply = (value: unknown, requestId: string) => (isFailure(value) ? failed(value, requestId) : json(value, requestId));

const queryOf = (request: Request) => Object.fromEntries(new URL(request.url).searchParams);

/** The routes' handlers, for app.ts to mount behind its key guard. */
export function batchRoutes(deps: GatewayDeps, worker: BatchWorker | null): Record<string, Handler> {
  const unavailable = batchesUnavailable();
  const withWorker =
    (
      handler: (
        worker: BatchWorker,
        key: KeyRecord,
        requestId: string,
        request: Request,
        params: Record<string, string>,
      ) => Promise<Response>,
    ): Handler =>
    (key, requestId, request, params) =>
      worker ? handler(worker, key, requestId, request, params) : Promise.resolve(failed(unavailable, requestId));
  return {
    uploadFile: async (key, requestId, request) => {
      const form = await httpInput(request, requestId, deps.env.PUBLIC_URL).form(FILE_FORM_BYTES_MAX);
      const file = await uploadFile(deps.db, key.accountId, form);
      return reply(isFailure(file) ? file : fileObject(file), requestId);
    },
    listFiles: async (key, requestId, request) => reply(await fileList(deps.db, key.accountId, queryOf(request)), requestId),
    getFile: async (key, requestId, _, params) => {
      const file = await findFile(deps.db, key.accountId, params.id!);
      return reply(file ? fileObject(file) : fileNotFound(params.id!), requestId);
    },
    fileContent: async (key, requestId, _, params) => {
      // Streamed a slice at a time: a download neither holds the file whole nor the event loop (docs/batches.md, "Where files live").
      // Bun sends a stream chunked, dropping its content-length (oven-sh/bun#10507); the length is said for when it keeps it.
      const sent = await fileStream(deps.db, key.accountId, params.id!);
      if (!sent) return failed(fileNotFound(params.id!), requestId);
      const headers = { "content-type": "application/octet-stream", "content-length": String(sent.bytes), "x-request-id": requestId };
      return new Response(sent.body, { headers });
    },
    deleteFile: async (key, requestId, _, params) => {
      const deleted = await deleteFile(deps.db, key.accountId, params.id!);
      return reply(deleted ? { id: params.id, object: "file", deleted: true } : fileNotFound(params.id!), requestId);
    },
    createBatch: withWorker(async (worker, key, requestId, request) => {
      const body = await readJsonBodyText(request, jsonLimits(deps.env));
      const residency = request.headers.get("x-darvaze-residency");
      return reply(isFailure(body) ? body : await createBatch(worker, key, body.value, residency), requestId);
    }),
    listBatches: withWorker(async (worker, key, requestId, request) =>
      reply(await batchList(worker, key.accountId, queryOf(request)), requestId),
    ),
    getBatch: withWorker(async (worker, key, requestId, _, params) => reply(await batchById(worker, key.accountId, params.id!), requestId)),
    cancelBatch: withWorker(async (worker, key, requestId, _, params) =>
      reply(await cancelBatch(worker, key.accountId, params.id!), requestId),
    ),
  };
}
