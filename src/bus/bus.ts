/**
 * The Bus: how actors talk. Two implementations, NATS (many nodes) and in-process (one node),
 * behind one interface. Both deliver a request to a handler in this process by a direct call:
 * no serialisation, no broker hop. Only when the handler lives on another node does a message
 * cross NATS, as JSON validated by the Rpc's zod schemas on receipt (bigints travel as strings).
 */
import type { z } from "zod";

/** A request/reply protocol: what is sent and what comes back, each with its schema. */
export interface Rpc<Req, Res> {
  name: string;
  request: z.ZodType<Req, unknown>;
  reply: z.ZodType<Res, unknown>;
  /** The request as it is sent to another process, when it differs from the value (a field kept for older nodes). */
  wire?: (request: Req) => unknown;
}

/** A one-way message kind (events, statistics). */
export interface Topic<T> {
  name: string;
  schema: z.ZodType<T, unknown>;
}

export type Handler<Req, Res> = (msg: Req) => Promise<Res> | Res;
export type Unsubscribe = () => void;

export interface RequestOptions {
  /** Bound on the wait for a remote reply. */
  timeoutMs?: number;
}

export interface GatherOptions<Res> {
  /** Bound on the wait for every reply: what arrived by then is returned. */
  timeoutMs: number;
  /** True once the replies so far are all that is wanted: the gather ends early. */
  enough: (replies: Res[]) => boolean;
}

/** Replies one gather takes at most, whatever `enough` says (a cluster has far fewer nodes). */
export const GATHER_REPLIES_MAX = 256;

export interface Bus {
  readonly kind: "local" | "nats";
  request<Req, Res>(rpc: Rpc<Req, Res>, subject: string, msg: Req, options?: RequestOptions): Promise<Res>;
  /**
   * Asks every server of `subject` (serveGather; this process's too) and returns
   * the replies that arrived within `timeoutMs`, or until `enough`; a bad reply is left out.
   */
  gather<Req, Res>(rpc: Rpc<Req, Res>, subject: string, msg: Req, options: GatherOptions<Res>): Promise<Res[]>;
  /** Answers gathers on a subject; unlike `serve`, any number of servers in one process may answer one subject. */
  serveGather<Req, Res>(rpc: Rpc<Req, Res>, subject: string, handler: Handler<Req, Res>): Unsubscribe;
  /** Serves a subject; `queue` shares it between nodes (one of them answers each request). */
  serve<Req, Res>(rpc: Rpc<Req, Res>, subject: string, handler: Handler<Req, Res>, options?: { queue?: string }): Unsubscribe;
  publish<T>(topic: Topic<T>, subject: string, msg: T): void;
  subscribe<T>(topic: Topic<T>, subject: string, handler: (msg: T) => void): Unsubscribe;
  /** Resolves once the broker has every subscription made so far: requests from other connections reach them. */
  flush(): Promise<void>;
  close(): Promise<void>;
}

export const REQUEST_TIMEOUT_MS_DEFAULT = 5_000;

export type BusErrorReason = "no_responders" | "timeout" | "remote_error" | "bad_reply" | "closed";

export class BusError extends Error {
  constructor(
    readonly reason: BusErrorReason,
    message: string,
  ) {
    super(message);
  }
}

export { encodeJson } from "../json.ts";
