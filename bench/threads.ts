/**
 * Per-thread scheduling of one process, from /proc/<pid>/task/<tid>/schedstat: the time each of
 * its threads ran, and the time it was ready to run but waited for the CPU. On the bench's one
 * CPU per gateway, a request is late when its thread waits behind another of the same process
 * (the main thread behind the HTTP client's, a compiler or collector thread, the embedded
 * database's worker): the wait shows here, and in no profile.
 */
import { readdirSync, readFileSync } from "node:fs";

export interface ThreadTimes {
  name: string;
  runMs: number;
  waitMs: number;
}

/** Each thread's name and times so far, by thread id. */
export function snapshot(pid: number): Map<string, ThreadTimes> {
  const threads = new Map<string, ThreadTimes>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const name = readFileSync(`/proc/${pid}/task/${tid}/comm`, "utf8").trim();
      const [runNs, waitNs] = readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ").map(Number);
      threads.set(tid, { name, runMs: runNs! / 1e6, waitMs: waitNs! / 1e6 });
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return threads;
}

/** Starts counting; the returned function gives each thread's run and wait since, summed by thread name, busiest first. */
export function startThreadTimes(pid: number): () => ThreadTimes[] {
  const before = snapshot(pid);
  return () => {
    const byName = new Map<string, ThreadTimes>();
    for (const [tid, now] of snapshot(pid)) {
      const was = before.get(tid) ?? { runMs: 0, waitMs: 0 };
      const sum = byName.get(now.name) ?? { name: now.name, runMs: 0, waitMs: 0 };
      sum.runMs += now.runMs - was.runMs;
      sum.waitMs += now.waitMs - was.waitMs;
      byName.set(now.name, sum);
    }
    return [...byName.values()].filter((t) => t.runMs >= 1 || t.waitMs >= 1).sort((a, b) => b.runMs - a.runMs);
  };
}
