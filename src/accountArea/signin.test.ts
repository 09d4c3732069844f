/**
 * Codes and sessions against a real database with a clock the test moves: a code's 2-minute
 * life, a code tried only by its own id, the requester's and the phone's send limits (IPv6 per
 * /64), an attacker who cannot lock the owner out, session idle and absolute lifetimes, a new id per sign-in, and the batched
 * last use of keys.
 */
import { afterAll, beforeAll, describe, expect, setSystemTime, test } from "bun:test";
import { sql } from "drizzle-orm";
import { freshDatabase, SETUP_MS_MAX } from "../../test/helpers.ts";
import { openDb, type Db } from "../db/client.ts";
import { migrate } from "../db/migrate.ts";
import { isFailure, type Failure } from "../errors.ts";
import { silentLogger } from "../log.ts";
import { LastUse } from "../keys/lastUse.ts";
import { accountForPhone, createAccount } from "../ledger/wallets.ts";
import { KeyStore } from "../keys/store.ts";
import {
  OTP_DIGITS,
  OTP_GUESSES_PER_PHONE_PER_DAY_MAX,
  OTP_RESEND_INTERVAL_MS,
  OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX,
  OTP_SENDS_PER_PHONE_ADDRESS_PER_DAY_MAX,
  OTP_SENDS_PER_PHONE_KNOWN_PER_DAY_MAX,
  OTP_SENDS_PER_PHONE_PER_DAY_MAX,
  OTP_SENDS_PER_PHONE_UNKNOWN_PER_DAY_MAX,
  OTP_TRIES_MAX,
  OTP_TTL_MS,
  OtpService,
  smsCeilings,
} from "./otp.ts";
import { SESSIONS_PER_ACCOUNT_MAX, SessionStore } from "./sessions.ts";
import { sweepConsole } from "./sweep.ts";
import type { SmsSender } from "./sms.ts";

let db: Db;
let drop: (() => Promise<void>) | undefined;
let nowMs = Date.parse("2026-11-23T10:00:00Z");
const inbox = new Map<string, string>();
const sender: SmsSender = {
  kind: "log",
  async sendCode(phone, code) {
    inbox.set(phone, code);
    return null;
  },
  async sendLowBalance() {
    return null;
  },
};
let otp: OtpService;
const SMS_DAILY_MAX = 5_000;

beforeAll(async () => {
  const database = await freshDatabase();
  drop = database?.drop;
  db = await openDb({ databaseUrl: database?.url, dataFolder: null });
  await migrate(db);
  otp = new OtpService(db, { secret: "s".repeat(40), sender, log: silentLogger, smsDailyMax: SMS_DAILY_MAX, now: () => nowMs });
}, SETUP_MS_MAX);
afterAll(async () => {
  await db.close();
  await drop?.();
}, SETUP_MS_MAX);

const wrongFor = (code: string) => (code === "123456" ? "654321" : "123456");
const codeOf = (failure: Failure | null) => failure?.code ?? null;
/** The failure a call must have returned. */
function refusal(result: unknown): Failure {
  if (!isFailure(result)) throw new Error(`expected a failure, got ${JSON.stringify(result)}`);
  return result;
}
/** Asks for a code that must be sent; returns its id and the code the phone received. */
async function sent(phone: string, address: string): Promise<{ codeId: string; code: string }> {
  const reply = await otp.send(phone, address);
  if (isFailure(reply)) throw new Error(`expected a code, got ${reply.code}: ${reply.message}`);
  return { codeId: reply.codeId, code: inbox.get(phone)! };
}

