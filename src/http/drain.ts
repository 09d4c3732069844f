/**
 * Graceful stop of the HTTP server: the listening socket closes at once (a load balancer, or a
 * client, sees connection refused and goes to another node before sending a byte), requests in
 * flight, streams included, finish within `drainMsMax`; whatever is still open then is closed.
 */
import type { Server } from "bun";
import type { Logger } from "../log.ts";

export async function drainHttp(server: Server<unknown>, drainMsMax: number, log: Logger): Promise<void> {
  const inFlight = server.pendingRequests;
  const drained = server.stop(false).then(() => true);
  const done = await Promise.race([drained, Bun.sleep(drainMsMax).then(() => false)]);
  if (!done) {
    log("warn", "drain_timed_out", { drainMsMax, pending: server.pendingRequests });
    await server.stop(true);
  } else if (inFlight > 0) {
    log("info", "drained", { requests: inFlight });
  }
}
