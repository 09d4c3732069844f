import { expect, jest, test } from "bun:test";
import type { PoolSnapshot } from "../../actors/protocol.ts";
import { LocalBus } from "../bus/local.ts";
import { liveRoutes } from "../http/live/route.ts";
import { adminGuard } from "../http/admin/guard.ts";
import type { GatewayDeps } from "../admission/deps.ts";
import type { OperatorStore } from "../operators/store.ts";

/** The admin guard with ADMIN_TOKEN only (no database: no operator token is presented here). */
const tokenGuard = (adminToken: string) => adminGuard({ env: { ADMIN_TOKEN: adminToken } } as GatewayDeps, {} as OperatorStore);
import { silentLogger } from "../log.ts";
import { LiveHub, liveViewSchema, mergeSnapshots } from "./live.ts";
import type { Sampler } from "./snapshot.ts";

const backend = (over: Partial<PoolSnapshot["backends"][number]> = {}): PoolSnapshot["backends"][number] => ({
  model: "m",
  backend: "gpu-1",
  region: "in-country",
  inFlight: 1,
  concurrencyLimit: 32,
  ttftEwmaMs: 100,
  tpotEwmaMs: null,
  requestsPerS: 1,
  tokensPerS: 10,
  errorRate: 0,
  breaker: "closed",
  quotaShare: null,
  ...over,
});

const snapshot = (node: string, over: Partial<PoolSnapshot> = {}): PoolSnapshot => ({
  node,
  atMs: 1_000,
  intervalMs: 1_000,
  backends: [backend()],
  models: [{ model: "m", requestsPerS: 1, errorsPerS: 0, tokensPerS: 10, spendMicroPerS: 100, ttftMs: 50 }],
  topKeys: [{ keyId: "key_1", name: "one", spentMicro: 5n }],
  ...over,
});

test("merging adds up rates and in-flight, weighs EWMAs by requests, and keeps the worst breaker", () => {
  const view = mergeSnapshots(
    [
      snapshot("n1"),
      snapshot("n2", {
        backends: [backend({ inFlight: 3, requestsPerS: 3, ttftEwmaMs: 200, errorRate: 1, breaker: "open" })],
        models: [{ model: "m", requestsPerS: 3, errorsPerS: 1, tokensPerS: 30, spendMicroPerS: 300, ttftMs: 150 }],
        topKeys: [
          { keyId: "key_1", name: "one", spentMicro: 7n },
          { keyId: "key_2", name: "two", spentMicro: 20n },
        ],
      }),
    ],
    2_000,
  );
  expect(view.nodes.map((n) => n.node)).toEqual(["n1", "n2"]);
  expect(view.backends).toHaveLength(1);
  const b = view.backends[0]!;
  expect(b).toMatchObject({ inFlight: 4, requestsPerS: 4, tokensPerS: 20, breaker: "open", nodes: 2, concurrencyLimit: 64 });
  expect(b.ttftEwmaMs).toBeCloseTo(175, 5);
  expect(b.errorRate).toBeCloseTo(0.75, 5);
  expect(view.models[0]).toMatchObject({ requestsPerS: 4, errorsPerS: 1, tokensPerS: 40, spendMicroPerS: 400 });
  expect(view.models[0]!.ttftMs).toBeCloseTo(125, 5);
  expect(view.topKeys).toEqual([
    { keyId: "key_2", name: "two", spentMicro: 20n },
    { keyId: "key_1", name: "one", spentMicro: 12n },
  ]);
  expect(liveViewSchema.parse(view)).toEqual(view);
});

