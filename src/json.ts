/**
 * JSON for messages that carry money: bigints travel as decimal strings, and are read back
 * (validated) by `bigintJson`.
 */
import { z } from "zod";

/** JSON with bigints as decimal strings. */
export function encodeJson(value: unknown): string {
  return JSON.stringify(value, (_, v) => (typeof v === "bigint" ? v.toString() : v));
}

/** A bigint, or its decimal string as `encodeJson` wrote it. */
export const bigintJson = z.union([
  z.bigint(),
  z
    .string()
    .regex(/^-?\d{1,30}$/)
    .transform((s) => BigInt(s)),
]);
