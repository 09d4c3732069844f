/**
 * Image URLs an upstream hands back are fetched only from the backend's own origin, public https
 * hosts, or `data:`: a backend that points the gateway at its own files, loopback, link-local, or
 * redirects it to a private address gets the client a 502 in OpenAI's shape, and nothing is
 * charged. The stub backend answers each images request with the URL given as its prompt.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { simImage } from "../src/sim/images.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";

const DALLE2_256_MICRO = 1_440_000_000n; // dall-e-2 256x256, $0.016 an image × 90,000 toman/USD

let backend: ReturnType<typeof Bun.serve>;
/** Another loopback server: not the backend's origin, so never to be reached through an image URL. */
let bystander: ReturnType<typeof Bun.serve>;
let bystanderHits = 0;
let t: TestGateway;
let key: string;
let client: OpenAI;

beforeAll(async () => {
  const png = simImage("x", 256, 256);
  bystander = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: () => (bystanderHits++, new Response(png, { headers: { "content-type": "image/png" } })),
  });
  backend = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch(req) {
      const url = new URL(req.url);
      if (url.pathname === "/files/good.png") return new Response(png, { headers: { "content-type": "image/png" } });
      if (url.pathname === "/files/redirect") return Response.redirect(url.searchParams.get("to")!, 302);
      if (url.pathname !== "/v1/images/generations") return new Response("gone", { status: 404 });
      return req
        .json()
        .then((raw) => Response.json({ created: 1, data: [{ url: (raw as { prompt: string }).prompt.replace("{origin}", url.origin) }] }));
    },
  });
  const path = join(mkdtempSync(join(tmpdir(), "darvaze-pools-")), "pools.json");
  const stub = { name: "images-stub", kind: "openai", url: `${backend.url.origin}/v1`, api_key_env: "STUB_KEY", region: "abroad" };
  writeFileSync(path, JSON.stringify({ pools: { "dall-e-2": { backends: [stub] } } }));
  t = await startTestGateway({ DARVAZE_CONFIG: path, STUB_KEY: "x" });
  ({ key } = await t.fundedKey(100_000));
  client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
}, SETUP_MS_MAX);

afterAll(async () => {
  await t?.stop();
  backend?.stop(true);
  bystander?.stop(true);
}, SETUP_MS_MAX);

async function balanceMicro(): Promise<bigint> {
  const response = await fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${key}` } });
  return BigInt(((await response.json()) as { balance_micro_toman: string }).balance_micro_toman);
}

/** The URL the backend returns for an image; `{origin}` becomes the backend's own origin. */
const generate = (url: string) => client.images.generate({ model: "dall-e-2", prompt: url, n: 1, size: "256x256" });

test("an image on the backend's own origin (a loopback host) is fetched and billed", async () => {
  const before = await balanceMicro();
  const reply = await generate("{origin}/files/good.png");
  expect(reply.data?.[0]?.url).toStartWith(`${t.url}/v1/media/`);
  expect(before - (await balanceMicro())).toBe(DALLE2_256_MICRO);
});

const REFUSED: [string, () => string, string][] = [
  ["file:", () => "file:///proc/self/environ", "file: URLs are not fetched"],
  ["loopback over http, another origin", () => `http://127.0.0.1:${bystander.port}/a.png`, "http: URLs are not fetched"],
  ["loopback over https", () => `https://127.0.0.1:${bystander.port}/a.png`, "the URL's address is not a public one"],
  [
    "a host name that resolves to loopback",
    () => `https://localhost:${bystander.port}/a.png`,
    "the URL's host resolves to an address that is not a public one",
  ],
  ["link-local (cloud metadata)", () => "https://169.254.169.254/latest/meta-data/", "the URL's address is not a public one"],
  [
    "a redirect from the backend's origin to a private address",
    () => `{origin}/files/redirect?to=${encodeURIComponent(`https://[::ffff:127.0.0.1]:${bystander.port}/a.png`)}`,
    "the URL's address is not a public one",
  ],
  [
    "a redirect from the backend's origin to a file:",
    () => `{origin}/files/redirect?to=${encodeURIComponent("file:///etc/passwd")}`,
    "file: URLs are not fetched",
  ],
];

test.each(REFUSED)("%s: refused, a 502 upstream_error, nothing charged", async (_name, url, why) => {
  const before = await balanceMicro();
  const error = await generate(url()).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(OpenAI.APIError);
  const apiError = error as InstanceType<typeof OpenAI.APIError>;
  expect([apiError.status, apiError.code]).toEqual([502, "upstream_error"]);
  expect(apiError.message).toContain(`The upstream's file URL was refused: ${why}`);
  expect(await balanceMicro()).toBe(before);
  expect(bystanderHits).toBe(0);
});
