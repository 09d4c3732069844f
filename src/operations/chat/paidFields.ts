/**
 * Chat fields that change the upstream's price or keep customer data: `service_tier` other than
 * auto/default, `store: true`, `prediction`, `web_search_options`, and audio output (`audio`, or
 * `modalities` with "audio"). Each is refused with a 400 naming it unless the model's pool enables
 * it (`paid_fields`, src/config.ts); an enabled field multiplies the request's token prices by its
 * `price_percent` (several multiply together), except `store`, which has no price of its own.
 * `anthropic.betas` (the Messages wire's `anthropic-beta`) are checked against the shipped list
 * (betas.ts): an unknown or refused name is a 400 naming it.
 */
import type { PaidFields } from "../../config.ts";
import { fail, type Failure } from "../../errors.ts";
import { betasVerdict } from "./betas.ts";
import type { ChatRequest } from "./schema.ts";

/** The percents the request's token prices are multiplied by; empty for a request that uses none. */
export type PricePercents = readonly number[];

function refused(field: string, what: string): Failure {
  return fail("invalid_request", `${what} is not enabled for this model; ask the operator to enable \`${field}\` in the model's pool.`, {
    param: field,
  });
}

/**
 * The price percents the body's paid fields bring, or a 400 naming the first one not enabled.
 * @example paidFieldPercents({ …, service_tier: "priority" }, { service_tier: { priority: { price_percent: 200 } } }) // [200]
 */
export function paidFieldPercents(body: ChatRequest, enabled: PaidFields | undefined): PricePercents | Failure {
  const betas = betasVerdict(body.anthropic?.betas);
  if ("refused" in betas) return fail("invalid_request", betas.message, { param: "anthropic-beta" });
  const percents: number[] = [];
  const tier = body.service_tier;
  // First: a reply served at the default tier drops this percent alone (asksPricedServiceTier).
  if (tier && tier !== "auto" && tier !== "default") {
    const price = enabled?.service_tier?.[tier];
    if (!price) return refused("service_tier", `service_tier \`${tier}\``);
    percents.push(price.price_percent);
  }
  if (body.store === true && enabled?.store !== true) return refused("store", "Storing conversations with the vendor (`store: true`)");
  const priced = [
    ["prediction", body.prediction != null, "Predicted outputs"],
    ["web_search_options", body.web_search_options != null, "Web search"],
    ["audio", body.audio != null || body.modalities?.includes("audio") === true, "Audio output"],
  ] as const;
  for (const [field, used, what] of priced) {
    if (!used) continue;
    const price = enabled?.[field];
    if (!price) return refused(field === "audio" && body.audio == null ? "modalities" : field, what);
    percents.push(price.price_percent);
  }
  return percents;
}

/**
 * Whether the body asks for a priced `service_tier` (one besides auto and default): its percent is
 * then the first of paidFieldPercents', which a reply served at the default tier is charged without.
 */
export function asksPricedServiceTier(body: ChatRequest): boolean {
  return body.service_tier != null && body.service_tier !== "auto" && body.service_tier !== "default";
}

/**
 * A price per 1M units times the percents, rounded up to the micro-toman.
 * @example priceWithPercents(13_500n, [150]) // 20_250n
 */
export function priceWithPercents(pricePer1m: bigint, percents: PricePercents): bigint {
  let numerator = pricePer1m;
  let denominator = 1n;
  for (const percent of percents) {
    numerator *= BigInt(percent);
    denominator *= 100n;
  }
  return (numerator + denominator - 1n) / denominator;
}
