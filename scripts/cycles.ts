/**
 * Import-cycle check (issue 19): dpdm over src/ and actors/, tests excluded, type-only imports
 * included (a file pair that imports each other is one module cut in two, whatever it imports).
 * Fails on any cycle not in KNOWN_CYCLES, and on a known cycle that is gone, so the list only shrinks.
 *
 *   bun run cycles
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";

/** Cycles left for a reason, each written as dpdm prints it (files joined by " -> "). */
const KNOWN_CYCLES: Record<string, string> = {};

const dpdmOutput = z.object({ circulars: z.array(z.array(z.string())) });

function findCycles(): string[] {
  const dir = mkdtempSync(join(tmpdir(), "cycles-"));
  try {
    const out = join(dir, "dpdm.json");
    const args = ["--no-warning", "--no-tree", "--no-circular", "--no-progress", "--exclude", "(node_modules|\\.test\\.ts$)", "-o", out];
    const run = Bun.spawnSync(["bun", "x", "dpdm", ...args, "src/**/*.ts", "actors/**/*.ts"], { stdout: "ignore", stderr: "pipe" });
    if (run.exitCode !== 0) throw new Error(`dpdm failed: ${run.stderr.toString()}`);
    return dpdmOutput.parse(JSON.parse(readFileSync(out, "utf8"))).circulars.map((cycle) => cycle.join(" -> "));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const cycles = findCycles();
const unknown = cycles.filter((cycle) => !(cycle in KNOWN_CYCLES));
const gone = Object.keys(KNOWN_CYCLES).filter((cycle) => !cycles.includes(cycle));
for (const cycle of cycles) console.log(`${cycle in KNOWN_CYCLES ? "known" : "NEW  "}  ${cycle}`);
for (const cycle of gone) console.log(`gone   ${cycle} (remove it from KNOWN_CYCLES in scripts/cycles.ts)`);
console.log(`cycles: ${cycles.length} found, ${unknown.length} new, ${gone.length} known and gone`);
process.exit(unknown.length > 0 || gone.length > 0 ? 1 : 0);
