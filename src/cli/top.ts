/**
 * `bun run gw top`: the cluster's live pool view in the terminal, redrawn each second like
 * `top`. It reads the gateway's SSE feed (`/admin/pools/live`, admin token), so any node shows
 * the whole cluster. `renderTop` is a pure function of one view; `runTop` does the I/O.
 */
import { SseSplitter } from "../providers/sse.ts";
import { liveViewSchema, type LiveView } from "../metrics/live.ts";
import { microToToman } from "../catalog/prices.ts";
import type { Invocation } from "./args.ts";
import { EXIT, messageOf, shownUrl, unreachableText } from "./exit.ts";

/** The terminal's rows when it does not say (not a TTY): enough for a log or a pipe. */
const ROWS_DEFAULT = 40;
/** Bound on one SSE event: a view is a few KB; anything far larger is not a Darvaze feed. */
const EVENT_CHARS_MAX = 4 * 1024 * 1024;
const CLEAR = "\x1b[H\x1b[2J";
const RED = "\x1b[31;1m";
const YELLOW = "\x1b[33m";
const RESET = "\x1b[0m";

export interface TopOptions {
  /** Rows available; tables are cut to fit and say how many rows were left out. */
  rows?: number;
  color?: boolean;
}

/**
 * One screen of the live view.
 * @example renderTop(view, { rows: 30, color: false }).split("\n")[0] // "darvaze top · 1 node · 05:30:12 UTC"
 */
export function renderTop(view: LiveView, options: TopOptions = {}): string {
  const rows = Math.max(10, options.rows ?? ROWS_DEFAULT);
  const paint = (text: string, code: string) => (options.color ? `${code}${text}${RESET}` : text);
  const time = new Date(view.atMs).toISOString().slice(11, 19);
  const nodes = view.nodes.length;
  const open = view.backends.filter((b) => b.breaker !== "closed").length;
  const lines = [
    `darvaze top · ${nodes} node${nodes === 1 ? "" : "s"} · ${time} UTC${open > 0 ? ` · ${paint(`${open} breaker${open === 1 ? "" : "s"} not closed`, RED)}` : ""}`,
    "",
  ];
  // Space for three tables, backends first when space is short: they show trouble.
  const budget = rows - lines.length - 9;
  const backendRows = Math.max(1, Math.ceil(budget * 0.5));
  const modelRows = Math.max(1, Math.floor(budget * 0.3));
  const keyRows = Math.max(1, budget - backendRows - modelRows);

  const backends = [...view.backends].sort((a, b) => rank(b.breaker) - rank(a.breaker) || b.requestsPerS - a.requestsPerS);
  lines.push(
    ...table(
      ["MODEL", "BACKEND", "BREAKER", "IN FLIGHT", "TTFT MS", "MS/TOKEN", "TOKENS/S", "REQ/S", "ERRORS"],
      backends.map((b) => [
        b.model,
        b.backend,
        b.breaker.replace("_", "-"),
        `${b.inFlight}/${b.concurrencyLimit}`,
        num(b.ttftEwmaMs),
        b.tpotEwmaMs === null ? "-" : num(b.tpotEwmaMs),
        num(b.tokensPerS),
        num(b.requestsPerS),
        `${Math.round(b.errorRate * 100)}%`,
      ]),
      backendRows,
      (row, text) =>
        backends[row]!.breaker !== "closed" ? paint(text, RED) : backends[row]!.errorRate >= 0.5 ? paint(text, YELLOW) : text,
    ),
    "",
  );
  const models = [...view.models].sort((a, b) => b.requestsPerS - a.requestsPerS || a.model.localeCompare(b.model));
  lines.push(
    ...table(
      ["MODEL", "REQ/S", "TOKENS/S", "TTFT MS", "ERRORS/S", "TOMAN/S"],
      models.map((m) => [
        m.model,
        num(m.requestsPerS),
        num(m.tokensPerS),
        m.ttftMs === null ? "-" : num(m.ttftMs),
        num(m.errorsPerS),
        num(m.spendMicroPerS / 1e6),
      ]),
      modelRows,
    ),
    "",
  );
  lines.push(
    ...table(
      ["TOP KEY", "NAME", "SPENT TOMAN"],
      view.topKeys.map((k) => [k.keyId, k.name, microToToman(k.spentMicro)]),
      keyRows,
    ),
  );
  return lines.join("\n");
}

function rank(breaker: string): number {
  return breaker === "open" ? 2 : breaker === "half_open" ? 1 : 0;
}

/** Padded columns, at most `rowsMax` rows, and a line saying how many were left out. */
function table(header: string[], rows: string[][], rowsMax: number, style: (row: number, text: string) => string = (_, t) => t): string[] {
  if (rows.length === 0) return [header.join("  "), "  (none yet)"];
  const shown = rows.slice(0, rowsMax);
  const widths = header.map((h, c) => Math.max(h.length, ...shown.map((r) => r[c]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, c) => (c === 0 || c === 1 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!)))
      .join("  ")
      .trimEnd();
  const out = [line(header), ...shown.map((r, i) => style(i, line(r)))];
  if (rows.length > shown.length) out.push(`  … ${rows.length - shown.length} more`);
  return out;
}

function num(n: number): string {
  if (n >= 100) return n.toFixed(0);
  if (n >= 1) return n.toFixed(1);
  return n === 0 ? "0" : n.toFixed(3);
}

/** The `data:` of each SSE event of `name` in a byte stream. */
export async function* sseData(body: ReadableStream<Uint8Array>, name: string): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  const sse = new SseSplitter({ eventCharsMax: EVENT_CHARS_MAX });
  for await (const chunk of body) {
    for (const event of sse.push(decoder.decode(chunk, { stream: true }))) if (event.event === name) yield event.data;
  }
}

export interface TopIo {
  out: (text: string) => void;
  err: (text: string) => void;
  rows?: () => number | undefined;
  color?: boolean;
  signal?: AbortSignal;
}

/** Exit codes as the CLI's: 0 ok (or stopped), 1 refused, 3 unreachable or the feed broke. */
export async function runTop(invocation: Invocation, once: boolean, io: TopIo): Promise<number> {
  let response: Response;
  try {
    response = await fetch(`${invocation.url}/admin/pools/live`, {
      headers: { authorization: `Bearer ${invocation.token}` },
      signal: io.signal,
    });
  } catch (error) {
    if (io.signal?.aborted) return EXIT.ok;
    io.err(unreachableText(invocation.url, messageOf(error)));
    return EXIT.unreachable;
  }
  if (!response.ok || !response.body) {
    const text = await response.text().catch(() => "");
    io.err(`error: the gateway refused the live feed (HTTP ${response.status}) ${text.slice(0, 300)}`.trimEnd());
    return EXIT.refused;
  }
  try {
    for await (const data of sseData(response.body, "pools")) {
      const view = liveViewSchema.safeParse(JSON.parse(data));
      if (!view.success) {
        io.err(`error: unexpected live view from ${shownUrl(invocation.url)}: ${view.error.issues[0]?.message}`);
        return EXIT.refused;
      }
      const screen = renderTop(view.data, { rows: io.rows?.(), color: io.color });
      if (once) {
        io.out(screen);
        return EXIT.ok;
      }
      io.out(`${CLEAR}${screen}`);
    }
  } catch (error) {
    if (io.signal?.aborted) return EXIT.ok;
    io.err(`error: the live feed broke off: ${messageOf(error)}`);
    return EXIT.unreachable;
  }
  if (io.signal?.aborted) return EXIT.ok;
  io.err("error: the gateway closed the live feed");
  return EXIT.unreachable;
}
