/**
 * Errors as the clients read them: a wrong key or an unknown model is not retried (the SDKs and
 * Claude Code honour `x-should-retry: false`), a base URL with `/v1` twice is named as such,
 * Anthropic-wire paths answer in Anthropic's shape, and the health probes clients send answer 200.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import type { Simulator } from "../src/sim/server.ts";
import { SETUP_MS_MAX, type TestGateway } from "./helpers.ts";
import { startWireSuite } from "./wires.ts";

let sim: Simulator;
let t: TestGateway;
let key: string;

beforeAll(async () => {
  ({ sim, t, key } = await startWireSuite());
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  await sim?.stop();
}, SETUP_MS_MAX);

/** A fetch that counts the calls a client makes. */
function countingFetch(): { fetch: typeof fetch; calls: () => number } {
  let calls = 0;
  const counted = ((input: string | URL | Request, init?: RequestInit) => {
    calls++;
    return fetch(input, init);
  }) as typeof fetch;
  return { fetch: counted, calls: () => calls };
}

describe("a wrong key", () => {
  test("the Anthropic SDK, retries left at its default, asks once and reports an authentication error", async () => {
    const counter = countingFetch();
    const client = new Anthropic({ baseURL: t.url, apiKey: "sk-dvz-wrong", fetch: counter.fetch });
    const error = await client.messages
      .create({ model: "gpt-4o-mini", max_tokens: 16, messages: [{ role: "user", content: "hi" }] })
      .catch((e) => e);
    expect(error).toBeInstanceOf(Anthropic.AuthenticationError);
    expect(error.headers.get("x-should-retry")).toBe("false");
    expect(counter.calls()).toBe(1);
  });

  test("the OpenAI SDK, retries left at its default, asks once", async () => {
    const counter = countingFetch();
    const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: "sk-dvz-wrong", fetch: counter.fetch });
    const error = await client.chat.completions
      .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] })
      .catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(counter.calls()).toBe(1);
  });

  test("an unknown model is 404 with x-should-retry: false", async () => {
    const response = await fetch(`${t.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(response.status).toBe(404);
    expect(response.headers.get("x-should-retry")).toBe("false");
  });
});

describe("a base URL with /v1 twice", () => {
  test("Anthropic's path answers 404 in Anthropic's shape, naming the base-URL mistake", async () => {
    const response = await fetch(`${t.url}/v1/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-4o-mini", max_tokens: 16, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(response.status).toBe(404);
    const body = (await response.json()) as { type: string; error: { type: string; message: string } };
    expect(body.type).toBe("error");
    expect(body.error.type).toBe("not_found_error");
    expect(body.error.message).toContain("/v1 twice");
    expect(body.error.message).toContain("ANTHROPIC_BASE_URL");
  });

  test("an OpenAI path answers in OpenAI's shape with the same hint", async () => {
    const response = await fetch(`${t.url}/v1/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}` },
      body: "{}",
    });
    expect(response.status).toBe(404);
    const body = (await response.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("not_found");
    expect(body.error.message).toContain("/v1 twice");
  });

  test("any unknown path under /v1/messages answers in Anthropic's shape", async () => {
    const response = await fetch(`${t.url}/v1/messages/no-such-thing`, { headers: { "x-api-key": key } });
    expect(response.status).toBe(404);
    expect(((await response.json()) as { type: string }).type).toBe("error");
  });
});

describe("health probes", () => {
  for (const path of ["/", "/api/hello"]) {
    for (const method of ["HEAD", "GET"]) {
      test(`${method} ${path} answers 200`, async () => {
        const response = await fetch(t.url + path, { method });
        expect(response.status).toBe(200);
      });
    }
  }
});

describe("system messages inside a Messages conversation", () => {
  /** The upstream's prompt tokens for a conversation, as the simulator logged them. */
  async function promptTokens(model: string, messages: unknown[]): Promise<number> {
    const client = new Anthropic({ baseURL: t.url, apiKey: key, maxRetries: 0 });
    const { data, response } = await client.messages
      .create({ model, max_tokens: 50, messages: messages as Anthropic.MessageParam[] })
      .withResponse();
    expect(data.type).toBe("message");
    const [entry] = sim.log.byRequestId(response.headers.get("request-id")!);
    return entry!.promptTokens;
  }

  for (const model of ["gpt-4o-mini", "claude-3-5-haiku", "gemini-2.5-flash"]) {
    test(`${model}: answered, with the instruction forwarded upstream`, async () => {
      const conversation = [
        { role: "user", content: "hi" },
        { role: "user", content: [{ type: "text", text: "and again" }] },
      ];
      const instructed = [conversation[0], { role: "system", content: "be brief, be exact, and answer in Persian" }, conversation[1]];
      expect(await promptTokens(model, instructed)).toBeGreaterThan(await promptTokens(model, conversation));
    });
  }

  test("a system message with a non-text block is a 400 naming it", async () => {
    const response = await fetch(`${t.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": key, "content-type": "application/json" },
      body: JSON.stringify({
        model: "gpt-4o-mini",
        max_tokens: 16,
        messages: [
          { role: "user", content: "hi" },
          { role: "system", content: [{ type: "image", source: { type: "url", url: "https://example.com/a.png" } }] },
        ],
      }),
    });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { message: string } }).error.message).toContain("messages.1.content.0.type");
  });
});
