import { expect, test } from "bun:test";
import { rateHeaders } from "./admit.ts";

test("rate headers: OpenAI's names for the limits the key has, none for those it has not", () => {
  expect(rateHeaders(undefined)).toEqual({});
  expect(rateHeaders({ limitRequests: 60, remainingRequests: 59, resetRequestsS: 1 })).toEqual({
    "x-ratelimit-limit-requests": "60",
    "x-ratelimit-remaining-requests": "59",
    "x-ratelimit-reset-requests": "1s",
  });
  expect(rateHeaders({ limitTokens: 1000 })).toEqual({
    "x-ratelimit-limit-tokens": "1000",
    "x-ratelimit-remaining-tokens": "0",
    "x-ratelimit-reset-tokens": "0s",
  });
});
