import { expect, test } from "bun:test";
import type { CatalogModel } from "../../catalog/catalog.ts";
import { imagesRequest, resolveImageChoice } from "./schema.ts";

const model = (units: string[]) =>
  ({ id: "m", price: { versionId: 1, tomanPerUsd: 1n, tomanPer1m: new Map(units.map((u) => [u, 1n])) } }) as unknown as CatalogModel;

test("auto and absent size and quality resolve to 1024x1024 and the middle quality", () => {
  const dalle3 = model(["image_1024x1792_standard", "image_1024x1024_standard", "image_1024x1024_hd"]);
  expect(resolveImageChoice(dalle3, undefined, "auto")).toEqual({ size: "1024x1024", quality: "standard" });
  const gpt = model(["image_1024x1024_low", "image_1024x1024_medium", "image_1024x1024_high"]);
  expect(resolveImageChoice(gpt, "auto", null)).toEqual({ size: "1024x1024", quality: "medium" });
  expect(resolveImageChoice(gpt, "512x512", null)).toMatchObject({ param: "size" });
  expect(resolveImageChoice(dalle3, "1024x1792", "hd")).toMatchObject({ param: "quality" });
});

test("n, size and response_format are bounded as in OpenAI's spec", () => {
  expect(imagesRequest.safeParse({ prompt: "p", n: 11 }).success).toBe(false);
  expect(imagesRequest.safeParse({ prompt: "p", size: "big" }).success).toBe(false);
  expect(imagesRequest.safeParse({ prompt: "p", response_format: "png" }).success).toBe(false);
  expect(imagesRequest.safeParse({ prompt: "p", n: 10, size: "1792x1024", response_format: "b64_json" }).success).toBe(true);
});
