/**
 * Sending one-time codes by SMS. One interface, three senders chosen by SMS_SENDER:
 * - `kavenegar`: Kavenegar's verify/lookup API with a template (the provider renders the text,
 *   which is what Iranian operators require for OTP traffic), POST form to
 *   `<KAVENEGAR_URL>/v1/<api key>/verify/lookup.json`; `src/sim/sms.ts` speaks the same API locally.
 * - `log`: development only; writes the code to the operator's log. It must be chosen explicitly.
 * - `none` (default): sign-in by code is unavailable (503), nothing is sent.
 * The API key sits in Kavenegar's URL path, so neither the URL nor the code is ever logged.
 */
import { z } from "zod";
import { fail, type Failure } from "../errors.ts";
import type { Logger } from "../log.ts";
import { readTextBounded } from "../providers/upstream.ts";
import { maskPhone, nationalPhone } from "./phone.ts";

export interface SmsSender {
  readonly kind: "kavenegar" | "log" | "none";
  /**
   * Sends `code` to `phone` (E.164); a failure is a value the console shows as 503. `asker`: whether
   * a known device of the phone asked (the SMS budget keeps a reserve for those).
   */
  sendCode(phone: string, code: string, asker?: { knownDevice: boolean }): Promise<Failure | null>;
  /** Tells `phone` its balance fell below its alert threshold; `balanceToman` is the balance, whole toman. */
  sendLowBalance(phone: string, balanceToman: string): Promise<Failure | null>;
}

export const SMS_SEND_TIMEOUT_MS = 10_000;
/** KAVENEGAR_ALERT_TEMPLATE's default. */
export const ALERT_TEMPLATE_DEFAULT = "darvaze-low-balance";
/** Kavenegar's replies are a few hundred bytes. */
export const SMS_REPLY_BYTES_MAX = 16 * 1024;

const kavenegarReply = z.object({ return: z.object({ status: z.number(), message: z.string() }) });

export interface KavenegarOptions {
  apiKey: string;
  template: string;
  /** The low-balance alert's template (KAVENEGAR_ALERT_TEMPLATE); its `%token` is the balance in toman. */
  alertTemplate?: string;
  /** `https://api.kavenegar.com`, or a simulator's address. */
  baseUrl: string;
  log: Logger;
}

export function kavenegarSender(options: KavenegarOptions): SmsSender {
  const url = `${options.baseUrl.replace(/\/$/, "")}/v1/${encodeURIComponent(options.apiKey)}/verify/lookup.json`;
  const unavailable = () =>
    fail("service_unavailable", "The code could not be sent by SMS just now; try again in a minute.", { retryAfterS: 60 });
  const send = async (phone: string, token: string, template: string): Promise<Failure | null> => {
    const body = new URLSearchParams({ receptor: nationalPhone(phone), token, template });
    try {
      const response = await fetch(url, { method: "POST", body, signal: AbortSignal.timeout(SMS_SEND_TIMEOUT_MS) });
      const parsed = kavenegarReply.safeParse(JSON.parse((await readTextBounded(response, SMS_REPLY_BYTES_MAX)).text));
      const status = parsed.success ? parsed.data.return.status : response.status;
      if (status === 200) return null;
      options.log("warn", "sms_refused", { provider: "kavenegar", status, phone: maskPhone(phone) });
    } catch (error) {
      options.log("warn", "sms_failed", { provider: "kavenegar", error: (error as Error).name, phone: maskPhone(phone) });
    }
    return unavailable();
  };
  return {
    kind: "kavenegar",
    sendCode: (phone, code) => send(phone, code, options.template),
    sendLowBalance: (phone, balanceToman) => send(phone, balanceToman, options.alertTemplate ?? ALERT_TEMPLATE_DEFAULT),
  };
}

/** Development: the code goes to the operator's log (never enabled by default). */
export function logSender(log: Logger): SmsSender {
  return {
    kind: "log",
    async sendCode(phone, code) {
      log("warn", "sms_development_code", { phone, code, note: "SMS_SENDER=log: development only, codes are in this log" });
      return null;
    },
    async sendLowBalance(phone, balanceToman) {
      log("warn", "sms_development_low_balance", { phone: maskPhone(phone), balanceToman });
      return null;
    },
  };
}

export const noSender: SmsSender = {
  kind: "none",
  async sendCode() {
    return fail("service_unavailable", "Sign-in by SMS is not configured on this gateway (SMS_SENDER).");
  },
  async sendLowBalance() {
    return fail("service_unavailable", "SMS is not configured on this gateway (SMS_SENDER).");
  },
};
