/**
 * A TCP proxy for faults between a node and its database: added latency (each chunk delivered
 * `latencyMs` after it arrived, in order), a stall (nothing delivered until released),
 * connection resets (every open connection cut at once) and a cut (resets, and every new
 * connection closed at once, as a database that is unreachable). Bounded: a direction buffers at most
 * PROXY_BUFFER_BYTES_MAX before the proxy stops reading its source.
 */
import type { Socket, TCPSocketListener } from "bun";

const PROXY_BUFFER_BYTES_MAX = 16 * 1024 * 1024;

interface Pipe {
  queue: { bytes: Uint8Array; dueMs: number }[];
  bytes: number;
  timer: ReturnType<typeof setTimeout> | null;
}

interface Link {
  client: Socket<Link>;
  upstream: Socket<Link> | null;
  toUpstream: Pipe;
  toClient: Pipe;
  closed: boolean;
}

const newPipe = (): Pipe => ({ queue: [], bytes: 0, timer: null });

export class FaultProxy {
  latencyMs = 0;
  private stalledNow = false;
  /** While set, every new connection is closed as soon as it opens. */
  private cutNow = false;
  private readonly links = new Set<Link>();
  /** Connections cut by `reset()`, for the report. */
  resets = 0;

  private constructor(private readonly listener: TCPSocketListener<Link>) {}

  static start(targetPort: number): FaultProxy {
    let proxy: FaultProxy;
    const listener = Bun.listen<Link>({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        open(client) {
          if (proxy.cutNow) {
            client.terminate();
            return;
          }
          const link: Link = { client, upstream: null, toUpstream: newPipe(), toClient: newPipe(), closed: false };
          client.data = link;
          proxy.links.add(link);
          Bun.connect<Link>({
            hostname: "127.0.0.1",
            port: targetPort,
            socket: {
              open(upstream) {
                upstream.data = link;
                link.upstream = upstream;
                proxy.pump(link, link.toUpstream, upstream);
              },
              data(_upstream, bytes) {
                proxy.enqueue(link, link.toClient, link.client, bytes);
              },
              drain(upstream) {
                proxy.pump(link, link.toUpstream, upstream);
              },
              close() {
                proxy.close(link);
              },
              error() {
                proxy.close(link);
              },
            },
          }).catch(() => proxy.close(link));
        },
        data(client, bytes) {
          const link = client.data;
          if (!link) return; // refused while cut
          proxy.enqueue(link, link.toUpstream, link.upstream, bytes);
        },
        drain(client) {
          proxy.pump(client.data, client.data.toClient, client);
        },
        close(client) {
          if (client.data) proxy.close(client.data);
        },
        error(client) {
          if (client.data) proxy.close(client.data);
        },
      },
    });
    proxy = new FaultProxy(listener);
    return proxy;
  }

  get port(): number {
    return this.listener.port;
  }

  get stalled(): boolean {
    return this.stalledNow;
  }

  set stalled(on: boolean) {
    this.stalledNow = on;
    if (!on) for (const link of this.links) this.pumpBoth(link);
  }

  get cut(): boolean {
    return this.cutNow;
  }

  /** On: every open connection is reset and every new one closed at once, until off. */
  set cut(on: boolean) {
    this.cutNow = on;
    if (on) this.reset();
  }

  /** Cuts every open connection (the node sees its database connections reset). */
  reset(): void {
    for (const link of [...this.links]) {
      this.resets++;
      link.client.terminate();
      link.upstream?.terminate();
      this.close(link);
    }
  }

  stop(): void {
    this.reset();
    this.listener.stop(true);
  }

  private pumpBoth(link: Link): void {
    if (link.upstream) this.pump(link, link.toUpstream, link.upstream);
    this.pump(link, link.toClient, link.client);
  }

  private enqueue(link: Link, pipe: Pipe, to: Socket<Link> | null, bytes: Uint8Array): void {
    if (link.closed) return;
    if (pipe.bytes + bytes.length > PROXY_BUFFER_BYTES_MAX) {
      // A runaway buffer: cut the connection rather than grow without bound.
      this.reset();
      return;
    }
    pipe.queue.push({ bytes: new Uint8Array(bytes), dueMs: performance.now() + this.latencyMs });
    pipe.bytes += bytes.length;
    if (to) this.pump(link, pipe, to);
  }

  private pump(link: Link, pipe: Pipe, to: Socket<Link>): void {
    while (!link.closed && !this.stalledNow && pipe.queue.length > 0) {
      const head = pipe.queue[0]!;
      const waitMs = head.dueMs - performance.now();
      if (waitMs > 0) {
        pipe.timer ??= setTimeout(() => {
          pipe.timer = null;
          this.pump(link, pipe, to);
        }, waitMs);
        return;
      }
      const written = to.write(head.bytes);
      pipe.bytes -= written;
      if (written < head.bytes.length) {
        head.bytes = head.bytes.subarray(written);
        return; // drain calls pump again
      }
      pipe.queue.shift();
    }
  }

  private close(link: Link): void {
    if (link.closed) return;
    link.closed = true;
    for (const pipe of [link.toUpstream, link.toClient]) if (pipe.timer) clearTimeout(pipe.timer);
    link.client.end();
    link.upstream?.end();
    this.links.delete(link);
  }
}
