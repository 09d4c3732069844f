/**
 * The shipped NATS configuration (docs/nats/darvaze.conf) on a nats-server of the test's own:
 * the gateway connects with its credentials over TLS; internal callers, each in an account of
 * their own, call the operations, stream with credit and cancel, and see $SRV; they cannot read
 * each other's requests nor reach the gateway's own subjects.
 */
import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { connect, nkeys, type NatsConnection, type Status } from "nats";
import { InternalClient } from "../src/internal/client.ts";
import { connectNats } from "../src/bus/nats.ts";
import { loadConfig, natsSettings } from "../src/config.ts";
import { silentLogger } from "../src/log.ts";
import { startGateway, type Gateway } from "../src/main.ts";
import { simulatorPools } from "../src/sim/pools.ts";
import { startSimulator, type Simulator } from "../src/sim/server.ts";
import { simCompletion, simPromptText } from "../src/sim/text.ts";
import { ADMIN_TOKEN, freshDatabase, SETUP_MS_MAX, testEnv, until } from "./helpers.ts";
import {
  NATS_SERVER_BIN,
  PASSWORDS,
  startNatsWithAuthorization,
  startNatsWithOperator,
  startShippedNats,
  type NatsServer,
} from "./natsServer.ts";

const HELLO = [{ role: "user" as const, content: "Hello, world!" }];

const suite = existsSync(NATS_SERVER_BIN) ? describe : describe.skip;
if (!existsSync(NATS_SERVER_BIN)) process.stderr.write(`\n*** SKIPPED the NATS security suite: no ${NATS_SERVER_BIN} ***\n\n`);

/** Permission errors the server sent to a connection, as `<operation> <subject>`. */
function permissionErrors(nc: NatsConnection): string[] {
  const seen: string[] = [];
  void (async () => {
    for await (const status of nc.status() as AsyncIterable<Status & { permissionContext?: { operation: string; subject: string } }>) {
      if (status.permissionContext) seen.push(`${status.permissionContext.operation} ${status.permissionContext.subject}`);
    }
  })();
  return seen;
}

