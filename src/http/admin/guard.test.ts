import { expect, test } from "bun:test";
import { redacted } from "./guard.ts";

test("secrets are taken out of audit states at any depth", () => {
  const state = { id: "k", key: "sk-dvz-x", backends: [{ name: "a", api_key: "sk-upstream" }], nested: { token: "dvz-op-x", keep: 1 } };
  expect(redacted(state)).toEqual({ id: "k", backends: [{ name: "a" }], nested: { keep: 1 } });
});
