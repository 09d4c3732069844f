/**
 * The operator CLI as operators run it: a real `bun run src/cli/gw.ts` process talking HTTP to a
 * gateway started in this process. Each step feeds the next (account → top-up → key → limits →
 * revoke; then rates, adjustments, a capped key and the audit on an account of their own), so the
 * tests run in order and share the ids they create.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CATALOG_FILE_PATH } from "../src/catalog/file.ts";
import { EXIT } from "../src/cli/exit.ts";
import { BACKENDS_PER_POOL_MAX } from "../src/config.ts";
import { randomBase62 } from "../src/ids.ts";
import { deadLetterRecords } from "../src/ledger/deadletter.ts";
import { ADMIN_TOKEN, startTestGateway, type TestGateway, SETUP_MS_MAX, until } from "./helpers.ts";
import { usageRecord } from "./usageRecords.ts";

const repoRoot = `${import.meta.dir}/..`;
const cliTimeoutMs = 20_000;

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

let t: TestGateway;

async function gw(args: string[], env: Record<string, string | undefined> = {}): Promise<Run> {
  const child = Bun.spawn(["bun", "run", "src/cli/gw.ts", ...args], {
    cwd: repoRoot,
    env: { ...process.env, GW_URL: t.url, ADMIN_TOKEN, ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr };
}

/** The value printed on the `label  value` line of human output. */
function field(stdout: string, label: string): string {
  const line = stdout.split("\n").find((l) => l.startsWith(`  ${label}  `));
  if (!line) throw new Error(`no ${label} line in:\n${stdout}`);
  return line.slice(label.length + 2).trim();
}

