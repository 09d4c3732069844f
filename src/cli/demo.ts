/**
 * `bun run demo`: a working gateway on a bare machine. Starts on the embedded defaults (PGlite
 * in DARVAZE_DATA, the in-process bus, a simulated upstream for every model, a simulated
 * Zarinpal), funds a demo account the way a customer would (a paid top-up: request, the bank
 * page, the callback, verify), creates a key and prints what to paste. The key pepper (and the admin token, unless
 * ADMIN_TOKEN is set) are generated once and kept in the data folder, so keys from an earlier
 * run keep working.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { loadConfig } from "../config.ts";
import { randomBase62 } from "../ids.ts";
import { createAccount, getWallet, hasBeenFunded, showAccount } from "../ledger/wallets.ts";
import { isFailure } from "../errors.ts";
import { runMain, startGateway, type Gateway } from "../main.ts";
import { startZarinpalSim, type ZarinpalSim } from "../sim/zarinpal/server.ts";

const DEMO_TOPUP_TOMAN = 1_000_000n;
/** A merchant id of the simulator's: the demo never talks to the real Zarinpal. */
const DEMO_MERCHANT_ID = "00000000-0000-4000-8000-000000000de0";
/** A second top-up left waiting, for the newcomer to pay in a browser. */
const DEMO_BROWSER_TOPUP_TOMAN = 50_000n;

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

/**
 * Pays a top-up as a customer would: the bank page's Pay button on the simulator, then the
 * callback it sends the browser to, which verifies and credits. Returns the top-up's ref_id.
 */
async function payAsCustomer(gateway: Gateway, accountId: string, toman: bigint): Promise<string> {
  const payments = gateway.payments!;
  const started = await payments.topups.start(accountId, toman * 1_000_000n);
  if (isFailure(started)) throw new Error(started.message);
  const bank = await fetch(`${started.redirectUrl}/pay`, { method: "POST", redirect: "manual" });
  const callback = bank.headers.get("location");
  if (!callback) throw new Error(`the simulated bank page sent no callback (HTTP ${bank.status})`);
  await fetch(callback, { redirect: "manual" });
  const settled = await payments.topups.get(started.topup.id);
  if (settled?.state !== "verified") throw new Error(`the demo top-up ended ${settled?.state}: ${settled?.reason ?? ""}`);
  return settled.refId!;
}

async function prepareDemo(gateway: Gateway, folder: string, env: { ADMIN_TOKEN: string }, adminTokenGenerated: boolean) {
  const accountId = await demoAccount(gateway, folder);
  const payment = (await hasBeenFunded(gateway.deps.db, accountId)) ? null : await payAsCustomer(gateway, accountId, DEMO_TOPUP_TOMAN);
  const wallet = (await getWallet(gateway.deps.db, accountId))!;
  const waiting = await gateway.payments!.topups.start(accountId, DEMO_BROWSER_TOPUP_TOMAN * 1_000_000n);
  if (isFailure(waiting)) throw new Error(waiting.message);
  const { key } = await gateway.deps.keys.create(accountId, `demo key ${new Date().toISOString()}`, {});
  const base = `${gateway.url}/v1`;
  const lines = [
    "",
    `Darvaze is running at ${gateway.url}`,
    `  ${gateway.deps.db.engine === "pglite" ? `PGlite in ${folder}` : "PostgreSQL"}, ${gateway.deps.bus.kind === "local" ? "in-process" : "NATS"} bus, simulated upstreams for every model`,
    `  demo account ${accountId}, wallet ${wallet.balanceMicro / 1_000_000n} toman`,
    ...(payment ? [`  funded by a paid top-up of ${DEMO_TOPUP_TOMAN} toman through the simulated Zarinpal (request, bank page, callback, verify; ref_id ${payment})`] : []),
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
    `Top up ${DEMO_BROWSER_TOPUP_TOMAN} toman more as a customer would: open this simulated bank page in a browser and press Pay:`,
    "",
    waiting.redirectUrl,
    "",
    `Operators: ADMIN_TOKEN=${adminTokenGenerated ? env.ADMIN_TOKEN : "<your ADMIN_TOKEN>"} GW_URL=${gateway.url} bun run gw accounts show ${accountId}`,
    "  (and `bun run gw topups list` for paid top-ups and their states)",
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
  // The demo's payments go to a simulated Zarinpal in this process, never the real one.
  let zarinpal: ZarinpalSim;
  try {
    zarinpal = await startZarinpalSim({ merchantIds: [DEMO_MERCHANT_ID] });
  } catch (error) {
    console.error("darvaze demo: could not start the Zarinpal simulator:", (error as Error).message);
    process.exit(1);
  }
  const env = {
    ...process.env,
    ZARINPAL_MERCHANT_ID: DEMO_MERCHANT_ID,
    ZARINPAL_BASE_URL: zarinpal.url,
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
    await zarinpal.stop();
    process.exit(1);
  }
}
