import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { z } from "zod";
import { CONFIG_PAGE_PATH, renderConfigPage } from "./configPage.ts";

describe("docs/configuration.md", () => {
  test("is what `bun run docs:config` generates from src/config.ts (run it after changing the schema)", () => {
    expect(readFileSync(CONFIG_PAGE_PATH, "utf8")).toBe(renderConfigPage());
  });

  test("a variable without a description is refused, named", () => {
    const schema = z.object({ DESCRIBED: z.string().describe("has one"), BARE_MS: z.coerce.number().int().min(1).max(9).default(5) });
    expect(() => renderConfigPage(schema)).toThrow("BARE_MS");
  });

  test("a row shows the default, the bounds and the description", () => {
    const schema = z.object({
      WAIT_MS: z.coerce.number().int().min(100).max(60_000).default(2_000).describe("How long to wait | at most."),
      SECRET: z.string().min(32).describe("A secret (docs/production.md)."),
    });
    const page = renderConfigPage(schema);
    expect(page).toContain("| `WAIT_MS` | `2000` | integer, 100 – 60,000 | How long to wait \\| at most. |");
    expect(page).toContain("| `SECRET` | **required** | at least 32 characters | A secret ([production.md](production.md)). |");
  });
});
