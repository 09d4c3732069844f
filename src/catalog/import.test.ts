import { afterAll, beforeAll, expect, test } from "bun:test";
import { CATALOG_FILE_PATH, entryPrices, type ModelEntry, parseCatalogFile } from "./file.ts";
import { CatalogImportRefused, diffCatalog, fetchCatalogFile } from "./import.ts";

const fileText = await Bun.file(CATALOG_FILE_PATH).text();
const shipped = () => parseCatalogFile(fileText);
const edit = (entries: ModelEntry[], id: string, change: (e: ModelEntry) => ModelEntry) =>
  entries.map((e) => (e.id === id ? change(structuredClone(e)) : e));

test("the shipped file against itself: nothing to change", () => {
  const { diff, changes } = diffCatalog(shipped(), shipped());
  expect(changes).toEqual([]);
  expect(diff).toEqual({ added: [], prices: [], limits: [], aliases: [], retired: [], changed: [], absent: [] });
});

test("a price written with other decimals is the same price", () => {
  const imported = edit(shipped(), "gpt-4o", (e) => ({
    ...e,
    usd_per_1m: { ...e.usd_per_1m, input_token: `${e.usd_per_1m.input_token}${e.usd_per_1m.input_token!.includes(".") ? "000" : ".000"}` },
  }));
  expect(diffCatalog(shipped(), imported).changes).toEqual([]);
});

test("each kind of change is in the diff, and the action its audit row names", () => {
  const current = shipped();
  const gpt4o = current.find((e) => e.id === "gpt-4o")!;
  let imported = edit(current, "gpt-4o", (e) => ({ ...e, usd_per_1m: { ...e.usd_per_1m, output_token: "99" }, context_window: 1000 }));
  imported = edit(imported, "gpt-4o-mini", (e) => ({ ...e, aliases: [...e.aliases, "mini"] }));
  imported = edit(imported, "claude-haiku-4-5", (e) => ({ ...e, retired: { successor: "gpt-4o" } }));
  imported = imported.filter((e) => e.id !== "tts-1");
  imported.push({ ...structuredClone(gpt4o), id: "gpt-4o-new", aliases: [] });
  const { diff, changes } = diffCatalog(current, imported);
  expect(diff.added).toEqual(["gpt-4o-new"]);
  expect(diff.prices).toContainEqual({ model: "gpt-4o", unit: "output_token", old: gpt4o.usd_per_1m.output_token!, new: "99" });
  expect(diff.prices.filter((p) => p.model === "gpt-4o-new" && p.old === null)).toHaveLength(entryPrices(gpt4o).length); // its batch prices too
  expect(diff.limits).toEqual([{ model: "gpt-4o", field: "context_window", old: gpt4o.context_window, new: 1000 }]);
  expect(diff.aliases).toEqual([{ model: "gpt-4o-mini", added: ["mini"], removed: [] }]);
  expect(diff.retired).toEqual([{ model: "claude-haiku-4-5", successor: "gpt-4o" }]);
  expect(diff.absent).toEqual(["tts-1"]);
  expect(changes.map((c) => [c.entry.id, c.action]).sort()).toEqual([
    ["claude-haiku-4-5", "retire"],
    ["gpt-4o", "change"],
    ["gpt-4o-mini", "alias"],
    ["gpt-4o-new", "add"],
  ]);
});

let server: ReturnType<typeof Bun.serve>;
beforeAll(() => {
  server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch(request) {
      const path = new URL(request.url).pathname;
      if (path === "/moved") return Response.redirect("http://127.0.0.1/elsewhere", 301);
      if (path === "/missing") return new Response("no", { status: 404 });
      return new Response(fileText);
    },
  });
});
afterAll(() => server.stop(true));

test("a URL: fetched from loopback over http, checked as the file is; refused past the size bound, on a redirect, or plain http elsewhere", async () => {
  const base = `http://127.0.0.1:${server.port}`;
  expect((await fetchCatalogFile(`${base}/models.json`)).length).toBe(shipped().length);
  await expect(fetchCatalogFile(`${base}/models.json`, fileText.length - 1)).rejects.toThrow(`larger than ${fileText.length - 1} bytes`);
  await expect(fetchCatalogFile(`${base}/moved`)).rejects.toThrow("redirect (301)");
  await expect(fetchCatalogFile(`${base}/missing`)).rejects.toThrow("answered 404");
  await expect(fetchCatalogFile("http://catalog.example/models.json")).rejects.toBeInstanceOf(CatalogImportRefused);
  await expect(fetchCatalogFile("ftp://127.0.0.1/models.json")).rejects.toThrow("https");
});
