/**
 * Key restrictions through the admin API and the official clients: a key limited to some models
 * or to some client addresses is refused elsewhere with a 403 in each wire's error shape, and a
 * change of its lists reaches admission like a revocation does.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { SETUP_MS_MAX, startTestGateway, type TestGateway, until } from "./helpers.ts";

const HELLO = [{ role: "user" as const, content: "Hello" }];

let t: TestGateway;
beforeAll(async () => {
  t = await startTestGateway();
}, SETUP_MS_MAX);
afterAll(async () => t.stop(), SETUP_MS_MAX);

const openai = (key: string) => new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });

test("a key restricted to one model gets 403 for another, on both wires; lifting the list lets it through", async () => {
  const { key, keyId } = await t.fundedKey(1_000, { allowed_models: ["gpt-4o-mini"] });
  const client = openai(key);
  const served = await client.chat.completions.create({ model: "gpt-4o-mini", messages: HELLO, max_tokens: 2 });
  expect(served.choices).toHaveLength(1);
  const refused = await client.chat.completions.create({ model: "phi-4", messages: HELLO, max_tokens: 2 }).catch((e) => e);
  expect(refused).toBeInstanceOf(OpenAI.PermissionDeniedError);
  expect([refused.status, refused.code, refused.param]).toEqual([403, "permission_denied", "model"]);
  expect(refused.message).toContain("phi-4");
  const embeddings = await client.embeddings.create({ model: "text-embedding-3-small", input: "x" }).catch((e) => e);
  expect(embeddings).toBeInstanceOf(OpenAI.PermissionDeniedError);
  const anthropic = new Anthropic({ baseURL: t.url, apiKey: key, maxRetries: 0 });
  const messages = await anthropic.messages.create({ model: "claude-3-5-haiku", max_tokens: 2, messages: HELLO }).catch((e) => e);
  expect(messages).toBeInstanceOf(Anthropic.PermissionDeniedError);
  expect(messages.error.error.type).toBe("permission_error");

  const lifted = await t.admin("PATCH", `/admin/keys/${keyId}`, { allowed_models: null });
  expect([lifted.status, lifted.body.allowed_models]).toEqual([200, null]);
  await until(
    async () => (await client.chat.completions.create({ model: "phi-4", messages: HELLO, max_tokens: 2 }).catch(() => null)) !== null,
  );
});

test("a key restricted to a CIDR gets 403 from another address, and is served from its own", async () => {
  const { key, keyId } = await t.fundedKey(1_000, { allowed_ips: ["203.0.113.0/24", "2001:db8::/32"] });
  const client = openai(key);
  const refused = await client.chat.completions.create({ model: "gpt-4o-mini", messages: HELLO, max_tokens: 2 }).catch((e) => e);
  expect(refused).toBeInstanceOf(OpenAI.PermissionDeniedError);
  expect([refused.status, refused.code]).toEqual([403, "permission_denied"]);
  expect(refused.message).toContain("127.0.0.1");
  const keyInfo = await fetch(`${t.url}/v1/key`, { headers: { authorization: `Bearer ${key}` } });
  expect(keyInfo.status).toBe(403);

  const widened = await t.admin("PATCH", `/admin/keys/${keyId}`, { allowed_ips: ["203.0.113.0/24", "127.0.0.0/8"] });
  expect(widened.body.allowed_ips).toEqual(["203.0.113.0/24", "127.0.0.0/8"]);
  await until(
    async () => (await client.chat.completions.create({ model: "gpt-4o-mini", messages: HELLO, max_tokens: 2 }).catch(() => null)) !== null,
  );
});

test("lists are bounded and checked: a bad block or too many entries is a 400 naming the field", async () => {
  const account = await t.admin("POST", "/admin/accounts", { name: "lists" });
  const bad = await t.admin("POST", `/admin/accounts/${account.body.id}/keys`, { name: "k", allowed_ips: ["10.0.0.0/40"] });
  expect([bad.status, bad.body.error.param]).toEqual([400, "allowed_ips.0"]);
  const many = Array.from({ length: 101 }, (_, i) => `10.0.0.${i}`);
  const tooMany = await t.admin("POST", `/admin/accounts/${account.body.id}/keys`, { name: "k", allowed_ips: many });
  expect([tooMany.status, tooMany.body.error.param]).toEqual([400, "allowed_ips"]);
});
