import { expect, test } from "bun:test";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { Counter, Histogram, Registry } from "prom-client";
import { BoundCounter, BoundHistogram, OVERFLOW_LABEL, SERIES_MAX } from "./bound.ts";

const BOUNDS = [0.01, 0.1, 1];

test("bound series read exactly as prom-client's for the same increments and observations", async () => {
  const registry = new Registry();
  const counter = new Counter({ name: "c_total", help: "Cs, \\ and\nlines.", labelNames: ["model", "backend"], registers: [registry] });
  const histogram = new Histogram({ name: "h_seconds", help: "Hs.", labelNames: ["model"], buckets: BOUNDS, registers: [registry] });
  const boundCounter = new BoundCounter("c_total", "Cs, \\ and\nlines.", ["model", "backend"]);
  const boundHistogram = new BoundHistogram("h_seconds", "Hs.", ["model"], BOUNDS);
  // A label value an operator may write: quotes, a backslash, a new line.
  const models = ["gpt-4o-mini", 'odd "name" \\ with\nline'];
  const values = [0, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 100];
  for (const [i, model] of models.entries()) {
    const cell = boundCounter.bind({ model, backend: "sim" });
    const series = boundHistogram.bind({ model });
    for (const value of values.slice(i)) {
      counter.inc({ model, backend: "sim" }, 3);
      cell.value += 3;
      histogram.observe({ model }, value);
      boundHistogram.observe(series, value);
    }
  }
  boundCounter.bind({ model: "never", backend: "sim" }); // bound, never added to: not written, as prom-client
  const bound = parsePrometheusTextFormat(`${boundCounter.exposition()}\n${boundHistogram.exposition()}`);
  const theirs = parsePrometheusTextFormat(await registry.metrics());
  const byName = (families: typeof bound) => families.sort((a, b) => a.name.localeCompare(b.name));
  expect(byName(bound)).toEqual(byName(theirs));
});

test("binding looks the labels up once: the cell a request adds to is the series written", () => {
  const counter = new BoundCounter("c_total", "Cs.", ["model"]);
  const cell = counter.bind({ model: "m" });
  expect(counter.bind({ model: "m" })).toBe(cell);
  cell.value += 2;
  expect(counter.exposition()).toContain('c_total{model="m"} 2\n');
});

test("past SERIES_MAX label sets, new ones share one overflow series", () => {
  const counter = new BoundCounter("c_total", "Cs.", ["model", "backend"]);
  for (let i = 0; i < SERIES_MAX; i++) counter.bind({ model: `m${i}`, backend: "b" }).value++;
  const past = counter.bind({ model: "one more", backend: "b" });
  expect(counter.bind({ model: "and another", backend: "c" })).toBe(past);
  past.value += 2;
  expect(counter.series.size).toBe(SERIES_MAX + 1);
  expect(counter.exposition()).toContain(`c_total{model="${OVERFLOW_LABEL}",backend="${OVERFLOW_LABEL}"} 2\n`);
});
