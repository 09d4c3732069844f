import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createLogger } from "../log.ts";
import { startSmsSimulator, type SmsSimulator } from "../sim/sms.ts";
import { kavenegarSender, logSender, noSender } from "./sms.ts";

const API_KEY = "kavenegar-secret-api-key";
let sim: SmsSimulator;
beforeAll(async () => {
  sim = await startSmsSimulator({ apiKey: API_KEY, template: "darvaze-otp" });
});
afterAll(() => sim.stop());

describe("SMS senders", () => {
  test("Kavenegar verify/lookup: the national number, the code as token, the template", async () => {
    const sender = kavenegarSender({ apiKey: API_KEY, template: "darvaze-otp", baseUrl: sim.url, log: () => {} });
    expect(await sender.sendCode("+989121234567", "042917")).toBeNull();
    expect(sim.sent.at(-1)).toMatchObject({ receptor: "09121234567", token: "042917", template: "darvaze-otp" });
  });

  test("refusals and failures are a 503 to the customer; the log has neither the code nor the API key", async () => {
    const lines: string[] = [];
    const log = createLogger("debug", (line) => lines.push(line));
    const wrongTemplate = kavenegarSender({ apiKey: API_KEY, template: "other", baseUrl: sim.url, log });
    expect((await wrongTemplate.sendCode("+989121234567", "111111"))?.code).toBe("service_unavailable");
    const wrongKey = kavenegarSender({ apiKey: "not-the-key", template: "darvaze-otp", baseUrl: sim.url, log });
    expect((await wrongKey.sendCode("+989121234567", "222222"))?.code).toBe("service_unavailable");
    sim.failWith = 500;
    const sender = kavenegarSender({ apiKey: API_KEY, template: "darvaze-otp", baseUrl: sim.url, log });
    expect((await sender.sendCode("+989121234567", "333333"))?.code).toBe("service_unavailable");
    sim.failWith = null;
    const unreachable = kavenegarSender({ apiKey: API_KEY, template: "darvaze-otp", baseUrl: "http://127.0.0.1:1", log });
    expect((await unreachable.sendCode("+989121234567", "444444"))?.code).toBe("service_unavailable");
    expect(lines.map((l) => JSON.parse(l).status ?? JSON.parse(l).event)).toEqual([424, 401, 500, "sms_failed"]);
    for (const secret of [API_KEY, "111111", "222222", "333333", "444444", "9121234567"]) expect(lines.join("\n")).not.toContain(secret);
  });

  test("the development sender logs the code; none refuses", async () => {
    const lines: string[] = [];
    expect(await logSender(createLogger("debug", (line) => lines.push(line))).sendCode("+989121234567", "555555")).toBeNull();
    expect(JSON.parse(lines[0]!)).toMatchObject({ event: "sms_development_code", phone: "+989121234567", code: "555555" });
    expect((await noSender.sendCode("+989121234567", "666666"))?.code).toBe("service_unavailable");
  });
});
