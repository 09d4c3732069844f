/**
 * A node opens its port only once its first request can be served without waiting on start-up's
 * work: on NATS + PostgreSQL, the quiet periods of the partitions it took at start are over
 * (an owner grows no share within one, so a key's first request would wait out the rest of it).
 */
import { expect } from "bun:test";
import { KEY_PARTITIONS } from "../actors/subjects.ts";
import { SETUP_MS_MAX, startTestGateway } from "./helpers.ts";
import { describeWith } from "./services.ts";

describeWith(["nats", "postgres"], "a one-node cluster's start", (it) => {
  it(
    "the port opens once the quiet periods of the partitions taken at start are over",
    async () => {
      const t = await startTestGateway();
      try {
        const cluster = t.gw.cluster!;
        expect(cluster.partitionsOwned).toBe(KEY_PARTITIONS);
        expect(cluster.quietLeftMs()).toBeLessThanOrEqual(0);
      } finally {
        await t.stop();
      }
    },
    SETUP_MS_MAX,
  );
});
