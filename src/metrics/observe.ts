/**
 * One call per request at its end: the Prometheus counters, the live view's traffic counts and
 * one structured access line (`event: "request"`) with ids, model, backend, status, tokens, cost
 * and timings. Never the API key (only its id); message content only when the operator sets
 * LOG_MESSAGE_CONTENT, and then only in this line.
 */
import type { Env } from "../config.ts";
import type { Logger } from "../log.ts";
import type { Metrics, RequestMetric } from "./metrics.ts";
import { UNIT_NAMES, UNITS, type UnitRow } from "../units.ts";

/** Characters of prompt or completion an access line carries at most, when content is logged. */
export const LOGGED_CONTENT_CHARS_MAX = 16_384;

export interface RequestRecord extends RequestMetric {
  requestId: string;
  keyId: string | null;
  /** Read only when content logging is on. */
  content?: () => { prompt: unknown; completion: string };
}

export interface ObserveDeps {
  env: Pick<Env, "LOG_MESSAGE_CONTENT">;
  metrics: Metrics;
  log: Logger;
}

/**
 * Records a request that reached a backend (or was admitted and failed there).
 * @example observeRequest(deps, { requestId, operation: "chat", model: "gpt-4o-mini", backend: "sim", status: 200, … })
 */
export function observeRequest(deps: ObserveDeps, r: RequestRecord): void {
  deps.metrics.request(r);
  const line: Record<string, unknown> = {
    requestId: r.requestId,
    keyId: r.keyId,
    operation: r.operation,
    model: r.model,
    backend: r.backend,
    status: r.status,
    inputTokens: r.inputTokens,
    outputTokens: r.outputTokens,
    billedMicro: r.billedMicro,
    durationMs: Math.round(r.durationMs),
    ttftMs: r.ttftMs == null ? null : Math.round(r.ttftMs),
    tpotMs: r.tpotMs == null ? null : Math.round(r.tpotMs * 100) / 100,
  };
  // The parts of the prompt priced apart (`cacheReadTokens`: UNITS' field stem), beside its whole `inputTokens`.
  for (const unit of UNIT_NAMES) {
    const row: UnitRow = UNITS[unit];
    const count = r.unitTokens?.[unit];
    if (row.tokens && row.partOf !== undefined && count) line[`${row.field}Tokens`] = count;
  }
  if (r.meteredMicro !== undefined) line.meteredMicro = r.meteredMicro;
  if (deps.env.LOG_MESSAGE_CONTENT && r.content) {
    const { prompt, completion } = r.content();
    line.prompt = clip(JSON.stringify(prompt));
    line.completion = clip(completion);
  }
  deps.log(r.status >= 500 ? "warn" : "info", "request", line);
}

/** Records a request refused before any backend: bad input, key, money or limits. */
export function observeRefused(
  deps: ObserveDeps,
  r: { requestId: string; keyId: string | null; operation: string; model: string | null; status: number; code: string; durationMs: number },
): void {
  // An unknown model name is the client's text: it never becomes a label.
  deps.metrics.refused(r.operation, r.model ?? "none", r.status);
  deps.log("info", "request", {
    requestId: r.requestId,
    keyId: r.keyId,
    operation: r.operation,
    model: r.model,
    backend: null,
    status: r.status,
    code: r.code,
    durationMs: Math.round(r.durationMs),
  });
}

/** Characters of an unmatched path an access line carries at most (the path is the client's text). */
export const LOGGED_PATH_CHARS_MAX = 256;

/**
 * The access line of a request that is not a paid operation (those log their own, with tokens and
 * cost): admin, models, health, count_tokens, the account area, and paths that match no route.
 * `route` is the matched pattern (`/admin/accounts/:id`), never the query string, which may carry
 * a key; an unmatched path is logged clipped. `clientAddress`: the client's (src/http/request.ts, clientAddressOf).
 */
export function observeHttp(
  log: Logger,
  r: {
    requestId: string | null;
    method: string;
    route: string | null;
    path: string;
    status: number;
    durationMs: number;
    clientAddress: string | null;
  },
): void {
  log(r.status >= 500 ? "warn" : "info", "request", {
    requestId: r.requestId,
    keyId: null,
    operation: r.route === "/v1/messages/count_tokens" || r.path.endsWith(":countTokens") ? "count_tokens" : "http",
    method: r.method,
    route: r.route ?? clip(r.path, LOGGED_PATH_CHARS_MAX),
    status: r.status,
    durationMs: Math.round(r.durationMs),
    clientAddress: r.clientAddress,
  });
}

function clip(text: string, charsMax = LOGGED_CONTENT_CHARS_MAX): string {
  return text.length > charsMax ? `${text.slice(0, charsMax)}…` : text;
}
