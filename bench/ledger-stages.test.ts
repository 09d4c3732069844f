import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { attribute, type CpuProfile, STAGE_RULES, stageOf } from "./ledger-stages.ts";

const ROOT = join(import.meta.dir, "..");
const frame = (functionName: string, file: string) => ({ functionName, url: file.startsWith("/") ? `file://${file}` : file });
const at = (file: string) => join(ROOT, file);

describe("the cost ledger's map from code to stage", () => {
  test("every rule names a file and functions that exist (a moved file or renamed function fails here, not silently charged to its caller's stage)", () => {
    const missing: string[] = [];
    for (const rule of STAGE_RULES) {
      const path = join(ROOT, rule.file);
      if (!existsSync(path)) {
        missing.push(rule.file);
        continue;
      }
      if (rule.file.endsWith("/")) continue;
      const text = readFileSync(path, "utf8");
      for (const name of rule.functions ?? []) {
        const declared = new RegExp(`(function\\s+${name}\\b|^\\s+(private\\s+|async\\s+|static\\s+)*${name}\\s*[(<])`, "m");
        if (!declared.test(text)) missing.push(`${rule.file}: ${name}`);
      }
    }
    expect(missing).toEqual([]);
  });

  test("a rule for a function wins over the rule for its file; files and functions no rule names have no stage", () => {
    expect(stageOf(ROOT, frame("settle", at("src/operations/chat/relay.ts")))).toBe("settle");
    expect(stageOf(ROOT, frame("pump", at("src/operations/chat/relay.ts")))).toBe("relay");
    expect(stageOf(ROOT, frame("prepare", at("src/operations/chat/chat.ts")))).toBe("parse");
    expect(stageOf(ROOT, frame("encodeJson", at("src/json.ts")))).toBeNull();
    expect(stageOf(ROOT, frame("record", at("src/admission/settlement.ts")))).toBeNull();
    expect(stageOf(ROOT, frame("parse", ""))).toBeNull();
  });
});

describe("attribute", () => {
  // root → Elysia's handler → chatCompletions → chat → prepare → zod;  … chat → JSON.parse (no rule: the route's own);
  // root → relay's settle → wordsLowerBound;  root → an anonymous built-in alone (Bun's server: http).
  const profile: CpuProfile = {
    nodes: [
      { id: 1, callFrame: frame("(root)", ""), children: [2, 8, 10] },
      { id: 2, callFrame: frame("", at("node_modules/elysia/dist/index.mjs")), children: [3] },
      { id: 3, callFrame: frame("chatCompletions", at("src/http/chat/route.ts")), children: [4] },
      { id: 4, callFrame: frame("chat", at("src/operations/chat/chat.ts")), children: [5, 7] },
      { id: 5, callFrame: frame("prepare", at("src/operations/chat/chat.ts")), children: [6] },
      { id: 6, callFrame: frame("safeParse", at("node_modules/zod/v4/core/schemas.js")) },
      { id: 7, callFrame: frame("parse", "") },
      { id: 8, callFrame: frame("settle", at("src/operations/chat/relay.ts")), children: [9] },
      { id: 9, callFrame: frame("wordsLowerBound", at("src/tokens/count.ts")) },
      { id: 10, callFrame: frame("anonymous", "") },
    ],
    startTime: 1_000_000,
    // One sample before the window, then one every 1,000 µs inside it, then one after it.
    samples: [6, 6, 6, 7, 9, 10, 6],
    timeDeltas: [0, 10_000, 1_000, 1_000, 1_000, 1_000, 10_000],
  };

  test("charges each sample in the window to its innermost named frame's stage", () => {
    const split = attribute(profile, { root: ROOT, fromUs: 1_005_000, toUs: 1_015_000 });
    expect(split.samples).toBe(5);
    expect(split.periodUs).toBe(1_000);
    expect(split.byStage).toMatchObject({ parse: 2, other: 1, http: 1, count: 1, relay: 0, settle: 0 });
    expect(split.hottest[0]).toEqual({ frame: "safeParse (zod/v4/core/schemas.js)", stage: "parse", samples: 2 });
  });

  test("a fallback rule names only a sample no ordinary rule names", () => {
    const drizzle = at("node_modules/drizzle-orm/pg-core/session.js");
    const database: CpuProfile = {
      nodes: [
        { id: 1, callFrame: frame("(root)", ""), children: [2, 4] },
        { id: 2, callFrame: frame("openHold", at("src/ledger/holds.ts")), children: [3] },
        { id: 3, callFrame: frame("execute", drizzle) },
        { id: 4, callFrame: frame("then", drizzle), children: [5] },
        { id: 5, callFrame: frame("postMessage", "") },
      ],
      startTime: 0,
      samples: [3, 5, 5],
      timeDeltas: [1, 1, 1],
    };
    expect(attribute(database, { root: ROOT, fromUs: 0, toUs: 10 }).byStage).toMatchObject({ admit: 1, usage: 2, http: 0 });
  });

  test("an empty window has no samples and no period", () => {
    const split = attribute(profile, { root: ROOT, fromUs: 0, toUs: 1 });
    expect(split.samples).toBe(0);
    expect(split.periodUs).toBe(0);
  });
});
