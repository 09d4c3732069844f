import { expect, test } from "bun:test";
import { Health, READY_DATABASE_MS_MAX, readyResponse, type ReadinessSources } from "./health.ts";

const healthy = (): ReadinessSources => ({
  db: { rows: async () => [{ "?column?": 1 }] as never[] },
  bus: { kind: "nats", connected: true },
  writer: { accepting: true, buffered: 3 },
});

async function probe(sources: ReadinessSources, draining = false) {
  const health = new Health(sources);
  health.draining = draining;
  const response = await readyResponse(health);
  return { status: response.status, body: (await response.json()) as any };
}

test("ready: 200 with every check ok", async () => {
  const { status, body } = await probe(healthy());
  expect(status).toBe(200);
  expect(body.status).toBe("ready");
  expect(body.reasons).toEqual([]);
  expect(body.checks).toMatchObject({
    database: { ok: true },
    bus: { ok: true, kind: "nats" },
    usage_writer: { ok: true, buffered: 3 },
    draining: { ok: true },
  });
  expect(body.error).toBeUndefined();
});

test("each reason makes a 503 that names it, in the wire's error shape", async () => {
  const failing = (code: string) =>
    Object.assign(new Error("Failed query: SELECT 1"), {
      cause: Object.assign(new Error("password authentication failed for user x"), { code }),
    });
  const cases: [string, ReadinessSources, boolean, string][] = [
    ["database refuses", { ...healthy(), db: { rows: () => Promise.reject(failing("57P03")) } }, false, "database: query failed (57P03)"],
    [
      "database unreachable",
      { ...healthy(), db: { rows: () => Promise.reject(Object.assign(new Error("connect"), { code: "ECONNREFUSED" })) } },
      false,
      "database: query failed (ECONNREFUSED)",
    ],
    [
      "database silent",
      { ...healthy(), db: { rows: () => new Promise(() => {}) } },
      false,
      `database: no answer within ${READY_DATABASE_MS_MAX} ms`,
    ],
    ["bus", { ...healthy(), bus: { kind: "nats", connected: false } }, false, "bus: NATS is disconnected (reconnecting)"],
    [
      "usage writer",
      { ...healthy(), writer: { accepting: false, buffered: 200_000 } },
      false,
      "usage_writer: usage records cannot be written",
    ],
    ["draining", healthy(), true, "draining: the node is shutting down"],
  ];
  for (const [name, sources, draining, reason] of cases) {
    const { status, body } = await probe(sources, draining);
    expect([name, status, body.status]).toEqual([name, 503, "not_ready"]);
    expect(body.reasons).toHaveLength(1);
    expect(body.reasons[0]).toStartWith(reason);
    expect(body.error).toMatchObject({ code: "service_unavailable", type: "api_error" });
    expect(body.error.message).toContain(reason);
    // No error text that could name a host or a user: codes only.
    expect(JSON.stringify(body)).not.toContain("password");
  }
}, 10_000);

test("the in-process bus is always connected; probes share one check", async () => {
  let queries = 0;
  const health = new Health({ ...healthy(), bus: { kind: "local" }, db: { rows: async () => (queries++, []) } });
  const results = await Promise.all(Array.from({ length: 50 }, () => health.ready()));
  expect(results.every((r) => r.status === "ready")).toBe(true);
  expect(queries).toBe(1);
});
