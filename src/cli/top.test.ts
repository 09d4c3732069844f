import { expect, test } from "bun:test";
import type { LiveView } from "../metrics/live.ts";
import { EXIT } from "./exit.ts";
import { renderTop, runTop, sseData } from "./top.ts";

const backend = (name: string, over: Partial<LiveView["backends"][number]> = {}): LiveView["backends"][number] => ({
  model: "llama-3.3-70b-instruct",
  backend: name,
  region: "in-country",
  inFlight: 3,
  concurrencyLimit: 64,
  ttftEwmaMs: 412.5,
  tpotEwmaMs: null,
  requestsPerS: 12,
  tokensPerS: 480,
  errorRate: 0,
  breaker: "closed",
  quotaShare: null,
  nodes: 2,
  ...over,
});

const view: LiveView = {
  atMs: Date.UTC(2026, 0, 2, 3, 4, 5),
  nodes: [
    { node: "a", atMs: 0 },
    { node: "b", atMs: 0 },
  ],
  backends: [backend("gpu-1"), backend("gpu-2", { breaker: "open", inFlight: 0, requestsPerS: 0, tokensPerS: 0, errorRate: 1 })],
  models: [
    { model: "llama-3.3-70b-instruct", requestsPerS: 12, errorsPerS: 0.5, tokensPerS: 480, spendMicroPerS: 25_500_000, ttftMs: null },
  ],
  topKeys: [{ keyId: "key_1", name: "backend", spentMicro: 1_234_500_000n }],
};

test("renderTop shows nodes, backends (trouble first), models and top keys", () => {
  const screen = renderTop(view, { rows: 40, color: false });
  const lines = screen.split("\n");
  expect(lines[0]).toBe("darvaze top · 2 nodes · 03:04:05 UTC · 1 breaker not closed");
  const header = lines.findIndex((l) => l.startsWith("MODEL") && l.includes("BREAKER"));
  expect(lines[header + 1]).toContain("gpu-2");
  expect(lines[header + 1]).toContain("open");
  expect(lines[header + 1]).toContain("100%");
  expect(lines[header + 2]).toMatch(/gpu-1\s+closed\s+3\/64\s+413\s+-\s+480\s+12\.0\s+0%/);
  expect(screen).toMatch(/llama-3\.3-70b-instruct\s+12\.0\s+480\s+-\s+0\.500\s+25\.5/);
  expect(screen).toMatch(/key_1\s+backend\s+1234\.5/);
});

test("renderTop paints an open breaker red only with color, and cuts tables to the rows", () => {
  expect(renderTop(view, { color: true })).toContain("\x1b[31;1m");
  expect(renderTop(view, { color: false })).not.toContain("\x1b[");
  const many = { ...view, backends: Array.from({ length: 50 }, (_, i) => backend(`gpu-${i}`)) };
  const screen = renderTop(many, { rows: 20, color: false });
  expect(screen.split("\n").length).toBeLessThanOrEqual(20);
  expect(screen).toMatch(/… \d+ more/);
});

test("renderTop says when nothing has been seen yet", () => {
  const screen = renderTop({ atMs: 0, nodes: [], backends: [], models: [], topKeys: [] }, { rows: 30 });
  expect(screen.split("\n")[0]).toBe("darvaze top · 0 nodes · 00:00:00 UTC");
  expect(screen).toContain("(none yet)");
});

test("sseData yields the data of named events, across chunk boundaries", async () => {
  const text = 'event: pools\ndata: {"a":1}\n\n: comment\n\nevent: other\ndata: x\n\nevent: pools\ndata: {"a":2}\n\n';
  const bytes = new TextEncoder().encode(text);
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      for (let i = 0; i < bytes.length; i += 7) c.enqueue(bytes.slice(i, i + 7));
      c.close();
    },
  });
  const seen: string[] = [];
  for await (const data of sseData(body, "pools")) seen.push(data);
  expect(seen).toEqual(['{"a":1}', '{"a":2}']);
});

test("runTop: an unreachable gateway exits 3, naming it without its password", async () => {
  const closed = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("") });
  const port = closed.port;
  await closed.stop(true);
  const said: string[] = [];
  const io = { out: (t: string) => said.push(t), err: (t: string) => said.push(t) };
  const code = await runTop(
    { command: { kind: "top", once: true }, url: `http://op:s3cret@127.0.0.1:${port}`, token: "t", json: false },
    true,
    io,
  );
  expect(code).toBe(EXIT.unreachable);
  expect(said.join("\n")).toStartWith(`error: cannot reach the gateway at http://127.0.0.1:${port} (`);
  expect(said.join("\n")).not.toContain("s3cret");
});
