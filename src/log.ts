/**
 * Structured logs: one JSON object per line on stderr. Fields are ids, counts and timings;
 * never an API key, and never message content.
 *
 * The lines of one turn of the event loop go out in one write, at its end (a busy node writes one
 * access line per request, and a write per line cost more than the line: bench/RESULTS.md), or at
 * once past LOG_BUFFER_CHARS_MAX; an error line goes out at once, after what was waiting, and
 * whatever waits is written when the process exits.
 */
import { encodeJson } from "./json.ts";

export type LogLevel = "debug" | "info" | "warn" | "error";
const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export type Logger = (level: LogLevel, event: string, fields?: Record<string, unknown>) => void;

/** Characters of log lines held for the end of the loop's turn before they are written anyway. */
export const LOG_BUFFER_CHARS_MAX = 65_536;

/** Lines to `write`, gathered per turn of the event loop (see the module); `flush` writes what waits. */
export function lineBatcher(write: (text: string) => void): { line: (text: string, urgent?: boolean) => void; flush: () => void } {
  let pending = "";
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    if (pending === "") return;
    const text = pending;
    pending = "";
    write(text);
  };
  return {
    line(text, urgent = false) {
      pending += text;
      if (urgent || pending.length >= LOG_BUFFER_CHARS_MAX) flush();
      else if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
      }
    },
    flush,
  };
}

let stderrLines: ReturnType<typeof lineBatcher> | null = null;

/** The process's one batcher for stderr, flushed on exit. */
function stderrBatcher(): ReturnType<typeof lineBatcher> {
  if (stderrLines === null) {
    const batcher = lineBatcher((text) => process.stderr.write(text));
    process.on("exit", batcher.flush);
    stderrLines = batcher;
  }
  return stderrLines;
}

/** Where a database driver's error message starts listing the query's parameters (drizzle: "Failed query: … \nparams: …"). */
const QUERY_PARAMS_MARK = "\nparams:";

/** `text` without a query's parameters: they may be a key's hash, an account, a customer's name. */
export function withoutQueryParams(text: string): string {
  const at = text.indexOf(QUERY_PARAMS_MARK);
  return at < 0 ? text : text.slice(0, at);
}

/** The fields of a line with every string cut before a query's parameters: no error line carries them, whoever logs it. */
function scrubbed(fields: Record<string, unknown>): Record<string, unknown> {
  for (const [name, value] of Object.entries(fields)) {
    if (typeof value === "string" && value.includes(QUERY_PARAMS_MARK)) fields = { ...fields, [name]: withoutQueryParams(value) };
  }
  return fields;
}

/** A logger of `minimum` and above; lines to `write` when given (tests), else to stderr, batched. */
export function createLogger(minimum: LogLevel, write?: (line: string) => void): Logger {
  const floor = RANK[minimum];
  const out: (line: string, urgent: boolean) => void = write ?? ((line, urgent) => stderrBatcher().line(line, urgent));
  return (level, event, fields = {}) => {
    if (RANK[level] < floor) return;
    const record = { t: new Date().toISOString(), level, event, ...scrubbed(fields) };
    out(`${encodeJson(record)}\n`, level === "error");
  };
}

export const silentLogger: Logger = () => {};
