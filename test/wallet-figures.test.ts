/**
 * The wallet as the customer means it (docs/billing.md, "The wallet's figures"): the account's
 * own leases hold its money for speed, so `/v1/credits` and the console's overview tell what is
 * held by requests running now (`in_flight`) and what can be spent (`spendable`: the available
 * balance plus the leases' uncommitted room), from every node's purse, asked over the bus.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { z } from "zod";
import type { Rpc } from "../src/bus/bus.ts";
import { LocalBus } from "../src/bus/local.ts";
import { NatsBus } from "../src/bus/nats.ts";
import { randomBase62 } from "../src/ids.ts";
import { SETUP_MS_MAX, services, startTestGateway, type TestGateway } from "./helpers.ts";
import { describeWith } from "./services.ts";
import { until } from "./until.ts";

const ECHO: Rpc<{ n: number }, { node: string }> = {
  name: "test.echo",
  request: z.object({ n: z.number() }),
  reply: z.object({ node: z.string() }),
};

describe("Bus.gather on the in-process bus", () => {
  test("every server's reply in this process, or none", async () => {
    const bus = new LocalBus();
    expect(await bus.gather(ECHO, "s", { n: 1 }, { timeoutMs: 100, enough: () => false })).toEqual([]);
    bus.serveGather(ECHO, "s", () => ({ node: "one" }));
    bus.serveGather(ECHO, "s", () => ({ node: "two" })); // two hosts in one process (tests run several)
    expect(await bus.gather(ECHO, "s", { n: 1 }, { timeoutMs: 100, enough: () => false })).toEqual([{ node: "one" }, { node: "two" }]);
  });
});

describeWith(["nats"], "Bus.gather on NATS", (it) => {
  it("every node that serves the subject answers; enough ends the wait early, the bound ends it otherwise", async () => {
    const subject = `t${randomBase62(10)}.gather`;
    const buses = await Promise.all(["a", "b", "c"].map((name) => NatsBus.connect(services.natsUrl!, `gather-${name}`)));
    try {
      buses[0]!.serveGather(ECHO, subject, () => ({ node: "a" }));
      buses[1]!.serveGather(ECHO, subject, () => ({ node: "b" }));
      await Promise.all(buses.map((bus) => bus.flush()));
      const started = performance.now();
      const early = await buses[2]!.gather(ECHO, subject, { n: 1 }, { timeoutMs: 20_000, enough: (r) => r.length === 2 });
      expect(early.map((r) => r.node).sort()).toEqual(["a", "b"]);
      expect(performance.now() - started).toBeLessThan(10_000); // ended by `enough`, not by the 20 s bound
      // A server in the asking process answers too; with no `enough`, the bound ends the wait with what came.
      const all = await buses[0]!.gather(ECHO, subject, { n: 2 }, { timeoutMs: 300, enough: () => false });
      expect(all.map((r) => r.node).sort()).toEqual(["a", "b"]);
      expect(await buses[2]!.gather(ECHO, `${subject}.none`, { n: 3 }, { timeoutMs: 300, enough: () => false })).toEqual([]);
    } finally {
      await Promise.all(buses.map((bus) => bus.close()));
    }
  }, 30_000);
});

describe("/v1/credits and the console's overview", () => {
  let t: TestGateway;
  let key: string;

  beforeAll(async () => {
    t = await startTestGateway();
    ({ key } = await t.fundedKey(5_000));
  }, SETUP_MS_MAX);
  afterAll(async () => t?.stop(), SETUP_MS_MAX);

  async function credits(): Promise<Record<string, string | boolean>> {
    const response = await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${key}` } });
    expect(response.status).toBe(200);
    return (await response.json()) as Record<string, string | boolean>;
  }

  function chat(stream: boolean, signal?: AbortSignal): Promise<Response> {
    return fetch(`${t.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello" }], max_tokens: 64, stream }),
      signal,
    });
  }

  test("after a request the account's lease holds its money, and all of it is spendable", async () => {
    expect((await chat(false)).status).toBe(200);
    const wallet = await credits();
    // The lease: held from the wallet, so `available` is what is left beside it…
    expect(BigInt(wallet.held_micro_toman as string)).toBeGreaterThan(0n);
    expect(BigInt(wallet.available_micro_toman as string)).toBeLessThan(BigInt(wallet.balance_micro_toman as string));
    // …but nothing runs now, so every toman of the balance can be spent.
    expect(wallet.in_flight_micro_toman).toBe("0");
    expect(wallet.spendable_micro_toman).toBe(wallet.balance_micro_toman);
    expect(wallet.approximate).toBe(false);
    expect(wallet.spendable_toman).toBe(wallet.balance_toman);
  });

  test("a request running now holds its reserve: in flight, and not spendable", async () => {
    Object.assign(t.sim!.options, { itlMs: 200, outputTokens: 40 });
    const leave = new AbortController();
    try {
      const stream = await chat(true, leave.signal);
      expect(stream.status).toBe(200);
      const wallet = await credits();
      const inFlight = BigInt(wallet.in_flight_micro_toman as string);
      expect(inFlight).toBeGreaterThan(0n);
      expect(BigInt(wallet.spendable_micro_toman as string)).toBe(BigInt(wallet.balance_micro_toman as string) - inFlight);
      await stream.body?.cancel();
    } finally {
      leave.abort();
      Object.assign(t.sim!.options, { itlMs: 0, outputTokens: 16 });
    }
    // Once it has ended, its reserve is no longer in flight.
    // Looked at once a second: `/v1/credits` is free within FREE_RPM.
    await until(async () => (await credits()).in_flight_micro_toman === "0", { msMax: 50_000, pollMs: 1_000 });
  }, 90_000);
});
