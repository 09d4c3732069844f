/**
 * The account area's parts, built from the configuration: the SMS sender (within the daily SMS budget), sign-in codes,
 * sessions, and top-ups (through a payment provider when one is configured).
 */
import type { Env } from "../config.ts";
import type { Db } from "../db/client.ts";
import type { Logger } from "../log.ts";
import { OtpService } from "./otp.ts";
import { SessionStore } from "./sessions.ts";
import { kavenegarSender, logSender, noSender, type SmsSender } from "./sms.ts";
import { budgetedSender, SmsBudget } from "./smsBudget.ts";
import { ledgerTopUps, type ConsoleTopUps } from "./topups.ts";

export interface AccountArea {
  /** CONSOLE_SECRET or its derivation: signs known-device cookies too. */
  secret: string;
  otp: OtpService;
  sessions: SessionStore;
  topUps: ConsoleTopUps;
  /** Takes every message from `smsBudget`. */
  sender: SmsSender;
  smsBudget: SmsBudget;
}

/** CONSOLE_SECRET, or one derived from KEY_PEPPER under a label of its own. */
export function consoleSecret(env: Pick<Env, "CONSOLE_SECRET" | "KEY_PEPPER">): string {
  return env.CONSOLE_SECRET ?? new Bun.CryptoHasher("sha256", env.KEY_PEPPER).update("darvaze console secret v1").digest("hex");
}

export function smsSender(env: Env, log: Logger): SmsSender {
  switch (env.SMS_SENDER) {
    case "kavenegar":
      return kavenegarSender({
        apiKey: env.KAVENEGAR_API_KEY!,
        template: env.KAVENEGAR_TEMPLATE,
        alertTemplate: env.KAVENEGAR_ALERT_TEMPLATE,
        baseUrl: env.KAVENEGAR_URL,
        log,
      });
    case "log":
      return logSender(log);
    case "none":
      return noSender;
  }
}

export function createAccountArea(
  env: Env,
  db: Db,
  log: Logger,
  options: { topUps?: ConsoleTopUps; smsBudget?: SmsBudget; now?: () => number } = {},
): AccountArea {
  const secret = consoleSecret(env);
  const smsBudget = options.smsBudget ?? new SmsBudget(db, { dailyMax: env.SMS_DAILY_BUDGET_MAX, log, now: options.now });
  const sender = budgetedSender(smsSender(env, log), smsBudget);
  return {
    secret,
    sender,
    smsBudget,
    otp: new OtpService(db, { secret, sender, log, smsDailyMax: smsBudget.dailyMax, now: options.now }),
    sessions: new SessionStore(db, {
      idleMs: env.CONSOLE_SESSION_IDLE_S * 1000,
      ttlMs: env.CONSOLE_SESSION_TTL_S * 1000,
      secret,
      now: options.now,
    }),
    topUps: options.topUps ?? ledgerTopUps(db),
  };
}
