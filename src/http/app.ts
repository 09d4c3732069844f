/**
 * The HTTP edge: Elysia routes for /v1 (customers) and /admin (operators). Bodies are read by
 * the handlers themselves (`parse: "none"`) so that size limits and malformed JSON get the
 * OpenAI error shape; every reply carries `x-request-id`.
 */
import { Elysia } from "elysia";
import { servedModel } from "../admission/model.ts";
import { fail, type Failure } from "../errors.ts";
import { AdminApi } from "./admin/route.ts";
import { adminGuard } from "./admin/guard.ts";
import { OperatorsAdmin } from "./admin/operators.ts";
import { operatorRoutes } from "./operators/route.ts";
import { OperatorStore } from "../operators/store.ts";
import { addAlias, catalogChangesView, catalogPullView, catalogView, importCatalog, putModel, retireModel } from "./admin/catalog.ts";
import type { CatalogPullStatus } from "../catalog/import.ts";
import { listDeadLettersRoute, replayDeadLetterRoute } from "./admin/deadletters.ts";
import { credits, generation, keyInfo } from "./account/route.ts";
import { chatCompletions } from "./chat/route.ts";
import type { GatewayDeps } from "../admission/deps.ts";
import { createEmbeddings } from "../operations/embeddings/embeddings.ts";
import { createResponse } from "./responses/route.ts";
import { anthropicFailed, countMessageTokens, createMessage } from "./messages/route.ts";
import {
  geminiAction,
  getGeminiModel,
  googleFailed,
  isPaidGeminiPath,
  listGeminiModels,
  sentByGemini,
  speaksGoogle,
} from "./gemini/route.ts";
import { createSpeech } from "../operations/audio/speech.ts";
import { createTranscription } from "../operations/audio/transcription.ts";
import { createImages } from "../operations/images/images.ts";
import { serveMedia } from "./media/route.ts";
import { callerOf, failed, isFailure, json, resultResponse } from "./guard.ts";
import type { KeyRecord } from "../keys/store.ts";
import { buildModelReplies } from "./models/route.ts";
import { arrivalNoter, clientAddressOf, decodeParams, httpInput, queryRefused } from "./request.ts";
import { trustedProxies } from "./forwarded.ts";
import { newRequestId, type OperationInput } from "../operations/input.ts";
import type { WholeResult } from "../operations/run.ts";
import type { FetchStatus } from "../catalog/rates.ts";
import type { LiveHub } from "../metrics/live.ts";
import { liveRoutes } from "./live/route.ts";
import type { AccountArea } from "../accountArea/index.ts";
import { consoleRoutes } from "./console/route.ts";
import { TopupsAdmin } from "./admin/topups.ts";
import { figureRoutes } from "./admin/figures.ts";
import { paymentCallback, resultPage } from "./pay/route.ts";
import { CALLBACK_PATH, RESULT_PATH } from "../payments/service.ts";
import { Health, readyResponse } from "./health.ts";
import { FreeGate, type FreeEndpoint } from "../admission/free.ts";
import { observeHttp } from "../metrics/observe.ts";
import { batchRoutes } from "./batches/route.ts";
import { messageBatchRoutes } from "./batches/messages.ts";
import type { BatchWorker } from "../batches/worker.ts";

const NO_PARSE = { parse: "none" as const };

/** HTTP/1.1 requires a Host (RFC 9112 §3.2); an HTTP/1.0 health check without one is answered the same. */
const NO_HOST = fail("invalid_request", "The request has no Host header: send one (HTTP/1.1 requires it).", { param: "host" });

/** A base URL given with `/v1` already in it, to which the client adds its own `/v1`. */
const DOUBLED_V1 = /^\/v1\/v1(\/|$)/;

/**
 * A request on Anthropic's wire, answered in Anthropic's error shape whatever goes wrong: its
 * paths (`/v1/messages…`, also behind a doubled `/v1`) and its SDKs' `anthropic-version` header.
 */
