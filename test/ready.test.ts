/**
 * /health and /ready on a whole gateway (embedded, or on the services the environment names):
 * ready once started, not ready from the moment it begins to stop.
 */
import { expect, test } from "bun:test";
import { SETUP_MS_MAX, startTestGateway } from "./helpers.ts";

test("a started gateway is alive and ready; once stopping, it is not ready and says it drains", async () => {
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
}, SETUP_MS_MAX);
