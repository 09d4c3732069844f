/**
 * Structured logs: one JSON object per line on stderr. Fields are ids, counts and timings;
 * never an API key, and never message content.
 */
import { encodeJson } from "./json.ts";

export type LogLevel = "debug" | "info" | "warn" | "error";
const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export type Logger = (level: LogLevel, event: string, fields?: Record<string, unknown>) => void;

export function createLogger(minimum: LogLevel, write: (line: string) => void = (l) => process.stderr.write(l)): Logger {
  const floor = RANK[minimum];
  return (level, event, fields = {}) => {
    if (RANK[level] < floor) return;
    const record = { t: new Date().toISOString(), level, event, ...fields };
    write(`${encodeJson(record)}\n`);
  };
}

export const silentLogger: Logger = () => {};