const chat = (key: string, model: string) =>
  fetch(`${t.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "Hello" }], max_tokens: 2 }),
  });
const credits = (key: string) => fetch(`${t.url}/v1/credits`, { headers: { authorization: `Bearer ${key}` } });

beforeAll(async () => {
  t = await startTestGateway();
}, SETUP_MS_MAX);

afterAll(async () => {
  await t.stop();
}, SETUP_MS_MAX);

describe("bun run gw", () => {
  let accountId = "";
  let keyId = "";
  let key = "";

  test(
    "accounts create prints the new account's id",
    async () => {
      const run = await gw(["accounts", "create", "Acme Ltd"]);
      expect(run.stderr).toBe("");
      expect(run.code).toBe(0);
      accountId = field(run.stdout, "id");
      expect(accountId).toMatch(/\S+/);
      expect(field(run.stdout, "balance")).toBe("0 toman");
    },
    cliTimeoutMs,
  );

  test(
    "keys create on an unfunded account is refused (exit 1)",
    async () => {
      const run = await gw(["keys", "create", accountId, "too early"]);
      expect(run.code).toBe(1);
      expect(run.stderr).toContain("(wallet_not_funded)");
      expect(run.stderr).toStartWith("error: ");
    },
    cliTimeoutMs,
  );

  test(
    "topup credits once per reference; another amount under it is a conflict",
    async () => {
      const first = await gw(["topup", accountId, "1500000.5", "--reference", "invoice-1"]);
      expect(first.code).toBe(0);
      expect(first.stdout).toContain("credited 1500000.5 toman");
      expect(field(first.stdout, "balance")).toBe("1500000.5 toman");

      const again = await gw(["topup", accountId, "1500000.5", "--reference", "invoice-1"]);
      expect(again.code).toBe(0);
      expect(again.stdout).toContain("already credited");
      expect(field(again.stdout, "balance")).toBe("1500000.5 toman");

      const other = await gw(["topup", accountId, "999", "--reference", "invoice-1"]);
      expect(other.code).toBe(1);
      expect(other.stderr).toContain("already used for another top-up");
      expect(other.stderr).toContain("(idempotency_conflict)");

      const account = await t.admin("GET", `/admin/accounts/${accountId}`);
      expect(account.body.balance_toman).toBe("1500000.5");
    },
    cliTimeoutMs,
  );

  test(
    "accounts limits sets the account's limits over its keys and the console's ceilings; accounts show prints them",
    async () => {
      const run = await gw(["accounts", "limits", accountId, "--concurrency-max", "40", "--rpm", "3000", "--keys-max", "5"]);
      expect(run.stderr).toBe("");
      expect(run.code).toBe(0);
      expect(field(run.stdout, "account limits")).toBe("40 concurrent, 3000 rpm, no tpm limit, 5 live keys");
      const reset = await gw(["accounts", "limits", accountId, "--rpm", "default", "--key-rpm-max", "900"]);
      expect(field(reset.stdout, "account limits")).toBe("40 concurrent, no rpm limit, no tpm limit, 5 live keys");
      expect(field(reset.stdout, "console key ceilings")).toContain("900 rpm");
      const shown = await gw(["accounts", "show", accountId]);
      expect(field(shown.stdout, "account limits")).toContain("40 concurrent");
      const unknown = await gw(["accounts", "limits", "acc_missing", "--rpm", "5"]);
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toContain("(not_found)");
    },
    cliTimeoutMs,
  );

  test(
    "keys create prints the key once, and the key works",
    async () => {
      const run = await gw(["keys", "create", accountId, "ci", "--concurrency-max", "3", "--rpm", "600"]);
      expect(run.code).toBe(0);
      expect(run.stdout).toContain("shown only once");
      expect(field(run.stdout, "limits")).toBe("concurrency 3, rpm 600, tpm none");
      keyId = field(run.stdout, "id");
      const keyLine = run.stdout.split("\n").find((l) => l.startsWith("    "));
      key = keyLine?.trim() ?? "";
      expect(key.length).toBeGreaterThan(20);

      const reply = await credits(key);
      expect(reply.status).toBe(200);
      expect(((await reply.json()) as { balance_toman: string }).balance_toman).toBe("1500000.5");
    },
    cliTimeoutMs,
  );

  test(
    "keys limits changes and lifts limits",
    async () => {
      const run = await gw(["keys", "limits", keyId, "--rpm", "none", "--tpm", "50000"]);
      expect(run.code).toBe(0);
      expect(field(run.stdout, "limits")).toBe("concurrency 3, rpm none, tpm 50000");
      expect((await credits(key)).status).toBe(200);
    },
    cliTimeoutMs,
  );

  test(
    "keys limits sets a key's model and address allowlists, and none clears them",
    async () => {
      // A key of its own account: its requests leave the wallet the other steps check untouched.
      const { key, keyId } = await t.fundedKey(1_000);
      const restricted = await gw(["keys", "limits", keyId, "--allowed-models", "phi-4", "--allowed-ips", "203.0.113.0/24,127.0.0.0/8"]);
      expect(restricted.code).toBe(0);
      expect([field(restricted.stdout, "models"), field(restricted.stdout, "addresses")]).toEqual(["phi-4", "203.0.113.0/24, 127.0.0.0/8"]);
      await until(async () => (await chat(key, "gpt-4o-mini")).status === 403);

      const outside = await gw(["keys", "limits", keyId, "--allowed-ips", "203.0.113.0/24"]);
      expect(field(outside.stdout, "addresses")).toBe("203.0.113.0/24");
      await until(async () => {
        const reply = await chat(key, "phi-4");
        return reply.status === 403 && ((await reply.json()) as { error: { message: string } }).error.message.includes("client addresses");
      });

      const cleared = await gw(["keys", "limits", keyId, "--allowed-models", "none", "--allowed-ips", "none"]);
      expect([field(cleared.stdout, "models"), field(cleared.stdout, "addresses")]).toEqual(["any", "any"]);
      await until(async () => (await chat(key, "gpt-4o-mini")).status === 200);
    },
    cliTimeoutMs,
  );

  test(
    "accounts show lists the balance and the key",
    async () => {
      const run = await gw(["accounts", "show", accountId]);
      expect(run.code).toBe(0);
      expect(field(run.stdout, "name")).toBe("Acme Ltd");
      expect(field(run.stdout, "balance")).toBe("1500000.5 toman");
      expect(field(run.stdout, "keys")).toBe("1");
      expect(run.stdout).toContain(keyId);
      expect(run.stdout).not.toContain(key);
    },
    cliTimeoutMs,
  );

  test(
    "keys revoke stops the key at once",
    async () => {
      const run = await gw(["keys", "revoke", keyId]);
      expect(run.code).toBe(0);
      expect(run.stdout).toContain("key revoked");
      expect((await credits(key)).status).toBe(401);
    },
    cliTimeoutMs,
  );

  test(
    "pools set replaces a model's backends from a file; a file that is not JSON, or not a pool, is a usage error",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "darvaze-cli-pools-"));
      const file = join(dir, "backends.json");
      const sim = t.sim!;
      writeFileSync(
        file,
        JSON.stringify({ backends: [{ name: "sim-a", kind: "openai", url: `${sim.url}/v1`, region: "in-country", weight: 2 }] }),
      );
      const run = await gw(["pools", "set", "phi-4", "--file", file]);
      expect(run.stderr).toBe("");
      expect(run.code).toBe(0);
      expect(run.stdout).toContain("pool set: phi-4");
      expect(run.stdout).toContain("sim-a");
      expect(t.gw.deps.pools.get("phi-4")!.backends.map((b) => [b.name, b.config.weight])).toEqual([["sim-a", 2]]);
      writeFileSync(file, "{not json");
      const broken = await gw(["pools", "set", "phi-4", "--file", file]);
      expect(broken.code).toBe(2);
      expect(broken.stderr).toContain("cannot read");
      const refused = await gw(["pools", "set", "no-such-model", "--file", join(dir, "missing.json")]);
      expect(refused.code).toBe(2);
      // Checked by the schema the admin API checks it with, before anything is sent.
      writeFileSync(
        file,
        JSON.stringify({ backends: [{ name: "sim-b", kind: "openai", url: `${sim.url}/v1`, region: "in-country", wieght: 3 }] }),
      );
      const misspelled = await gw(["pools", "set", "phi-4", "--file", file]);
      expect(misspelled.code).toBe(2);
      expect(misspelled.stderr).toContain(
        `error: ${file} is not a pool the gateway takes: Unrecognized request argument supplied: backends.0.wieght`,
      );
      // The pools file's schema: one limit, refused whole; a key named only by its variable.
      const one = (name: string) => ({ name, kind: "openai", url: `${sim.url}/v1`, region: "in-country" });
      writeFileSync(file, JSON.stringify({ backends: Array.from({ length: BACKENDS_PER_POOL_MAX + 1 }, (_, i) => one(`b${i}`)) }));
      const many = await gw(["pools", "set", "phi-4", "--file", file]);
      expect(many.code).toBe(2);
      expect(many.stderr).toContain(
        `Invalid value for 'backends': at most ${BACKENDS_PER_POOL_MAX} backends in a pool (BACKENDS_PER_POOL_MAX)`,
      );
      writeFileSync(file, JSON.stringify({ backends: [{ ...one("sim-c"), api_key: "${OPENAI_API_KEY}" }] }));
      const keyed = await gw(["pools", "set", "phi-4", "--file", file]);
      expect(keyed.code).toBe(2);
      expect(keyed.stderr).toContain(`Invalid value for 'backends.0.api_key': a key is never sent or stored`);
      expect(t.gw.deps.pools.get("phi-4")!.backends.map((b) => b.name)).toEqual(["sim-a"]);
    },
    cliTimeoutMs,
  );

  test(
    "pools lists every model's backends",
    async () => {
      const run = await gw(["pools"]);
      expect(run.code).toBe(0);
      expect(run.stdout).toContain("BACKEND");
      const pools = await t.admin("GET", "/admin/pools");
      for (const pool of pools.body.data as { model: string }[]) expect(run.stdout).toContain(pool.model);
    },
    cliTimeoutMs,
  );

  test(
    "--json prints the reply as JSON",
    async () => {
      const show = await gw(["accounts", "show", accountId, "--json"]);
      expect(show.code).toBe(0);
      const account = JSON.parse(show.stdout) as { id: string; balance_micro_toman: string; keys: unknown[] };
      expect(account.id).toBe(accountId);
      expect(account.balance_micro_toman).toBe("1500000500000");
      expect(account.keys).toHaveLength(1);

      const pools = await gw(["--json", "pools"]);
      expect((JSON.parse(pools.stdout) as { object: string }).object).toBe("list");
    },
    cliTimeoutMs,
  );

  test(
    "a wrong admin token is refused (exit 1) and not printed",
    async () => {
      const wrong = "wrong-admin-token-9876543210";
      const run = await gw(["pools"], { ADMIN_TOKEN: wrong });
      expect(run.code).toBe(1);
      expect(run.stderr).toContain("(admin_unauthorized)");
      expect(run.stdout + run.stderr).not.toContain(wrong);
    },
    cliTimeoutMs,
  );

  test(
    "an unknown account is refused (exit 1)",
    async () => {
      const run = await gw(["accounts", "show", "acct_missing"]);
      expect(run.code).toBe(1);
      expect(run.stderr).toContain("(not_found)");
    },
    cliTimeoutMs,
  );

  test(
    "an unreachable gateway exits 3 naming the URL",
    async () => {
      const closed = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("") });
      const url = `http://127.0.0.1:${closed.port}`;
      await closed.stop(true);
      const run = await gw(["pools"], { GW_URL: url });
      expect(run.code).toBe(3);
      expect(run.stderr).toContain(`cannot reach the gateway at ${url}`);
    },
    cliTimeoutMs,
  );

  test(
    "a usage error exits 2 with the usage and sends nothing",
    async () => {
      const run = await gw(["keys", "create", accountId, "ci", "--rpm", "0"]);
      expect(run.code).toBe(2);
      expect(run.stderr).toContain("--rpm must be a positive whole number");
      expect(run.stderr).toContain("usage: bun run gw");
      const account = await t.admin("GET", `/admin/accounts/${accountId}`);
      expect(account.body.keys).toHaveLength(1);
    },
    cliTimeoutMs,
  );
});

