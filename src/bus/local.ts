/**
 * The in-process bus: the embedded default. Requests are direct calls to the registered handler;
 * events are delivered to every subscriber of the exact subject on the next microtask.
 */
import { runTask } from "../background.ts";
import { silentLogger, type Logger } from "../log.ts";
import { BusError, type Bus, type GatherOptions, type Handler, type Rpc, type Topic, type Unsubscribe } from "./bus.ts";

export class LocalBus implements Bus {
  readonly kind = "local" as const;
  private readonly handlers = new Map<string, Handler<unknown, unknown>>();
  private readonly gatherers = new Map<string, Set<Handler<unknown, unknown>>>();
  private readonly subscribers = new Map<string, Set<(msg: unknown) => void>>();
  private closed = false;

  /** `log`: where a subscriber that throws is reported (it is counted either way). */
  constructor(private readonly log: Logger = silentLogger) {}

  async request<Req, Res>(rpc: Rpc<Req, Res>, subject: string, msg: Req): Promise<Res> {
    if (this.closed) throw new BusError("closed", "the bus is closed");
    const handler = this.handlers.get(subject) as Handler<Req, Res> | undefined;
    if (!handler) throw new BusError("no_responders", `nothing serves ${subject} (${rpc.name})`);
    return handler(msg);
  }

  /** Every server of the subject in this process: their replies (a failing one left out). */
  async gather<Req, Res>(_rpc: Rpc<Req, Res>, subject: string, msg: Req, _options?: GatherOptions<Res>): Promise<Res[]> {
    if (this.closed) throw new BusError("closed", "the bus is closed");
    const handlers = [...(this.gatherers.get(subject) ?? [])] as Handler<Req, Res>[];
    const replies = await Promise.allSettled(handlers.map(async (handler) => handler(msg)));
    return replies.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  }

  serveGather<Req, Res>(_rpc: Rpc<Req, Res>, subject: string, handler: Handler<Req, Res>): Unsubscribe {
    const set = this.gatherers.get(subject) ?? new Set();
    set.add(handler as Handler<unknown, unknown>);
    this.gatherers.set(subject, set);
    return () => set.delete(handler as Handler<unknown, unknown>);
  }

  serve<Req, Res>(_rpc: Rpc<Req, Res>, subject: string, handler: Handler<Req, Res>): Unsubscribe {
    if (this.handlers.has(subject)) throw new Error(`${subject} is already served in this process`);
    this.handlers.set(subject, handler as Handler<unknown, unknown>);
    return () => {
      if (this.handlers.get(subject) === handler) this.handlers.delete(subject);
    };
  }

  publish<T>(_topic: Topic<T>, subject: string, msg: T): void {
    const set = this.subscribers.get(subject);
    if (!set || this.closed) return;
    for (const subscriber of set) queueMicrotask(() => runTask("bus_event", this.log, () => subscriber(msg)));
  }

  subscribe<T>(_topic: Topic<T>, subject: string, handler: (msg: T) => void): Unsubscribe {
    const set = this.subscribers.get(subject) ?? new Set();
    set.add(handler as (msg: unknown) => void);
    this.subscribers.set(subject, set);
    return () => set.delete(handler as (msg: unknown) => void);
  }

  async flush(): Promise<void> {}

  async close(): Promise<void> {
    this.closed = true;
    this.handlers.clear();
    this.gatherers.clear();
    this.subscribers.clear();
  }
}