test("the hub publishes its node's snapshots, merges other nodes', and drops nodes that fell silent", async () => {
  const bus = new LocalBus();
  const sampler = { sample: () => snapshot("self") } as unknown as Sampler;
  const published: string[] = [];
  const hub = new LiveHub({ bus, subject: "t.v1.metrics.pools", sampler, log: silentLogger, intervalMs: 50, staleMs: 300 });
  const { POOL_SNAPSHOTS } = await import("../../actors/protocol.ts");
  bus.subscribe(POOL_SNAPSHOTS, "t.v1.metrics.pools", (s) => published.push(s.node));
  // Bun's fake timers drive the hub's interval and its staleness clock (performance.now) alike;
  // the bus delivers on microtasks, which they leave alone.
  jest.useFakeTimers();
  try {
    hub.start();
    bus.publish(POOL_SNAPSHOTS, "t.v1.metrics.pools", snapshot("other"));
    await Promise.resolve(); // "other" arrives at time 0
    jest.advanceTimersByTime(150); // three ticks
    await Promise.resolve();
    expect(published).toContain("self");
    expect(hub.current().nodes.map((n) => n.node)).toEqual(["other", "self"]);
    jest.advanceTimersByTime(100); // 250 ms since "other" spoke: not yet stale
    expect(hub.current().nodes.map((n) => n.node)).toEqual(["other", "self"]);
    jest.advanceTimersByTime(100); // 350 ms: past staleMs 300
    expect(hub.current().nodes.map((n) => n.node)).toEqual(["self"]);
  } finally {
    hub.stop();
    jest.useRealTimers();
  }
  await bus.close();
});

test("/admin/pools/live needs the admin token and streams views as SSE", async () => {
  const bus = new LocalBus();
  const sampler = { sample: () => snapshot("self") } as unknown as Sampler;
  const hub = new LiveHub({ bus, subject: "t.v1.metrics.pools", sampler, log: silentLogger, intervalMs: 50 });
  hub.start();
  const routes = liveRoutes(hub, tokenGuard("admin-token-0123456789"));
  const refused = await routes.handle(new Request("http://localhost/admin/pools/live"));
  expect(refused.status).toBe(401);
  expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("admin_unauthorized");

  const controller = new AbortController();
  const reply = await routes.handle(
    new Request("http://localhost/admin/pools/live", {
      headers: { authorization: "Bearer admin-token-0123456789" },
      signal: controller.signal,
    }),
  );
  expect(reply.status).toBe(200);
  expect(reply.headers.get("content-type")).toBe("text/event-stream");
  const reader = reply.body!.getReader();
  let text = "";
  while ((text.match(/event: pools/g) ?? []).length < 3) text += new TextDecoder().decode((await reader.read()).value);
  const events = text.split("\n\n").filter((e) => e.startsWith("event: pools"));
  const last = liveViewSchema.parse(JSON.parse(events[2]!.split("data: ")[1]!));
  expect(last.nodes.map((n) => n.node)).toEqual(["self"]);
  expect(last.topKeys[0]!.spentMicro).toBe(5n);
  expect(hub.listenerCount).toBe(1);
  await reader.cancel();
  expect(hub.listenerCount).toBe(0); // a listener that leaves is forgotten
  hub.stop();
  await bus.close();
});

test("the dashboard page and its files are served; other names are not", async () => {
  const hub = new LiveHub({ bus: new LocalBus(), subject: "s", sampler: {} as Sampler, log: silentLogger });
  const routes = liveRoutes(hub, tokenGuard("admin-token-0123456789"));
  const page = await routes.handle(new Request("http://localhost/admin/dashboard"));
  expect(page.headers.get("content-type")).toContain("text/html");
  const html = await page.text();
  expect(html).toContain("/admin/dashboard/dashboard.js");
  expect(html).not.toMatch(/https?:\/\//); // nothing from a CDN
  expect((await routes.handle(new Request("http://localhost/admin/dashboard/dashboard.js"))).headers.get("content-type")).toContain(
    "javascript",
  );
  expect((await routes.handle(new Request("http://localhost/admin/dashboard/dashboard.css"))).status).toBe(200);
  expect((await routes.handle(new Request("http://localhost/admin/dashboard/..%2Fdeps.ts"))).status).toBe(404);
});
