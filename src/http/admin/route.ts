/**
 * The operators' API under /admin: accounts, top-ups, keys, pools. Every route goes through
 * `adminGuard`: the caller (ADMIN_TOKEN, an operator's token or session: access.ts), the role
 * matrix (src/operators/roles.ts), and for a change one audit row (src/operators/audit.ts).
 * Amounts go in as toman (a whole number or a decimal string) and come back both as toman
 * strings and as exact micro-toman strings.
 */
import { z } from "zod";
import { KEY_EVENTS, PRICE_EVENTS } from "../../../actors/protocol.ts";
import { reloadCatalog } from "../../catalog/catalog.ts";
import { RateRefused, setRate, type FetchStatus } from "../../catalog/rates.ts";
import { auditLedger } from "../../ledger/audit.ts";
import { microToToman, tomanToMicro } from "../../catalog/prices.ts";
import { keyRestrictionFields } from "../../keys/restrictions.ts";
import { LOW_BALANCE_THRESHOLD_MICRO_MAX, setLowBalanceThreshold } from "../../accountArea/balanceAlerts.ts";
import { fail, isFailure } from "../../errors.ts";
import type { KeyRecord } from "../../keys/store.ts";
import {
  accountLimitsBody,
  CONCURRENCY_MAX_LIMIT,
  INT4_MAX,
  limitsObject,
  limitsPatchOf,
  resolveLimits,
} from "../../keys/accountLimits.ts";
import { accountExists, adjust, createAccount, hasBeenFunded, showAccount, topUp, type Wallet } from "../../ledger/wallets.ts";
import { auditWithin } from "../../operators/audit.ts";
import type { GatewayDeps } from "../../admission/deps.ts";
import { failed, json } from "../guard.ts";
import { walletFields } from "../account/route.ts";
import { parseBody } from "./body.ts";
import { poolsView, setPool } from "./pools.ts";
import { priceField, UNIT_NAMES, unitsField, type PriceField, type UnitsField } from "../../units.ts";

type RecordColumns = Record<UnitsField | PriceField, bigint>;

/** A usage record's units as `<unit>_units` fields. */
function unitFields(row: RecordColumns): Record<string, string> {
  return Object.fromEntries(UNIT_NAMES.map((unit) => [`${unit}_units`, row[unitsField(unit)].toString()]));
}

/** A usage record's prices by unit, toman per 1M. */
function unitPrices(row: RecordColumns): Record<string, string> {
  return Object.fromEntries(UNIT_NAMES.map((unit) => [unit, row[priceField(unit)].toString()]));
}

const name = z.string().trim().min(1).max(200);
export const amountToman = z.union([z.number(), z.string()]).transform((value, ctx) => {
  try {
    return tomanToMicro(value);
  } catch (error) {
    ctx.addIssue({ code: "custom", message: (error as Error).message });
    return z.NEVER;
  }
});
/** Key limits as operators and the account area set them. */
export const keyLimitFields = {
  concurrency_max: z.number().int().min(1).max(CONCURRENCY_MAX_LIMIT).optional(),
  rpm: z.number().int().min(1).max(10_000_000).nullable().optional(),
  // The column is an `integer`: a larger value was a 500 at the insert.
  tpm: z.number().int().min(1).max(INT4_MAX).nullable().optional(),
  monthly_spend_cap_toman: amountToman.nullable().optional(),
  /** `in-country`: route every request of the key to in-country backends; null: no requirement. */
  residency: z.literal("in-country").nullable().optional(),
  /** Model ids or aliases the key may call, and addresses or CIDR blocks it may be used from; null: any. */
  ...keyRestrictionFields,
};
const signedToman = z.union([z.number(), z.string()]).transform((value, ctx) => {
  if (typeof value === "number" && !Number.isSafeInteger(value)) {
    ctx.addIssue({ code: "custom", message: "an amount given as a JSON number must be whole; send decimals as a string" });
    return z.NEVER;
  }
  const text = String(value).trim();
  const negative = text.startsWith("-");
  try {
    const micro = tomanToMicro(negative ? text.slice(1) : text);
    return negative ? -micro : micro;
  } catch (error) {
    ctx.addIssue({ code: "custom", message: (error as Error).message });
    return z.NEVER;
  }
});

