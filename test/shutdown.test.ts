/**
 * A gateway stopped with SIGTERM gives its leases back: afterwards no money of any wallet is
 * held, and every request it served is billed (embedded: PGlite in a data folder of its own).
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import { openPglite } from "../src/db/client.ts";
import { randomBase62 } from "../src/ids.ts";
import { startSimulator } from "../src/sim/server.ts";
import { ADMIN_TOKEN } from "./helpers.ts";
import { poolsFileFor, spawnGateway } from "./processes.ts";

const folder = mkdtempSync(join(tmpdir(), "darvaze-shutdown-"));
const sim = await startSimulator();
afterAll(async () => {
  await sim.stop();
  rmSync(folder, { recursive: true, force: true });
});

test("SIGTERM returns every lease and loses no usage", async () => {
  const node = await spawnGateway({
    DARVAZE_DATA: folder,
    DARVAZE_CONFIG: poolsFileFor(sim),
    DATABASE_URL: undefined,
    NATS_URL: undefined,
    ADMIN_TOKEN,
    KEY_PEPPER: randomBase62(40),
  });
  const admin = async (method: string, path: string, body?: unknown) =>
    (
      await fetch(node.url + path, {
        method,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
        body: body ? JSON.stringify(body) : undefined,
      })
    ).json() as Promise<any>;
  const account = await admin("POST", "/admin/accounts", { name: "shutdown" });
  await admin("POST", `/admin/accounts/${account.id}/topups`, { amount_toman: 5_000, reference: "seed" });
  const { key } = await admin("POST", `/admin/accounts/${account.id}/keys`, { name: "k" });
  let served = 0;
  for (let i = 0; i < 20; i++) {
    const response = await fetch(`${node.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}` },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello, world!" }], max_tokens: 10 }),
    });
    if (response.status === 200) served++;
  }
  const credits = (await (await fetch(`${node.url}/v1/credits`, { headers: { authorization: `Bearer ${key}` } })).json()) as {
    held_micro_toman: string;
  };
  expect(BigInt(credits.held_micro_toman)).toBeGreaterThan(0n); // the key's lease
  await node.kill("SIGTERM");
  expect(node.process.exitCode).toBe(0);

  const db = await openPglite(folder);
  try {
    const [wallet] = await db.rows<{ held: unknown; balance: unknown }>(
      sql`SELECT held_micro AS held, balance_micro AS balance FROM wallets`,
    );
    expect(String(wallet!.held)).toBe("0");
    const [usage] = await db.rows<{ n: unknown }>(sql`SELECT count(*) AS n FROM usage_records`);
    expect(Number(usage!.n)).toBe(served);
    // 20 × (10 × 13,500 + 10 × 54,000) micro-toman
    expect(BigInt(String(wallet!.balance))).toBe(5_000_000_000n - BigInt(served) * 675_000n);
  } finally {
    await db.close();
  }
}, 60_000);
