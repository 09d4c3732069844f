import { describe, expect, test } from "bun:test";
import { base32Decode, base32Encode, hotp, otpauthUri, totpStep, verifyTotp } from "./totp.ts";

// RFC 6238 appendix B: the SHA-1 seed "12345678901234567890", 8 digits.
const SEED = Buffer.from("12345678901234567890");
const VECTORS: [number, string][] = [
  [59, "94287082"],
  [1111111109, "07081804"],
  [1111111111, "14050471"],
  [1234567890, "89005924"],
  [2000000000, "69279037"],
  [20000000000, "65353130"],
];

describe("TOTP", () => {
  test.each(VECTORS)("RFC 6238 SHA-1 vector at %i s", (seconds, code) => {
    expect(hotp(SEED, totpStep(seconds * 1000), 8)).toBe(code);
  });

  test("RFC 4226 HOTP vectors (6 digits)", () => {
    const codes = ["755224", "287082", "359152", "969429", "338314", "254676", "287922", "162583", "399871", "520489"];
    expect(codes.map((_, i) => hotp(SEED, i))).toEqual(codes);
  });

  test("base32 round-trips the seed (RFC 4648's alphabet)", () => {
    expect(base32Encode(SEED)).toBe("GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ");
    expect(base32Decode("GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ").equals(SEED)).toBe(true);
  });

  test("accepts one step either side, not two; never a step already used", () => {
    const secret = base32Encode(SEED);
    const nowMs = 1_111_111_111_000;
    const step = totpStep(nowMs);
    const code = (s: number) => hotp(SEED, s);
    expect(verifyTotp(secret, code(step), nowMs, 0)).toBe(step);
    expect(verifyTotp(secret, code(step - 1), nowMs, 0)).toBe(step - 1);
    expect(verifyTotp(secret, code(step + 1), nowMs, 0)).toBe(step + 1);
    expect(verifyTotp(secret, code(step - 2), nowMs, 0)).toBeNull();
    expect(verifyTotp(secret, code(step), nowMs, step)).toBeNull();
    expect(verifyTotp(secret, "12345", nowMs, 0)).toBeNull();
  });

  test("the otpauth URI names the secret, SHA1, 6 digits and 30 s", () => {
    const uri = new URL(otpauthUri("ABC", "ana"));
    expect(uri.protocol).toBe("otpauth:");
    expect(uri.searchParams.get("secret")).toBe("ABC");
    expect(uri.searchParams.get("digits")).toBe("6");
    expect(uri.searchParams.get("period")).toBe("30");
  });
});
