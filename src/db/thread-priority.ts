/**
 * The scheduling priority of one thread. Linux keeps a nice value per thread, so the embedded
 * database's worker can run below the request thread on the same core: a request that arrives
 * while a usage batch commits is served at once instead of waiting out the worker's time slice
 * (measured, one connection, both threads on one core, request after request: p99 6.2 ms at the
 * same priority, 2.6 ms with the worker at nice 10; bench/RESULTS.md).
 */
import { dlopen, FFIType } from "bun:ffi";

/** The range Linux accepts; higher is a lower priority. Only root may go below the current value. */
export const NICE_MIN = -20;
export const NICE_MAX = 19;
const PRIO_PROCESS = 0;

function libc() {
  return dlopen("libc.so.6", {
    setpriority: { args: [FFIType.i32, FFIType.u32, FFIType.i32], returns: FFIType.i32 },
  });
}

/**
 * Sets the calling thread's nice value (clamped to NICE_MIN…NICE_MAX); false where that is not
 * possible (not Linux, no glibc), and the thread then keeps the process's priority.
 * @example setThreadNice(10) // in a worker: the worker runs below the request thread
 */
export function setThreadNice(nice: number): boolean {
  if (process.platform !== "linux") return false;
  const value = Math.min(NICE_MAX, Math.max(NICE_MIN, Math.trunc(nice)));
  try {
    const lib = libc();
    try {
      // who = 0 names the calling thread on Linux, not the whole process.
      return lib.symbols.setpriority(PRIO_PROCESS, 0, value) === 0;
    } finally {
      lib.close();
    }
  } catch {
    return false;
  }
}
