/**
 * A chat request's output when the upstream reported no usage: it never does, or the client left
 * and the stream was cut. The one count of an unreported or cut request.
 *
 * In full, with the reasoning: docs/internals.md#output-the-upstream-did-not-report.
 */
import type { Backend } from "../../../actors/pool/backend.ts";
import type { Admission, SettleExtra } from "../../admission/settlement.ts";
import type { Usage } from "../../providers/types.ts";
import { countsExactly } from "../../admission/model.ts";
import { hidesReasoning, takesReasoningEffort } from "../../catalog/reasoning.ts";
import { countTokens, utf8Bytes } from "../../tokens/count.ts";
import type { VendorCount } from "../../providers/count.ts";
import { invariant } from "../../invariant.ts";

/** From a client's leave to the upstream's socket closing: the cut's bound (measured: bench/leave.ts). */
export const STREAM_CUT_MS_MAX = 250;
/**
 * What a count endpoint may add to a text's own tokens: Anthropic's counts the text as a message,
 * its framing included (a few tokens). The count's stated margin, on the customer's side.
 */
export const COUNT_FRAMING_TOKENS_MAX = 16;
/** The fastest time per token an allowance is reckoned with: a backend measured faster counts as this fast. */
export const CUT_TPOT_MS_MIN = 1;

/** Where a count that fell back to bytes is logged. */
export type CountLog = (event: string, fields: Record<string, unknown>) => void;

/**
 * The visible tokens of `text` as its vendor counts them.
 * @example await visibleTokens(admission, "Hello!") // 2 on gpt-4o-mini; 6 (its bytes) on a backend without a count
 */
export async function visibleTokens(admission: Admission, text: string, vendorCount?: VendorCount, log?: CountLog): Promise<number> {
  if (text === "") return 0;
  if (countsExactly(admission.model)) return countTokens(text);
  if (vendorCount) {
    const counted = await vendorCount(text).catch(() => null);
    if (counted !== null) return counted;
    log?.("count_fell_back_to_bytes", { requestId: admission.requestId, model: admission.model.id });
  }
  return utf8Bytes(text);
}

/**
 * Output tokens for text the upstream sent, finished without a usage report.
 * @example await unreportedOutputTokens(admission, "Hello!") // 2 on gpt-4o-mini; 6 (its bytes) on a Gemini model that does not reason
 */
export async function unreportedOutputTokens(
  admission: Admission,
  text: string,
  vendorCount?: VendorCount,
  log?: CountLog,
): Promise<number> {
  if (takesReasoningEffort(admission.model.id)) return admission.coveredOutputUnits;
  return Math.min(await visibleTokens(admission, text, vendorCount, log), admission.coveredOutputUnits);
}

/** What the relay knows of a stream at its cut (performance-clock times, ms). */
export interface CutFacts {
  /** Everything read from the upstream until the cut. */
  text: string;
  /** When the upstream answered (its reply's headers). */
  answeredMs: number;
  /** The last read from the upstream. */
  lastReadMs: number;
  /** When the client left. */
  cutMs: number;
  /** The backend's time per token: the lower of its measured estimate and this stream's own. */
  tpotMs: number;
}

/** A cut stream's output: billed = metered + allowance, within the hold. */
export interface CutOutput {
  output: number;
  /** The visible tokens read until the cut. */
  metered: number;
  /** Hidden reasoning and in-flight tokens billed on top of the metered ones. */
  allowance: number;
}

/**
 * The output of a stream cut when its client left.
 * @example await cutOutputTokens(admission, { text: "Hi there", answeredMs: 0, lastReadMs: 100, cutMs: 110, tpotMs: 20 }) // { metered: 2, allowance: 14, output: 16 } on gpt-4o-mini
 */
export async function cutOutputTokens(admission: Admission, cut: CutFacts, vendorCount?: VendorCount, log?: CountLog): Promise<CutOutput> {
  const covered = admission.coveredOutputUnits;
  const metered = Math.min(await visibleTokens(admission, cut.text, vendorCount, log), covered);
  const tpotMs = Math.max(CUT_TPOT_MS_MIN, Number.isFinite(cut.tpotMs) ? cut.tpotMs : CUT_TPOT_MS_MIN);
  const inFlight = Math.ceil((Math.max(0, cut.cutMs - cut.lastReadMs) + STREAM_CUT_MS_MAX) / tpotMs);
  // Until its last event; the in-flight allowance counts the time after it.
  const generated = Math.floor(Math.max(0, cut.lastReadMs - cut.answeredMs) / tpotMs);
  const hidden = hidesReasoning(admission.model) ? Math.max(0, generated - metered) : 0;
  const output = Math.min(covered, metered + hidden + inFlight);
  invariant(metered <= output && output <= covered, "cut_within_bounds", { requestId: admission.requestId, metered, output, covered });
  return { output, metered, allowance: output - metered };
}

/** How a chat request ended, for its bill: what the upstream reported, and the output the gateway counted. */
export interface ChatEnding {
  /** The backend that served it: one that runs the hosted tool itself (Anthropic's) may have made every call it was allowed. */
  backend: Pick<Backend, "adapter">;
  /** The upstream's usage report, or null when it sent none. */
  reported: Usage | null;
  /** The prompt's tokens the upstream told at its stream's start, when it did (Anthropic's message_start). */
  inputAtStart?: number | null;
  /** The output billed. */
  output: number;
  /** The output metered, when above what is billed (a stream cut at its length: the rest is written off). */
  metered?: number;
  /** The status its client got. */
  status: number;
  /** Whether the upstream owed a report (it finished): none is then an upstream anomaly. */
  usageOwed: boolean;
  /** The upstream reports serving the default tier to a request that asked a priced one (Admission.servedAtDefaultTier). */
  servedDefaultTier?: boolean;
  extra: Omit<SettleExtra, "billedMicroMax" | "usageMissing">;
}

/**
 * The usage a chat request is billed: the upstream's report, else the gateway's own count (the
 * cost value's input, and every hosted call it was allowed when the backend runs the tool), with
 * `output` as counted. `prompt` is that usage before its output (a stream's usage chunk shows it).
 * @example await chatUsage(admission, { backend, reported: null, output: 12, … }) // { prompt: { input: 30, output: 0, hosted_call: 0 }, used: { …, output: 12 } }
 */
export async function chatUsage(
  admission: Admission,
  ending: Pick<ChatEnding, "backend" | "reported" | "inputAtStart" | "output">,
): Promise<{ prompt: Usage; used: Usage }> {
  const hosted = admission.hostedUnreported(ending.backend.adapter.kind === "anthropic");
  let prompt: Usage;
  if (ending.reported) prompt = { ...ending.reported };
  else {
    // A stream cut before its report may have told its prompt's count at its start.
    const input = ending.inputAtStart ?? (await admission.inputUnitsUnreported()) + hosted.inputUnits;
    prompt = { input, output: 0, hosted_call: hosted.calls };
  }
  return { prompt, used: { ...prompt, output: ending.output } };
}
