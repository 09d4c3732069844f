import { expect, test } from "bun:test";
import { microTomanToRial, rialToMicroToman } from "./amount.ts";
import {
  callbackParams,
  RAW_REPLY_CHARS_MAX,
  replyToInquiryOutcome,
  replyToUnverifiedOutcome,
  replyToVerifyOutcome,
  requestBody,
} from "./wire.ts";

const paid = (code: number | string) => ({
  status: 200,
  body: {
    data: { code, message: "Verified", card_pan: "502229******5995", card_hash: "AB", ref_id: 201, fee_type: "Merchant", fee: 5000 },
    errors: [],
  },
});
const failure = (code: number | string, status = 200) => ({ status, body: { data: [], errors: { code, message: "x", validations: [] } } });

test("toman ↔ rial is ×10, in one place", () => {
  expect(microTomanToRial(50_000n * 1_000_000n)).toBe(500_000);
  expect(rialToMicroToman(500_000)).toBe(50_000n * 1_000_000n);
  expect(() => microTomanToRial(1n)).toThrow();
  expect(
    requestBody("m", { topupId: "top_1", amountMicro: 50_000n * 1_000_000n, description: "d", callbackUrl: "http://x/cb" }).amount,
  ).toBe(500_000);
});

test("100 and 101 are both paid, with code as a number or a string", () => {
  for (const code of [100, "100", 101, "101"]) {
    const outcome = replyToVerifyOutcome(paid(code));
    expect(outcome.kind).toBe("paid");
    if (outcome.kind === "paid") {
      expect(outcome.refId).toBe("201");
      expect(outcome.feeMicro).toBe(500n * 1_000_000n);
      expect(outcome.alreadyVerified).toBe(Number(code) === 101);
    }
  }
});

test("error codes map to what settle does with them, whatever the HTTP status", () => {
  expect(replyToVerifyOutcome(failure(-50)).kind).toBe("amount_mismatch");
  expect(replyToVerifyOutcome(failure("-51")).kind).toBe("not_paid");
  expect(replyToVerifyOutcome(failure(-54, 404)).kind).toBe("invalid");
  expect(replyToVerifyOutcome(failure(-53)).kind).toBe("invalid");
  expect(replyToVerifyOutcome(failure(-12, 429)).kind).toBe("retry");
  expect(replyToVerifyOutcome(failure(-10, 401)).kind).toBe("retry");
  expect(replyToVerifyOutcome({ failure: "no reply within 1000 ms" }).kind).toBe("retry");
  expect(replyToVerifyOutcome({ status: 502, body: "<html>" }).kind).toBe("retry");
  // 100 without a ref_id is not a payment we can record.
  expect(replyToVerifyOutcome({ status: 200, body: { data: { code: 100 }, errors: [] } }).kind).toBe("retry");
});

test("inquiry, unverified list and callback parsing", () => {
  expect(replyToInquiryOutcome({ status: 200, body: { data: { code: "100", status: "PAID" }, errors: [] } })).toMatchObject({
    kind: "status",
    status: "PAID",
  });
  expect(replyToInquiryOutcome(failure(-54)).kind).toBe("invalid");
  const list = replyToUnverifiedOutcome({
    status: 200,
    body: { data: { code: "100", authorities: [{ authority: "A1", amount: 50500 }] } },
  });
  expect(list).toEqual({ ok: true, payments: [{ authority: "A1", amountMicro: 5_050n * 1_000_000n }] });
  expect(callbackParams(new URLSearchParams("Authority=A00012&Status=OK"))).toEqual({ authority: "A00012", status: "OK" });
  expect(callbackParams(new URLSearchParams("Authority=A00012&Status=whatever"))?.status).toBe("NOK");
  expect(callbackParams(new URLSearchParams("Authority=<script>"))).toBeNull();
});

test("a huge reply is kept cut to its bound", () => {
  const outcome = replyToVerifyOutcome({ status: 500, body: { junk: "x".repeat(RAW_REPLY_CHARS_MAX * 2) } });
  expect(JSON.stringify(outcome.raw).length).toBeLessThan(RAW_REPLY_CHARS_MAX + 200);
});