// Strict: a misspelled field is a 400, not silently ignored.
export const createAccountBody = z.strictObject({ name });
export const topUpBody = z.strictObject({ amount_toman: amountToman, reference: z.string().trim().min(1).max(200) });
export const createKeyBody = z.strictObject({ name, ...keyLimitFields });
export const keyLimitsBody = z
  .strictObject(keyLimitFields)
  .refine(
    (body) => Object.values(body).some((v) => v !== undefined),
    "name at least one of concurrency_max, rpm, tpm, monthly_spend_cap_toman, residency, allowed_models, allowed_ips",
  );
export const adjustmentBody = z.strictObject({
  amount_toman: signedToman,
  reason: z.string().trim().min(3).max(500),
  reference: z.string().trim().min(1).max(200),
});
/** A low-balance alert threshold in toman, at most LOW_BALANCE_THRESHOLD_MICRO_MAX; null turns the alert off. */
export const lowBalanceThreshold = amountToman
  .refine((micro) => micro > 0n && micro <= LOW_BALANCE_THRESHOLD_MICRO_MAX, "between 0 and 1,000,000,000 toman")
  .nullable();
/** The alert threshold alone: what the account area may change of its account. */
export const alertBody = z.strictObject({ low_balance_threshold_toman: lowBalanceThreshold });
/** PATCH /admin/accounts/{id}: the alert threshold, the operator's limits (src/keys/accountLimits.ts), or both. */
export const accountSettingsBody = z
  .strictObject({ low_balance_threshold_toman: lowBalanceThreshold.optional(), limits: accountLimitsBody.optional() })
  .refine(
    (body) => body.low_balance_threshold_toman !== undefined || body.limits !== undefined,
    "name low_balance_threshold_toman or limits",
  );
/** An account's alert threshold as the APIs show it. */
export function alertFields(thresholdMicro: bigint | null) {
  return { low_balance_threshold_toman: thresholdMicro === null ? null : microToToman(thresholdMicro) };
}
export const rateBody = z.strictObject({
  toman_per_usd: z.number().int().positive().max(100_000_000),
  /** ISO time; default now. */
  effective_at: z.iso.datetime({ offset: true }).optional(),
});

export function limitsOf(body: Partial<z.infer<typeof keyLimitsBody>>) {
  return {
    concurrencyMax: body.concurrency_max,
    rpm: body.rpm,
    tpm: body.tpm,
    monthlySpendCapMicro: body.monthly_spend_cap_toman,
    residency: body.residency,
    allowedModels: body.allowed_models,
    allowedIps: body.allowed_ips,
  };
}

export function keyObject(key: KeyRecord) {
  return {
    id: key.id,
    object: "key",
    account_id: key.accountId,
    name: key.name,
    display: key.display,
    concurrency_max: key.concurrencyMax,
    rpm: key.rpm,
    tpm: key.tpm,
    monthly_spend_cap_toman: key.monthlySpendCapMicro === null ? null : microToToman(key.monthlySpendCapMicro),
    residency: key.residency,
    allowed_models: key.allowedModels,
    allowed_ips: key.allowedIps,
    created_at: key.createdAt.toISOString(),
    revoked_at: key.revokedAt?.toISOString() ?? null,
    expires_at: key.expiresAt?.toISOString() ?? null,
  };
}

function fetchStatusFields(status: FetchStatus | null) {
  if (!status) return null;
  return {
    source: status.source,
    last_attempt_at: status.lastAttemptAt,
    last_success_at: status.lastSuccessAt,
    last_error: status.lastError,
    last_rate: status.lastRate === null ? null : Number(status.lastRate),
  };
}

export class AdminApi {
  constructor(
    private readonly deps: GatewayDeps,
    private readonly rateFetch: () => FetchStatus | null = () => null,
  ) {}

  async adjust(request: Request, accountId: string, requestId: string): Promise<Response> {
    const body = await parseBody(request, adjustmentBody);
    if (isFailure(body)) return failed(body, requestId);
    if (!(await accountExists(this.deps.db, accountId))) return failed(fail("not_found", `No account ${accountId}.`), requestId);
    const reply = (applied: { credited: boolean; wallet: Wallet }) => ({
      object: "adjustment",
      account_id: accountId,
      reference: body.reference,
      amount_toman: microToToman(body.amount_toman),
      reason: body.reason,
      credited: applied.credited,
      ...walletFields(applied.wallet),
    });
    const result = await adjust(this.deps.db, accountId, body.amount_toman, body.reason, body.reference, (tx, applied) =>
      auditWithin(tx, reply(applied)),
    );
    if (isFailure(result)) return failed(result, requestId);
    this.deps.log("info", "wallet_adjusted", { accountId, amountMicro: body.amount_toman, reference: body.reference });
    return json(reply(result), requestId, result.credited ? 201 : 200);
  }