function speaksAnthropic(request: Request): boolean {
  const path = new URL(request.url).pathname.replace(DOUBLED_V1, "/v1$1");
  return path.startsWith("/v1/messages") || request.headers.has("anthropic-version");
}

/** The 404 of an unknown path; one that doubles `/v1` names the base-URL mistake behind it. */
function notFound(request: Request | undefined): Failure {
  const path = request ? new URL(request.url).pathname : "";
  if (!DOUBLED_V1.test(path)) return fail("not_found", "No such endpoint.");
  return fail(
    "not_found",
    `No such endpoint: ${path} has /v1 twice. Anthropic clients add /v1 themselves: set ANTHROPIC_BASE_URL to the gateway's address without /v1 ` +
      "(OpenAI clients take it with /v1).",
  );
}

function hello(): Response {
  return new Response("ok", { headers: { "content-type": "text/plain" } });
}

/** Routes of the paid operations: each writes its own access line, with tokens and cost (src/metrics/observe.ts). */
const PAID_ROUTES = new Set([
  "/v1/chat/completions",
  "/v1/responses",
  "/v1/messages",
  "/v1/embeddings",
  "/v1/audio/speech",
  "/v1/audio/transcriptions",
  "/v1/images/generations",
]);

/** Routes of Google's wire: `models/{model}:{action}`, paid for the actions that generate or embed. */
const GEMINI_ACTION_ROUTES = new Set(["/v1beta/models/*", "/v1/models/*"]);

/** Whether a route wrote its own access line (a paid operation's). */
function writesOwnLine(route: string, request: Request): boolean {
  return PAID_ROUTES.has(route) || (GEMINI_ACTION_ROUTES.has(route) && isPaidGeminiPath(new URL(request.url).pathname));
}

/**
 * The error shape of a request's wire: on the model API (`/v1…`), Anthropic's, Google's (its
 * routes, or its clients' key), else OpenAI's; the admin API, the console and the payment pages
 * always answer OpenAI's, whatever a query or header says (`?key=` on /admin was Google's).
 */
function failedOn(request: Request | undefined, route?: string): typeof failed {
  if (!request || !new URL(request.url).pathname.startsWith("/v1")) return failed;
  if (!route) {
    // No route: the client's wire, as its path and headers tell it.
    if (speaksAnthropic(request)) return anthropicFailed;
    return speaksGoogle(request) ? googleFailed : failed;
  }
  if (route.startsWith("/v1/messages")) return anthropicFailed;
  if (route.startsWith("/v1beta/") || GEMINI_ACTION_ROUTES.has(route)) return googleFailed;
  // The model list is both wires', by the key's place (as the route picks its handler).
  return route.startsWith("/v1/models") && sentByGemini(request) ? googleFailed : failed;
}

/** What an error Elysia raised before a handler ran says to the client: its own input's fault (a 400), or the gateway's. */
function elysiaFailure(code: string | number, request: Request | undefined): Failure {
  if (code === "NOT_FOUND") return notFound(request);
  // A body Elysia parsed by its content-type (a route that reads none of its own) and could not.
  if (code === "PARSE")
    return fail("invalid_json", "The request body is not what its content-type says; this endpoint takes JSON or none.");
  return fail("internal_error", "The gateway failed unexpectedly; the request id identifies it in the logs.");
}

/** When each request arrived, for the access line of the requests that are not paid operations. */
const arrivals = new WeakMap<Request, number>();

/** The access line of a request that wrote none of its own. */
function logAccess(deps: GatewayDeps, request: Request, route: string | null, reply: { status: number; requestId: string | null }): void {
  const arrivedMs = arrivals.get(request);
  observeHttp(deps.log, {
    requestId: reply.requestId,
    method: request.method,
    route,
    path: new URL(request.url).pathname,
    status: reply.status,
    durationMs: arrivedMs === undefined ? 0 : performance.now() - arrivedMs,
    clientAddress: clientAddressOf(request),
  });
}