suite("NATS locked down by the shipped configuration", () => {
  let nats: NatsServer;
  let gw: Gateway;
  let sim: Simulator;
  let billing: NatsConnection;
  let support: NatsConnection;
  let key: string;

  const caller = (user: "billing" | "support") =>
    connect({ servers: nats.url, user, pass: PASSWORDS[user], tls: { caFile: nats.tls.caFile } });

  let database: Awaited<ReturnType<typeof freshDatabase>> = null;

  beforeAll(async () => {
    nats = await startShippedNats();
    // With DATABASE_URL the node joins a cluster: partition leases and quotas in KV, in its account.
    database = await freshDatabase();
    const env = testEnv({
      NATS_URL: nats.url,
      NATS_USER: "gateway",
      NATS_PASSWORD: PASSWORDS.gateway,
      NATS_TLS_CA_FILE: nats.tls.caFile,
      DARVAZE_SUBJECT_PREFIX: "gw", // the shipped file's subjects
      DATABASE_URL: database?.url,
    });
    sim = await startSimulator();
    gw = await startGateway(loadConfig(env), { inMemory: true, log: silentLogger, pools: (catalog) => simulatorPools(catalog, sim.url) });
    const admin = async (path: string, body: unknown) =>
      (
        await fetch(gw.url + path, { method: "POST", headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, body: JSON.stringify(body) })
      ).json() as Promise<any>;
    const account = await admin("/admin/accounts", { name: "callers" });
    await admin(`/admin/accounts/${account.id}/topups`, { amount_toman: 1000, reference: "nats-security" });
    key = (await admin(`/admin/accounts/${account.id}/keys`, { name: "internal" })).key;
    billing = await caller("billing");
    support = await caller("support");
  }, SETUP_MS_MAX);

  afterAll(async () => {
    await billing?.close();
    await support?.close();
    await gw?.stop();
    await sim?.stop();
    await nats?.stop();
    await database?.drop();
  }, SETUP_MS_MAX);

  test("the server refuses a connection without credentials, with wrong ones, or without TLS", async () => {
    const base = { servers: nats.url, tls: { caFile: nats.tls.caFile }, reconnect: false };
    expect(
      await connect(base).then(
        () => "connected",
        (e: Error) => e.message,
      ),
    ).toMatch(/Authorization Violation/i);
    expect(
      await connect({ ...base, user: "gateway", pass: "wrong" }).then(
        () => "connected",
        (e: Error) => e.message,
      ),
    ).toMatch(/Authorization Violation/i);
    // The server's certificate is signed by the test CA only: without it, the client refuses the server.
    const untrusted = await connect({ servers: nats.url, user: "gateway", pass: PASSWORDS.gateway, reconnect: false }).then(
      () => "connected",
      (e: Error) => e.message,
    );
    expect(untrusted).not.toBe("connected");
    // The gateway's own settings, as a node reads them, connect; the same without TLS settings refuse.
    const settings = natsSettings(
      loadConfig(testEnv({ NATS_URL: nats.url, NATS_USER: "gateway", NATS_PASSWORD: PASSWORDS.gateway, NATS_TLS_CA_FILE: nats.tls.caFile }))
        .env,
    )!;
    const nc = await connectNats(settings, "settings-check");
    expect(nc.info?.tls_required).toBe(true);
    await nc.close();
    const plain = natsSettings(
      loadConfig(testEnv({ NATS_URL: `nats://127.0.0.1:${nats.port}`, NATS_USER: "gateway", NATS_PASSWORD: PASSWORDS.gateway })).env,
    )!;
    expect(
      await connectNats({ ...plain }, "no-ca").then(
        (c) => c.close().then(() => "connected"),
        (e: Error) => e.message,
      ),
    ).toMatch(/cannot connect to NATS/);
  });

  test("an internal caller calls an operation and streams with credit, through its account's imports", async () => {
    Object.assign(sim.options, { ttftMs: 0, itlMs: 0, outputTokens: 120 });
    const client = new InternalClient(billing, { apiKey: key, prefix: "gw", creditWindow: 4, stallMs: 10_000 });
    const whole = await client.request("chat.completions", { model: "gpt-4o-mini", messages: HELLO, max_tokens: 5 });
    expect(whole.status).toBe(200);
    expect(gw.cluster !== null).toBe(database !== null);
    let text = "";
    let chunks = 0;
    for await (const chunk of client.stream("chat.completions", { model: "gpt-4o-mini", messages: HELLO, stream: true })) {
      text += chunk.choices[0]?.delta?.content ?? "";
      // A slow consumer is the behaviour under test: a pause beyond the window, so only credit grants move it on.
      if (++chunks % 20 === 0) await Bun.sleep(50);
    }
    expect(text).toBe(simCompletion({ seed: 1, promptText: simPromptText(HELLO), tokens: 120 }).join(""));
    // $SRV is imported too: the caller sees the service, and the credit waits its grants ended.
    let waits = 0;
    for await (const s of await billing.services.client().stats("darvaze")) {
      const chat = s.endpoints?.find((e) => e.subject === "gw.v1.chat.completions");
      waits += (chat?.data as { credit_waits?: number } | undefined)?.credit_waits ?? 0;
    }
    expect(waits).toBeGreaterThan(0);
    // A whole reply in several messages (a streamed response type) arrives joined.
    const many = await client.request("embeddings", {
      model: "text-embedding-3-small",
      input: Array.from({ length: 60 }, (_, i) => `line ${i}`),
      encoding_format: "float",
    });
    expect(many.body.length).toBeGreaterThan(billing.info!.max_payload);
  }, 30_000);

  test("a caller's cancel reaches the gateway: nothing more is relayed, the upstream is cut", async () => {
    Object.assign(sim.options, { ttftMs: 0, itlMs: 20, outputTokens: 100 });
    const client = new InternalClient(support, { apiKey: key, prefix: "gw", stallMs: 10_000 });
    let chunkId = "";
    let chunks = 0;
    for await (const chunk of client.stream("chat.completions", { model: "gpt-4o-mini", messages: HELLO, stream: true })) {
      chunkId = chunk.id;
      if (++chunks === 5) break;
    }
    const seq = Number(chunkId.replace("chatcmpl-sim-", ""));
    const entry = () => sim.log.entries().find((e) => e.seq === seq);
    await until(() => entry() !== undefined);
    expect(entry()?.aborted).toBe(true);
    expect(entry()!.completionTokens).toBeLessThan(100);
    // The gateway settled it as a request its caller left (499).
    const status = async () => {
      await gw.deps.writer.flush();
      const rows = await gw.deps.db.rows<{ status: number }>(
        sql`SELECT status FROM usage_records WHERE request_id = ${entry()!.requestId}`,
      );
      return rows[0]?.status;
    };
    await until(async () => (await status()) === 499);
  }, 30_000);

  test("a caller cannot read another caller's requests", async () => {
    const errors = permissionErrors(billing);
    const seen: string[] = [];
    for (const subject of ["gw.v1.chat.completions", "gw.v1.>", ">"]) {
      billing.subscribe(subject, { callback: (_, msg) => msg?.subject && seen.push(msg.subject) });
    }
    await billing.flush();
    await until(() => errors.length >= 3);
    expect(errors.sort()).toEqual(["subscription >", "subscription gw.v1.>", "subscription gw.v1.chat.completions"]);
    // Support's request is answered; billing saw none of it.
    const client = new InternalClient(support, { apiKey: key, prefix: "gw" });
    expect((await client.request("chat.completions", { model: "gpt-4o-mini", messages: HELLO, max_tokens: 3 })).status).toBe(200);
    // A negative check: nothing reaches billing within 100 ms of the answered request.
    await Bun.sleep(100);
    expect(seen).toEqual([]);
  });

  test("a caller cannot publish to the key actors', events' and usage subjects", async () => {
    const errors = permissionErrors(support);
    // A spy in the gateway's account, where those subjects live.
    const spy = await connect({ servers: nats.url, user: "gateway", pass: PASSWORDS.gateway, tls: { caFile: nats.tls.caFile } });
    const arrived: string[] = [];
    for (const subject of ["gw.v1.keys.>", "gw.v1.events.>", "gw.v1.usage", "gw.v1.usage.>", "gw.v1.pools.>"]) {
      spy.subscribe(subject, { callback: (_, msg) => arrived.push(msg.string()) });
    }
    await spy.flush();
    const targets = [
      "gw.v1.keys.0.admit",
      "gw.v1.keys.0.settle",
      "gw.v1.events.keys",
      "gw.v1.events.wallets",
      "gw.v1.usage",
      "gw.v1.pools.stats",
    ];
    // The gateway's own traffic on these subjects goes on (pool statistics each second): look for ours.
    const probe = new TextEncoder().encode(JSON.stringify({ probe: "from-support-account" }));
    for (const subject of targets) support.publish(subject, probe);
    const refused = await support.request("gw.v1.keys.0.admit", probe, { timeout: 1_000 }).then(
      () => "answered",
      (e: Error) => e.message,
    );
    expect(refused).not.toBe("answered");
    await support.flush();
    await until(() => targets.every((t) => errors.includes(`publish ${t}`)));
    for (const subject of targets) expect(errors).toContain(`publish ${subject}`);
    // A negative check: none of the refused publishes arrives within 100 ms.
    await Bun.sleep(100);
    expect(arrived.filter((data) => data.includes("from-support-account"))).toEqual([]);
    await spy.close();
  });
});

