/**
 * Work that runs outside any request: timers, sweeps, fire-and-forget promises. A failure in one
 * is logged and counted (`darvaze_background_failures_total{task}`), never thrown: a rejection
 * nobody handles ends a Bun process, and with it every request and open lease the node serves.
 *
 * Retry is bounded by construction: a repeated task's next tick is its retry (one run at a time,
 * so a slow database never stacks runs), and a one-shot task is one whose work a repeated task
 * also does (a lease's close is retried by the idle sweep, a takeover's renewal by the renewal
 * timer), so none loops on its own.
 */
import type { Logger } from "./log.ts";

/** Task names are a closed, small set (labels); past this, failures count under `other`. */
export const BACKGROUND_TASKS_MAX = 64;

const failures = new Map<string, number>();

/** Failures since the process started, by task (metrics; every gateway of the process shares them). */
export function backgroundFailures(): Iterable<[string, number]> {
  return failures.entries();
}

function count(task: string): void {
  const name = failures.has(task) || failures.size < BACKGROUND_TASKS_MAX ? task : "other";
  failures.set(name, (failures.get(name) ?? 0) + 1);
}

function reasonOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Records a failure of `task`: one log line (with `fields`: ids, never secrets) and one count.
 * @example taskFailed("lease_close", log, error, { keyId, holdId });
 */
export function taskFailed(task: string, log: Logger, error: unknown, fields: Record<string, unknown> = {}): void {
  count(task);
  log("error", "background_task_failed", { task, ...fields, error: reasonOf(error) });
}

/**
 * Runs `work` without waiting for it; a throw or rejection is logged and counted, never raised.
 * @example runTask("key_close", log, () => actor.close(lease));
 */
export function runTask(task: string, log: Logger, work: () => unknown): void {
  try {
    const result = work();
    if (result instanceof Promise) result.catch((error: unknown) => taskFailed(task, log, error));
  } catch (error) {
    taskFailed(task, log, error);
  }
}

/**
 * Runs `work` every `intervalMs`, one run at a time (a tick that finds the previous run still
 * going is skipped); failures are logged and counted and the next tick tries again.
 * Returns the stop function.
 * @example const stop = every("idle_sweep", 5_000, log, () => host.sweepIdle());
 */
export function every(task: string, intervalMs: number, log: Logger, work: () => unknown): () => void {
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    runTask(task, log, async () => {
      try {
        await work();
      } finally {
        running = false;
      }
    });
  }, intervalMs);
  timer.unref?.(); // a background task never keeps a process alive by itself: the server does
  return () => clearInterval(timer);
}

let rejectionsGuarded = false;

/**
 * A process-wide last line: a rejection nobody handled is logged and counted (task
 * `unhandled_rejection`) instead of ending the process. Every known task catches its own; this is
 * for the one that was missed, and tests fail on any (test/preload.ts), so it is not a fix.
 */
export function guardRejections(log: Logger): void {
  if (rejectionsGuarded) return;
  rejectionsGuarded = true;
  process.on("unhandledRejection", (reason) => taskFailed("unhandled_rejection", log, reason));
}
