import { expect, test } from "bun:test";
import { createLogger, LOG_BUFFER_CHARS_MAX, lineBatcher } from "./log.ts";

test("the lines of one turn go out in one write, after it", async () => {
  const writes: string[] = [];
  const batcher = lineBatcher((text) => writes.push(text));
  batcher.line("a\n");
  batcher.line("b\n");
  expect(writes).toEqual([]);
  await new Promise((resolve) => setImmediate(resolve));
  expect(writes).toEqual(["a\nb\n"]);
  batcher.line("c\n");
  await new Promise((resolve) => setImmediate(resolve));
  expect(writes).toEqual(["a\nb\n", "c\n"]);
});

test("an urgent line goes out at once, after what waited; so does a full buffer", () => {
  const writes: string[] = [];
  const batcher = lineBatcher((text) => writes.push(text));
  batcher.line("info\n");
  batcher.line("error\n", true);
  expect(writes).toEqual(["info\nerror\n"]);
  const long = `${"x".repeat(LOG_BUFFER_CHARS_MAX)}\n`;
  batcher.line(long);
  expect(writes).toEqual(["info\nerror\n", long]);
  batcher.flush();
  expect(writes.length).toBe(2);
});

test("lines waiting when the process exits are written, in order", async () => {
  const script = `
    const { createLogger } = await import(${JSON.stringify(`${import.meta.dir}/log.ts`)});
    const log = createLogger("info");
    log("debug", "hidden");
    for (let i = 0; i < 3; i++) log("info", "line", { i });
    process.exit(0);
  `;
  const child = Bun.spawn(["bun", "-e", script], { stdout: "ignore", stderr: "pipe" });
  const stderr = await new Response(child.stderr).text();
  expect(await child.exited).toBe(0);
  const lines = stderr
    .trim()
    .split("\n")
    .map((line) => JSON.parse(line) as { event: string; i: number });
  expect(lines.map((l) => [l.event, l.i])).toEqual([
    ["line", 0],
    ["line", 1],
    ["line", 2],
  ]);
});

test("a logger given a writer writes each line to it at once", () => {
  const lines: string[] = [];
  const log = createLogger("info", (line) => lines.push(line));
  log("info", "one", { n: 1n });
  expect(JSON.parse(lines[0]!)).toMatchObject({ level: "info", event: "one", n: "1" });
});

test("no line carries a query's parameters, whoever logs the database's error", () => {
  const lines: string[] = [];
  const log = createLogger("info", (line) => lines.push(line));
  const error = 'Failed query: insert into "api_keys" ("id", "hash") values ($1, $2)\nparams: key_1,5f2b9c0d-secret-hash';
  log("error", "unhandled", { error, requestId: "req_1" });
  log("info", "plain", { note: "params: stay when no query precedes them" });
  expect(lines[0]).toContain('Failed query: insert into \\"api_keys\\"');
  expect(lines[0]).not.toContain("secret-hash");
  expect(lines[0]).toContain("req_1");
  expect(lines[1]).toContain("params: stay");
});
