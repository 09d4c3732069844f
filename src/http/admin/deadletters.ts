/**
 * Dead-lettered usage records for operators (ledger/deadletter.ts): the list, and the replay
 * that posts one after a fix and reverses its write-off.
 *
 *   GET  /admin/usage/dead-letters?status=dead|replayed|all&limit=N
 *   POST /admin/usage/dead-letters/{id}/replay   → 200 {outcome: replayed | already_replayed}
 *                                                  409 replay_refused (the database still refuses it)
 */
import { z } from "zod";
import { microToToman } from "../../catalog/prices.ts";
import { fail } from "../../errors.ts";
import { DEAD_LETTERS_LISTED_MAX, listDeadLetters, replayDeadLetter, type DeadLetterRow } from "../../ledger/deadletter.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import { failed, json, zodFailure } from "../guard.ts";

const listQuery = z.object({
  status: z.enum(["dead", "replayed", "all"]).default("dead"),
  limit: z.coerce.number().int().min(1).max(DEAD_LETTERS_LISTED_MAX).default(100),
});

/** A dead letter's id: a bigserial, in decimal. */
export const DEAD_LETTER_ID = /^[1-9][0-9]{0,18}$/;
/** The column is a bigserial (int8). */
const DEAD_LETTER_ID_MAX = 2n ** 63n - 1n;

export function deadLetterObject(row: DeadLetterRow) {
  const { written_off_micro, ...rest } = row;
  return {
    object: "usage.dead_letter",
    ...rest,
    written_off_toman: microToToman(BigInt(written_off_micro)),
    written_off_micro_toman: written_off_micro,
  };
}

export async function listDeadLettersRoute(deps: GatewayDeps, request: Request, requestId: string): Promise<Response> {
  const query = listQuery.safeParse(Object.fromEntries(new URL(request.url).searchParams));
  if (!query.success) return failed(zodFailure(query.error), requestId);
  const { status, limit } = query.data;
  const rows = await listDeadLetters(deps.db, { status: status === "all" ? undefined : status, limit });
  return json({ object: "list", data: rows.map(deadLetterObject) }, requestId);
}

export async function replayDeadLetterRoute(deps: GatewayDeps, id: string, requestId: string): Promise<Response> {
  // Past int8 no row can have it: the database refused the lookup, and that read as the ledger refusing a replay (409).
  if (!DEAD_LETTER_ID.test(id) || BigInt(id) > DEAD_LETTER_ID_MAX) return failed(fail("not_found", `No dead letter ${id}.`), requestId);
  const result = await replayDeadLetter(deps.db, BigInt(id));
  switch (result.outcome) {
    case "not_found":
      return failed(fail("not_found", `No dead letter ${id}.`), requestId);
    case "refused":
      return failed(fail("replay_refused", `The ledger still refuses dead letter ${id}: ${result.reason}`), requestId);
    case "already_replayed":
      return json({ object: "usage.replay", id, outcome: result.outcome }, requestId);
    case "replayed":
      deps.log("info", "dead_letter_replayed", { id, written: result.written });
      return json(
        {
          object: "usage.replay",
          id,
          outcome: result.outcome,
          // 0 when the record was billed meanwhile: replay posts by request id, once.
          written: result.written,
          posted_micro_toman: result.postedMicro.toString(),
          written_off_micro_toman: result.writtenOffMicro.toString(),
        },
        requestId,
      );
  }
}