suite("NATS with mutual TLS (the shipped file with verify: true)", () => {
  let nats: NatsServer;
  beforeAll(async () => {
    nats = await startShippedNats({ verifyClients: true });
  }, SETUP_MS_MAX);
  afterAll(async () => nats?.stop());

  test("a node with its client certificate connects; without one it is refused", async () => {
    const base = { NATS_URL: nats.url, NATS_USER: "gateway", NATS_PASSWORD: PASSWORDS.gateway, NATS_TLS_CA_FILE: nats.tls.caFile };
    const withCert = natsSettings(
      loadConfig(testEnv({ ...base, NATS_TLS_CERT_FILE: nats.tls.clientCertFile, NATS_TLS_KEY_FILE: nats.tls.clientKeyFile })).env,
    )!;
    const nc = await connectNats(withCert, "mtls-check");
    await nc.flush();
    await nc.close();
    const without = natsSettings(loadConfig(testEnv(base)).env)!;
    const refused = await connectNats({ ...without }, "no-cert").then(
      async (c) => {
        // Some TLS stacks report the refused certificate only at the first round trip.
        const flushed = await c.flush().then(
          () => "connected",
          (e: Error) => e.message,
        );
        await c.close();
        return flushed;
      },
      (e: Error) => e.message,
    );
    expect(refused).toMatch(/cannot connect to NATS/);
  }, 30_000);
});

suite("NATS in operator mode, with a .creds file", () => {
  test("a node connects with its creds file; one signed by an unknown account is refused", async () => {
    const nats = await startNatsWithOperator();
    try {
      const connects = async (file: string) =>
        connectNats(natsSettings(loadConfig(testEnv({ NATS_URL: nats.url, NATS_CREDS_FILE: file })).env)!, "creds-check").then(
          async (nc) => (await nc.close(), "connected"),
          (e: Error) => e.message,
        );
      expect(await connects(nats.credsFile)).toBe("connected");
      expect(await connects(nats.strangerCredsFile)).toMatch(/Authorization Violation/i);
    } finally {
      await nats.stop();
    }
  }, 30_000);
});

suite("NATS with an NKey or a token", () => {
  test("a node authenticates with its NKey seed or token from the environment; a wrong one is refused", async () => {
    const user = nkeys.createUser();
    const seed = new TextDecoder().decode(user.getSeed());
    const other = new TextDecoder().decode(nkeys.createUser().getSeed());
    const byNkey = await startNatsWithAuthorization(`{ users: [ { nkey: ${user.getPublicKey()} } ] }`);
    const byToken = await startNatsWithAuthorization(`{ token: "node-token-0123456789" }`);
    try {
      const connects = async (env: Record<string, string>) => {
        const settings = natsSettings(loadConfig(testEnv(env)).env)!;
        return connectNats(settings, "auth-check").then(
          async (nc) => (await nc.close(), "connected"),
          (e: Error) => e.message,
        );
      };
      expect(await connects({ NATS_URL: byNkey.url, NATS_NKEY_SEED: seed })).toBe("connected");
      expect(await connects({ NATS_URL: byNkey.url, NATS_NKEY_SEED: other })).toMatch(/Authorization Violation/i);
      expect(await connects({ NATS_URL: byToken.url, NATS_TOKEN: "node-token-0123456789" })).toBe("connected");
      expect(await connects({ NATS_URL: byToken.url, NATS_TOKEN: "wrong" })).toMatch(/Authorization Violation/i);
    } finally {
      await byNkey.stop();
      await byToken.stop();
    }
  }, 30_000);
});
