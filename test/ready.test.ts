/**
 * /health and /ready on a whole gateway (embedded, or on the services the environment names):
 * ready once started, not ready from the moment it begins to stop.
 */
import { expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { READY_CACHE_MS } from "../src/http/health.ts";
import { SETUP_MS_MAX, startTestGateway } from "./helpers.ts";
import { untilValue } from "./until.ts";
import { NATS_SERVER_BIN, startNatsWithAuthorization } from "./natsServer.ts";

test(
  "a started gateway is alive and ready; once stopping, it is not ready and says it drains",
  async () => {
    const t = await startTestGateway();
    let stopped = false;
    try {
      expect(await (await fetch(`${t.url}/health`)).text()).toBe("ok");
      const ready = await fetch(`${t.url}/ready`);
      const body = (await ready.json()) as any;
      expect(ready.status).toBe(200);
      expect(body).toMatchObject({ status: "ready", reasons: [] });
      expect(body.checks.bus.kind).toBe(t.gw.deps.bus.kind);
      expect(body.checks.database.ok).toBe(true);
      const stopping = t.stop();
      stopped = true;
      expect(t.gw.health.draining).toBe(true); // set before the first await of stop()
      await stopping;
      const after = await t.gw.health.ready();
      expect(after.status).toBe("not_ready");
      expect(after.reasons).toContain("draining: the node is shutting down");
    } finally {
      if (!stopped) await t.stop();
    }
  },
  SETUP_MS_MAX,
);

const withNatsServer = existsSync(NATS_SERVER_BIN) ? test : test.skip;
if (!existsSync(NATS_SERVER_BIN)) process.stderr.write(`\n*** SKIPPED the NATS readiness test: no ${NATS_SERVER_BIN} ***\n\n`);

withNatsServer(
  "NATS going away makes the node not ready, with that reason; back when NATS is",
  async () => {
    const nats = await startNatsWithAuthorization(`{ token: "ready-token-0123456789" }`);
    const t = await startTestGateway({ NATS_URL: nats.url, NATS_TOKEN: "ready-token-0123456789", DATABASE_URL: undefined });
    const ready = async () => {
      const response = await fetch(`${t.url}/ready`);
      return { status: response.status, body: (await response.json()) as { reasons: string[] } };
    };
    const readyWith = (status: number) =>
      untilValue(ready, {
        accept: (now) => now.status === status,
        msMax: 50_000,
        what: `/ready answering ${status}`,
        pollMs: READY_CACHE_MS / 2,
      });
    try {
      expect((await ready()).status).toBe(200);
      await nats.kill();
      const down = await readyWith(503);
      expect(down.status).toBe(503);
      expect(down.body.reasons).toContain("bus: NATS is disconnected (reconnecting)");
      await nats.restart();
      expect((await readyWith(200)).status).toBe(200);
    } finally {
      await t.stop();
      await nats.stop();
    }
  },
  SETUP_MS_MAX,
);
