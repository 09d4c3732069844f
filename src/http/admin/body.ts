/** Reading an admin or console request's JSON body: bounded, then checked against its schema. */
import type { z } from "zod";
import { isFailure, type Failure } from "../../errors.ts";
import { zodFailure } from "../guard.ts";
import { nulPath, nulRefused, readJsonBodyText } from "../request.ts";

/** Admin bodies are small; anything bigger is a mistake. */
export const ADMIN_BODY_BYTES_MAX = 64 * 1024;
/** Admin and console bodies are flat records; anything deeper is a mistake. */
export const ADMIN_BODY_DEPTH_MAX = 16;

export async function parseBody<T>(request: Request, schema: z.ZodType<T, unknown>, bytesMax = ADMIN_BODY_BYTES_MAX): Promise<T | Failure> {
  const read = await readJsonBodyText(request, { bytesMax, depthMax: ADMIN_BODY_DEPTH_MAX });
  if (isFailure(read)) return read;
  const nul = nulPath(read.value);
  if (nul !== null) return nulRefused(nul);
  const parsed = schema.safeParse(read.value);
  return parsed.success ? parsed.data : zodFailure(parsed.error);
}
