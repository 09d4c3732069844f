/** Reading an admin or console request's JSON body: bounded, then checked against its schema. */
import type { z } from "zod";
import { isFailure, type Failure } from "../../errors.ts";
import { zodFailure } from "../guard.ts";
import { readJsonBody } from "../request.ts";

/** Admin bodies are small; anything bigger is a mistake. */
export const ADMIN_BODY_BYTES_MAX = 64 * 1024;

export async function parseBody<T>(request: Request, schema: z.ZodType<T, unknown>, bytesMax = ADMIN_BODY_BYTES_MAX): Promise<T | Failure> {
  const raw = await readJsonBody(request, bytesMax);
  if (isFailure(raw)) return raw;
  const parsed = schema.safeParse(raw);
  return parsed.success ? parsed.data : zodFailure(parsed.error);
}