describe("one-time codes", () => {
  test("a code lives 2 minutes; a resend from the same address waits a minute; a code is tried only by its own id", async () => {
    const phone = "+989120000101";
    const first = await sent(phone, "10.0.0.1");
    nowMs += OTP_RESEND_INTERVAL_MS - 1_000;
    expect(refusal(await otp.send(phone, "10.0.0.1")).code).toBe("code_resend_limited");
    nowMs += 1_000;
    const second = await sent(phone, "10.0.0.1");
    if (first.code !== second.code) expect(codeOf(await otp.verify(phone, second.codeId, first.code))).toBe("code_invalid");
    expect(codeOf(await otp.verify("+989120000199", second.codeId, second.code))).toBe("code_expired"); // another phone's id
    nowMs += OTP_TTL_MS;
    expect(codeOf(await otp.verify(phone, second.codeId, second.code))).toBe("code_expired");
  });

  test("per phone: OTP_SENDS_PER_PHONE_ADDRESS_PER_DAY_MAX from one address, OTP_SENDS_PER_PHONE_UNKNOWN_PER_DAY_MAX from all", async () => {
    const phone = "+989120000102";
    for (let i = 0; i < OTP_SENDS_PER_PHONE_ADDRESS_PER_DAY_MAX; i++, nowMs += OTP_RESEND_INTERVAL_MS) await sent(phone, "10.0.1.1");
    const own = refusal(await otp.send(phone, "10.0.1.1"));
    expect(own.code).toBe("code_resend_limited");
    expect(own.message).toContain("from your network today");
    expect(own.retryAfterS).toBeGreaterThan(23 * 3_600);
    let address = 2;
    while (address < 100 && !isFailure(await otp.send(phone, `10.0.1.${address}`))) address++;
    // The phone's own daily cap stops the many addresses together: the bound on guessing.
    expect(address - 2 + OTP_SENDS_PER_PHONE_ADDRESS_PER_DAY_MAX).toBe(OTP_SENDS_PER_PHONE_UNKNOWN_PER_DAY_MAX);
    const all = refusal(await otp.send(phone, `10.0.1.${address + 1}`));
    expect(all.message).toContain("sent to this number today");
    nowMs += 24 * 3_600_000;
    await sent(phone, "10.0.1.1");
  });

  test("an attacker's 20 wrong codes from one address: the owner, from another address, signs in within two minutes", async () => {
    const phone = "+989120000103";
    const attackStart = nowMs;
    let wrong = 0;
    while (wrong < 20) {
      const asked = await otp.send(phone, "203.0.113.66");
      if (isFailure(asked)) {
        nowMs += (asked.retryAfterS ?? 60) * 1000; // the attacker waits as long as told, and goes on
        continue;
      }
      const guess = wrongFor(inbox.get(phone)!);
      for (let i = 0; i < OTP_TRIES_MAX; i++, wrong++) {
        const reply = codeOf(await otp.verify(phone, asked.codeId, guess));
        expect(reply).toBe(i < OTP_TRIES_MAX - 1 ? "code_invalid" : "code_attempts_exceeded");
      }
    }
    expect(nowMs - attackStart).toBeLessThan(24 * 3_600_000);
    const ownerStart = nowMs;
    const owner = await sent(phone, "198.51.100.7");
    expect(await otp.verify(phone, owner.codeId, owner.code)).toBeNull();
    expect(nowMs - ownerStart).toBeLessThan(2 * 60_000);
    // The attacker, guessing at the owner's code without its id, cannot touch it either.
    const again = await sent(phone, "198.51.100.8");
    expect(codeOf(await otp.verify(phone, "otp_guessed", wrongFor(again.code)))).toBe("code_expired");
    expect(await otp.verify(phone, again.codeId, again.code)).toBeNull();
  });

  test("IPv6 addresses in one /64 share one limit; the next /64 has its own", async () => {
    const phone = "+989120000106";
    await sent(phone, "2001:db8:6:1::1");
    expect(refusal(await otp.send(phone, "2001:db8:6:1:ffff:ffff:ffff:ffff")).code).toBe("code_resend_limited");
    await sent(phone, "2001:db8:6:2::1");
    let refusedAt = -1;
    for (let i = 0; i <= OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX && refusedAt < 0; i++) {
      const reply = await otp.send(`+98913000${String(i).padStart(4, "0")}`, `2001:db8:6:3:${i.toString(16)}::1`);
      if (isFailure(reply)) refusedAt = i;
    }
    expect(refusedAt).toBe(OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX);
    expect(isFailure(await otp.send("+989130009999", "2001:db8:6:4::1"))).toBe(false);
  });

  test("50 attacking addresses spend the unknown requesters' cap; the owner's known device still gets codes and signs in", async () => {
    const phone = "+989120000107";
    nowMs += 24 * 3_600_000;
    const attacks = await Promise.all(Array.from({ length: 50 }, (_, i) => otp.send(phone, `198.18.${i}.1`)));
    expect(attacks.filter((a) => !isFailure(a)).length).toBe(OTP_SENDS_PER_PHONE_UNKNOWN_PER_DAY_MAX);
    expect(refusal(attacks.find(isFailure)).message).toContain("sent to this number today");
    // A new browser of the owner is an unknown requester too: refused.
    expect(refusal(await otp.send(phone, "192.0.2.10")).code).toBe("code_resend_limited");
    // The owner's known device, even behind an attacker's address: a cap of its own.
    const owner = await otp.send(phone, "198.18.0.1", "dev-owner");
    if (isFailure(owner)) throw new Error(owner.message);
    expect(await otp.verify(phone, owner.codeId, inbox.get(phone)!)).toBeNull();
    expect(refusal(await otp.send(phone, "198.18.0.1", "dev-owner")).message).toContain("just sent"); // its own resend interval
    // The phone's known devices together have OTP_SENDS_PER_PHONE_KNOWN_PER_DAY_MAX, and no more.
    let known = 1;
    for (; known < OTP_SENDS_PER_PHONE_KNOWN_PER_DAY_MAX + 2; known++) {
      if (isFailure(await otp.send(phone, "192.0.2.10", `dev-${known}`))) break;
    }
    expect(known).toBe(OTP_SENDS_PER_PHONE_KNOWN_PER_DAY_MAX);
    expect(OTP_SENDS_PER_PHONE_UNKNOWN_PER_DAY_MAX + OTP_SENDS_PER_PHONE_KNOWN_PER_DAY_MAX).toBe(OTP_SENDS_PER_PHONE_PER_DAY_MAX);
  });

  test("one IPv4 /24 or IPv6 /48 cannot spend more than its share of the SMS budget; the next range has its own", async () => {
    const small = new OtpService(db, { secret: "s".repeat(40), sender, log: silentLogger, smsDailyMax: 200, now: () => nowMs });
    const { addressDay, rangeDay } = smsCeilings(200);
    expect([addressDay, rangeDay]).toEqual([4, 10]);
    nowMs += 24 * 3_600_000;
    const phoneOf = (i: number) => `+98915${String(i).padStart(7, "0")}`;
    const v4 = await Promise.all(Array.from({ length: 50 }, (_, i) => small.send(phoneOf(i), `100.64.7.${i + 1}`)));
    expect(v4.filter((r) => !isFailure(r)).length).toBe(rangeDay);
    expect(refusal(v4.find(isFailure)).message).toContain("range");
    const v6 = await Promise.all(Array.from({ length: 50 }, (_, i) => small.send(phoneOf(100 + i), `2001:db8:7:${i.toString(16)}::1`)));
    expect(v6.filter((r) => !isFailure(r)).length).toBe(rangeDay);
    expect(isFailure(await small.send(phoneOf(200), "100.64.8.1"))).toBe(false);
    expect(isFailure(await small.send(phoneOf(201), "2001:db8:8::1"))).toBe(false);
    // One address, many phones: its own share.
    let fromOne = 0;
    while (fromOne < addressDay + 2 && !isFailure(await small.send(phoneOf(300 + fromOne), "100.64.9.1"))) fromOne++;
    expect(fromOne).toBe(addressDay);
    // A known device is not held by its address's or range's ceilings.
    expect(isFailure(await small.send(phoneOf(0), "100.64.7.1", "dev-a"))).toBe(false);
  });

  test("guessing is bounded: a phone's codes of a day take at most 1 in 10,000 of the code space", () => {
    expect(OTP_GUESSES_PER_PHONE_PER_DAY_MAX).toBe(OTP_SENDS_PER_PHONE_PER_DAY_MAX * OTP_TRIES_MAX);
    expect(OTP_GUESSES_PER_PHONE_PER_DAY_MAX / 10 ** OTP_DIGITS).toBeLessThanOrEqual(1 / 10_000);
  });

  test("concurrent wrong tries cannot exceed the per-code limit", async () => {
    const phone = "+989120000104";
    nowMs += 24 * 3_600_000;
    const { codeId, code } = await sent(phone, "10.0.3.1");
    const replies = await Promise.all(Array.from({ length: 12 }, () => otp.verify(phone, codeId, wrongFor(code))));
    expect(replies.every((r) => r !== null)).toBe(true);
    const [row] = await db.rows<{ tries: number }>(sql`SELECT tries FROM otp_codes WHERE phone = ${phone}`);
    expect(row!.tries).toBe(OTP_TRIES_MAX);
    expect(codeOf(await otp.verify(phone, codeId, code))).toBe("code_attempts_exceeded");
  });

  test("the first sign-in creates the account once, even twice at once", async () => {
    const [a, b] = await Promise.all([accountForPhone(db, "+989120000105"), accountForPhone(db, "+989120000105")]);
    expect(a.id).toBe(b.id);
    expect([a.created, b.created].sort()).toEqual([false, true]);
    const [wallet] = await db.rows<{ n: number }>(sql`SELECT count(*)::int AS n FROM wallets WHERE account_id = ${a.id}`);
    expect(wallet!.n).toBe(1);
  });
});

