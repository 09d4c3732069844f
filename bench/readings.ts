/**
 * What the server under test spent and suffered during one measurement, read before and after it:
 * its CPU time (every thread of every node, from /proc/<pid>/stat), CPU 0's busy share (the load
 * generator's CPU: when it is saturated the row measured the load generator, not the server),
 * and from a Darvaze node's /metrics the longest event-loop stall and the memory guard's forced
 * collections and their pauses (the bare proxy's stall from its own `/stall`, the same monitor).
 */
import { readFileSync } from "node:fs";
import type { Target } from "./targets.ts";
import { LOAD_CPU } from "./procs.ts";

/** Linux's USER_HZ: /proc reports CPU time in these ticks. */
export const TICKS_PER_S = 100;

export interface Readings {
  /** Server CPU milliseconds per 1,000 successful requests; null when its pid is unknown. */
  cpuMsPer1k: number | null;
  /** Share of CPU 0 busy during the run, 0..1. */
  cpu0Busy: number;
  /** Longest event-loop stall of a Darvaze node or the bare proxy during the run; null for other targets. */
  stallMaxMs: number | null;
  /** The memory guard's collections, light and full, their pause, and the full ones among them. */
  gcForced: number | null;
  gcPauseMs: number | null;
  gcFull: number | null;
}

/** The memory guard's collections so far (light and full), their pause time, and the full ones, from the gateway's /metrics. */
export async function forcedCollections(target: Target): Promise<{ count: number; pauseS: number; full: number }> {
  if (!target.adminToken) return { count: 0, pauseS: 0, full: 0 }; // not a Darvaze
  const text = await scrape(target.url, target.adminToken);
  return {
    count: metricValue(text, "darvaze_gc_forced_total"),
    pauseS: metricValue(text, "darvaze_gc_forced_pause_seconds_total"),
    full: metricValue(text, "darvaze_gc_forced_full_total"),
  };
}

async function scrape(url: string, adminToken: string): Promise<string> {
  const response = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${adminToken}` } });
  if (!response.ok) throw new Error(`/metrics answered ${response.status}`);
  return response.text();
}

const metricValue = (text: string, name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? 0);

/** The processes' CPU time so far (every thread, user and system), in ticks. */
export function cpuTicks(pids: number[]): number {
  // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
  return pids.reduce((total, pid) => {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return total + Number(fields[11]) + Number(fields[12]);
  }, 0);
}

function cpu0Ticks(): { busy: number; total: number } {
  const line = readFileSync("/proc/stat", "utf8")
    .split("\n")
    .find((l) => l.startsWith(`cpu${LOAD_CPU} `))!;
  const [user, nice, system, idle, iowait, irq, softirq, steal] = line.split(/\s+/).slice(1, 9).map(Number) as number[];
  const busy = user! + nice! + system! + irq! + softirq! + steal!;
  return { busy, total: busy + idle! + iowait! };
}

/** Every Darvaze node's metrics: the sum of the counters and the worst stall. */
async function darvazeReadings(
  target: Target,
): Promise<{ stallMaxMs: number; gcForced: number; gcPauseMs: number; gcFull: number } | null> {
  if (!target.adminToken) return null;
  const texts = await Promise.all((target.urls ?? [target.url]).map((url) => scrape(url, target.adminToken!)));
  const sum = (name: string) => texts.reduce((total, text) => total + metricValue(text, name), 0);
  return {
    stallMaxMs: Math.max(...texts.map((text) => metricValue(text, "darvaze_event_loop_stall_max_seconds"))) * 1000,
    gcForced: sum("darvaze_gc_forced_total"),
    gcPauseMs: sum("darvaze_gc_forced_pause_seconds_total") * 1000,
    gcFull: sum("darvaze_gc_forced_full_total"),
  };
}

/** The bare proxy's longest stall since the last call (a call starts a new window); null for a target without one. */
async function stallReading(target: Target): Promise<number | null> {
  if (!target.stallUrl) return null;
  const response = await fetch(target.stallUrl);
  if (!response.ok) throw new Error(`${target.stallUrl} answered ${response.status}`);
  return ((await response.json()) as { stallMaxMs: number }).stallMaxMs;
}

/**
 * Starts the readings; the returned function ends them, given the requests the run completed.
 * @example const done = await startReadings(target); … const readings = await done(m.requests);
 */
export async function startReadings(target: Target): Promise<(requests: number) => Promise<Readings>> {
  const pids = target.pids ?? (target.pid ? [target.pid] : []);
  // This scrape also starts a new stall window on each node.
  const before = await darvazeReadings(target);
  await stallReading(target);
  const cpu0Before = cpu0Ticks();
  const ticksBefore = pids.length ? cpuTicks(pids) : 0;
  return async (requests) => {
    const ticks = pids.length ? cpuTicks(pids) - ticksBefore : 0;
    const cpu0 = cpu0Ticks();
    const after = await darvazeReadings(target);
    const stall = await stallReading(target);
    return {
      cpuMsPer1k: pids.length && requests > 0 ? ((ticks / TICKS_PER_S) * 1000 * 1000) / requests : null,
      cpu0Busy: (cpu0.busy - cpu0Before.busy) / Math.max(1, cpu0.total - cpu0Before.total),
      stallMaxMs: after ? after.stallMaxMs : stall,
      gcForced: after && before ? after.gcForced - before.gcForced : null,
      gcPauseMs: after && before ? after.gcPauseMs - before.gcPauseMs : null,
      gcFull: after && before ? after.gcFull - before.gcFull : null,
    };
  };
}
