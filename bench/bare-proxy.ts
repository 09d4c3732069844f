/**
 * The yardstick for the gateway: the least a Bun proxy can do. Parse the JSON body, fetch the
 * upstream, relay the reply (a stream as a stream). No auth, no accounting, no validation.
 * `GET /stall` answers the longest event-loop stall since the previous call, read by the
 * gateway's own monitor (src/metrics/loop.ts), so the bench reports the yardstick's stalls too.
 *
 *   UPSTREAM_URL=http://127.0.0.1:9100 PORT=9200 bun run bench/bare-proxy.ts
 */
import { startLoopMonitor } from "../src/metrics/loop.ts";

const upstreamUrl = process.env.UPSTREAM_URL ?? "http://127.0.0.1:9100";
const port = Number(process.env.PORT ?? 9200);

const loop = startLoopMonitor();

const server = Bun.serve({
  port,
  hostname: "127.0.0.1",
  idleTimeout: 0,
  async fetch(req) {
    if (req.method === "GET" && req.url.endsWith("/stall")) return Response.json(loop.read());
    const body = (await req.json()) as { stream?: boolean };
    const upstream = await fetch(upstreamUrl + new URL(req.url).pathname, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: req.headers.get("authorization") ?? "" },
      body: JSON.stringify(body),
    });
    const headers = { "content-type": upstream.headers.get("content-type") ?? "application/json" };
    if (body.stream === true) return new Response(upstream.body, { status: upstream.status, headers });
    return new Response(await upstream.arrayBuffer(), { status: upstream.status, headers });
  },
});

console.log(`bare proxy listening on http://127.0.0.1:${server.port} -> ${upstreamUrl}`);
process.once("SIGTERM", () => {
  server.stop(true);
  process.exit(0);
});
