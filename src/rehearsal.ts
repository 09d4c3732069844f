/**
 * The start-up rehearsal: before its port opens, a node serves a whole chat and a streamed one to
 * itself, through the same route function, admission, key actor, purse, pool and settlement as a
 * customer's, so that the first customer does not pay for the process's first runs (the engine's
 * first compilations, the database's first statements and connections, the first upstream fetch).
 * bench/first-request.ts measures what it saves; docs/internals.md#the-start-up-rehearsal.
 *
 *   account   REHEARSAL_ACCOUNT_ID (src/ledger/wallets.ts): no phone, a wallet at zero, limits
 *             set so that the account's gates run too; made once. The operator's revenue and
 *             anomaly figures leave it out.
 *   key       issued with every limit a key can have, its secret never leaving this function,
 *             its row deleted after.
 *   model     REHEARSAL_MODEL_ID, a copy of a catalog chat model at zero prices, known only to
 *             the rehearsal's own catalog and pools: no customer can name it, /v1/models never lists it.
 *   upstream  a loopback server of its own that answers the rehearsal's two chats only, stopped after.
 *
 * Its requests are recorded as any request is (their usage rows at zero cost, the lease on its
 * wallet given back at the end), but counted in metrics of their own and logged only when they
 * fail. A failure never stops the start: it is logged (`rehearsal_failed`) and the node listens.
 * START_REHEARSAL=false skips it.
 */
import { PoolHost } from "../actors/pool/host.ts";
import { WALLET_RECALLS } from "../actors/protocol.ts";
import type { GatewayDeps } from "./admission/deps.ts";
import { Catalog, type CatalogModel, type PriceVersion } from "./catalog/catalog.ts";
import { chatCompletions } from "./http/chat/route.ts";
import { ensureRehearsalAccount, REHEARSAL_ACCOUNT_ID } from "./ledger/wallets.ts";
import type { Logger } from "./log.ts";
import { Metrics } from "./metrics/metrics.ts";
import { newRequestId } from "./operations/input.ts";
import { TIMED_OUT, within } from "./within.ts";
import type { PoolsFile } from "./config.ts";

export const REHEARSAL_MODEL_ID = "darvaze-start-rehearsal";
/** Bound on the whole rehearsal: past it the node listens anyway (a cold PGlite on a busy core takes seconds). */
export const REHEARSAL_MS_MAX = 30_000;

/** Every limit a key can have, so that the rehearsal runs each one's check (none is near: its requests cost nothing). */
const REHEARSAL_KEY_LIMITS = { concurrencyMax: 2, rpm: 60, tpm: 100_000, monthlySpendCapMicro: 1_000_000n };

/** What the rehearsal sends: a short prompt and a two-token answer, whole and streamed. */
const CHAT_BODY = { model: REHEARSAL_MODEL_ID, messages: [{ role: "user", content: "Say hello." }], max_tokens: 8 };

export interface RehearsalOutcome {
  /** The statuses of the whole chat and of the stream, in that order. */
  statuses: number[];
  ms: number;
}

/**
 * Runs the rehearsal; never throws. What it did is logged (`rehearsed`, `rehearsal_failed` with why, or
 * `rehearsal_skipped` for a catalog without a chat model).
 * @example await rehearse(deps); // before app.listen
 */
export async function rehearse(deps: GatewayDeps): Promise<RehearsalOutcome | null> {
  const startedMs = performance.now();
  const model = rehearsalModel(deps.catalog);
  if (!model) {
    // A gateway that serves no chat model (embeddings alone, say) has no chat path to warm.
    deps.log("info", "rehearsal_skipped", { reason: "the catalog has no chat model" });
    return null;
  }
  try {
    const outcome = await within(rehearsed(deps, model, startedMs), REHEARSAL_MS_MAX);
    if (outcome === TIMED_OUT) throw new Error(`not done within ${REHEARSAL_MS_MAX} ms`);
    deps.log("info", "rehearsed", { ...outcome, ms: Math.round(outcome.ms) });
    return outcome;
  } catch (error) {
    deps.log("warn", "rehearsal_failed", { error: (error as Error).message, ms: Math.round(performance.now() - startedMs) });
    return null;
  }
}

async function rehearsed(deps: GatewayDeps, model: CatalogModel, startedMs: number): Promise<RehearsalOutcome> {
  const upstream = startUpstream();
  try {
    await deps.db.warmConnections?.();
    await ensureRehearsalAccount(deps.db);
    const { key, record } = await deps.keys.create(REHEARSAL_ACCOUNT_ID, "start-up rehearsal", REHEARSAL_KEY_LIMITS);
    try {
      const own = rehearsalDeps(deps, model, `http://127.0.0.1:${upstream.port}`);
      const statuses: number[] = [];
      for (const stream of [false, true]) statuses.push(await chatStatus(own, key, stream));
      if (statuses.some((status) => status !== 200)) throw new Error(`answered ${statuses.join(", ")}`);
      return { statuses, ms: performance.now() - startedMs };
    } finally {
      await deps.keys.discard(record.id);
      // Its lease given back now, on whichever node holds it, rather than when the key goes idle.
      deps.bus.publish(WALLET_RECALLS, deps.subjects.walletRecalls, { accountId: REHEARSAL_ACCOUNT_ID, fromKeyId: record.id });
    }
  } finally {
    await upstream.stop(true);
  }
}

