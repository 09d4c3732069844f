/**
 * Child processes of a benchmark run: each one pinned to a CPU with `taskset`, its output kept
 * (a bounded tail) for error messages, and every one of them killed when the run ends, whether
 * it ends well, throws, or is interrupted. `installExitHandlers` must run before the first spawn.
 */
import type { Subprocess } from "bun";
import type { z } from "zod";

/** CPU of the load generators and the simulator; the server under test gets the other one. */
export const LOAD_CPU = 0;
export const SERVER_CPU = 1;
export const PINNING = `load generator (wrk, SSE client), simulator and this runner on CPU ${LOAD_CPU}; gateway or proxy under test on CPU ${SERVER_CPU} (taskset before exec: every thread it starts, the embedded database's worker included, stays there)`;

const outputTailBytesMax = 16 * 1024;
const stopGraceMsMax = 5_000;
const readyPollMs = 50;

export interface Child {
  readonly label: string;
  readonly proc: Subprocess<"ignore", "pipe", "pipe">;
  /** The last bytes the process wrote to stdout and stderr. */
  output(): string;
  /** SIGTERM, then SIGKILL after a grace period; resolves once the process is gone. */
  stop(): Promise<void>;
}

const live = new Set<Child>();
/** Short-lived load generators (wrk, the SSE client): killed with the servers. */
const loads = new Set<Subprocess>();
/** Temp folders and databases to remove if the run is interrupted. */
const cleanups = new Set<() => Promise<void> | void>();
const cleanupMsMax = 5_000;

function killAllNow(): void {
  for (const child of live) child.proc.kill("SIGKILL");
  for (const proc of loads) proc.kill("SIGKILL");
  live.clear();
  loads.clear();
}

/** Registers `cleanup` to run if the run is interrupted; returns a function that unregisters it. */
export function onInterrupt(cleanup: () => Promise<void> | void): () => void {
  cleanups.add(cleanup);
  return () => cleanups.delete(cleanup);
}

const interruption = new AbortController();
/** Aborted on SIGINT/SIGTERM/SIGHUP: the run must not go on, nor report a half-measured run. */
export const interruptedSignal: AbortSignal = interruption.signal;

async function interrupted(code: number): Promise<never> {
  interruption.abort(new Error("interrupted"));
  killAllNow();
  const all = Promise.allSettled([...cleanups].map(async (cleanup) => cleanup()));
  await Promise.race([all, Bun.sleep(cleanupMsMax)]);
  process.exit(code);
}

let handlersInstalled = false;

/** Kills every child on exit, on SIGINT/SIGTERM and on an uncaught error. */
export function installExitHandlers(): void {
  if (handlersInstalled) return;
  handlersInstalled = true;
  process.on("exit", killAllNow);
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.once(signal, () => {
      console.error(`\nbench: ${signal}, stopping children`);
      void interrupted(130);
    });
  }
  process.on("uncaughtException", (error) => {
    console.error("bench: uncaught", error);
    void interrupted(1);
  });
}

/** Pins the runner itself (all its threads) to the load CPU. */
export function pinSelf(): void {
  Bun.spawnSync(["taskset", "-a", "-cp", String(LOAD_CPU), String(process.pid)], { stdout: "ignore", stderr: "ignore" });
}

async function keepTail(stream: ReadableStream<Uint8Array>, append: (text: string) => void): Promise<void> {
  const decoder = new TextDecoder();
  for await (const chunk of stream) append(decoder.decode(chunk, { stream: true }));
}

export interface SpawnOptions {
  label: string;
  cpu: number;
  cmd: string[];
  env?: Record<string, string | undefined>;
}

/**
 * Starts `cmd` under `taskset -c <cpu>` (taskset execs, so the pid is the command's own).
 * @example const sim = spawnPinned({ label: "sim", cpu: LOAD_CPU, cmd: ["bun", "run", "src/sim/main.ts"] });
 */
