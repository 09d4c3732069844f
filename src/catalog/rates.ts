/**
 * Exchange rates. Each new rate makes a new price version: every model's USD list price × the
 * rate, rounded once, effective from a stated time. Requests admitted before that time are
 * charged at the old version, after it at the new one. A rate can be set by an operator or
 * fetched daily from a configurable JSON source; a failed fetch keeps the last rate and is
 * reported (GET /admin/rates).
 */
import { desc, eq } from "drizzle-orm";
import { z } from "zod";
import type { Db } from "../db/client.ts";
import { exchangeRates, prices, priceVersions } from "../db/schema.ts";
import { every, runTask } from "../background.ts";
import type { Logger } from "../log.ts";
import { priceProblem, usdToTomanPer1m } from "./prices.ts";

/** A fetched rate more than this factor away from the current one is refused as implausible. */
export const FETCHED_RATE_CHANGE_FACTOR_MAX = 2;
export const RATE_FETCH_TIMEOUT_MS = 10_000;
export const TOMAN_PER_USD_MAX = 100_000_000n;

export interface NewRate {
  tomanPerUsd: bigint;
  effectiveAt: Date;
}

/** A rate that would price a model past the price bound: nothing was written. */
export class RateRefused extends Error {}

/** Inserts the rate and its price version, pricing every model of the newest version. */
export async function setRate(db: Db, rate: NewRate): Promise<{ versionId: number; models: number }> {
  if (rate.tomanPerUsd <= 0n || rate.tomanPerUsd > TOMAN_PER_USD_MAX) throw new RangeError("toman_per_usd is out of range");
  return db.orm.transaction(async (tx) => {
    const [latest] = await tx.select({ id: priceVersions.id }).from(priceVersions).orderBy(desc(priceVersions.id)).limit(1);
    const usd = latest ? await tx.select().from(prices).where(eq(prices.versionId, latest.id)) : [];
    for (const p of usd) {
      const problem = priceProblem(p.unit, p.usdPer1m, rate.tomanPerUsd);
      if (problem) throw new RateRefused(`model ${p.modelId}: ${problem}`);
    }
    const [inserted] = await tx.insert(exchangeRates).values(rate).returning({ id: exchangeRates.id });
    const [version] = await tx
      .insert(priceVersions)
      .values({ rateId: inserted!.id, effectiveAt: rate.effectiveAt })
      .returning({ id: priceVersions.id });
    if (usd.length > 0) {
      await tx.insert(prices).values(
        usd.map((p) => ({
          versionId: version!.id,
          modelId: p.modelId,
          unit: p.unit,
          usdPer1m: p.usdPer1m,
          tomanPer1m: usdToTomanPer1m(p.usdPer1m, rate.tomanPerUsd),
        })),
      );
    }
    return { versionId: version!.id, models: new Set(usd.map((p) => p.modelId)).size };
  });
}

/** Follows a dotted path (`data.usd.sell`, `rates.0.value`) into parsed JSON. */
export function pickNumber(json: unknown, path: string): number | null {
  let value: unknown = json;
  for (const part of path.split(".").filter(Boolean)) {
    if (value === null || typeof value !== "object") return null;
    value = (value as Record<string, unknown>)[part];
  }
  const number = typeof value === "string" ? Number(value) : value;
  return typeof number === "number" && Number.isFinite(number) && number > 0 ? number : null;
}

export interface FetchStatus {
  source: string | null;
  lastAttemptAt: string | null;
  lastSuccessAt: string | null;
  lastError: string | null;
  lastRate: string | null;
}

export const rateSourceSchema = z.object({
  url: z.string().url(),
  path: z.string().min(1),
  intervalMs: z.number().int().min(60_000),
});

/**
 * Fetches the rate from `url` every `intervalMs` and sets it when it changed. The current rate
 * is asked of `current()` so a plausibility check can refuse a wild value.
 */
export class RateFetcher {
  readonly status: FetchStatus;
  private stopFetching: (() => void) | null = null;

  constructor(
    private readonly db: Db,
    private readonly source: z.infer<typeof rateSourceSchema>,
    private readonly current: () => bigint | undefined,
    private readonly onChange: () => Promise<void>,
    private readonly log: Logger,
  ) {
    this.status = { source: source.url, lastAttemptAt: null, lastSuccessAt: null, lastError: null, lastRate: null };
  }

  start(): void {
    runTask("rate_fetch", this.log, () => this.fetchOnce());
    this.stopFetching = every("rate_fetch", this.source.intervalMs, this.log, () => this.fetchOnce());
  }

  stop(): void {
    this.stopFetching?.();
  }

  async fetchOnce(): Promise<void> {
    this.status.lastAttemptAt = new Date().toISOString();
    try {
      const response = await fetch(this.source.url, { signal: AbortSignal.timeout(RATE_FETCH_TIMEOUT_MS) });
      if (!response.ok) throw new Error(`the source answered ${response.status}`);
      const value = pickNumber(await response.json(), this.source.path);
      if (value === null) throw new Error(`no positive number at ${this.source.path}`);
      const rate = BigInt(Math.round(value));
      const current = this.current();
      if (current !== undefined) {
        const factor = Number(rate) / Number(current);
        if (factor > FETCHED_RATE_CHANGE_FACTOR_MAX || factor < 1 / FETCHED_RATE_CHANGE_FACTOR_MAX) {
          throw new Error(`fetched rate ${rate} is implausibly far from the current ${current}; not applied`);
        }
      }
      if (rate !== current) {
        await setRate(this.db, { tomanPerUsd: rate, effectiveAt: new Date() });
        await this.onChange();
        this.log("info", "rate_fetched", { tomanPerUsd: rate });
      }
      this.status.lastSuccessAt = new Date().toISOString();
      this.status.lastRate = rate.toString();
      this.status.lastError = null;
    } catch (error) {
      this.status.lastError = (error as Error).message;
      this.log("warn", "rate_fetch_failed", { error: this.status.lastError });
    }
  }
}