/** The status and request id of what a handler returned (a Response, or a value Elysia sends with `set.status`). */
function replyOf(response: unknown, setStatus: number | string | undefined): { status: number; requestId: string | null } {
  if (response instanceof Response) return { status: response.status, requestId: response.headers.get("x-request-id") };
  return { status: typeof setStatus === "number" ? setStatus : 200, requestId: null };
}

function prepared(body: string, requestId: string): Response {
  return new Response(body, { headers: { "content-type": "application/json", "x-request-id": requestId } });
}

type RouteArgs = { request: Request; params: Record<string, string> };
type KeyHandler = (key: KeyRecord, requestId: string, request: Request, params: Record<string, string>) => Promise<Response> | Response;

/** Wraps a /v1 handler so it runs for an authenticated key. */
function keyGuard(deps: GatewayDeps) {
  return (handler: KeyHandler) =>
    async ({ request, params }: RouteArgs) => {
      const requestId = newRequestId();
      const caller = await callerOf(request, deps);
      if (isFailure(caller)) return failed(caller, requestId);
      return handler(caller.key, requestId, request, params);
    };
}

/** Wraps a /v1 handler of unpriced work so it runs for an authenticated key within the key's free slots and rate. */
function freeGuard(deps: GatewayDeps, gate: FreeGate) {
  const withKey = keyGuard(deps);
  return (endpoint: FreeEndpoint, handler: KeyHandler) =>
    withKey(async (key, requestId, request, params) => {
      const release = gate.enter(key, endpoint);
      if (typeof release !== "function") return failed(release, requestId);
      try {
        return await handler(key, requestId, request, params);
      } finally {
        release();
      }
    });
}

/** The catalog replies, prepared once per price version. */
function modelRepliesOf(deps: GatewayDeps): () => ReturnType<typeof buildModelReplies> {
  let models = buildModelReplies(deps.catalog, deps.pools);
  return () => {
    if (models.versionId !== deps.catalog.currentVersion()?.versionId) models = buildModelReplies(deps.catalog, deps.pools);
    return models;
  };
}