export function spawnPinned(options: SpawnOptions): Child {
  const proc = Bun.spawn(["taskset", "-c", String(options.cpu), ...options.cmd], {
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    env: options.env ?? process.env,
  });
  let tail = "";
  const append = (text: string) => {
    tail = (tail + text).slice(-outputTailBytesMax);
  };
  void keepTail(proc.stdout, append).catch(() => {});
  void keepTail(proc.stderr, append).catch(() => {});
  const child: Child = {
    label: options.label,
    proc,
    output: () => tail,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill("SIGTERM");
        const timer = setTimeout(() => proc.kill("SIGKILL"), stopGraceMsMax);
        await proc.exited;
        clearTimeout(timer);
      }
      live.delete(child);
    },
  };
  live.add(child);
  return child;
}

/**
 * Runs a load generator to its end and returns its stdout; killed after `killAfterMs` and with
 * the run. Throws with its output when it exits non-zero.
 */
export async function runLoad(label: string, cmd: string[], killAfterMs: number): Promise<string> {
  const proc = Bun.spawn(cmd, { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  loads.add(proc);
  const timer = setTimeout(() => proc.kill("SIGKILL"), killAfterMs);
  try {
    const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    if (code !== 0) throw new Error(`${label} exited with code ${code}: ${stderr.trim() || stdout.trim()}`);
    return stdout;
  } finally {
    clearTimeout(timer);
    loads.delete(proc);
  }
}

/**
 * Runs a load generator that prints its figures as its last JSON line, and returns them parsed by `schema`.
 * @example const figures = await runLoadFigures({ label: "mix-load", cmd, killAfterMs: 60_000, schema });
 */
export async function runLoadFigures<Schema extends z.ZodType>(options: {
  label: string;
  cmd: string[];
  killAfterMs: number;
  schema: Schema;
}): Promise<z.infer<Schema>> {
  const stdout = await runLoad(options.label, options.cmd, options.killAfterMs);
  const line = stdout.split("\n").findLast((l) => l.startsWith("{"));
  if (!line) throw new Error(`${options.label} printed no figures:\n${stdout}`);
  return options.schema.parse(JSON.parse(line));
}

/**
 * A benchmark's whole run: children killed at its end (and on a signal or an uncaught error),
 * the runner pinned to the load CPU, a watchdog that interrupts it after `runSMax` seconds, and
 * an interrupted run left to the signal handler (which cleans up, then exits).
 * @example await runBenchmark({ name: "bench:mix", runSMax: 600 }, async () => { … });
 */
export async function runBenchmark(options: { name: string; runSMax: number }, body: () => Promise<void>): Promise<void> {
  installExitHandlers();
  pinSelf();
  const watchdog = setTimeout(() => {
    console.error(`${options.name}: still running after ${options.runSMax} s, giving up`);
    process.kill(process.pid, "SIGTERM");
  }, options.runSMax * 1000);
  watchdog.unref();
  try {
    await body();
  } catch (error) {
    if (!interruptedSignal.aborted) throw error;
    await new Promise<never>(() => {});
  } finally {
    await stopAll();
    clearTimeout(watchdog);
  }
}

/** Stops every child still running (the `finally` of a run). */
export async function stopAll(): Promise<void> {
  await Promise.all([...live].map((child) => child.stop()));
}

/** Polls `url` until it answers 2xx; fails early if the child exits, late after `timeoutMs`. */
export async function waitReady(child: Child, url: string, timeoutMs = 20_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (child.proc.exitCode !== null) {
      throw new Error(`${child.label} exited with code ${child.proc.exitCode} before it was ready:\n${child.output()}`);
    }
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(1_000) });
      await response.arrayBuffer();
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    await Bun.sleep(readyPollMs);
  }
  throw new Error(`${child.label} not ready at ${url} after ${timeoutMs} ms:\n${child.output()}`);
}

/** A port nobody listens on right now (taken and released at once; the race is harmless here). */
export function freePort(): number {
  const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = server.port;
  server.stop(true);
  return port;
}