describe("sessions", () => {
  test("idle and absolute lifetimes; the token is stored hashed", async () => {
    const sessions = new SessionStore(db, { idleMs: 60 * 60_000, ttlMs: 3 * 60 * 60_000, secret: "x".repeat(40), now: () => nowMs });
    const { id: accountId } = await accountForPhone(db, "+989120000201");
    const { token, id } = await sessions.create(accountId, { userAgent: "test", clientAddress: "10.0.0.9" });
    const [row] = await db.rows<{ token_hash: string }>(sql`SELECT token_hash FROM console_sessions WHERE id = ${id}`);
    expect(row!.token_hash).not.toContain(token);
    expect((await sessions.lookup(token))?.accountId).toBe(accountId);
    nowMs += 59 * 60_000;
    expect(await sessions.lookup(token)).not.toBeNull(); // use renews the idle lifetime
    nowMs += 59 * 60_000;
    expect(await sessions.lookup(token)).not.toBeNull();
    nowMs += 59 * 60_000; // used within idle every time, but 2 h 57 min since sign-in …
    expect(await sessions.lookup(token)).not.toBeNull();
    nowMs += 4 * 60_000; // … and past the absolute 3 h now
    expect(await sessions.lookup(token)).toBeNull();

    const idle = await sessions.create(accountId, { userAgent: null, clientAddress: null });
    nowMs += 60 * 60_000;
    expect(await sessions.lookup(idle.token)).toBeNull();
  });

  test("each sign-in has its own id; at most SESSIONS_PER_ACCOUNT_MAX live; revoke is per account", async () => {
    const sessions = new SessionStore(db, { idleMs: 60 * 60_000, ttlMs: 3 * 60 * 60_000, secret: "x".repeat(40), now: () => nowMs });
    const { id: accountId } = await accountForPhone(db, "+989120000202");
    const made = [];
    for (let i = 0; i <= SESSIONS_PER_ACCOUNT_MAX; i++) {
      nowMs += 1;
      made.push(await sessions.create(accountId, { userAgent: null, clientAddress: null }));
    }
    expect(new Set(made.map((m) => m.id)).size).toBe(made.length);
    expect(await sessions.lookup(made[0]!.token)).toBeNull(); // the oldest was ended
    expect((await sessions.list(accountId)).length).toBe(SESSIONS_PER_ACCOUNT_MAX);
    const other = await accountForPhone(db, "+989120000203");
    expect(await sessions.revoke(other.id, made[1]!.id)).toBe(false);
    expect(await sessions.revoke(accountId, made[1]!.id)).toBe(true);
    expect(await sessions.revokeAll(accountId)).toBe(SESSIONS_PER_ACCOUNT_MAX - 1);
    expect(await sessions.lookup(made.at(-1)!.token)).toBeNull();
    expect(sessions.csrfToken(made[1]!.id)).not.toBe(sessions.csrfToken(made[2]!.id));
  });
});

