/**
 * The NATS bus: actors on many nodes. A subject served in this process is still a direct call
 * (local delivery); otherwise the request crosses NATS as JSON in an envelope `{r}` (reply) or
 * `{e}` (the handler failed), and both sides validate with the Rpc's schemas.
 */
import { readFileSync } from "node:fs";
import {
  connect,
  credsAuthenticator,
  nkeyAuthenticator,
  type ConnectionOptions,
  type Msg,
  type NatsConnection,
  RequestStrategy,
  type Subscription,
} from "nats";
import { runTask } from "../background.ts";
import type { NatsSettings } from "../config.ts";
import { silentLogger, type Logger } from "../log.ts";
import {
  BusError,
  encodeJson,
  GATHER_REPLIES_MAX,
  REQUEST_TIMEOUT_MS_DEFAULT,
  type Bus,
  type GatherOptions,
  type Handler,
  type RequestOptions,
  type Rpc,
  type Topic,
  type Unsubscribe,
} from "./bus.ts";

/** A server that never finishes the handshake (e.g. it refused our TLS certificate without a word) fails the start after this. */
export const NATS_CONNECT_TIMEOUT_MS = 5_000;
/**
 * The client pings its server this often and takes it for dead after NATS_PINGS_OUT_MAX pings
 * unanswered: a hung server (stopped, its host unreachable without a reset) is left for another
 * of the cluster within seconds, not the client's default of minutes.
 */
export const NATS_PING_INTERVAL_MS = 2_000;
export const NATS_PINGS_OUT_MAX = 2;
/** Between pings of `answering` that failed (the connection was lost meanwhile). */
const NATS_PING_RETRY_MS = 250;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export class NatsBus implements Bus {
  readonly kind = "nats" as const;
  private readonly local = new Map<string, Handler<unknown, unknown>>();
  /** False between a disconnect and the reconnect that follows it. */
  connected = true;
  /** Told once at the next disconnect (whenDisconnected); each removes itself when its wait ends. */
  private readonly disconnectWatchers = new Set<() => void>();

  private constructor(
    readonly nc: NatsConnection,
    private readonly log: Logger,
  ) {
    runTask("nats_status", log, async () => {
      for await (const status of nc.status()) {
        if (status.type === "disconnect" || status.type === "reconnecting") {
          this.connected = false;
          const watchers = [...this.disconnectWatchers];
          this.disconnectWatchers.clear();
          for (const watcher of watchers) watcher();
        } else if (status.type === "reconnect") {
          this.connected = true;
        }
      }
    });
  }

  /**
   * Calls `watcher` once at the next disconnect (on the next microtask while disconnected) and
   * returns what stops the watch: a wait on NATS (a publish) races a disconnect rather than its own
   * timeout. A wait must stop its watch when it ends: a watch left behind is kept, with everything
   * its function holds, until NATS next disconnects (one per publish grew a node by the size of
   * every usage message it sent: bench/RESULTS.md).
   * @example const stop = bus.whenDisconnected(() => gone.resolve()); try { … } finally { stop(); }
   */
  whenDisconnected(watcher: () => void): () => void {
    if (!this.connected) {
      queueMicrotask(watcher);
      return () => {};
    }
    this.disconnectWatchers.add(watcher);
    return () => void this.disconnectWatchers.delete(watcher);
  }

  /**
   * Resolves once the server answers a ping (through a reconnect when one is needed), or the
   * connection is closed: a usage log found hung is trusted again only then.
   */
  async answering(): Promise<void> {
    while (!this.nc.isClosed()) {
      try {
        await this.nc.flush();
        return;
      } catch {
        await Bun.sleep(NATS_PING_RETRY_MS);
      }
    }
  }

  /** `log`: where a failed reply or a subscriber that throws is reported (it is counted either way). */
  static async connect(settings: NatsSettings | string, name: string, log: Logger = silentLogger): Promise<NatsBus> {
    return new NatsBus(await connectNats(settings, name), log);
  }

  async request<Req, Res>(rpc: Rpc<Req, Res>, subject: string, msg: Req, options: RequestOptions = {}): Promise<Res> {
    const handler = this.local.get(subject) as Handler<Req, Res> | undefined;
    if (handler) return handler(msg);
    let reply: Msg;
    try {
      reply = await this.nc.request(subject, encoder.encode(encodeJson(rpc.wire ? rpc.wire(msg) : msg)), {
        timeout: options.timeoutMs ?? REQUEST_TIMEOUT_MS_DEFAULT,
      });
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code === "503") throw new BusError("no_responders", `nothing serves ${subject} (${rpc.name})`);
      if (code === "TIMEOUT") throw new BusError("timeout", `${rpc.name} on ${subject} timed out`);
      throw new BusError("closed", `${rpc.name} on ${subject} failed: ${(error as Error).message}`);
    }
    return decodeReply(rpc, reply.data);
  }

  async gather<Req, Res>(rpc: Rpc<Req, Res>, subject: string, msg: Req, options: GatherOptions<Res>): Promise<Res[]> {
    const replies: Res[] = [];
    try {
      const messages = await this.nc.requestMany(subject, encoder.encode(encodeJson(rpc.wire ? rpc.wire(msg) : msg)), {
        strategy: RequestStrategy.Count,
        maxMessages: GATHER_REPLIES_MAX,
        maxWait: options.timeoutMs,
      });
      for await (const message of messages) {
        try {
          replies.push(decodeReply(rpc, message.data));
        } catch {
          continue; // a node answering garbage or an error is one node fewer, not a failed gather
        }
        if (options.enough(replies)) break;
      }
    } catch (error) {
      if ((error as { code?: string }).code !== "503")
        throw new BusError("closed", `${rpc.name} on ${subject} failed: ${(error as Error).message}`);
    }
    return replies;
  }

  serveGather<Req, Res>(rpc: Rpc<Req, Res>, subject: string, handler: Handler<Req, Res>): Unsubscribe {
    const sub = this.nc.subscribe(subject, {
      callback: (err, msg) => {
        if (err || !msg.reply) return;
        runTask("bus_reply", this.log, async () => msg.respond(encoder.encode(await answer(rpc, handler, msg.data))));
      },
    });
    return () => sub.unsubscribe();
  }

  serve<Req, Res>(rpc: Rpc<Req, Res>, subject: string, handler: Handler<Req, Res>, options: { queue?: string } = {}): Unsubscribe {
    if (this.local.has(subject)) throw new Error(`${subject} is already served in this process`);
    this.local.set(subject, handler as Handler<unknown, unknown>);
    const sub = this.nc.subscribe(subject, {
      queue: options.queue,
      callback: (err, msg) => {
        if (err || !msg.reply) return;
        // The requester may be gone and the connection closing: a reply that cannot be sent is counted, not raised.
        runTask("bus_reply", this.log, async () => msg.respond(encoder.encode(await answer(rpc, handler, msg.data))));
      },
    });
    return () => {
      this.local.delete(subject);
      sub.unsubscribe();
    };
  }

  publish<T>(_topic: Topic<T>, subject: string, msg: T): void {
    if (!this.nc.isClosed()) this.nc.publish(subject, encoder.encode(encodeJson(msg)));
  }

  subscribe<T>(topic: Topic<T>, subject: string, handler: (msg: T) => void): Unsubscribe {
    const sub: Subscription = this.nc.subscribe(subject, {
      callback: (err, msg) => {
        if (err) return;
        const parsed = topic.schema.safeParse(safeJson(msg.data));
        if (parsed.success) runTask("bus_event", this.log, () => handler(parsed.data));
      },
    });
    return () => sub.unsubscribe();
  }

  async flush(): Promise<void> {
    await this.nc.flush();
  }

  async close(): Promise<void> {
    this.local.clear();
    if (!this.nc.isClosed()) await this.nc.drain();
  }
}

