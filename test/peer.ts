/**
 * HTTP requests from a chosen loopback source address (127.0.0.0/8 is all loopback on Linux), so
 * tests can be many clients: Bun's fetch cannot pick its source address, node:http's
 * `localAddress` can. The gateway sees the address as the TCP peer's.
 */
import http from "node:http";

export interface PeerReply {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** Every `set-cookie`, each as `name=value` (attributes dropped). */
  cookies: string[];
  body: any;
}

export function peerRequest(
  url: string,
  options: { from: string; method?: string; headers?: Record<string, string>; body?: unknown },
): Promise<PeerReply> {
  const target = new URL(url);
  const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
  return new Promise((resolve, reject) => {
    const request = http.request(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname + target.search,
        method: options.method ?? "GET",
        localAddress: options.from,
        headers: { ...(payload ? { "content-type": "application/json" } : {}), ...options.headers },
      },
      (response) => {
        let text = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => (text += chunk));
        response.on("end", () => {
          let body: any = text;
          try {
            body = JSON.parse(text);
          } catch {}
          const cookies = (response.headers["set-cookie"] ?? []).map((c) => c.split(";")[0]!);
          resolve({ status: response.statusCode ?? 0, headers: response.headers, cookies, body });
        });
      },
    );
    request.on("error", reject);
    request.end(payload);
  });
}
