import { expect, test } from "bun:test";
import { MODEL_ALIASES } from "./aliases.ts";
import { Catalog } from "./catalog.ts";
import { REASONING_MODELS, takesReasoningEffort } from "./reasoning.ts";
import { SEED_MODELS } from "./seed.ts";

const seedIds = new Set(SEED_MODELS.map((m) => m.id));
const catalog = new Catalog(
  SEED_MODELS.map(({ usdPer1m: _, ...m }) => ({ ...m, createdS: 0 })),
  [],
);

test("every alias names a chat model of the seed, and none shadows a catalog id", () => {
  for (const [alias, id] of MODEL_ALIASES) {
    expect({ alias, known: seedIds.has(id), shadows: seedIds.has(alias) }).toEqual({ alias, known: true, shadows: false });
  }
});

test("a dated id resolves to its catalog model; an unknown one to nothing", () => {
  expect(catalog.get("claude-sonnet-4-20250514")?.id).toBe("claude-sonnet-4");
  expect(catalog.get("gpt-4o-2024-08-06")?.id).toBe("gpt-4o");
  expect(catalog.get("claude-sonnet-4")?.id).toBe("claude-sonnet-4");
  expect(catalog.get("claude-sonnet-9-20300101")).toBeUndefined();
});

test("reasoning models are catalog chat models; a dated id of one takes an effort", () => {
  for (const id of REASONING_MODELS) expect(SEED_MODELS.find((m) => m.id === id)?.operation).toBe("chat");
  expect(takesReasoningEffort("claude-sonnet-4-20250514")).toBe(true);
  expect(takesReasoningEffort("gpt-4o-mini")).toBe(false);
});