  async setRate(request: Request, requestId: string): Promise<Response> {
    const body = await parseBody(request, rateBody);
    if (isFailure(body)) return failed(body, requestId);
    const effectiveAt = body.effective_at ? new Date(body.effective_at) : new Date();
    const latest = this.deps.catalog.allVersions().at(-1);
    if (latest && effectiveAt.getTime() < latest.effectiveAtMs) {
      return failed(
        fail(
          "invalid_request",
          `effective_at is before the newest price version's (${new Date(latest.effectiveAtMs).toISOString()}); it would never take effect.`,
          {
            param: "effective_at",
          },
        ),
        requestId,
      );
    }
    let version: Awaited<ReturnType<typeof setRate>>;
    try {
      version = await setRate(this.deps.db, { tomanPerUsd: BigInt(body.toman_per_usd), effectiveAt });
    } catch (error) {
      if (!(error instanceof RateRefused)) throw error;
      return failed(fail("invalid_request", `This rate is refused: ${error.message}.`, { param: "toman_per_usd" }), requestId);
    }
    await reloadCatalog(this.deps.db, this.deps.catalog);
    this.deps.bus.publish(PRICE_EVENTS, this.deps.subjects.priceEvents, { versionId: version.versionId });
    this.deps.log("info", "rate_set", { tomanPerUsd: body.toman_per_usd, versionId: version.versionId });
    return json(
      {
        object: "price_version",
        id: version.versionId,
        toman_per_usd: body.toman_per_usd,
        effective_at: effectiveAt.toISOString(),
        models: version.models,
      },
      requestId,
      201,
    );
  }

  rates(requestId: string): Response {
    const current = this.deps.catalog.currentVersion();
    const versions = this.deps.catalog.allVersions().slice(-30);
    return json(
      {
        object: "rates",
        current: current
          ? {
              id: current.versionId,
              toman_per_usd: Number(current.tomanPerUsd),
              effective_at: new Date(current.effectiveAtMs).toISOString(),
            }
          : null,
        versions: versions.map((v) => ({
          id: v.versionId,
          toman_per_usd: Number(v.tomanPerUsd),
          effective_at: new Date(v.effectiveAtMs).toISOString(),
        })),
        fetch: fetchStatusFields(this.rateFetch()),
      },
      requestId,
    );
  }

  async audit(requestId: string): Promise<Response> {
    await this.deps.writer.flush();
    const report = await auditLedger(this.deps.db, { holdExpiryGraceMs: this.deps.env.HOLD_EXPIRY_GRACE_MS });
    return json({ object: "ledger_audit", ...report }, requestId);
  }

  async createAccount(request: Request, requestId: string): Promise<Response> {
    const body = await parseBody(request, createAccountBody);
    if (isFailure(body)) return failed(body, requestId);
    const account = await createAccount(this.deps.db, body.name);
    return json(
      {
        id: account.id,
        object: "account",
        name: account.name,
        created_at: account.createdAt.toISOString(),
        ...walletFields({ balanceMicro: 0n, heldMicro: 0n }),
      },
      requestId,
      201,
    );
  }

  /** PATCH /admin/accounts/:id: the account's low-balance alert threshold and its limits. */
  async setAccountSettings(request: Request, accountId: string, requestId: string): Promise<Response> {
    const body = await parseBody(request, accountSettingsBody);
    if (isFailure(body)) return failed(body, requestId);
    const missing = () => failed(fail("not_found", `No account ${accountId}.`), requestId);
    const threshold = body.low_balance_threshold_toman;
    if (threshold !== undefined && !(await setLowBalanceThreshold(this.deps.db, accountId, threshold))) return missing();
    const limits = body.limits
      ? await this.deps.keys.setAccountLimits(accountId, limitsPatchOf(body.limits))
      : await this.deps.keys.accountLimits(accountId);
    if (!limits) return missing();
    if (body.limits) {
      // Every node drops its copy and its share of the account's slots is registered again (as for a key's limits).
      this.deps.bus.publish(KEY_EVENTS, this.deps.subjects.keyEvents, { keyId: accountId, kind: "limits_changed" });
      this.deps.log("info", "account_limits_changed", { accountId });
    }
    return json(
      { id: accountId, object: "account", ...(threshold !== undefined ? alertFields(threshold) : {}), limits: limitsObject(limits) },
      requestId,
    );
  }

