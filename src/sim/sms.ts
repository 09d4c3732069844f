/**
 * A local stand-in for Kavenegar's verify/lookup API (`POST /v1/<api key>/verify/lookup.json`
 * with form fields receptor, token, template), for tests and the demo. It answers like the real
 * service (`{"return":{"status":200,…},"entries":[…]}`; 401 for a wrong key, 424 for an unknown
 * template, 411 for a bad receptor) and keeps what it "sent", so a test can read the code a
 * phone received.
 *
 * @example
 * const sms = await startSmsSimulator({ apiKey: "k", template: "darvaze-otp" });
 * sms.lastCode("09121234567");
 */
import { ALERT_TEMPLATE_DEFAULT } from "../accountArea/sms.ts";

export interface SentSms {
  receptor: string;
  token: string;
  template: string;
  at: number;
}

export interface SmsSimulator {
  readonly url: string;
  readonly sent: SentSms[];
  /** The newest code sent to a national number (`0912…`), or null. */
  lastCode(receptor: string): string | null;
  /** When set, every send fails with this Kavenegar status (e.g. 500). */
  failWith: number | null;
  stop(): Promise<void>;
}

/** Messages kept; older ones are dropped. */
export const SMS_SIM_SENT_MAX = 10_000;

function reply(status: number, message: string, entries: unknown[] = []): Response {
  return Response.json({ return: { status, message }, entries }, { status: status === 200 ? 200 : status >= 500 ? 500 : 400 });
}

export async function startSmsSimulator(options: {
  apiKey: string;
  template: string;
  alertTemplate?: string;
  port?: number;
}): Promise<SmsSimulator> {
  const templates = new Set([options.template, options.alertTemplate ?? ALERT_TEMPLATE_DEFAULT]);
  const sent: SentSms[] = [];
  let messageId = 1;
  const sim: SmsSimulator = {
    url: "",
    sent,
    failWith: null,
    lastCode: (receptor) => sent.findLast((m) => m.receptor === receptor)?.token ?? null,
    stop: async () => {
      server.stop(true);
    },
  };
  const server = Bun.serve({
    port: options.port ?? 0,
    hostname: "127.0.0.1",
    async fetch(request) {
      const match = /^\/v1\/([^/]+)\/verify\/lookup\.json$/.exec(new URL(request.url).pathname);
      if (!match || request.method !== "POST") return reply(404, "not found");
      if (decodeURIComponent(match[1]!) !== options.apiKey) return reply(401, "invalid api key");
      if (sim.failWith !== null) return reply(sim.failWith, "simulated failure");
      const form = new URLSearchParams(await request.text());
      const receptor = form.get("receptor") ?? "";
      const token = form.get("token") ?? "";
      const template = form.get("template") ?? "";
      if (!/^09\d{9}$/.test(receptor)) return reply(411, "invalid receptor");
      if (!templates.has(template)) return reply(424, "template not found");
      if (!token || token.length > 100) return reply(431, "invalid token");
      sent.push({ receptor, token, template, at: Date.now() });
      if (sent.length > SMS_SIM_SENT_MAX) sent.shift();
      return reply(200, "تایید شد", [
        {
          messageid: messageId++,
          message: token,
          status: 5,
          statustext: "ارسال به مخابرات",
          receptor,
          date: Math.floor(Date.now() / 1000),
          cost: 0,
        },
      ]);
    },
  });
  return Object.assign(sim, { url: `http://127.0.0.1:${server.port}` });
}
