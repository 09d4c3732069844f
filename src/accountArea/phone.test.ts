import { describe, expect, test } from "bun:test";
import { asciiDigits, maskPhone, nationalPhone, normalisePhone } from "./phone.ts";

describe("phone normalisation", () => {
  test.each([
    "09121234567",
    "9121234567",
    "+989121234567",
    "00989121234567",
    "989121234567",
    "+98 912 123 4567",
    "0912-123-4567",
    "۰۹۱۲۱۲۳۴۵۶۷",
    "٠٩١٢١٢٣٤٥٦٧",
    "+۹۸۹۱۲۱۲۳۴۵۶۷",
  ])("%s is +989121234567", (input) => {
    expect(normalisePhone(input)).toBe("+989121234567");
  });

  test.each(["", "02112345678", "+14155550100", "0912123456", "091212345678", "abc", "0".repeat(40), "+98 812 123 4567"])(
    "%s is refused",
    (input) => {
      expect(normalisePhone(input)).toBeNull();
    },
  );

  test("digits and forms", () => {
    expect(asciiDigits("۱۲۳٤٥٦x")).toBe("123456x");
    expect(nationalPhone("+989121234567")).toBe("09121234567");
    expect(maskPhone("+989121234567")).toBe("+98912•••4567");
  });
});