  async showAccount(accountId: string, requestId: string): Promise<Response> {
    const shown = await showAccount(this.deps.db, accountId);
    if (!shown) return failed(fail("not_found", `No account ${accountId}.`), requestId);
    return json(
      {
        id: shown.account.id,
        object: "account",
        name: shown.account.name,
        created_at: shown.account.createdAt.toISOString(),
        ...walletFields(shown.wallet),
        ...alertFields(shown.account.lowBalanceThresholdMicro),
        limits: limitsObject(resolveLimits(shown.account)),
        keys: shown.keys.map((k) => keyObject({ ...k, residency: k.residency === "in-country" ? "in-country" : null })),
        keys_more: shown.keysMore,
        recent_usage: shown.usage.map((u) => ({
          request_id: u.requestId,
          key_id: u.keyId,
          model: u.model,
          operation: u.operation,
          backend: u.backend,
          ...unitFields(u),
          hosted_call_unit: u.hostedCallUnit,
          price_version: u.priceVersionId,
          prices_toman_per_1m: unitPrices(u),
          metered_micro_toman: u.meteredMicro.toString(),
          billed_toman: microToToman(u.billedMicro),
          billed_micro_toman: u.billedMicro.toString(),
          status: u.status,
          duration_ms: u.durationMs,
          created_at: u.createdAt.toISOString(),
        })),
      },
      requestId,
    );
  }

  async topUp(request: Request, accountId: string, requestId: string): Promise<Response> {
    const body = await parseBody(request, topUpBody);
    if (isFailure(body)) return failed(body, requestId);
    if (!(await accountExists(this.deps.db, accountId))) return failed(fail("not_found", `No account ${accountId}.`), requestId);
    const reply = (applied: { credited: boolean; wallet: Wallet }) => ({
      object: "topup",
      account_id: accountId,
      reference: body.reference,
      amount_toman: microToToman(body.amount_toman),
      credited: applied.credited,
      ...walletFields(applied.wallet),
    });
    const result = await topUp(this.deps.db, accountId, body.amount_toman, body.reference, (tx, applied) =>
      auditWithin(tx, reply(applied)),
    );
    if (isFailure(result)) return failed(result, requestId);
    return json(reply(result), requestId, result.credited ? 201 : 200);
  }

  async createKey(request: Request, accountId: string, requestId: string): Promise<Response> {
    const body = await parseBody(request, createKeyBody);
    if (isFailure(body)) return failed(body, requestId);
    if (!(await accountExists(this.deps.db, accountId))) return failed(fail("not_found", `No account ${accountId}.`), requestId);
    if (!(await hasBeenFunded(this.deps.db, accountId))) {
      return failed(fail("wallet_not_funded", "Top up this account's wallet before creating a key for it."), requestId);
    }
    const issued = await this.deps.keys.issue(accountId, body.name, limitsOf(body));
    if (isFailure(issued)) return failed(issued, requestId);
    const { key, record } = issued;
    this.deps.log("info", "key_created", { keyId: record.id, accountId });
    return json({ ...keyObject(record), key }, requestId, 201);
  }

  async setKeyLimits(request: Request, keyId: string, requestId: string): Promise<Response> {
    const body = await parseBody(request, keyLimitsBody);
    if (isFailure(body)) return failed(body, requestId);
    const record = await this.deps.keys.setLimits(keyId, limitsOf(body));
    if (!record) return failed(fail("not_found", `No key ${keyId}.`), requestId);
    this.deps.bus.publish(KEY_EVENTS, this.deps.subjects.keyEvents, { keyId, kind: "limits_changed" });
    return json(keyObject(record), requestId);
  }

  async revokeKey(keyId: string, requestId: string): Promise<Response> {
    const record = await this.deps.keys.revoke(keyId);
    if (!record) return failed(fail("not_found", `No key ${keyId}.`), requestId);
    this.deps.bus.publish(KEY_EVENTS, this.deps.subjects.keyEvents, { keyId, kind: "revoked" });
    this.deps.log("info", "key_revoked", { keyId });
    return json(keyObject(record), requestId);
  }

  pools(requestId: string): Response {
    return poolsView(this.deps, requestId);
  }

  setPool(request: Request, model: string, requestId: string): Promise<Response> {
    return setPool(this.deps, request, model, requestId);
  }
}
