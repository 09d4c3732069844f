import { expect, test } from "bun:test";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, loadConfig } from "./config.ts";
import { silentLogger } from "./log.ts";
import { startGateway } from "./main.ts";

const required = { ADMIN_TOKEN: "a".repeat(16), KEY_PEPPER: "p".repeat(32), PORT: "0" };

test("a start without a pools file and without pools given is refused naming DARVAZE_CONFIG and the demo, before the data folder is made", async () => {
  const data = join(mkdtempSync(join(tmpdir(), "darvaze-nopools-")), "data");
  const config = loadConfig({ ...required, DARVAZE_DATA: data });
  expect(config.pools).toBeNull();
  const refused = await startGateway(config, { log: silentLogger }).catch((error: unknown) => error);
  expect(refused).toBeInstanceOf(ConfigError);
  const { problems } = refused as ConfigError;
  expect(problems).toHaveLength(1);
  expect(problems[0]).toStartWith("DARVAZE_CONFIG: is required: the pools file of the upstreams to serve");
  expect(problems[0]).toContain("`bun run demo` serves every model from simulated upstreams");
  expect(existsSync(data)).toBe(false);
});
