/**
 * `bun run demo`: a working gateway on a bare machine. Starts on the embedded defaults (PGlite
 * in DARVAZE_DATA, the in-process bus, a simulated upstream for every model), funds a demo
 * account, creates a key and prints what to paste. The key pepper (and the admin token, unless
 * ADMIN_TOKEN is set) are generated once and kept in the data folder, so keys from an earlier
 * run keep working.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { loadConfig } from "../config.ts";
import { randomBase62 } from "../ids.ts";
import { createAccount, showAccount, topUp } from "../ledger/wallets.ts";
import { isFailure } from "../errors.ts";
import { runMain, startGateway, type Gateway } from "../main.ts";

const DEMO_TOPUP_TOMAN = 1_000_000n;

/** A secret kept in the data folder, created on first use (mode 0600). */
function keptSecret(folder: string, name: string): string {
  const path = join(folder, name);
  if (existsSync(path)) return readFileSync(path, "utf8").trim();
  const secret = randomBase62(48);
  writeFileSync(path, `${secret}\n`, { mode: 0o600 });
  return secret;
}

async function demoAccount(gateway: Gateway, folder: string): Promise<string> {
  const path = join(folder, "demo-account");
  const { db } = gateway.deps;
  if (existsSync(path)) {
    const id = readFileSync(path, "utf8").trim();
    if (await showAccount(db, id)) return id;
  }
  const account = await createAccount(db, "demo");
  writeFileSync(path, `${account.id}\n`);
  return account.id;
}

async function prepareDemo(gateway: Gateway, folder: string, env: { ADMIN_TOKEN: string }, adminTokenGenerated: boolean) {
  const accountId = await demoAccount(gateway, folder);
  const topped = await topUp(gateway.deps.db, accountId, DEMO_TOPUP_TOMAN * 1_000_000n, `demo-initial-${accountId}`);
  if (isFailure(topped)) throw new Error(topped.message);
  const { key } = await gateway.deps.keys.create(accountId, `demo key ${new Date().toISOString()}`, {});
  const base = `${gateway.url}/v1`;
  const lines = [
    "",
    `Darvaze is running at ${gateway.url}`,
    `  ${gateway.deps.db.engine === "pglite" ? `PGlite in ${folder}` : "PostgreSQL"}, ${gateway.deps.bus.kind === "local" ? "in-process" : "NATS"} bus, simulated upstreams for every model`,
    `  demo account ${accountId}, wallet ${topped.wallet.balanceMicro / 1_000_000n} toman`,
    "",
    "Point any OpenAI client at it (the official SDKs read these two variables):",
    "",
    `export OPENAI_BASE_URL=${base}`,
    `export OPENAI_API_KEY=${key}`,
    "",
    "Try it with curl:",
    "",
    `curl -s ${base}/chat/completions -H "Authorization: Bearer ${key}" -H "Content-Type: application/json" -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello!"}],"max_tokens":20}'`,
    "",
    "Or with the OpenAI SDK for Node (npm install openai), after the two exports above:",
    "",
    `node --input-type=module -e 'import OpenAI from "openai"; const r = await new OpenAI().chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello!" }] }); console.log(r.choices[0].message.content)'`,
    "",
    "Your balance:",
    "",
    `curl -s ${base}/credits -H "Authorization: Bearer ${key}"`,
    "",
    `Operators: ADMIN_TOKEN=${adminTokenGenerated ? env.ADMIN_TOKEN : "<your ADMIN_TOKEN>"} GW_URL=${gateway.url} bun run gw accounts show ${accountId}`,
    "",
    "The key is shown only this once. Press Ctrl+C to stop.",
    "",
  ];
  process.stdout.write(lines.join("\n"));
}

if (import.meta.main) {
  const folder = resolve(process.env.DARVAZE_DATA ?? "./.darvaze");
  mkdirSync(folder, { recursive: true });
  const adminTokenGenerated = !process.env.ADMIN_TOKEN;
  const env = {
    ...process.env,
    DARVAZE_DATA: folder,
    ADMIN_TOKEN: process.env.ADMIN_TOKEN ?? keptSecret(folder, "admin-token"),
    KEY_PEPPER: process.env.KEY_PEPPER ?? keptSecret(folder, "pepper"),
    LOG_LEVEL: process.env.LOG_LEVEL ?? "warn",
  };
  const gateway = await runMain(() => startGateway(loadConfig(env)));
  try {
    await prepareDemo(gateway, folder, { ADMIN_TOKEN: env.ADMIN_TOKEN }, adminTokenGenerated);
  } catch (error) {
    console.error("darvaze demo: could not prepare the demo account:", (error as Error).message);
    await gateway.stop();
    process.exit(1);
  }
}
