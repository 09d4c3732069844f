import { test } from "bun:test";
import { startTestGateway } from "./helpers.ts";
import { createLogger } from "../src/log.ts";
import { cookieName } from "../src/http/console/guard.ts";
import { accountForPhone } from "../src/ledger/wallets.ts";
test("probe", async () => {
  const t = await startTestGateway({}, { log: createLogger("error") });
  const origin = new URL(t.url).origin;
  const { id } = await accountForPhone(t.gw.deps.db, "+989120000099");
  for (const [m, p] of [
    ["POST", "/console/api/sign-out?before=Infinity"],
    ["DELETE", "/console/api/sessions/9223372036854775807"],
    ["POST", "/console/api/topups/abc/check"],
    ["DELETE", "/console/api/keys/%C0%AF"],
    ["DELETE", "/console/api/keys/abc"],
  ] as const) {
    const s = await t.gw.console.sessions.create(id, { userAgent: "x", clientAddress: "127.0.0.1" });
    const r = await fetch(t.url + p, {
      method: m,
      headers: {
        origin,
        "sec-fetch-site": "same-origin",
        cookie: `${cookieName(origin)}=${s.token}`,
        "x-csrf-token": t.gw.console.sessions.csrfToken(s.id),
        "content-type": "application/json",
      },
    });
    console.log(m, p, r.status, (await r.text()).slice(0, 200));
  }
  await t.stop();
}, 60000);