/** The first chat model of the catalog (an OpenAI one when there is one: their prompts are counted exactly, as most first requests are). */
function rehearsalModel(catalog: Catalog): CatalogModel | undefined {
  const chat = catalog.list().filter((m) => m.operation === "chat");
  return chat.find((m) => m.vendor === "openai") ?? chat[0];
}

/** The node's services with a catalog, pools, metrics and log of the rehearsal's own. */
function rehearsalDeps(deps: GatewayDeps, model: CatalogModel, upstreamUrl: string): GatewayDeps {
  const { price, ...row } = model;
  const zero = new Map([...price.tomanPer1m.keys()].map((unit) => [unit, 0n]));
  const version: PriceVersion = {
    versionId: price.versionId,
    tomanPerUsd: price.tomanPerUsd,
    effectiveAtMs: 0,
    prices: new Map([[REHEARSAL_MODEL_ID, zero]]),
  };
  const catalog = new Catalog([{ ...row, id: REHEARSAL_MODEL_ID, aliases: [] }], [version]);
  const backend = { name: "rehearsal", kind: "openai", url: `${upstreamUrl}/v1`, region: "abroad", weight: 1, concurrency_max: 2 } as const;
  const file: PoolsFile = { default_backends: [], pools: { [REHEARSAL_MODEL_ID]: { backends: [backend] } } };
  const pools = new PoolHost(catalog, file, { upstreamTimeoutMs: deps.env.UPSTREAM_TIMEOUT_MS });
  const metrics = new Metrics({ pools, leaseSlackMicro: () => 0n, usageBacklog: () => 0, natsConnected: () => null });
  return { ...deps, catalog, pools, metrics, log: failuresOnly(deps.log) };
}

/** The rehearsal's requests write no access line: only what went wrong reaches the node's log. */
function failuresOnly(log: Logger): Logger {
  return (level, event, fields) => {
    if (level === "warn" || level === "error") log(level, event, { ...fields, rehearsal: true });
  };
}

/** One chat of the rehearsal's key, read to its end (a stream's last frame settles it); its status. */
async function chatStatus(deps: GatewayDeps, key: string, stream: boolean): Promise<number> {
  const request = new Request("http://127.0.0.1/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ ...CHAT_BODY, stream }),
  });
  const set = { headers: {} as Record<string, string | number> };
  const reply = await chatCompletions(request, newRequestId(), deps, set);
  if (reply instanceof Response) {
    await reply.arrayBuffer();
    return reply.status;
  }
  for await (const _ of reply);
  return 200;
}

/** The rehearsal's answer: "Hello there", two tokens, after a prompt of nine (its exact count, so no usage anomaly is recorded). */
const REPLY_WORDS = ["Hello", " there"];
const REPLY_USAGE = { prompt_tokens: 9, completion_tokens: REPLY_WORDS.length, total_tokens: 9 + REPLY_WORDS.length };

/** The loopback upstream: OpenAI's chat completions, whole or streamed with its usage last, for the rehearsal's model only. */
function startUpstream(): ReturnType<typeof Bun.serve> {
  return Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    reusePort: false,
    routes: {
      "/v1/chat/completions": {
        POST: async (request) => {
          const body = (await request.json()) as { model?: unknown; stream?: unknown };
          if (body.model !== REHEARSAL_MODEL_ID) return Response.json({ error: { message: "not the rehearsal's model" } }, { status: 404 });
          return body.stream === true ? streamedReply() : Response.json(wholeReply());
        },
      },
    },
    fetch: () => new Response("not found", { status: 404 }),
  });
}

function wholeReply() {
  return {
    id: "chatcmpl-rehearsal",
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: REHEARSAL_MODEL_ID,
    choices: [{ index: 0, message: { role: "assistant", content: REPLY_WORDS.join("") }, finish_reason: "stop" }],
    usage: REPLY_USAGE,
  };
}

function streamedReply(): Response {
  const chunk = (choices: unknown[], usage?: unknown) =>
    `data: ${JSON.stringify({ id: "chatcmpl-rehearsal", object: "chat.completion.chunk", created: Math.floor(Date.now() / 1000), model: REHEARSAL_MODEL_ID, choices, ...(usage ? { usage } : {}) })}\n\n`;
  const frames = [
    ...REPLY_WORDS.map((content, i) =>
      chunk([{ index: 0, delta: i === 0 ? { role: "assistant", content } : { content }, finish_reason: null }]),
    ),
    chunk([{ index: 0, delta: {}, finish_reason: "stop" }]),
    chunk([], REPLY_USAGE),
    "data: [DONE]\n\n",
  ];
  return new Response(frames.join(""), { headers: { "content-type": "text/event-stream" } });
}
