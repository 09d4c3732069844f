/**
 * A chat request's bill when the upstream reported no usage (it never does, or it was cut, or
 * the client left before its last chunk). Input: the request's cost value (its admission's input
 * count). Output: every token the upstream sent, visible and hidden reasoning, counted as the
 * vendor would (o200k where that is its tokenizer, else UTF-8 bytes, a bound for any byte-level
 * BPE); a model whose reasoning is hidden reports it only in usage, so without a report the bill
 * is all the hold covers. There is no other count of an unreported request.
 */
import { type Admission, countsExactly } from "../../admission/admission.ts";
import { takesReasoningEffort } from "../../catalog/reasoning.ts";
import { countTokens, utf8Bytes } from "../../tokens/count.ts";

/**
 * Output tokens for text the upstream sent without a usage report.
 * @example await unreportedOutputTokens(admission, "Hello!") // 2 on gpt-4o-mini; 6 (its bytes) on a Gemini model that does not reason
 */
export async function unreportedOutputTokens(admission: Admission, text: string): Promise<number> {
  if (takesReasoningEffort(admission.model.id)) return admission.coveredOutputUnits;
  const counted = countsExactly(admission.model) ? await countTokens(text) : utf8Bytes(text);
  return Math.min(counted, admission.coveredOutputUnits);
}
