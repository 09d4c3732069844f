/**
 * Runs the Zarinpal simulator as a process:
 *
 *   bun run sim:pay -- --port 9200 [--merchant-id UUID] [--codes-as-strings]
 *
 * Then point the gateway at it (ZARINPAL_BASE_URL=http://127.0.0.1:9200). A bad flag exits 2.
 */
import { parseArgs } from "node:util";
import { startZarinpalSim } from "./server.ts";

const usage = `usage: bun run sim:pay -- [--port N] [--merchant-id UUID]... [--codes-as-strings] [--delayed-redirect-s N]`;

function main(): Promise<void> | void {
  let values: ReturnType<typeof parse>["values"];
  try {
    values = parse().values;
  } catch (error) {
    console.error(`${(error as Error).message}\n${usage}`);
    process.exit(2);
  }
  if (values.help) {
    console.log(usage);
    return;
  }
  const port = Number(values.port ?? "0");
  const delayed = Number(values["delayed-redirect-s"] ?? "5");
  if (!Number.isInteger(port) || port < 0 || port > 65535 || !Number.isInteger(delayed) || delayed < 0 || delayed > 600) {
    console.error(`--port must be 0..65535 and --delayed-redirect-s 0..600\n${usage}`);
    process.exit(2);
  }
  return startZarinpalSim({
    port,
    merchantIds: values["merchant-id"]?.length ? values["merchant-id"] : undefined,
    codesAsStrings: values["codes-as-strings"] === true,
    delayedRedirectS: delayed,
  }).then((sim) =>
    console.log(`zarinpal simulator listening at ${sim.url} (StartPay: ${sim.url}/pg/StartPay/<authority>, log: ${sim.url}/__sim/log)`),
  );
}

function parse() {
  return parseArgs({
    args: process.argv.slice(2),
    options: {
      port: { type: "string" },
      "merchant-id": { type: "string", multiple: true },
      "codes-as-strings": { type: "boolean" },
      "delayed-redirect-s": { type: "string" },
      help: { type: "boolean" },
    },
    strict: true,
  });
}

await main();
