/**
 * An account's operator limits are ceilings its keys cannot escape (src/keys/accountLimits.ts):
 * concurrency and rpm summed over its keys, its number of live keys, bounded limit fields. On
 * one gateway in this process (embedded, or a one-node cluster on the suite's services), and on
 * two gateway processes where one account's keys are admitted by both nodes.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ACCOUNT_CONCURRENCY_MAX_DEFAULT, ACCOUNT_KEYS_MAX_DEFAULT } from "../src/keys/accountLimits.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway, until } from "./helpers.ts";
import { nodeAdmin, useTwoNodes } from "./processes.ts";
import { describeWith } from "./services.ts";

/** Long enough that every request of a burst is in flight while the others are admitted. */
const SLOW_TTFT_MS = 3_000;

async function chat(url: string, key: string): Promise<{ status: number; code: string | null; message: string }> {
  const reply = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello" }], max_tokens: 8 }),
  });
  const body = (await reply.json()) as { error?: { code?: string; message?: string } };
  return { status: reply.status, code: body.error?.code ?? null, message: body.error?.message ?? "" };
}

/** An account with `keys` keys of concurrency 5, after `limits` are set on it. */
async function accountWithKeys(t: TestGateway, limits: Record<string, unknown>, keys = 2) {
  const funded = await t.fundedKey(100_000, { concurrency_max: 5 });
  const patched = await t.admin("PATCH", `/admin/accounts/${funded.accountId}`, { limits });
  expect(patched.status).toBe(200);
  const more = [];
  for (let i = 1; i < keys; i++) {
    const created = await t.admin("POST", `/admin/accounts/${funded.accountId}/keys`, { name: `k${i}`, concurrency_max: 5 });
    expect(created.status).toBe(201);
    more.push(created.body.key as string);
  }
  return { accountId: funded.accountId, keys: [funded.key, ...more] };
}

describe("account limits on one gateway", () => {
  let t: TestGateway;
  beforeAll(async () => {
    t = await startTestGateway();
  }, SETUP_MS_MAX);
  afterAll(async () => {
    await t?.stop();
  }, SETUP_MS_MAX);

  test("an account shows its limits, each its named default until the operator sets it; null goes back to the default", async () => {
    const { accountId } = await t.fundedKey(1_000);
    const shown = await t.admin("GET", `/admin/accounts/${accountId}`);
    expect(shown.body.limits).toMatchObject({ concurrency_max: ACCOUNT_CONCURRENCY_MAX_DEFAULT, keys_max: ACCOUNT_KEYS_MAX_DEFAULT });
    const set = await t.admin("PATCH", `/admin/accounts/${accountId}`, { limits: { concurrency_max: 7, rpm: 100 } });
    expect(set.body.limits).toMatchObject({ concurrency_max: 7, rpm: 100 });
    const reset = await t.admin("PATCH", `/admin/accounts/${accountId}`, { limits: { concurrency_max: null } });
    expect(reset.body.limits).toMatchObject({ concurrency_max: ACCOUNT_CONCURRENCY_MAX_DEFAULT, rpm: 100 });
    const unknown = await t.admin("PATCH", `/admin/accounts/${accountId}`, { limits: { concurency_max: 3 } });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.message).toContain("concurency_max");
    expect((await t.admin("PATCH", "/admin/accounts/acc_missing", { limits: { rpm: 5 } })).status).toBe(404);
  });

  test("two keys share the account's concurrency: the third request in flight is refused naming the account", async () => {
    const { keys } = await accountWithKeys(t, { concurrency_max: 2 });
    t.sim!.options.ttftMs = SLOW_TTFT_MS;
    try {
      const slow = [chat(t.url, keys[0]!), chat(t.url, keys[1]!)];
      await until(() => inFlightTotal(t) === 2, 10_000);
      const third = await chat(t.url, keys[1]!);
      expect(third.status).toBe(429);
      expect(third.code).toBe("concurrency_limit_exceeded");
      expect(third.message).toContain("for this account (limit 2)");
      expect((await Promise.all(slow)).map((r) => r.status)).toEqual([200, 200]);
    } finally {
      t.sim!.options.ttftMs = 0;
    }
    expect((await chat(t.url, keys[0]!)).status).toBe(200); // the slots came back
  }, 30_000);

  test("two keys share the account's rpm", async () => {
    const { keys } = await accountWithKeys(t, { rpm: 3 });
    const statuses = [];
    for (const key of [keys[0]!, keys[1]!, keys[0]!]) statuses.push((await chat(t.url, key)).status);
    expect(statuses).toEqual([200, 200, 200]);
    const fourth = await chat(t.url, keys[1]!);
    expect(fourth.status).toBe(429);
    expect(fourth.message).toContain("3 requests per minute for this account");
  }, 30_000);

  test("the key past keys_max is refused 409 key_limit_reached; a revoked key frees its place", async () => {
    const { accountId, keys } = await accountWithKeys(t, { keys_max: 2 });
    expect(keys).toHaveLength(2);
    const third = await t.admin("POST", `/admin/accounts/${accountId}/keys`, { name: "third" });
    expect(third.status).toBe(409);
    expect(third.body.error).toMatchObject({ code: "key_limit_reached", param: "keys_max" });
    expect(third.body.error.message).toContain("its limit of 2");
    const listed = await t.admin("GET", `/admin/accounts/${accountId}`);
    await t.admin("DELETE", `/admin/keys/${listed.body.keys[0].id}`);
    expect((await t.admin("POST", `/admin/accounts/${accountId}/keys`, { name: "third" })).status).toBe(201);
  });

  test("a key's tpm past its integer column is a 400 naming the field, not a 500", async () => {
    const { accountId } = await t.fundedKey(1_000);
    const huge = await t.admin("POST", `/admin/accounts/${accountId}/keys`, { name: "huge", tpm: 10_000_000_000 });
    expect(huge.status).toBe(400);
    expect(huge.body.error.param).toBe("tpm");
  });
});

