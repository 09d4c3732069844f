/**
 * `bun run demo`: a working gateway on a bare machine. Starts the simulators it needs in this
 * process (an upstream for every model unless DARVAZE_CONFIG names a pools file, and Zarinpal),
 * then the gateway on the embedded defaults (PGlite in DARVAZE_DATA, the in-process bus), funds a demo account the way a customer would (a paid top-up: request, the bank
 * page, the callback, verify), creates a key and prints what to paste, with the account area's
 * address (sign in as the demo phone; the development SMS sender prints each code here) and the
 * operators' dashboard. Simulated upstreams answer at a human pace (DEMO_TTFT_MS, DEMO_ITL_MS,
 * DEMO_OUTPUT_TOKENS), so a streamed reply is visibly streamed. The key pepper (and the admin token, unless
 * ADMIN_TOKEN is set) are generated once and kept in the data folder, so keys from an earlier
 * run keep working.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Catalog } from "../catalog/catalog.ts";
import { loadConfig } from "../config.ts";
import { randomBase62 } from "../ids.ts";
import { accountForPhone, getWallet, hasBeenFunded } from "../ledger/wallets.ts";
import { createLogger, type Logger, type LogLevel } from "../log.ts";
import { nationalPhone } from "../accountArea/phone.ts";
import { isFailure } from "../errors.ts";
import { runMain, startGateway, type Gateway } from "../main.ts";
import { simulatorPools } from "../sim/pools.ts";
import { startSimulator, type Simulator } from "../sim/server.ts";
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

/** The demo customer's phone: the account area signs it in with codes printed by the demo. */
export const DEMO_PHONE = "+989120000000";

/** The simulated upstreams' pace in the demo: a first token after a few hundred ms, then tens a second. */
export function demoPace(env: Record<string, string | undefined>) {
  const ms = (name: string, fallback: number, max: number) => Math.min(max, Math.max(0, Number(env[name] ?? fallback) || 0));
  return {
    ttftMs: ms("DEMO_TTFT_MS", 400, 60_000),
    itlMs: ms("DEMO_ITL_MS", 40, 10_000),
    outputTokens: ms("DEMO_OUTPUT_TOKENS", 120, 100_000),
  };
}

/** The operator's log, plus each development SMS as a plain line on the terminal. */
function demoLogger(level: LogLevel): Logger {
  const log = createLogger(level);
  return (lvl, event, fields = {}) => {
    if (event === "sms_development_code") {
      process.stdout.write(
        `SMS to ${nationalPhone(String(fields.phone))}: your Darvaze sign-in code is ${String(fields.code)} (valid 2 minutes)\n`,
      );
      return;
    }
    log(lvl, event, fields);
  };
}

async function demoAccount(gateway: Gateway): Promise<string> {
  return (await accountForPhone(gateway.deps.db, DEMO_PHONE)).id;
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

/** The demo's simulators: the upstream one only when no pools file is given. */
interface DemoSims {
  upstream: Simulator | null;
  zarinpal: ZarinpalSim;
}

async function startDemoSims(env: Record<string, string | undefined>): Promise<DemoSims> {
  // The demo's payments go to a simulated Zarinpal in this process, never the real one.
  const zarinpal = await startZarinpalSim({ merchantIds: [DEMO_MERCHANT_ID] });
  try {
    const upstream = env.DARVAZE_CONFIG ? null : await startSimulator({ port: 0, ...demoPace(env) });
    return { upstream, zarinpal };
  } catch (error) {
    await zarinpal.stop();
    throw error;
  }
}

async function stopDemoSims(sims: DemoSims): Promise<void> {
  await sims.upstream?.stop();
  await sims.zarinpal.stop();
}

async function prepareDemo(
  gateway: Gateway,
  folder: string,
  env: { ADMIN_TOKEN: string; DARVAZE_CONFIG?: string },
  adminTokenGenerated: boolean,
) {
  const upstreams = env.DARVAZE_CONFIG ? `the upstreams of ${env.DARVAZE_CONFIG}` : "simulated upstreams for every model";
  const accountId = await demoAccount(gateway);
  const payment = (await hasBeenFunded(gateway.deps.db, accountId)) ? null : await payAsCustomer(gateway, accountId, DEMO_TOPUP_TOMAN);
  const wallet = (await getWallet(gateway.deps.db, accountId))!;
  const waiting = await gateway.payments!.topups.start(accountId, DEMO_BROWSER_TOPUP_TOMAN * 1_000_000n);
  if (isFailure(waiting)) throw new Error(waiting.message);
  const { key } = await gateway.deps.keys.create(accountId, `demo key ${new Date().toISOString()}`, {});
  const base = `${gateway.url}/v1`;
  const lines = [
    "",
    `Darvaze is running at ${gateway.url}`,
    `  ${gateway.deps.db.engine === "pglite" ? `PGlite in ${folder}` : "PostgreSQL"}, ${gateway.deps.bus.kind === "local" ? "in-process" : "NATS"} bus, ${upstreams}`,
    `  demo account ${accountId}, wallet ${wallet.balanceMicro / 1_000_000n} toman`,
    ...(payment
      ? [
          `  funded by a paid top-up of ${DEMO_TOPUP_TOMAN} toman through the simulated Zarinpal (request, bank page, callback, verify; ref_id ${payment})`,
        ]
      : []),
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
    `Operators' live dashboard: ${gateway.url}/admin/dashboard (sign in with the admin token)`,
    "",
    `Account area: ${gateway.url}/console/`,
    `  sign in as ${nationalPhone(DEMO_PHONE)}: ask for a code on the sign-in page; the development SMS sender (SMS_SENDER=${gateway.console.sender.kind}) prints it on this terminal;`,
    "  top up through the simulated bank page, create a key, call the API, watch usage.",
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
  let sims: DemoSims;
  try {
    sims = await startDemoSims(process.env);
  } catch (error) {
    console.error("darvaze demo: could not start the simulators:", (error as Error).message);
    process.exit(1);
  }
  const env = {
    ...process.env,
    // Codes in the demo's terminal, never a real SMS; customers come back from the bank page to the account area.
    SMS_SENDER: process.env.SMS_SENDER ?? "log",
    PAYMENT_RETURN_URL: process.env.PAYMENT_RETURN_URL ?? "/console/#/wallet",
    ZARINPAL_MERCHANT_ID: DEMO_MERCHANT_ID,
    ZARINPAL_BASE_URL: sims.zarinpal.url,
    DARVAZE_DATA: folder,
    ADMIN_TOKEN: process.env.ADMIN_TOKEN ?? keptSecret(folder, "admin-token"),
    KEY_PEPPER: process.env.KEY_PEPPER ?? keptSecret(folder, "pepper"),
    LOG_LEVEL: process.env.LOG_LEVEL ?? "warn",
  };
  const { upstream } = sims;
  // Without a pools file every model is served by the demo's upstream simulator.
  const pools = upstream ? (catalog: Catalog) => simulatorPools(catalog, upstream.url) : undefined;
  const config = loadConfig(env);
  const log = demoLogger(config.env.LOG_LEVEL);
  const gateway = await runMain(() => startGateway(config, { log, pools }), log);
  try {
    await prepareDemo(gateway, folder, env, adminTokenGenerated);
  } catch (error) {
    console.error("darvaze demo: could not prepare the demo account:", (error as Error).message);
    await gateway.stop();
    await stopDemoSims(sims);
    process.exit(1);
  }
}
