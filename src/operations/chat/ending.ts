/**
 * How a relayed stream ends: one pure decision from what happened, so that every end is billed,
 * recorded and closed by the same table (unit-tested on its own in ending.test.ts).
 *
 *   client gone   499; the upstream is cut at once; billed its report if it finished before
 *                 the cut took effect, else the cut's count (unreported.ts: what was metered
 *                 until the cut plus the stated allowance); nothing more is sent
 *   cut           200; the hold could not cover the next text: billed what was delivered, the
 *                 rest of what was read metered and written off; finish_reason "length", [DONE]
 *   failed        502; billed what was delivered; an error frame
 *   done          200; billed the upstream's report (our count when it sent none); [DONE]
 */
import type { Failure } from "../../errors.ts";
import type { Usage } from "../../providers/types.ts";
import type { ReplyEnd } from "../../providers/upstream.ts";
import { STATUS_CLIENT_CLOSED } from "../../admission/settlement.ts";

/** What happened to a stream, as its relay saw it. */
export interface StreamEnding {
  clientGone: boolean;
  /** Text the hold could not cover: the stream was cut before it. */
  withheld: boolean;
  /** The upstream said it finished (its end marker, or a final event). */
  finished: boolean;
  failure: Failure | null;
  /** The upstream's latest usage figure, if it sent one. */
  reported: Usage | null;
}

export type EndKind = "client_gone" | "length_cut" | "failed" | "done";

export interface EndDecision {
  end: EndKind;
  status: number;
  /** How the upstream reply ends, for its backend (see ReplyEnd). */
  reply: ReplyEnd;
  /**
   * Where the billed output tokens come from: the upstream's report, our count of everything it
   * sent (it finished after the client left, without a report), the meter (what was delivered),
   * or the cut (it was stopped unfinished when the client left: what was read until the cut plus
   * the allowance for what it generated unseen, unreported.ts).
   */
  output: "report" | "count_sent" | "meter" | "cut";
  /** The last frames the client gets. */
  last: "cut" | "error" | "done" | null;
}

/**
 * @example decideEnd({ clientGone: false, withheld: false, finished: true, failure: null, reported: usage })
 *   // { end: "done", status: 200, reply: "done", output: "report", last: "done" }
 */
export function decideEnd(e: StreamEnding): EndDecision {
  if (e.clientGone) {
    return {
      end: "client_gone",
      status: STATUS_CLIENT_CLOSED,
      reply: e.finished ? "done" : "abandoned",
      output: e.finished ? (e.reported ? "report" : "count_sent") : "cut",
      last: null,
    };
  }
  if (e.withheld) return { end: "length_cut", status: 200, reply: "abandoned", output: "meter", last: "cut" };
  const output = e.finished && e.reported ? "report" : "meter";
  if (e.failure) return { end: "failed", status: 502, reply: "failed", output, last: "error" };
  return { end: "done", status: 200, reply: "done", output, last: "done" };
}