describe("bun run gw: rates, adjustments, spend caps, ledger audit", () => {
  let accountId = "";

  test(
    "rates set makes a new price version that rates show lists as current",
    async () => {
      const set = await gw(["rates", "set", "123457"]);
      expect(set.stderr).toBe("");
      expect(set.code).toBe(0);
      expect(set.stdout).toContain("rate set: 123457 toman per USD");
      const version = field(set.stdout, "version");
      expect(version).toMatch(/^\d+$/);

      const show = await gw(["rates", "show"]);
      expect(show.code).toBe(0);
      expect(field(show.stdout, "toman per USD")).toBe("123457");
      expect(field(show.stdout, "version")).toBe(version);
      expect(show.stdout).toMatch(new RegExp(`^  ${version}\\s+123457\\s+\\S+\\s+current$`, "m"));
      expect(show.stdout).toContain("rate fetch: not configured");

      const rates = await t.admin("GET", "/admin/rates");
      expect(rates.body.current).toMatchObject({ id: Number(version), toman_per_usd: 123457 });
    },
    cliTimeoutMs,
  );

  test(
    "a rate effective later is listed as scheduled, not current",
    async () => {
      const later = new Date(Date.now() + 365 * 24 * 3600 * 1000).toISOString();
      const set = await gw(["rates", "set", "150000", "--effective-at", later]);
      expect(set.code).toBe(0);
      expect(field(set.stdout, "effective")).toBe(later);
      const version = field(set.stdout, "version");

      const show = await gw(["rates", "show"]);
      expect(field(show.stdout, "toman per USD")).toBe("123457");
      expect(show.stdout).toMatch(new RegExp(`^  ${version}\\s+150000\\s+\\S+\\s+scheduled$`, "m"));
    },
    cliTimeoutMs,
  );

  test(
    "adjust credits and debits the wallet exactly, once per reference",
    async () => {
      const account = await t.admin("POST", "/admin/accounts", { name: "Adjusted Ltd" });
      accountId = account.body.id as string;
      await t.admin("POST", `/admin/accounts/${accountId}/topups`, { amount_toman: "1000", reference: "adj-funding" });

      const up = await gw(["adjust", accountId, "250.25", "--reason", "refund for the outage", "--reference", "adj-up"]);
      expect(up.stderr).toBe("");
      expect(up.code).toBe(0);
      expect(up.stdout).toContain(`credited 250.25 toman to ${accountId}`);
      expect(field(up.stdout, "balance")).toBe("1250.25 toman");

      const down = await gw(["adjust", accountId, "-12.000001", "--reason", "double-counted refund", "--reference", "adj-down"]);
      expect(down.code).toBe(0);
      expect(down.stdout).toContain(`debited 12.000001 toman from ${accountId}`);
      expect(field(down.stdout, "balance")).toBe("1238.249999 toman");

      const again = await gw(["adjust", accountId, "-12.000001", "--reason", "double-counted refund", "--reference", "adj-down"]);
      expect(again.code).toBe(0);
      expect(again.stdout).toContain("already applied");
      expect(field(again.stdout, "balance")).toBe("1238.249999 toman");

      const other = await gw(["adjust", accountId, "5", "--reason", "something else", "--reference", "adj-down"]);
      expect(other.code).toBe(1);
      expect(other.stderr).toContain("(idempotency_conflict)");

      const shown = await t.admin("GET", `/admin/accounts/${accountId}`);
      expect(shown.body.balance_micro_toman).toBe("1238249999");
    },
    cliTimeoutMs,
  );

  test(
    "a debit larger than the available balance is refused (exit 1) and changes nothing",
    async () => {
      const run = await gw(["adjust", accountId, "-1238.25", "--reason", "too much", "--reference", "adj-overdraw"]);
      expect(run.code).toBe(1);
      expect(run.stderr).toContain("does not cover this debit");
      expect(run.stdout).toBe("");
      const shown = await t.admin("GET", `/admin/accounts/${accountId}`);
      expect(shown.body.balance_toman).toBe("1238.249999");

      // The refused reference was not used up.
      const exact = await gw(["adjust", accountId, "-1238.249999", "--reason", "close the wallet", "--reference", "adj-overdraw"]);
      expect(exact.code).toBe(0);
      expect(field(exact.stdout, "balance")).toBe("0 toman");
      const restore = await gw(["adjust", accountId, "1238.249999", "--reason", "reopen the wallet", "--reference", "adj-restore"]);
      expect(field(restore.stdout, "balance")).toBe("1238.249999 toman");
    },
    cliTimeoutMs,
  );

  test(
    "keys create takes a monthly spend cap, accounts show lists it, keys limits lifts it",
    async () => {
      const created = await gw(["keys", "create", accountId, "capped", "--monthly-spend-cap", "500.5"]);
      expect(created.code).toBe(0);
      expect(field(created.stdout, "monthly cap")).toBe("500.5 toman");
      const keyId = field(created.stdout, "id");

      const show = await gw(["accounts", "show", accountId]);
      expect(show.code).toBe(0);
      expect(show.stdout).toContain("MONTHLY CAP");
      const row = show.stdout.split("\n").find((l) => l.includes(keyId));
      expect(row).toContain("500.5 toman");

      const lifted = await gw(["keys", "limits", keyId, "--monthly-spend-cap", "none"]);
      expect(lifted.code).toBe(0);
      expect(field(lifted.stdout, "monthly cap")).toBe("none");
      const account = await t.admin("GET", `/admin/accounts/${accountId}`);
      expect(account.body.keys[0].monthly_spend_cap_toman).toBeNull();
    },
    cliTimeoutMs,
  );

  test(
    "ledger audit passes on the test gateway (exit 0)",
    async () => {
      const run = await gw(["ledger", "audit"]);
      expect(run.stderr).toBe("");
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(/^ledger audit: ok \(\d+ checks\)$/m);
      expect(run.stdout).not.toContain("FAILED");

      const json = await gw(["ledger", "audit", "--json"]);
      expect(json.code).toBe(0);
      expect((JSON.parse(json.stdout) as { ok: boolean }).ok).toBe(true);
    },
    cliTimeoutMs,
  );

  test(
    "usage dead-letters lists a refused record, the audit notes it, usage replay posts it once",
    async () => {
      const db = t.gw.deps.db;
      const requestId = `req_cli_dead_${randomBase62(6)}`;
      const record = usageRecord({ requestId, accountId: "acct_cli_dead", holdId: "hold_cli_closed", billedMicro: 3n });
      const [letter] = await deadLetterRecords(db, [record], { reason: "23514: a check refused it", sqlState: "23514", source: "writer" });
      expect(letter?.requestId).toBe(requestId);
      const listed = await gw(["usage", "dead-letters"]);
      expect(listed.code).toBe(0);
      const line = listed.stdout.split("\n").find((l) => l.includes(requestId));
      expect(line).toMatch(/^\s*\d+\s+dead\s+req_cli_dead_\w+\s+\S+\s+writer\s+23514\s+0\.000003\s/);
      const audit = await gw(["ledger", "audit"]);
      expect(audit.code).toBe(0);
      expect(audit.stdout).toContain("1 dead-lettered usage record(s) await replay, 3 micro-toman written off");
      const id = line!.trim().split(/\s+/)[0]!;
      const replayed = await gw(["usage", "replay", id]);
      expect(replayed.stderr).toBe("");
      expect(replayed.code).toBe(0);
      // The hold does not exist (closed long ago): nothing is charged, the write-off is reversed and the value written off as usage.
      expect(replayed.stdout).toBe(`dead letter ${id} replayed: posted 0 micro-toman, write-off reversed\n`);
      expect((await gw(["usage", "replay", id])).stdout).toContain("was replayed before");
      expect((await gw(["usage", "dead-letters"])).stdout).not.toContain(requestId);
      expect((await gw(["usage", "dead-letters", "--all"])).stdout).toContain(requestId);
      expect((await gw(["ledger", "audit"])).code).toBe(0);
    },
    cliTimeoutMs,
  );

  test(
    "ledger audit exits 4 and names the violation when a wallet disagrees with its transfers",
    async () => {
      const db = t.gw.deps.db;
      await db.rows(sql`UPDATE wallets SET balance_micro = balance_micro + 1 WHERE account_id = ${accountId}`);
      try {
        const run = await gw(["ledger", "audit"]);
        expect(run.code).toBe(4);
        expect(run.stdout).toContain("FAILED  every wallet's balance equals its transfers");
        expect(run.stdout).toContain(`account_id=${accountId} balance=1238250000 transfers=1238249999`);
        expect(run.stdout).toMatch(/^ledger audit: FAILED \(1 of \d+ checks\)$/m);

        const json = await gw(["ledger", "audit", "--json"]);
        expect(json.code).toBe(4);
        expect((JSON.parse(json.stdout) as { ok: boolean }).ok).toBe(false);
      } finally {
        await db.rows(sql`UPDATE wallets SET balance_micro = balance_micro - 1 WHERE account_id = ${accountId}`);
      }
      expect((await gw(["ledger", "audit"])).code).toBe(0);
    },
    cliTimeoutMs,
  );
});

