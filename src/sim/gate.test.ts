import { expect, test } from "bun:test";
import { SimGate } from "./gate.ts";
import { startSimulator } from "./server.ts";
import { until } from "../../test/until.ts";

test("beyond its concurrency a request waits in arrival order, and leaves the queue when its caller gives up", async () => {
  let capacity: number | null = 1;
  const gate = new SimGate(() => capacity);
  const never = new AbortController().signal;
  expect(await gate.enter(never)).toBe(true);
  const order: number[] = [];
  const second = gate.enter(never).then((ok) => order.push(2) && ok);
  const quitter = new AbortController();
  const third = gate.enter(quitter.signal);
  const fourth = gate.enter(never).then((ok) => order.push(4) && ok);
  expect([gate.running, gate.waiting]).toEqual([1, 3]);
  quitter.abort();
  expect(await third).toBe(false);
  expect(gate.waiting).toBe(2);
  gate.leave();
  expect(await second).toBe(true);
  capacity = null; // raised at run time: the rest go at once
  gate.drain();
  expect(await fourth).toBe(true);
  expect(order).toEqual([2, 4]);
  expect([gate.running, gate.waiting]).toEqual([2, 0]);
});

test("a saturated simulator queues, gets slower, and says so in /metrics", async () => {
  const sim = await startSimulator({ concurrency: 2, ttftMs: 150 });
  try {
    const ask = () =>
      fetch(`${sim.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
      });
    const started = performance.now();
    const replies = Array.from({ length: 6 }, ask);
    // All six arrive: two run, four wait (watched until they have, not after a guessed pause).
    let metrics = "";
    const waiting = /^vllm:num_requests_waiting\{[^}]*\} 4$/m;
    await until(async () => waiting.test((metrics = await (await fetch(`${sim.url}/metrics`)).text())), 2_000);
    expect(metrics).toMatch(/^vllm:num_requests_running\{[^}]*\} 2$/m);
    expect(metrics).toMatch(/^vllm:num_requests_waiting\{[^}]*\} 4$/m);
    for (const reply of await Promise.all(replies)) expect(reply.status).toBe(200);
    // Three rounds of two at 150 ms each.
    expect(performance.now() - started).toBeGreaterThanOrEqual(440);
  } finally {
    await sim.stop();
  }
});
