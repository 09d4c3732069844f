/**
 * The gateway's daily SMS budget: every message the gateway sends (sign-in codes today, any
 * other purpose later) takes one from SMS_DAILY_BUDGET_MAX for the UTC day first, so a flood of
 * sign-in requests, whatever its addresses, costs the operator at most the budget a day. Take is
 * one conditional upsert (`sent < max`), so nodes together never pass it. A spent budget refuses
 * with a 503 until the next UTC day, counts the refusal, and says so to the operator: an error in
 * the log (once a day) and `darvaze_sms_budget_exhausted` in /metrics.
 *
 * @example
 *   const sender = budgetedSender(kavenegarSender(…), new SmsBudget(db, { dailyMax: 5_000, log }));
 */
import { sql } from "drizzle-orm";
import type { Db } from "../db/client.ts";
import { fail } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { SmsSender } from "./sms.ts";

const DAY_MS = 24 * 3_600_000;
/**
 * The last share of the day's budget only codes asked by a phone's known device, and low-balance
 * alerts, may take: a flood of unknown requesters from many networks leaves it to the owners.
 */
export const SMS_BUDGET_KNOWN_DEVICE_RESERVE_SHARE = 0.1;

/** What unknown requesters' codes may take of a day's budget of `dailyMax`. */
export function unknownRequestersMax(dailyMax: number): number {
  return Math.max(1, Math.floor(dailyMax * (1 - SMS_BUDGET_KNOWN_DEVICE_RESERVE_SHARE)));
}

export interface SmsBudgetOptions {
  dailyMax: number;
  log: Logger;
  now?: () => number;
}

export interface SmsBudgetDay {
  day: string;
  sent: number;
  refused: number;
  max: number;
  exhausted: boolean;
}

export class SmsBudget {
  constructor(
    private readonly db: Db,
    private readonly options: SmsBudgetOptions,
  ) {}

  get dailyMax(): number {
    return this.options.dailyMax;
  }

  private nowMs(): number {
    return this.options.now?.() ?? Date.now();
  }

  /** Takes one message from today's budget, if fewer than `max` (at most the budget) are sent: true when it may be sent. */
  async take(purpose: string, max = this.options.dailyMax): Promise<boolean> {
    const day = utcDay(this.nowMs());
    const [taken] = await this.db.rows<{ sent: number }>(sql`
      INSERT INTO sms_days (day, sent) VALUES (${day}::date, 1)
      ON CONFLICT (day) DO UPDATE SET sent = sms_days.sent + 1 WHERE sms_days.sent < ${Math.min(max, this.options.dailyMax)}
      RETURNING sent`);
    if (taken) return true;
    const [counted] = await this.db.rows<{ refused: number }>(sql`
      UPDATE sms_days SET refused = refused + 1 WHERE day = ${day}::date RETURNING refused`);
    if (counted?.refused === 1) {
      this.options.log("error", "sms_budget_exhausted", { day, dailyMax: this.options.dailyMax, takenMax: max, purpose });
    }
    return false;
  }

  /** Today's use, every node's (read at scrape time for /metrics). */
  async today(): Promise<SmsBudgetDay> {
    const day = utcDay(this.nowMs());
    const [row] = await this.db.rows<{ sent: number; refused: number }>(sql`
      SELECT sent, refused FROM sms_days WHERE day = ${day}::date`);
    const sent = row?.sent ?? 0;
    const max = this.options.dailyMax;
    return { day, sent, refused: row?.refused ?? 0, max, exhausted: sent >= max };
  }

  /** Seconds until the budget renews (the next UTC midnight). */
  secondsToNextDay(): number {
    const now = this.nowMs();
    return Math.max(1, Math.ceil((Math.floor(now / DAY_MS + 1) * DAY_MS - now) / 1000));
  }
}

/** `sender`, taking each message from `budget` first; `none` sends nothing and takes nothing. */
export function budgetedSender(sender: SmsSender, budget: SmsBudget): SmsSender {
  if (sender.kind === "none") return sender;
  return {
    kind: sender.kind,
    async sendCode(phone, code, asker) {
      const max = asker?.knownDevice ? budget.dailyMax : unknownRequestersMax(budget.dailyMax);
      if (!(await budget.take("sign-in code", max))) {
        return fail("service_unavailable", "Sign-in codes cannot be sent by SMS just now; try again later.", {
          retryAfterS: budget.secondsToNextDay(),
        });
      }
      return sender.sendCode(phone, code);
    },
    async sendLowBalance(phone, balanceToman) {
      if (!(await budget.take("low-balance alert"))) {
        return fail("service_unavailable", "The gateway's SMS budget for today is spent.", { retryAfterS: budget.secondsToNextDay() });
      }
      return sender.sendLowBalance(phone, balanceToman);
    },
  };
}

function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}
