/**
 * The HTTP edge: Elysia routes for /v1 (customers) and /admin (operators). Bodies are read by
 * the handlers themselves (`parse: "none"`) so that size limits and malformed JSON get the
 * OpenAI error shape; every reply carries `x-request-id`.
 */
import { Elysia } from "elysia";
import { fail } from "../errors.ts";
import { AdminApi, adminAuthorized } from "./admin/route.ts";
import { listDeadLettersRoute, replayDeadLetterRoute } from "./admin/deadletters.ts";
import { credits, keyInfo } from "./account/route.ts";
import { chatCompletions } from "./chat/route.ts";
import type { EdgeDeps } from "./deps.ts";
import { createEmbeddings } from "./embeddings/route.ts";
import { createResponse } from "./responses/route.ts";
import { countMessageTokens, createMessage } from "./messages/route.ts";
import { createSpeech } from "./audio/speech.ts";
import { createTranscription } from "./audio/transcription.ts";
import { createImages } from "./images/route.ts";
import { serveMedia } from "./media/store.ts";
import { callerOf, failed, isFailure, json } from "./guard.ts";
import type { KeyRecord } from "../keys/store.ts";
import { buildModelReplies } from "./models/route.ts";
import { httpInput, newRequestId } from "./request.ts";
import type { FetchStatus } from "../catalog/rates.ts";
import type { LiveHub } from "../metrics/live.ts";
import { liveRoutes } from "./live/route.ts";
import type { Console } from "../console/index.ts";
import { consoleRoutes } from "./console/route.ts";
import { TopupsAdmin } from "./admin/topups.ts";
import { paymentCallback, resultPage } from "./pay/route.ts";
import { CALLBACK_PATH, RESULT_PATH } from "../payments/service.ts";
import { Health, readyResponse } from "./health.ts";

const NO_PARSE = { parse: "none" as const };

function prepared(body: string, requestId: string): Response {
  return new Response(body, { headers: { "content-type": "application/json", "x-request-id": requestId } });
}

type RouteArgs = { request: Request; params: Record<string, string> };
type KeyHandler = (key: KeyRecord, requestId: string, request: Request, params: Record<string, string>) => Promise<Response> | Response;
type AdminHandler = (request: Request, params: Record<string, string>, requestId: string) => Promise<Response> | Response;

/** Wraps a /v1 handler so it runs for an authenticated key. */
function keyGuard(deps: EdgeDeps) {
  return (handler: KeyHandler) =>
    async ({ request, params }: RouteArgs) => {
      const requestId = newRequestId();
      const caller = await callerOf(request, deps);
      if (isFailure(caller)) return failed(caller, requestId);
      return handler(caller.key, requestId, request, params);
    };
}

/** Wraps an /admin handler so it runs after the admin token is checked. */
function adminGuard(deps: EdgeDeps) {
  return (handler: AdminHandler) =>
    async ({ request, params }: RouteArgs) => {
      const requestId = newRequestId();
      if (!adminAuthorized(request, deps.env.ADMIN_TOKEN)) {
        return failed(fail("admin_unauthorized", "This admin endpoint needs `Authorization: Bearer <ADMIN_TOKEN>`."), requestId);
      }
      return handler(request, params, requestId);
    };
}

/** The catalog replies, prepared once per price version. */
function modelRepliesOf(deps: EdgeDeps): () => ReturnType<typeof buildModelReplies> {
  let models = buildModelReplies(deps.catalog, deps.pools);
  return () => {
    if (models.versionId !== deps.catalog.currentVersion()?.versionId) models = buildModelReplies(deps.catalog, deps.pools);
    return models;
  };
}

// biome-ignore lint/complexity/noExcessiveLinesPerFunction: a declarative table, one line per route with its handler.
export function createApp(
  deps: EdgeDeps,
  options: { rateFetch?: () => FetchStatus | null; live?: LiveHub; health?: Health; console?: Console } = {},
) {
  const admin = new AdminApi(deps, options.rateFetch);
  const topups = new TopupsAdmin(deps);
  const health = options.health ?? new Health(deps);
  const modelReplies = modelRepliesOf(deps);
  const withKey = keyGuard(deps);
  const asAdmin = adminGuard(deps);
  const input = (request: Request) => httpInput(request, newRequestId(), deps.env.PUBLIC_URL);

  return (
    new Elysia()
      .onError(({ code, error }) => {
        const requestId = newRequestId();
        if (code === "NOT_FOUND") return failed(fail("not_found", "No such endpoint."), requestId);
        deps.log("error", "unhandled", { requestId, code, error: error instanceof Error ? error.message : String(error) });
        return failed(fail("internal_error", "The gateway failed unexpectedly; the request id identifies it in the logs."), requestId);
      })
      .post("/v1/chat/completions", ({ request, set }) => chatCompletions(request, newRequestId(), deps, set), NO_PARSE)
      .post("/v1/responses", ({ request, set }) => createResponse(request, newRequestId(), deps, set), NO_PARSE)
      // Anthropic's wire (`?beta=true`, as Claude Code sends it, matches the same route).
      .post("/v1/messages", ({ request, set }) => createMessage(request, newRequestId(), deps, set), NO_PARSE)
      .post("/v1/messages/count_tokens", ({ request }) => countMessageTokens(request, newRequestId(), deps), NO_PARSE)
      .post("/v1/embeddings", ({ request }) => createEmbeddings(input(request), deps), NO_PARSE)
      .post("/v1/audio/speech", ({ request }) => createSpeech(input(request), deps), NO_PARSE)
      .post("/v1/audio/transcriptions", ({ request }) => createTranscription(input(request), deps), NO_PARSE)
      .post("/v1/images/generations", ({ request }) => createImages(input(request), deps), NO_PARSE)
      // No key: the id is unguessable and the lifetime bounded, so an <img src> can load it.
      .get("/v1/media/:id", ({ params }) => serveMedia(params.id, newRequestId(), deps))
      .get(
        "/v1/models",
        withKey((_, requestId) => prepared(modelReplies().list, requestId)),
      )
      .get(
        "/v1/models/:id",
        withKey((_, requestId, __, params) => {
          const body = modelReplies().byId.get(decodeURIComponent(params.id!));
          if (body) return prepared(body, requestId);
          return failed(
            fail("model_not_found", `The model \`${params.id}\` does not exist or you do not have access to it.`, { param: "model" }),
            requestId,
          );
        }),
      )
      .get(
        "/v1/key",
        withKey(async (key, requestId) => json(await keyInfo(key, deps), requestId)),
      )
      .get(
        "/v1/credits",
        withKey(async (key, requestId) => {
          const reply = await credits(key, deps);
          return isFailure(reply) ? failed(reply, requestId) : json(reply, requestId);
        }),
      )
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
        asAdmin((request, params, id) => admin.setPool(request, decodeURIComponent(params.model!), id)),
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
      .use(options.live ? liveRoutes(options.live, deps.env.ADMIN_TOKEN) : new Elysia())
      .use(options.console ? consoleRoutes(deps, options.console) : new Elysia())
  );
}

export type App = ReturnType<typeof createApp>;
