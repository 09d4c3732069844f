/**
 * The upstream simulator: OpenAI-compatible chat (plus Anthropic Messages at /v1/messages and
 * Gemini generateContent at /v1beta/models/{model}:…, see `flavor`) with vLLM-style /metrics, standing in
 * for vendor APIs and GPU hosts in tests, the demo and benchmarks. Its replies are deterministic
 * for a seed, and its log (`SimLog`) is the independent truth billing tests compare against.
 *
 * @example
 * const sim = await startSimulator({ ttftMs: 30, itlMs: 5 });
 * const client = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: "x" });
 * sim.options.failRate = 0.1; // options are live
 * await sim.stop();
 */
import { anthropicWire } from "./anthropic.ts";
import { handleAnthropicCount, handleGeminiCount } from "./count.ts";
import { responsesWire } from "./responses.ts";
import { authorized, handleChat, unauthorizedResponse, type ChatContext } from "./chat.ts";
import { handleSpeech, handleTranscription } from "./audio.ts";
import { handleEmbeddings, handleGeminiEmbeddings } from "./embeddings.ts";
import { handleImages, SimImageStore } from "./images.ts";
import type { Exchange } from "./exchange.ts";
import { SimGate } from "./gate.ts";
import { SimLog } from "./log.ts";
import { SimMetrics } from "./metrics.ts";
import { SimOptionsSchema, type SimOptions } from "./options.ts";
import { mulberry32 } from "./text.ts";
import { geminiWire } from "./gemini.ts";
import { handleVendorChat } from "./vendor.ts";
import { errorBody } from "./wire.ts";

export { SimOptionsSchema, type SimOptions } from "./options.ts";
export { SimLog, simLogEntriesMax, type SimLogEntry, type SimLogTotals, type SimFinishReason } from "./log.ts";

export type Simulator = {
  /** `http://127.0.0.1:<port>`, no trailing slash. */
  readonly url: string;
  readonly port: number;
  readonly log: SimLog;
  /** Live: changes apply to requests that arrive afterwards. */
  readonly options: SimOptions;
  /** Count requests answered (Anthropic's count_tokens, Gemini's countTokens). */
  counts(): number;
  /** Closes every connection (stalled streams included) and logs what was in flight. */
  stop(): Promise<void>;
};

/** Request bodies above this are refused by Bun before they reach a handler. */
export const simBodyBytesMax = 32 * 1024 * 1024;

const hostname = "127.0.0.1";
const jsonHeaders = { "content-type": "application/json" } as const;
const notFoundBytes = new TextEncoder().encode(
  errorBody({ message: "Unknown simulator route.", type: "invalid_request_error", code: "unknown_url" }),
);

export async function startSimulator(opts: Partial<SimOptions> = {}): Promise<Simulator> {
  const options = SimOptionsSchema.parse(opts);
  const context = createContext(options);
  const startedAtSec = Math.floor(Date.now() / 1000);
  const images = new SimImageStore();
  const server: ReturnType<typeof Bun.serve> = Bun.serve({
    port: options.port,
    hostname,
    // Stalls and long TTFTs must not be cut by Bun's 10 s idle default.
    idleTimeout: 0,
    // Bun's default, stated: a second simulator on a busy port fails instead of sharing it.
    reusePort: false,
    maxRequestBodySize: simBodyBytesMax,
    routes: {
      ...vendorRoutes(context, options, startedAtSec),
      "/v1/embeddings": { POST: (req) => handleEmbeddings(context, req) },
      "/v1/audio/speech": { POST: (req) => handleSpeech(context, req) },
      "/v1/audio/transcriptions": { POST: (req) => handleTranscription(context, req) },
      "/v1/images/generations": { POST: (req) => handleImages(context, images, `http://${hostname}:${server.port}`, req) },
      "/sim/images/:id": { GET: (req) => images.serve(req.params.id) },
      "/metrics": { GET: () => metricsResponse(context) },
      "/sim/log": { GET: () => Response.json(context.log.entries()) },
    },
    fetch: () => new Response(notFoundBytes, { status: 404, headers: jsonHeaders }),
  });
  const port = server.port ?? options.port;
  return {
    url: `http://${hostname}:${port}`,
    port,
    log: context.log,
    options,
    counts: () => context.counts,
    stop: () => stopServer(context, server),
  };
}

type RouteHandlers = { GET?: (req: Request) => Response | Promise<Response>; POST?: (req: Request) => Response | Promise<Response> };

/** The chat routes of the flavors served; the flavor is read once, when the server starts. */
function vendorRoutes(context: ChatContext, options: SimOptions, startedAtSec: number): Record<string, RouteHandlers> {
  const serves = (flavor: SimOptions["flavor"]) => options.flavor === "all" || options.flavor === flavor;
  const routes: Record<string, RouteHandlers> = {};
  if (serves("openai")) {
    routes["/v1/chat/completions"] = { POST: (req) => handleChat(context, req) };
    routes["/v1/responses"] = { POST: (req) => handleVendorChat(context, req, responsesWire) };
    routes["/v1/models"] = { GET: (req) => modelsResponse(context, req, startedAtSec) };
  }
  if (serves("anthropic")) {
    routes["/v1/messages"] = { POST: (req) => handleVendorChat(context, req, anthropicWire) };
    routes["/v1/messages/count_tokens"] = { POST: (req) => handleAnthropicCount(context, req) };
  }
  if (serves("gemini")) {
    // Google serves both API versions; @google/genai defaults to v1, the gateway uses v1beta.
    // `{model}:generateContent` and `:streamGenerateContent` are chat; `:batchEmbedContents` embeds.
    const gemini = (req: Request) => {
      const target = decodeURIComponent(new URL(req.url).pathname.split("/").pop() ?? "");
      if (target.endsWith(":countTokens")) return handleGeminiCount(context, req);
      return /:(batchEmbedContents|embedContent)$/.test(target)
        ? handleGeminiEmbeddings(context, req, target)
        : handleVendorChat(context, req, geminiWire);
    };
    routes["/v1beta/models/:target"] = { POST: gemini };
    routes["/v1/models/:target"] = { POST: gemini };
  }
  return routes;
}

function createContext(options: SimOptions): ChatContext {
  let rollSeed = options.seed;
  let random = mulberry32(rollSeed);
  return {
    options,
    log: new SimLog(),
    metrics: new SimMetrics(),
    live: new Set<Exchange>(),
    stopping: false,
    gate: new SimGate(() => options.concurrency),
    counts: 0,
    roll(rate: number): boolean {
      if (rate <= 0) return false;
      if (rate >= 1) return true;
      // Tests may change the seed at run time; the roll sequence follows it.
      if (options.seed !== rollSeed) {
        rollSeed = options.seed;
        random = mulberry32(rollSeed);
      }
      return random() < rate;
    },
  };
}

async function stopServer(context: ChatContext, server: { stop(force: boolean): Promise<void> }): Promise<void> {
  context.stopping = true;
  await server.stop(true);
  for (const exchange of [...context.live]) exchange.abort();
}

function modelsResponse(context: ChatContext, req: Request, created: number): Response {
  if (!authorized(context.options, req)) return unauthorizedResponse();
  const data = context.metrics.models().map((id) => ({ id, object: "model", created, owned_by: "darvaze-sim" }));
  return Response.json({ object: "list", data });
}

function metricsResponse(context: ChatContext): Response {
  return new Response(context.metrics.render(context.gate.running, context.gate.waiting), {
    headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" },
  });
}
