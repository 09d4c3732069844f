/**
 * NatsBus.whenDisconnected against a nats-server of the test's own, killed: a watch in place is
 * told at the disconnect, a stopped one is not (a wait that ended must leave nothing behind), and
 * one set while disconnected is told at once.
 */
import { describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { NatsBus } from "../src/bus/nats.ts";
import { NATS_SERVER_BIN, OwnNats } from "./chaos/services.ts";
import { until } from "./until.ts";

const suite = existsSync(NATS_SERVER_BIN) ? describe : describe.skip;
if (!existsSync(NATS_SERVER_BIN)) process.stderr.write(`\n*** SKIPPED 1 test (the NATS disconnect watch): no ${NATS_SERVER_BIN} ***\n\n`);

suite("NatsBus.whenDisconnected", () => {
  test("a watch in place is told at the disconnect, a stopped one never; one set while disconnected at once", async () => {
    const nats = await OwnNats.start();
    const bus = await NatsBus.connect(nats.url, "disconnect-watch-test");
    try {
      let told = 0;
      let stoppedTold = 0;
      bus.whenDisconnected(() => told++);
      const stop = bus.whenDisconnected(() => stoppedTold++);
      stop();
      await nats.kill();
      await until(() => told === 1);
      expect(bus.connected).toBe(false);
      let toldAtOnce = false;
      bus.whenDisconnected(() => {
        toldAtOnce = true;
      });
      await until(() => toldAtOnce);
      expect(told).toBe(1);
      expect(stoppedTold).toBe(0);
    } finally {
      await bus.close().catch(() => {});
      await nats.stop();
    }
  }, 30_000);
});
