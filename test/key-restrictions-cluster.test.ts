/**
 * Key restrictions across two gateway processes on one NATS and one PostgreSQL: a key restricted
 * to one model is refused another model on both nodes, and a change of its allowlist made through
 * one node is applied by the other (the key-change event, as a revocation travels).
 */
import { expect } from "bun:test";
import { until } from "./helpers.ts";
import { nodeAdmin, useTwoNodes } from "./processes.ts";
import { describeWith } from "./services.ts";

/** How long the test waits for a change to reach the other node: a bound a busy machine keeps. */
const PROPAGATION_MS_MAX = 10_000;

describeWith(["nats", "postgres"], "key restrictions on two gateway processes", (it) => {
  const cluster = useTwoNodes({ outputTokens: 4 });

  it("a key allowed one model is refused another on both nodes; a change made on one node applies on the other", async () => {
    const [one, two] = cluster.urls();
    const account = await nodeAdmin(one, "POST", "/admin/accounts", { name: "restricted" });
    await nodeAdmin(one, "POST", `/admin/accounts/${account.body.id}/topups`, { amount_toman: 10_000, reference: "restricted-topup" });
    const created = await nodeAdmin(one, "POST", `/admin/accounts/${account.body.id}/keys`, {
      name: "k",
      allowed_models: ["gpt-4o-mini"],
    });
    const { key, id: keyId } = created.body as { key: string; id: string };
    const chat = async (url: string, model: string) => {
      const reply = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model, messages: [{ role: "user", content: "Hello" }], max_tokens: 8 }),
      });
      const body = (await reply.json()) as { error?: { code?: string } };
      return [reply.status, body.error?.code ?? null];
    };
    for (const url of [one, two]) {
      expect(await chat(url, "gpt-4o-mini")).toEqual([200, null]);
      expect(await chat(url, "deepseek-v3")).toEqual([403, "permission_denied"]);
    }

    // Allowed through node 1: node 2 follows without a restart.
    const widened = await nodeAdmin(one, "PATCH", `/admin/keys/${keyId}`, { allowed_models: ["gpt-4o-mini", "deepseek-v3"] });
    expect(widened.status).toBe(200);
    const startedMs = performance.now();
    await until(async () => (await chat(two, "deepseek-v3"))[0] === 200, PROPAGATION_MS_MAX);
    console.log(`key restrictions: node 2 applied node 1's change after ${Math.round(performance.now() - startedMs)} ms`);

    // Narrowed again through node 2: node 1 refuses.
    expect((await nodeAdmin(two, "PATCH", `/admin/keys/${keyId}`, { allowed_models: ["deepseek-v3"] })).status).toBe(200);
    await until(async () => (await chat(one, "gpt-4o-mini"))[0] === 403, PROPAGATION_MS_MAX);
    expect(await chat(one, "gpt-4o-mini")).toEqual([403, "permission_denied"]);
    expect(await chat(one, "deepseek-v3")).toEqual([200, null]);
  }, 60_000);
});
