/**
 * JSON for messages that carry money: bigints travel as decimal strings, and are read back
 * (validated) by `bigintJson`.
 */
import { z } from "zod";

/**
 * JSON with bigints as decimal strings. The bigints are replaced in a copy first: a replacer
 * function would take JSON.stringify off its fast path (about 3× slower on usage records, which
 * every request writes two or three times).
 */
export function encodeJson(value: unknown): string {
  return JSON.stringify(withoutBigints(value));
}

/** `value` with every bigint as its decimal string (objects with a `toJSON` are left to it). */
function withoutBigints(value: unknown): unknown {
  if (typeof value === "bigint") return value.toString();
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) return value.map(withoutBigints);
  if (typeof (value as { toJSON?: unknown }).toJSON === "function") return value;
  const copy: Record<string, unknown> = {};
  for (const key of Object.keys(value)) copy[key] = withoutBigints((value as Record<string, unknown>)[key]);
  return copy;
}

const DECIMAL = /^-?\d{1,30}$/;

/**
 * A bigint, or its decimal string as `encodeJson` wrote it. One check and one conversion rather
 * than a union of two schemas: the usage log's consumer reads a dozen of these per record (a
 * third of its validation time with the union).
 */
export const bigintJson = z
  .custom<bigint | string>((v) => typeof v === "bigint" || (typeof v === "string" && DECIMAL.test(v)), {
    message: "Expected a bigint or its decimal string (at most 30 digits)",
  })
  .transform((v) => (typeof v === "bigint" ? v : BigInt(v)));

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;

/**
 * Whether JSON text nests arrays and objects deeper than `depthMax`, read from the raw text before
 * anything parses it: code that walks a parsed value recursively (validation, serialization)
 * would otherwise spend seconds on, or overflow its stack at, a body of a few hundred KB. Brackets
 * inside strings do not count; strings are skipped with `indexOf`, so a large prompt costs little.
 * Malformed text is left to the parser. It stops at the first bracket past the bound.
 *
 * @example jsonDepthExceeds('{"a":[[1]]}', 2) // true: three levels
 */
export function jsonDepthExceeds(text: string, depthMax: number): boolean {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) i = stringEnd(text, i);
    else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > depthMax) return true;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) depth--;
  }
  return false;
}

/** The index of the quote that closes the string opened at `open` (the text's length when none does). */
function stringEnd(text: string, open: number): number {
  let at = open;
  for (;;) {
    at = text.indexOf('"', at + 1);
    if (at < 0) return text.length;
    let slashes = 0;
    while (text.charCodeAt(at - 1 - slashes) === BACKSLASH) slashes++;
    if (slashes % 2 === 0) return at;
  }
}