test("old codes and long-ended sessions are swept; live ones stay", async () => {
  const sessions = new SessionStore(db, { idleMs: 60 * 60_000, ttlMs: 3 * 60 * 60_000, secret: "x".repeat(40), now: () => nowMs });
  const { id: accountId } = await accountForPhone(db, "+989120000301");
  const ended = await sessions.create(accountId, { userAgent: null, clientAddress: null });
  await sessions.revoke(accountId, ended.id);
  await otp.send("+989120000301", "10.0.9.1");
  const old = await sweepConsole(db, nowMs + 31 * 24 * 3_600_000);
  expect(old.codes).toBeGreaterThan(0);
  expect(old.sessions).toBeGreaterThan(0);
  const live = await sessions.create(accountId, { userAgent: null, clientAddress: null });
  await otp.send("+989120000302", "10.0.9.1");
  await sweepConsole(db, nowMs);
  expect(await sessions.lookup(live.token)).not.toBeNull();
  const [left] = await db.rows<{ n: number }>(sql`SELECT count(*)::int AS n FROM otp_codes WHERE phone = '+989120000302'`);
  expect(left!.n).toBe(1);
});

describe("keys: last use in batches, expiry on cached keys", () => {
  test("uses are written by one flush, never moving a key's last use back", async () => {
    const keys = new KeyStore(db, { prefix: "sk-dvz-", pepper: "p".repeat(40) });
    const account = await createAccount(db, "last use");
    const { key, record } = await keys.create(account.id, "k", {});
    for (let i = 0; i < 100; i++) expect(isFailure(await keys.authenticate(key))).toBe(false);
    expect(keys.lastUse.size).toBe(1);
    expect(await keys.lastUse.flush(db)).toBe(1);
    const [row] = await db.rows<{ last_used_at: string }>(sql`SELECT last_used_at FROM api_keys WHERE id = ${record.id}`);
    const written = new Date(row!.last_used_at).getTime();
    expect(Math.abs(written - Date.now())).toBeLessThan(10_000);
    const stale = new LastUse();
    stale.note(record.id, written - 60_000);
    await stale.flush(db);
    const [after] = await db.rows<{ last_used_at: string }>(sql`SELECT last_used_at FROM api_keys WHERE id = ${record.id}`);
    expect(new Date(after!.last_used_at).getTime()).toBe(written);
  });

  test("an expired key is refused even from the cache", async () => {
    const keys = new KeyStore(db, { prefix: "sk-dvz-", pepper: "p".repeat(40) });
    const account = await createAccount(db, "expiry");
    const expiresAt = new Date(Date.now() + 300);
    const { key } = await keys.create(account.id, "k", { expiresAt });
    expect(isFailure(await keys.authenticate(key))).toBe(false);
    // The wall clock moves past the expiry; the cache's own clock (monotonic) does not, so the
    // record is still served from the cache and must be refused there.
    setSystemTime(new Date(expiresAt.getTime() + 50));
    try {
      const refused = await keys.authenticate(key);
      expect(isFailure(refused) && refused.message).toContain("expired");
    } finally {
      setSystemTime();
    }
  });
});
