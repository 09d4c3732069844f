import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ANTHROPIC_BETAS, betasVerdict } from "./betas.ts";

const RECORDED = JSON.parse(readFileSync(join(import.meta.dir, "../../../test/fixtures/clients/claude-code-sonnet.json"), "utf8")) as {
  headers: Record<string, string>;
};

test("every beta Claude Code sent in the recorded request is listed, from its traffic, with no price effect", () => {
  const sent = RECORDED.headers["anthropic-beta"]!.split(",");
  expect(sent.length).toBeGreaterThan(3);
  for (const name of sent)
    expect([name, ANTHROPIC_BETAS.get(name)?.class, ANTHROPIC_BETAS.get(name)?.source]).toEqual([name, "free", "traffic"]);
  expect(betasVerdict(sent)).toEqual({ longContext: false });
});

test("an unknown name and a refused one are refused, naming them; context-1m lifts the standard window", () => {
  expect(betasVerdict(["effort-2025-11-24", "made-up-2099-01-01"])).toMatchObject({ refused: "made-up-2099-01-01" });
  const fast = betasVerdict(["fast-mode-2026-02-01"]);
  expect(fast).toMatchObject({ refused: "fast-mode-2026-02-01" });
  expect("message" in fast && fast.message).toContain("premium rate");
  expect(betasVerdict(["claude-code-20250219", "context-1m-2025-08-07"])).toEqual({ longContext: true });
  expect(betasVerdict(undefined)).toEqual({ longContext: false });
});

test("each listed name is a dated beta name with a reason", () => {
  for (const [name, beta] of ANTHROPIC_BETAS) {
    expect(name).toMatch(/^[a-z0-9-]+-20\d\d-?\d\d-?\d\d$/);
    expect(beta.why.length).toBeGreaterThan(10);
  }
});

test("docs/api.md lists every beta with its class", () => {
  const docs = readFileSync(join(import.meta.dir, "../../../docs/api.md"), "utf8");
  const label = { free: "no price effect", long_context: "priced: long context", refused: "refused" } as const;
  for (const [name, beta] of ANTHROPIC_BETAS) expect(docs).toContain(`| \`${name}\` | ${label[beta.class]} | ${beta.why} |`);
});
