import { expect, test } from "bun:test";
import { credentialsOf } from "./request.ts";

test("a client's request cannot claim to be a batch line, whatever header it sends", () => {
  const request = new Request("http://gw.test/v1/chat/completions", {
    headers: { authorization: "Bearer sk-x", "x-darvaze-batch": "true", batch: "true" },
  });
  const credentials = credentialsOf(request);
  expect(credentials.key).toBe("sk-x");
  expect(credentials.batch).toBeUndefined();
});