/**
 * The connection options for NATS settings (a bare URL: no credentials, TLS if the server asks).
 * Files (creds, CA, certificate) are read here, so a rotated file takes effect at the next start.
 */
export function natsConnectionOptions(settings: NatsSettings | string, name: string): ConnectionOptions {
  const s: NatsSettings = typeof settings === "string" ? { servers: settings.split(","), auth: null, tls: null } : settings;
  const auth = s.auth;
  const options: ConnectionOptions = {
    servers: s.servers,
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    timeout: NATS_CONNECT_TIMEOUT_MS,
    pingInterval: NATS_PING_INTERVAL_MS,
    maxPingOut: NATS_PINGS_OUT_MAX,
  };
  if (auth && "user" in auth) Object.assign(options, { user: auth.user, pass: auth.pass });
  else if (auth && "token" in auth) options.token = auth.token;
  else if (auth && "nkeySeed" in auth) options.authenticator = nkeyAuthenticator(encoder.encode(auth.nkeySeed));
  else if (auth && "credsFile" in auth) options.authenticator = credsAuthenticator(readFileSync(auth.credsFile));
  if (s.tls) options.tls = { ...s.tls };
  return options;
}

/** Opens a NATS connection with the node's settings; every NATS connection of the gateway goes through here. */
export async function connectNats(settings: NatsSettings | string, name: string): Promise<NatsConnection> {
  const options = natsConnectionOptions(settings, name);
  try {
    return await connect(options);
  } catch (error) {
    const servers = (options.servers as string[]).join(",");
    throw new Error(`cannot connect to NATS at ${servers}: ${(error as Error).message}`, { cause: error });
  }
}

function safeJson(data: Uint8Array): unknown {
  try {
    return JSON.parse(decoder.decode(data));
  } catch {
    return undefined;
  }
}

async function answer<Req, Res>(rpc: Rpc<Req, Res>, handler: Handler<Req, Res>, data: Uint8Array): Promise<string> {
  const parsed = rpc.request.safeParse(safeJson(data));
  if (!parsed.success) return encodeJson({ e: `bad ${rpc.name} request: ${parsed.error.issues[0]?.message ?? "invalid"}` });
  try {
    return encodeJson({ r: await handler(parsed.data) });
  } catch (error) {
    return encodeJson({ e: (error as Error).message });
  }
}

function decodeReply<Req, Res>(rpc: Rpc<Req, Res>, data: Uint8Array): Res {
  const envelope = safeJson(data) as { r?: unknown; e?: unknown } | undefined;
  if (envelope && typeof envelope.e === "string") throw new BusError("remote_error", envelope.e);
  const parsed = rpc.reply.safeParse(envelope?.r);
  if (!parsed.success) throw new BusError("bad_reply", `bad ${rpc.name} reply: ${parsed.error.issues[0]?.message ?? "invalid"}`);
  return parsed.data;
}
