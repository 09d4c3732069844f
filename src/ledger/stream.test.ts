/**
 * The usage log's publish wait, without NATS: the overdue mark against a stall of the node's own
 * event loop (an acknowledgement that reached the node's socket during the stall counts; here a
 * real socket's data, written before the stall and read after it, as a JetStream ack would be),
 * and the disconnect watch each wait sets and must stop.
 */
import { expect, test } from "bun:test";
import type { JetStreamClient, JetStreamManager } from "nats";
import type { Db } from "../db/client.ts";
import { silentLogger } from "../log.ts";
import { JetStreamUsageSink, USAGE_ACK_OVERDUE_MS } from "./stream.ts";
import { usageRecord } from "../../test/usageRecords.ts";

test("a stall of the node's own event loop past the overdue bound is not a hung usage log: the acknowledgement that arrived meanwhile counts", async () => {
  // Each publish writes a byte to a local socket and is acknowledged when its peer reads it.
  const acks: (() => void)[] = [];
  const server = Bun.listen({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      data: (_socket, data) => {
        for (let byte = 0; byte < data.length; byte++) acks.shift()?.();
      },
    },
  });
  const client = await Bun.connect({ hostname: "127.0.0.1", port: server.port, socket: { data() {} } });
  let seq = 0;
  const js = {
    publish: () =>
      new Promise((resolve) => {
        acks.push(() => resolve({ seq: ++seq }));
        client.write("a");
      }),
  } as unknown as JetStreamClient;
  const direct: string[] = [];
  const sink = new JetStreamUsageSink(js, {} as JetStreamManager, "USAGE", "usage", {} as Db, silentLogger, {
    direct: { write: async (records) => void direct.push(...records.map((r) => r.requestId)) },
    whenDisconnected: () => () => {},
    connected: () => true,
    answering: async () => {},
  });
  sink.confirmations.stop();
  try {
    for (let round = 0; round < 3; round++) {
      const writing = sink.write([usageRecord({ requestId: `req_${round}`, accountId: "acct_s", holdId: "hold_s", billedMicro: 1n })]);
      // A turn that runs long (a collection, a burst of requests): the acknowledgement arrives during it.
      const until = performance.now() + USAGE_ACK_OVERDUE_MS * 2;
      while (performance.now() < until) {}
      await writing;
    }
    expect(seq).toBe(3);
    expect(direct).toEqual([]);
    expect(sink.full).toBe(false);
  } finally {
    client.end();
    server.stop(true);
  }
});

test("every publish stops its disconnect watch when its wait ends: acknowledged, failed or overdue", async () => {
  // A watch left in place keeps the publishing call's frame, the message's text with it, until NATS
  // next disconnects: one per publish grew a node by every usage message it sent.
  const watching = new Set<() => void>();
  const answers: ("ack" | "fail" | "never")[] = ["ack", "fail", "ack", "never"];
  let seq = 0;
  const js = {
    publish: () => {
      const answer = answers.shift();
      if (answer === "ack") return Promise.resolve({ seq: ++seq });
      if (answer === "fail") return Promise.reject(new Error("no responders"));
      return new Promise(() => {});
    },
  } as unknown as JetStreamClient;
  const direct: string[] = [];
  const sink = new JetStreamUsageSink(js, {} as JetStreamManager, "USAGE", "usage", {} as Db, silentLogger, {
    direct: { write: async (records) => void direct.push(...records.map((r) => r.requestId)) },
    whenDisconnected: (watcher) => {
      watching.add(watcher);
      return () => void watching.delete(watcher);
    },
    connected: () => true,
    answering: () => new Promise<void>(() => {}),
  });
  sink.confirmations.stop();
  const record = (n: number) => usageRecord({ requestId: `req_w${n}`, accountId: "acct_w", holdId: "hold_w", billedMicro: 1n });
  for (let n = 0; n < 4; n++) {
    await sink.write([record(n)]);
    expect(watching.size).toBe(0);
  }
  expect(seq).toBe(2);
  // The failed and the overdue publish went straight to the ledger.
  expect(direct).toEqual(["req_w1", "req_w3"]);
});
