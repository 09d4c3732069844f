/**
 * Where nats-server and PostgreSQL run during a benchmark. They are system services, shared with
 * the rest of the machine; left to the scheduler they wake on the gateway's CPU as often as not,
 * and every wake-up is a pause for the gateway that a deployment (where they are other machines)
 * would not see. So a run moves every process of both (the postmaster's future children inherit
 * it) to the load CPU, and puts them back where they were when it ends.
 */
import { readdirSync, readFileSync } from "node:fs";

/** Processes whose command name is one of `names` (/proc/<pid>/comm). */
function processesNamed(names: string[]): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (names.includes(readFileSync(`/proc/${entry}/comm`, "utf8").trim())) pids.push(Number(entry));
    } catch {}
  }
  return pids;
}

function affinityOf(pid: number): string | null {
  const out = Bun.spawnSync(["taskset", "-pc", String(pid)], { stderr: "ignore" });
  return out.exitCode === 0 ? (/:\s*(\S+)\s*$/.exec(out.stdout.toString())?.[1] ?? null) : null;
}

function setAffinity(pid: number, cpus: string): boolean {
  return Bun.spawnSync(["taskset", "-a", "-pc", cpus, String(pid)], { stdout: "ignore", stderr: "ignore" }).exitCode === 0;
}

export interface ServicesPinned {
  /** What the run's report says about them. */
  description: string;
  restore(): void;
}

/**
 * Pins nats-server and PostgreSQL (every process of each) to `cpu` until `restore`.
 * @example const pinned = pinServices(LOAD_CPU); try { … } finally { pinned.restore(); }
 */
export function pinServices(cpu: number): ServicesPinned {
  const before = new Map<number, string>();
  for (const pid of processesNamed(["nats-server", "postgres"])) {
    const affinity = affinityOf(pid);
    if (affinity !== null && setAffinity(pid, String(cpu))) before.set(pid, affinity);
  }
  return {
    description:
      before.size > 0
        ? `nats-server and PostgreSQL (${before.size} processes, children inheriting) pinned to CPU ${cpu} for the run, as if they were other machines`
        : "nats-server and PostgreSQL not found on this machine (or not ours to pin): not pinned",
    restore: () => {
      for (const [pid, affinity] of before) setAffinity(pid, affinity);
    },
  };
}
