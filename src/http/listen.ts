/**
 * How the gateway listens: one process per port, and a connection kept as long as the gateway
 * itself may leave a client waiting in silence.
 *
 * Elysia's Bun adapter asks for `reusePort: true` and `idleTimeout: 30` unless told otherwise.
 * With reusePort a second gateway on a busy port starts without a word and the kernel splits the
 * connections between the two (each with its own keys and data), so it is off but for the workers
 * of one host (WORKERS), which are nodes of one cluster (src/workers.ts). Bun closes a
 * connection that sent and received nothing for `idleTimeout` seconds, a request still being
 * answered included (Bun today skips that for a request whose body has arrived; nothing here
 * relies on it), so the idle timeout is set above the longest silence the gateway can cause.
 */
import type { Env } from "../config.ts";
import { IMAGE_DOWNLOAD_MS_MAX } from "../operations/images/images.ts";

/** Bun refuses a larger idle timeout (and 0 would never close an idle connection). */
export const BUN_IDLE_TIMEOUT_S_MAX = 255;
/** Room for admission, the ledger and writing the reply around the waits counted below. */
export const IDLE_MARGIN_S = 10;

/**
 * Seconds a connection may be silent: a non-streamed reply waits up to UPSTREAM_TIMEOUT_MS for
 * the upstream (all tries), then up to IMAGE_DOWNLOAD_MS_MAX for image downloads; a stream sends
 * a keep-alive every STREAM_KEEPALIVE_MS. Config bounds both settings so this fits Bun's maximum.
 * @example idleTimeoutS({ UPSTREAM_TIMEOUT_MS: 120_000, STREAM_KEEPALIVE_MS: 15_000 }) // 160
 */
export function idleTimeoutS(env: Pick<Env, "UPSTREAM_TIMEOUT_MS" | "STREAM_KEEPALIVE_MS">): number {
  const silenceMs = Math.max(env.UPSTREAM_TIMEOUT_MS + IMAGE_DOWNLOAD_MS_MAX, env.STREAM_KEEPALIVE_MS);
  const seconds = Math.ceil(silenceMs / 1000) + IDLE_MARGIN_S;
  if (seconds > BUN_IDLE_TIMEOUT_S_MAX)
    throw new Error(`idle timeout ${seconds} s is above Bun's ${BUN_IDLE_TIMEOUT_S_MAX} s: config.ts must bound the waits`);
  return seconds;
}

/**
 * The options for Elysia's `listen`, every default that matters stated. A worker of several
 * (WORKERS) shares its port with its siblings on purpose; its supervisor checked that no other
 * process holds it.
 */
export function listenOptions(env: Env) {
  return {
    port: env.PORT,
    hostname: env.HOST,
    reusePort: env.DARVAZE_WORKER_INDEX !== undefined,
    idleTimeout: idleTimeoutS(env),
    // Our own limit answers 413 in the OpenAI shape; Bun's must sit above it.
    maxRequestBodySize: env.BODY_BYTES_MAX + 1024 * 1024,
  };
}

export class PortInUseError extends Error {
  constructor(
    readonly hostname: string,
    readonly port: number,
  ) {
    super(`port ${port} on ${hostname} is in use (another gateway?); stop it or set PORT to a free port`);
  }
}

/** Whether an error is the operating system's "address in use". */
export function isAddressInUse(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === "EADDRINUSE";
}

/**
 * Fails fast when the port is taken, before the gateway opens its database or joins a cluster:
 * binds it (no reusePort) and lets go at once. The real listen still reports a port lost in between.
 */
export function ensurePortFree(hostname: string, port: number): void {
  if (port === 0) return;
  try {
    Bun.listen({ hostname, port, socket: { data() {} } }).stop(true);
  } catch (error) {
    if (isAddressInUse(error)) throw new PortInUseError(hostname, port);
    throw error;
  }
}
