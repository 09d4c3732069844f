/**
 * The usage log's overdue mark against a stall of the node's own event loop: an acknowledgement
 * that reached the node's socket during the stall counts. The acknowledgement here is a real
 * socket's data, written before the stall and read after it, as a JetStream ack would be; no NATS.
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
    disconnected: () => new Promise<void>(() => {}),
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
