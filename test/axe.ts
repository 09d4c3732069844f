/** axe-core in a page under test: its serious and critical violations, each as `rule: selectors`. */
import { readFileSync } from "node:fs";
import type { Page } from "playwright-core";

const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

export async function seriousViolations(page: Page): Promise<string[]> {
  await page.evaluate(AXE);
  const result = (await page.evaluate(`axe.run(document, { resultTypes: ["violations"] })`)) as {
    violations: { id: string; impact: string; nodes: { target: string[] }[] }[];
  };
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
}