describe("bun run gw catalog import", () => {
  const shipped = () => JSON.parse(readFileSync(CATALOG_FILE_PATH, "utf8")) as { models: { id: string }[] };
  const added = {
    id: "acme-import-1",
    operation: "chat",
    vendor: "acme",
    context_window: 64_000,
    listing: 960,
    capabilities: { streaming: true, tools: false, reasoning: "none", images_in: false },
    usd_per_1m: { input_token: "1", output_token: "2" },
    source: { pages: [], note: "made-up test prices" },
  };
  const catalogFile = (models: object[]) => {
    const path = join(mkdtempSync(join(tmpdir(), "darvaze-catalog-")), "models.json");
    writeFileSync(path, JSON.stringify({ models }));
    return path;
  };

  test(
    "the diff first; --apply applies it, audited under --by; the same file again applies nothing",
    async () => {
      const file = catalogFile([...shipped().models, added]);
      const dry = await gw(["catalog", "import", file]);
      expect(dry, dry.stderr).toMatchObject({ code: 0 });
      expect(dry.stdout).toContain("added    acme-import-1");
      expect(dry.stdout).toContain("price    acme-import-1 output_token: - → $2");
      expect(dry.stdout).toContain("not applied (a dry run): 1 models would change; run again with --apply");
      const { key } = await t.fundedKey(100_000);
      expect((await chat(key, "acme-import-1")).status).toBe(404);

      const applied = await gw(["catalog", "import", file, "--apply", "--by", "ops-import"]);
      expect(applied, applied.stderr).toMatchObject({ code: 0 });
      expect(applied.stdout).toMatch(/applied: 1 models changed, price version \d+/);
      expect((await chat(key, "acme-import-1")).status).toBe(200);
      const changes = await gw(["catalog", "changes", "--model", "acme-import-1"]);
      expect(changes.stdout).toContain("ops-import");

      const again = await gw(["catalog", "import", file, "--apply"]);
      expect(again.stdout).toContain("nothing to apply: the catalog already matches the file");
    },
    cliTimeoutMs * 4,
  );

  test(
    "a file the catalog refuses is a usage error naming the problem, and nothing is sent",
    async () => {
      const { output_token: _, ...unpriced } = added.usd_per_1m;
      const run = await gw(["catalog", "import", catalogFile([{ ...added, id: "acme-import-2", usd_per_1m: unpriced }])]);
      expect(run.code).toBe(EXIT.usage);
      expect(run.stderr).toContain("model acme-import-2 reports output_token but has no price for it");
    },
    cliTimeoutMs,
  );
});
