import { expect, test } from "bun:test";
import { fail } from "../../errors.ts";
import { decideEnd, type StreamEnding } from "./ending.ts";

const usage = { input: 10, output: 5 };
const base: StreamEnding = { clientGone: false, withheld: false, finished: false, failure: null, reported: null };
const broke = fail("upstream_error", "broke off");

test.each([
  [
    "finished with a report",
    { finished: true, reported: usage },
    { end: "done", status: 200, reply: "done", output: "report", last: "done" },
  ],
  ["finished without a report: our count", { finished: true }, { end: "done", status: 200, reply: "done", output: "meter", last: "done" }],
  [
    "an upstream failure: billed what was delivered",
    { failure: broke, reported: usage },
    { end: "failed", status: 502, reply: "failed", output: "meter", last: "error" },
  ],
  [
    "cut at the hold",
    { withheld: true, reported: usage },
    { end: "length_cut", status: 200, reply: "abandoned", output: "meter", last: "cut" },
  ],
  [
    "client gone, upstream finished in the drain",
    { clientGone: true, finished: true, reported: usage },
    { end: "client_gone", status: 499, reply: "done", output: "report", last: null },
  ],
  [
    "client gone, the upstream finished without a report: everything it sent is counted",
    { clientGone: true, finished: true },
    { end: "client_gone", status: 499, reply: "done", output: "count_sent", last: null },
  ],
  [
    "client gone, the upstream cut unfinished: billed the cut's count, never the hold",
    { clientGone: true, reported: usage },
    { end: "client_gone", status: 499, reply: "abandoned", output: "cut", last: null },
  ],
  [
    "client gone wins over a cut and a failure",
    { clientGone: true, withheld: true, failure: broke },
    { end: "client_gone", status: 499, reply: "abandoned", output: "cut", last: null },
  ],
  [
    "a cut wins over a failure",
    { withheld: true, failure: broke },
    { end: "length_cut", status: 200, reply: "abandoned", output: "meter", last: "cut" },
  ],
] as const)("%s", (_, ending, decision) => {
  expect(decideEnd({ ...base, ...ending })).toEqual(decision);
});