// biome-ignore lint/complexity/noExcessiveLinesPerFunction: a declarative table, one line per route with its handler.
export function createApp(
  deps: GatewayDeps,
  options: {
    rateFetch?: () => FetchStatus | null;
    catalogPull?: () => CatalogPullStatus | null;
    live?: LiveHub;
    health?: Health;
    console?: AccountArea;
    /** The node's part in running batches; absent: /v1/batches answers 503. */
    batches?: BatchWorker;
  } = {},
) {
  const admin = new AdminApi(deps, options.rateFetch);
  const topups = new TopupsAdmin(deps);
  const health = options.health ?? new Health(deps);
  const modelReplies = modelRepliesOf(deps);
  const withKey = keyGuard(deps);
  const free = new FreeGate({ rpm: deps.env.FREE_RPM });
  const freeWithKey = freeGuard(deps, free);
  const operatorStore = new OperatorStore(deps.db, deps.env.KEY_PEPPER);
  const operators = new OperatorsAdmin(deps, operatorStore);
  const asAdmin = adminGuard(deps, operatorStore);
  const noteArrival = arrivalNoter(trustedProxies(deps.env.TRUSTED_PROXIES));
  const operation = async (run: (input: OperationInput, deps: GatewayDeps) => Promise<WholeResult>, request: Request) => {
    const input = httpInput(request, newRequestId(), deps.env.PUBLIC_URL);
    return resultResponse(await run(input, deps), input.requestId);
  };
  const listModels = withKey((_, requestId) => prepared(modelReplies().list, requestId));
  const batch = batchRoutes(deps, options.batches ?? null);
  const messageBatch = messageBatchRoutes(deps, options.batches ?? null, free);
  const getModel = withKey((_, requestId, __, params) => {
    const model = servedModel(deps.catalog, params.id!);
    if (isFailure(model)) return failed(model, requestId);
    const body = modelReplies().byId.get(model.id);
    return body ? prepared(body, requestId) : failed(fail("model_not_found", `The model \`${model.id}\` is not listed.`), requestId);
  });

  // The operators' session routes forward to the admin routes of this very app.
  let self: { handle(request: Request): Promise<Response> } | null = null;
  const app = new Elysia()
    .onRequest(({ request, server }) => {
      arrivals.set(request, performance.now());
      noteArrival(request, server);
      // Without a Host header Bun gives a relative URL, which no route can read.
      if (request.url.startsWith("/")) return failed(NO_HOST, newRequestId());
    })
    .onError(({ code, error, request, route }) => {
      const requestId = newRequestId();
      const failure = elysiaFailure(code, request);
      const reply = failedOn(request, route)(failure, requestId);
      if (failure.code === "internal_error")
        deps.log("error", "unhandled", { requestId, code, error: error instanceof Error ? error.message : String(error) });
      // No route, or one that threw (a paid one then wrote no line of its own either).
      if (request) logAccess(deps, request, code === "NOT_FOUND" ? null : route, { status: reply.status, requestId });
      return reply;
    })
    // Path parameters decoded once, here: an undecodable one is the route's 400, never a handler's throw.
    .onBeforeHandle({ as: "global" }, ({ request, params, route }) => {
      const refused = (params ? decodeParams(params as Record<string, string | null>) : null) ?? queryRefused(request.url);
      if (refused) return failedOn(request, route)(refused, newRequestId());
    })
    .onAfterHandle({ as: "global" }, ({ request, route, response, set }) => {
      if (!writesOwnLine(route, request)) logAccess(deps, request, route, replyOf(response, set.status));
    })
    // Health probes: Claude Code's reachability check (`HEAD /`, `/api/hello`) and load balancers.
    .get("/", () => hello())
    .head("/", () => hello())
    .get("/api/hello", () => hello())
    .head("/api/hello", () => hello())
    .post("/v1/chat/completions", ({ request, set }) => chatCompletions(request, newRequestId(), deps, set), NO_PARSE)
    .post("/v1/responses", ({ request, set }) => createResponse(request, newRequestId(), deps, set), NO_PARSE)
    // Anthropic's wire (`?beta=true`, as Claude Code sends it, matches the same route).
    .post("/v1/messages", ({ request, set }) => createMessage(request, newRequestId(), deps, set), NO_PARSE)
    // Anthropic's Message Batches: free like OpenAI's (FREE_RPM); each request a paid line.
    .post("/v1/messages/batches", messageBatch.create!, NO_PARSE)
    .get("/v1/messages/batches", messageBatch.list!)
    .get("/v1/messages/batches/:id", messageBatch.get!)
    .post("/v1/messages/batches/:id/cancel", messageBatch.cancel!, NO_PARSE)
    .get("/v1/messages/batches/:id/results", messageBatch.results!)
    .post("/v1/messages/count_tokens", ({ request }) => countMessageTokens(request, newRequestId(), deps, free), NO_PARSE)
    // Google's wire: `models/{model}:{action}`, under v1beta (the SDKs' default) and v1.
    .post("/v1beta/models/*", ({ request, set, params }) => geminiAction(request, newRequestId(), deps, free, set, params["*"]), NO_PARSE)
    .post("/v1/models/*", ({ request, set, params }) => geminiAction(request, newRequestId(), deps, free, set, params["*"]), NO_PARSE)
    .get("/v1beta/models", ({ request }) => listGeminiModels(request, newRequestId(), deps))
    .get("/v1beta/models/*", ({ request, params }) => getGeminiModel(request, newRequestId(), deps, params["*"]))
    .post("/v1/embeddings", ({ request }) => operation(createEmbeddings, request), NO_PARSE)
    .post("/v1/audio/speech", ({ request }) => operation(createSpeech, request), NO_PARSE)
    .post("/v1/audio/transcriptions", ({ request }) => operation(createTranscription, request), NO_PARSE)
    .post("/v1/images/generations", ({ request }) => operation(createImages, request), NO_PARSE)
    // No key: the id is unguessable and the lifetime bounded, so an <img src> can load it.
    .get("/v1/media/:id", ({ params }) => serveMedia(params.id, newRequestId(), deps))
    // The Gemini SDKs (apiVersion v1, their default) list and get models here too: they send x-goog-api-key.
    .get("/v1/models", (args) => (sentByGemini(args.request) ? listGeminiModels(args.request, newRequestId(), deps) : listModels(args)))
    .get("/v1/models/:id", (args) =>
      sentByGemini(args.request) ? getGeminiModel(args.request, newRequestId(), deps, args.params.id) : getModel(args),
    )
    .get(
      "/v1/key",
      freeWithKey("key", async (key, requestId) => json(await keyInfo(key, deps), requestId)),
    )
    .get(
      "/v1/credits",
      freeWithKey("credits", async (key, requestId) => {
        const reply = await credits(key, deps);
        return isFailure(reply) ? failed(reply, requestId) : json(reply, requestId);
      }),
    )
    .get(
      "/v1/generations/:id",
      freeWithKey("generation", async (key, requestId, _, params) => {
        const reply = await generation(key, params.id!, deps);
        return isFailure(reply) ? failed(reply, requestId) : json(reply, requestId);
      }),
    )
    // Files and batches: free (no admission; FREE_RPM apiece); each line of a batch is a paid request.
    .post("/v1/files", freeWithKey("files", batch.uploadFile!), NO_PARSE)
    .get("/v1/files", freeWithKey("files", batch.listFiles!))
    .get("/v1/files/:id", freeWithKey("files", batch.getFile!))
    .get("/v1/files/:id/content", freeWithKey("files", batch.fileContent!))
    .delete("/v1/files/:id", freeWithKey("files", batch.deleteFile!))
    .post("/v1/batches", freeWithKey("batches", batch.createBatch!), NO_PARSE)
    .get("/v1/batches", freeWithKey("batches", batch.listBatches!))
    .get("/v1/batches/:id", freeWithKey("batches", batch.getBatch!))
    .post("/v1/batches/:id/cancel", freeWithKey("batches", batch.cancelBatch!), NO_PARSE)
    .get("/health", () => new Response("ok"))
    // The customer's browser, back from the payment provider: no key, and never a payment by itself.
    .get(CALLBACK_PATH, ({ request }) => paymentCallback(request, deps.payments ?? null, newRequestId()))
    .get(RESULT_PATH, ({ request }) => resultPage(request))
    .get("/ready", () => readyResponse(health))
    .get(
      "/metrics",
      asAdmin(async () => {
        const { body, contentType } = await deps.metrics.exposition();
        return new Response(body, { headers: { "content-type": contentType } });
      }),
    )
    .post(
      "/admin/accounts",
      asAdmin((request, _, id) => admin.createAccount(request, id)),
      NO_PARSE,
    )
    .get(
      "/admin/accounts/:id",
      asAdmin((_, params, id) => admin.showAccount(params.id!, id)),
    )
    .patch(
      "/admin/accounts/:id",
      asAdmin((request, params, id) => admin.setAccountSettings(request, params.id!, id)),
      NO_PARSE,
    )
    .post(
      "/admin/accounts/:id/topups",
      asAdmin((request, params, id) => admin.topUp(request, params.id!, id)),
      NO_PARSE,
    )
    .post(
      "/admin/accounts/:id/keys",
      asAdmin((request, params, id) => admin.createKey(request, params.id!, id)),
      NO_PARSE,
    )
    .patch(
      "/admin/keys/:id",
      asAdmin((request, params, id) => admin.setKeyLimits(request, params.id!, id)),
      NO_PARSE,
    )
    .delete(
      "/admin/keys/:id",
      asAdmin((_, params, id) => admin.revokeKey(params.id!, id)),
    )
    .get(
      "/admin/pools",
      asAdmin((_, __, id) => admin.pools(id)),
    )
    .put(
      "/admin/pools/:model",
      asAdmin((request, params, id) => admin.setPool(request, params.model!, id)),
      NO_PARSE,
    )
    .get(
      "/admin/catalog",
      asAdmin((_, __, id) => catalogView(deps, id)),
    )
    .get(
      "/admin/catalog/changes",
      asAdmin((request, _, id) => catalogChangesView(deps, request, id)),
    )
    .get(
      "/admin/catalog/import",
      asAdmin((_, __, id) => catalogPullView(options.catalogPull?.() ?? null, id)),
    )
    .post(
      "/admin/catalog/import",
      asAdmin((request, _, id) => importCatalog(deps, request, id)),
      NO_PARSE,
    )
    .put(
      "/admin/catalog/models/:model",
      asAdmin((request, params, id) => putModel(deps, request, params.model!, id)),
      NO_PARSE,
    )
    .post(
      "/admin/catalog/models/:model/aliases",
      asAdmin((request, params, id) => addAlias(deps, request, params.model!, id)),
      NO_PARSE,
    )
    .post(
      "/admin/catalog/models/:model/retire",
      asAdmin((request, params, id) => retireModel(deps, request, params.model!, id)),
      NO_PARSE,
    )
    .post(
      "/admin/accounts/:id/adjustments",
      asAdmin((request, params, id) => admin.adjust(request, params.id!, id)),
      NO_PARSE,
    )
    .post(
      "/admin/rates",
      asAdmin((request, _, id) => admin.setRate(request, id)),
      NO_PARSE,
    )
    .get(
      "/admin/rates",
      asAdmin((_, __, id) => admin.rates(id)),
    )
    .get(
      "/admin/ledger/audit",
      asAdmin((_, __, id) => admin.audit(id)),
    )
    .post(
      "/admin/topups",
      asAdmin((request, _, id) => topups.start(request, id)),
      NO_PARSE,
    )
    .get(
      "/admin/topups",
      asAdmin((request, _, id) => topups.list(request, id)),
    )
    .post(
      "/admin/topups/reconcile",
      asAdmin((_, __, id) => topups.reconcile(id)),
    )
    .get(
      "/admin/topups/:id",
      asAdmin((_, params, id) => topups.show(params.id!, id)),
    )
    .post(
      "/admin/topups/:id/complete",
      asAdmin((request, params, id) => topups.review(request, params.id!, "complete", id)),
      NO_PARSE,
    )
    .post(
      "/admin/topups/:id/reject",
      asAdmin((request, params, id) => topups.review(request, params.id!, "reject", id)),
      NO_PARSE,
    )
    .get(
      "/admin/usage/dead-letters",
      asAdmin((request, _, id) => listDeadLettersRoute(deps, request, id)),
    )
    .post(
      "/admin/usage/dead-letters/:id/replay",
      asAdmin((_, params, id) => replayDeadLetterRoute(deps, params.id!, id)),
      NO_PARSE,
    )
    .get(
      "/admin/operators",
      asAdmin((_, __, id) => operators.list(id)),
    )
    .post(
      "/admin/operators",
      asAdmin((request, _, id) => operators.add(request, id)),
      NO_PARSE,
    )
    .patch(
      "/admin/operators/:id",
      asAdmin((request, params, id) => operators.change(request, params.id!, id)),
      NO_PARSE,
    )
    .delete(
      "/admin/operators/:id",
      asAdmin((_, params, id) => operators.remove(params.id!, id)),
    )
    .post(
      "/admin/operators/:id/tokens",
      asAdmin((request, params, id) => operators.createToken(request, params.id!, id)),
      NO_PARSE,
    )
    .delete(
      "/admin/operator-tokens/:id",
      asAdmin((_, params, id) => operators.revokeToken(params.id!, id)),
    )
    .get(
      "/admin/audit",
      asAdmin((request, _, id) => operators.audit(request, id)),
    )
    .use(figureRoutes(deps, asAdmin, options.console, options.batches))
    .use(options.live ? liveRoutes(options.live, asAdmin) : new Elysia())
    .use(options.console ? consoleRoutes(deps, options.console, options.batches) : new Elysia())
    .use(operatorRoutes(deps, operatorStore, (request) => self!.handle(request)));
  self = app;
  return app;
}

export type App = ReturnType<typeof createApp>;
