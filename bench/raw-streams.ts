/**
 * Chat streams held open over raw sockets, for the benchmarks that read what a waiting stream
 * costs the gateway (bench/streams.ts, bench/stream-heap.ts): a socket costs this client little,
 * and each reply's status is noted from its first bytes, the rest read and dropped.
 */

/** Streams connected at once, so that opening thousands is not one burst of connects. */
const OPEN_BATCH = 200;

export interface RawStreams {
  /** How many replies began with each status ("200", "429", …). */
  readonly statuses: Map<string, number>;
  /** Streams whose reply has begun, whatever its status. */
  answered(): number;
  /** Streams answered 200. */
  ok(): number;
  close(): void;
}

/**
 * Opens `count` streams of a long story on `target`'s chat route.
 * @example const streams = await openRawStreams(gateway, 500); … streams.close();
 */
export async function openRawStreams(target: { url: string; key: string }, count: number): Promise<RawStreams> {
  const { hostname, port } = new URL(target.url);
  const body = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Tell a long story." }], stream: true });
  const request =
    `POST /v1/chat/completions HTTP/1.1\r\nHost: ${hostname}:${port}\r\nAuthorization: Bearer ${target.key}\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  const statuses = new Map<string, number>();
  const sockets: { end(): void }[] = [];
  const connect = async () => {
    let seen = false;
    const socket = await Bun.connect({
      hostname,
      port: Number(port),
      socket: {
        data(_, data) {
          if (seen) return;
          seen = true;
          // "HTTP/1.1 200 …": the status is the status line's 10th to 12th bytes.
          const status = data.toString("latin1", 9, 12);
          statuses.set(status, (statuses.get(status) ?? 0) + 1);
        },
      },
    });
    socket.write(request);
    sockets.push(socket);
  };
  for (let opened = 0; opened < count; opened += OPEN_BATCH) {
    await Promise.all(Array.from({ length: Math.min(OPEN_BATCH, count - opened) }, connect));
  }
  return {
    statuses,
    answered: () => [...statuses.values()].reduce((a, b) => a + b, 0),
    ok: () => statuses.get("200") ?? 0,
    close: () => {
      for (const socket of sockets.splice(0)) socket.end();
    },
  };
}
