import { expect, test } from "bun:test";
import { sqlStateOf } from "../db/client.ts";
import { isPoison, sqlReason } from "./deadletter.ts";

/** An error as drizzle throws it: "Failed query … params: …", the driver's error as its cause. */
const drizzleError = (code: string, message: string) =>
  Object.assign(new Error(`Failed query: INSERT INTO usage_records …\nparams: [{"requestId":"req_1","accountId":"acct_1"}]`), {
    cause: Object.assign(new Error(message), { code }),
  });

test("only data and constraint errors (SQLSTATE classes 22 and 23) are poison", () => {
  for (const code of ["22003", "22P05", "22021", "23514", "23505", "23502"]) expect(isPoison(drizzleError(code, "refused"))).toBe(true);
  for (const code of ["40001", "40P01", "08006", "57P01", "53300", "42P01", "XX000"]) expect(isPoison(drizzleError(code, "failed"))).toBe(false);
  // Connection errors carry errno names, not SQLSTATEs.
  expect(isPoison(Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }))).toBe(false);
  expect(isPoison(Object.assign(new Error("write CONNECTION_CLOSED"), { code: "CONNECTION_CLOSED" }))).toBe(false);
  expect(isPoison(new Error("timeout"))).toBe(false);
  expect(sqlStateOf(drizzleError("23514", "x"))).toBe("23514");
});

test("a reason is the database's words, without the batch drizzle puts in its message", () => {
  const reason = sqlReason(drizzleError("23514", 'new row for relation "usage_records" violates check constraint "usage_records_billed_within_metered"'));
  expect(reason).toBe('23514: new row for relation "usage_records" violates check constraint "usage_records_billed_within_metered"');
  expect(sqlReason(new Error("Failed query: SELECT 1\nparams: secret"))).toBe("Failed query: SELECT 1");
});
