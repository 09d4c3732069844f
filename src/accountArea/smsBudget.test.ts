/** The SMS budget against a real database, with a clock the test moves. */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { freshDatabase, SETUP_MS_MAX } from "../../test/helpers.ts";
import { openDb, type Db } from "../db/client.ts";
import { migrate } from "../db/migrate.ts";
import { silentLogger } from "../log.ts";
import type { SmsSender } from "./sms.ts";
import { budgetedSender, SMS_BUDGET_KNOWN_DEVICE_RESERVE_SHARE, SmsBudget, unknownRequestersMax } from "./smsBudget.ts";

let db: Db;
let drop: (() => Promise<void>) | undefined;
let nowMs = Date.parse("2026-11-23T23:59:00Z");

beforeAll(async () => {
  const database = await freshDatabase();
  drop = database?.drop;
  db = await openDb({ databaseUrl: database?.url, dataFolder: null });
  await migrate(db);
}, SETUP_MS_MAX);
afterAll(async () => {
  await db.close();
  await drop?.();
}, SETUP_MS_MAX);

test("concurrent takes never pass the budget; a spent budget refuses until the next UTC day", async () => {
  const budget = new SmsBudget(db, { dailyMax: 5, log: silentLogger, now: () => nowMs });
  const taken = await Promise.all(Array.from({ length: 12 }, () => budget.take("test")));
  expect(taken.filter(Boolean).length).toBe(5);
  expect(await budget.today()).toMatchObject({ day: "2026-11-23", sent: 5, refused: 7, max: 5, exhausted: true });
  expect(budget.secondsToNextDay()).toBe(60);

  let delivered = 0;
  const inner: SmsSender = {
    kind: "kavenegar",
    async sendCode() {
      delivered++;
      return null;
    },
    async sendLowBalance() {
      delivered++;
      return null;
    },
  };
  const sender = budgetedSender(inner, budget);
  const refused = await sender.sendCode("+989120000001", "123456");
  expect(refused?.code).toBe("service_unavailable");
  expect(refused?.retryAfterS).toBe(60);
  expect(delivered).toBe(0);

  nowMs += 60_000;
  expect(await sender.sendCode("+989120000001", "123456")).toBeNull();
  expect(delivered).toBe(1);
  expect(await budget.today()).toMatchObject({ day: "2026-11-24", sent: 1, refused: 0, exhausted: false });
});

test("unknown requesters leave the reserve to known devices and alerts", async () => {
  nowMs = Date.parse("2026-11-25T10:00:00Z");
  const budget = new SmsBudget(db, { dailyMax: 20, log: silentLogger, now: () => nowMs });
  const inner: SmsSender = { kind: "kavenegar", sendCode: async () => null, sendLowBalance: async () => null };
  const sender = budgetedSender(inner, budget);
  const unknownMax = unknownRequestersMax(20);
  expect(unknownMax).toBe(20 - 20 * SMS_BUDGET_KNOWN_DEVICE_RESERVE_SHARE);
  for (let i = 0; i < unknownMax; i++) expect(await sender.sendCode("+989120000001", "123456", { knownDevice: false })).toBeNull();
  expect((await sender.sendCode("+989120000001", "123456"))?.code).toBe("service_unavailable");
  expect((await sender.sendCode("+989120000001", "123456", { knownDevice: false }))?.code).toBe("service_unavailable");
  // The reserve: known devices and alerts, up to the budget and no further.
  expect(await sender.sendCode("+989120000001", "123456", { knownDevice: true })).toBeNull();
  expect(await sender.sendLowBalance("+989120000001", "10")).toBeNull();
  while ((await budget.today()).sent < 20) expect(await sender.sendCode("+989120000001", "123456", { knownDevice: true })).toBeNull();
  expect((await sender.sendCode("+989120000001", "123456", { knownDevice: true }))?.code).toBe("service_unavailable");
  expect(await budget.today()).toMatchObject({ sent: 20, exhausted: true });
});