/** Requests in flight on the gateway, over every key (the key host's gauge by class). */
function inFlightTotal(t: TestGateway): number {
  let total = 0;
  for (const n of t.gw.keyHost.inFlightByClass().values()) total += n;
  return total;
}

describeWith(["nats", "postgres"], "account limits on two gateway processes", (it) => {
  const cluster = useTwoNodes({ outputTokens: 4, ttftMs: SLOW_TTFT_MS });

  it("an account's concurrency holds over its keys on both nodes", async () => {
    const [one, two] = cluster.urls();
    const account = await nodeAdmin(one, "POST", "/admin/accounts", { name: "shared" });
    const accountId = account.body.id as string;
    await nodeAdmin(one, "POST", `/admin/accounts/${accountId}/topups`, { amount_toman: 100_000, reference: "shared-topup" });
    expect((await nodeAdmin(two, "PATCH", `/admin/accounts/${accountId}`, { limits: { concurrency_max: 2 } })).status).toBe(200);
    const keys: string[] = [];
    for (const name of ["a", "b"])
      keys.push((await nodeAdmin(one, "POST", `/admin/accounts/${accountId}/keys`, { name, concurrency_max: 5 })).body.key);
    // Two requests of each key at each node at once: without the account's limit all eight would run.
    const burst = [one, two].flatMap((url) => keys.flatMap((key) => [chat(url, key), chat(url, key)]));
    const replies = await Promise.all(burst);
    const ok = replies.filter((r) => r.status === 200).length;
    const refused = replies.filter((r) => r.status === 429);
    console.log(`account concurrency 2 over two nodes: ${ok} of ${replies.length} ran, ${refused.length} refused`);
    expect(ok).toBeGreaterThanOrEqual(1);
    expect(ok).toBeLessThanOrEqual(2);
    expect(refused.length).toBe(replies.length - ok);
    for (const r of refused) expect(r.message).toContain("for this account (limit 2)");
  }, 60_000);
});
