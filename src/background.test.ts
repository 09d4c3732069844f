import { expect, test } from "bun:test";
import { join } from "node:path";
import { backgroundFailures, every, runTask } from "./background.ts";
import type { Logger } from "./log.ts";
import { until } from "../test/until.ts";

function failuresOf(task: string): number {
  return new Map(backgroundFailures()).get(task) ?? 0;
}

function recordingLog(): { log: Logger; events: { event: string; fields?: Record<string, unknown> }[] } {
  const events: { event: string; fields?: Record<string, unknown> }[] = [];
  return { log: (_level, event, fields) => void events.push({ event, fields }), events };
}

test("a fire-and-forget task that throws or rejects is logged and counted, not raised", async () => {
  const { log, events } = recordingLog();
  runTask("t_sync", log, () => {
    throw new Error("sync");
  });
  runTask("t_async", log, async () => {
    await Bun.sleep(1); // a task that fails later, after runTask has returned: the case under test
    throw new Error("async");
  });
  await until(() => failuresOf("t_async") === 1);
  expect(failuresOf("t_sync")).toBe(1);
  expect(events.map((e) => [e.event, e.fields?.task, e.fields?.error])).toEqual([
    ["background_task_failed", "t_sync", "sync"],
    ["background_task_failed", "t_async", "async"],
  ]);
});

test("a repeated task runs again after a failure, and never twice at once", async () => {
  const { log } = recordingLog();
  let runs = 0;
  let running = 0;
  let overlapped = false;
  const stop = every("t_every", 1, log, async () => {
    runs++;
    running++;
    overlapped ||= running > 1;
    await Bun.sleep(5); // a run longer than the interval (the case under test): ticks meanwhile are skipped
    running--;
    if (runs <= 2) throw new Error("database away");
  });
  try {
    await until(() => runs >= 4);
  } finally {
    stop();
  }
  expect(failuresOf("t_every")).toBe(2);
  expect(overlapped).toBe(false);
});

test("with the process-wide handler installed, a rejection nobody handles still fails the test it happens in", async () => {
  const fixture = join(import.meta.dir, "../test/fixtures/background/unhandled.fixture.ts");
  const run = Bun.spawn(["bun", "test", fixture], { cwd: join(import.meta.dir, ".."), stdout: "pipe", stderr: "pipe" });
  const [code, err] = await Promise.all([run.exited, new Response(run.stderr).text()]);
  expect(err).toContain("nobody handles this");
  expect(err).toContain("1 fail");
  expect(code).not.toBe(0);
});
