import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { CATALOG_PAGE_PATH, renderCatalogPage } from "./catalogPage.ts";

test("docs/catalog.md is what `bun run docs:catalog` generates from src/catalog/models.json (run it after changing the file)", () => {
  expect(readFileSync(CATALOG_PAGE_PATH, "utf8")).toBe(renderCatalogPage());
});

test("a row shows the aliases, the prices by unit and where they were read", () => {
  const page = renderCatalogPage();
  const sonnet = page.split("\n").find((line) => line.startsWith("| `claude-sonnet-4` |"))!;
  expect(sonnet).toContain("`claude-sonnet-4-20250514`");
  expect(sonnet).toContain("cache_write_1h_token $6");
  expect(sonnet).toContain("(read 2026-11-25)");
});
