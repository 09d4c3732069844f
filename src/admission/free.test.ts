import { expect, test } from "bun:test";
import { isFailure } from "../errors.ts";
import { FreeGate } from "./free.ts";

const key = { id: "k1", concurrencyMax: 2 };

test("a key's slots: taken while in flight, given back once however often release is called", () => {
  const gate = new FreeGate({ rpm: 100 });
  const first = gate.enter(key, "count_tokens");
  const second = gate.enter(key, "credits");
  expect(typeof first).toBe("function");
  expect(typeof second).toBe("function");
  const third = gate.enter(key, "key");
  expect(isFailure(third) && third.code).toBe("concurrency_limit_exceeded");
  (first as () => void)();
  (first as () => void)();
  expect(typeof gate.enter(key, "key")).toBe("function");
  expect(isFailure(gate.enter(key, "key"))).toBe(true); // the double release freed one slot, not two
});

test("each endpoint's rate is a sliding minute of its own, refused with the seconds until one frees", () => {
  let nowMs = 1_000_000;
  const gate = new FreeGate({ rpm: 2, nowMs: () => nowMs });
  const use = (endpoint: "count_tokens" | "credits") => {
    const entered = gate.enter(key, endpoint);
    if (typeof entered === "function") entered();
    return entered;
  };
  use("count_tokens");
  nowMs += 10_000;
  use("count_tokens");
  const refused = use("count_tokens");
  expect(isFailure(refused) && [refused.code, refused.retryAfterS]).toEqual(["rate_limit_exceeded", 50]);
  expect(typeof use("credits")).toBe("function");
  nowMs += 50_000; // the first count has left the window
  expect(typeof use("count_tokens")).toBe("function");
});
