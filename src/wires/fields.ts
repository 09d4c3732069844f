/**
 * The wires' rule for fields: every field a client sends is known, and any other is a 400 naming
 * it (a field the gateway does not know is one it cannot price). Zod's strict objects say so for
 * fixed shapes; these say it for shapes read by hand, and place a nested failure in the request.
 */
import type { z } from "zod";
import { fail, type Failure, zodFailure } from "../errors.ts";

/**
 * The first field of `raw` not in `allowed`, as the 400 naming it; null when all are known (or
 * `allowed` is absent: a shape refused elsewhere).
 * @example unknownField({ type: "text", text: "Hi", x: 1 }, new Set(["type", "text"]), "messages.0.content.0") // param "messages.0.content.0.x"
 */
export function unknownField(raw: Readonly<Record<string, unknown>>, allowed: ReadonlySet<string> | undefined, at: string): Failure | null {
  if (!allowed) return null;
  for (const key in raw) {
    if (!allowed.has(key))
      return fail("invalid_request", `Unrecognized request argument supplied: ${at}.${key}`, { param: `${at}.${key}` });
  }
  return null;
}

/** A zod failure of a part parsed on its own, its param placed under `at`. */
export function zodFailureAt(error: z.ZodError, at: string): Failure {
  const failure = zodFailure(error);
  const param = failure.param ? `${at}.${failure.param}` : at;
  return { ...failure, param, message: `Invalid value for '${param}': ${error.issues[0]!.message}` };
}
