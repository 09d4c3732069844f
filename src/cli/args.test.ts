import { describe, expect, test } from "bun:test";
import { parseInvocation, type Command, type Invocation } from "./args.ts";

const env = { ADMIN_TOKEN: "admin-token-0123456789" };

function accepted(argv: string[], environment: Record<string, string | undefined> = env): Invocation {
  const result = parseInvocation(argv, environment);
  if (!result.ok) throw new Error(`refused: ${result.error}`);
  return result.invocation;
}

const command = (argv: string[]): Command => accepted(argv).command;

function refused(argv: string[], environment: Record<string, string | undefined> = env): string {
  const result = parseInvocation(argv, environment);
  if (result.ok) throw new Error(`accepted: ${JSON.stringify(result.invocation.command)}`);
  return result.error;
}

describe("parseInvocation: commands", () => {
  test("accounts create / show", () => {
    expect(command(["accounts", "create", "Acme Ltd"])).toEqual({ kind: "accounts.create", name: "Acme Ltd" });
    expect(command(["accounts", "show", "acct_1"])).toEqual({ kind: "accounts.show", accountId: "acct_1" });
  });

  test("topup keeps the amount as an exact decimal string", () => {
    expect(command(["topup", "acct_1", "1500000", "--reference", "inv-1"])).toEqual({
      kind: "topup",
      accountId: "acct_1",
      amountToman: "1500000",
      reference: "inv-1",
    });
    expect(command(["topup", "--reference=inv-2", "acct_1", "0.000001"])).toMatchObject({ amountToman: "0.000001", reference: "inv-2" });
    expect(command(["topup", "acct_1", "12.5", "--reference", "r"])).toMatchObject({ amountToman: "12.5" });
  });

  test("keys create with and without limits", () => {
    expect(command(["keys", "create", "acct_1", "ci"])).toEqual({ kind: "keys.create", accountId: "acct_1", name: "ci", limits: {} });
    expect(command(["keys", "create", "acct_1", "ci", "--concurrency-max", "4", "--rpm=60", "--tpm", "100000"])).toEqual({
      kind: "keys.create",
      accountId: "acct_1",
      name: "ci",
      limits: { concurrency_max: 4, rpm: 60, tpm: 100_000 },
    });
  });

  test("keys limits: a number sets a limit, none lifts it, an absent flag leaves it", () => {
    expect(command(["keys", "limits", "key_1", "--rpm", "none", "--tpm", "5000"])).toEqual({
      kind: "keys.limits",
      keyId: "key_1",
      limits: { rpm: null, tpm: 5000 },
    });
    expect(command(["keys", "limits", "key_1", "--concurrency-max", "2"])).toEqual({
      kind: "keys.limits",
      keyId: "key_1",
      limits: { concurrency_max: 2 },
    });
  });

  test("keys revoke, pools, help", () => {
    expect(command(["keys", "revoke", "key_1"])).toEqual({ kind: "keys.revoke", keyId: "key_1" });
    expect(command(["pools"])).toEqual({ kind: "pools" });
    expect(command(["top"])).toEqual({ kind: "top", once: false });
    expect(command(["top", "--once"])).toEqual({ kind: "top", once: true });
    expect(command(["pools", "set", "llama", "--file", "b.json"])).toEqual({ kind: "pools.set", model: "llama", file: "b.json" });
    expect(refused(["pools", "set", "llama"], env)).toContain("--file is required");
    expect(refused(["pools", "set", "--file", "b.json"], env)).toContain("missing <model>");
    expect(command(["keys", "create", "acc_1", "k", "--residency", "in-country"])).toEqual({
      kind: "keys.create",
      accountId: "acc_1",
      name: "k",
      limits: { residency: "in-country" },
    });
    expect(command(["keys", "limits", "key_1", "--residency", "none"])).toEqual({
      kind: "keys.limits",
      keyId: "key_1",
      limits: { residency: null },
    });
    expect(refused(["keys", "create", "acc_1", "k", "--residency", "none"], env)).toContain("--residency must be in-country");
    expect(refused(["keys", "limits", "key_1", "--residency", "abroad"], env)).toContain("--residency must be in-country or none");
    expect(command(["help"])).toEqual({ kind: "help" });
    expect(command(["keys", "create", "--help"])).toEqual({ kind: "help" });
    expect(command(["-h"])).toEqual({ kind: "help" });
  });

  test("help needs no token", () => {
    expect(accepted(["help"], {}).token).toBeNull();
  });

  test("-- ends the flags, so a name may start with dashes", () => {
    expect(command(["accounts", "create", "--", "--odd name"])).toEqual({ kind: "accounts.create", name: "--odd name" });
  });
});

describe("parseInvocation: rates, adjust, ledger, monthly caps", () => {
  test("rates show / set, with and without --effective-at", () => {
    expect(command(["rates", "show"])).toEqual({ kind: "rates.show" });
    expect(command(["rates", "set", "95000"])).toEqual({ kind: "rates.set", tomanPerUsd: 95_000 });
    expect(command(["rates", "set", "95000", "--effective-at", "2025-03-21T00:00:00+03:30"])).toEqual({
      kind: "rates.set",
      tomanPerUsd: 95_000,
      effectiveAt: "2025-03-21T00:00:00+03:30",
    });
    expect(command(["rates", "set", "--effective-at=2025-03-20T20:30:00.5Z", "1"])).toMatchObject({
      effectiveAt: "2025-03-20T20:30:00.5Z",
    });
  });

  test("a bad rate is refused", () => {
    for (const bad of ["0", "-5", "95000.5", "95,000", "1e5", "abc", "", "007"]) {
      expect(refused(["rates", "set", bad])).toContain("toman-per-usd must be a positive whole number");
    }
    expect(refused(["rates", "set"])).toContain("missing <toman-per-usd>");
    expect(refused(["rates", "set", "1", "2"])).toContain("unexpected argument: 2");
    expect(refused(["rates"])).toContain("show or set");
    expect(refused(["rates", "show", "--effective-at", "2025-03-21T00:00:00Z"])).toBe("rates show does not take --effective-at");
  });

  test("a bad --effective-at is refused: it needs an ISO time with an offset", () => {
    for (const bad of [
      "2025-03-21T00:00:00",
      "2025-03-21",
      "2025-03-21 00:00:00Z",
      "2025-13-01T00:00:00Z",
      "2025-02-30T00:00:00Z",
      "2025-03-21T00:00Z",
      "tomorrow",
      "1742500000",
    ]) {
      expect(refused(["rates", "set", "95000", "--effective-at", bad])).toContain("--effective-at must be an ISO time with an offset");
    }
    expect(refused(["rates", "set", "95000", "--effective-at"])).toBe("--effective-at needs a value");
  });

  test("adjust takes a signed amount, a reason and a reference", () => {
    expect(command(["adjust", "acct_1", "100", "--reason", "refund for outage", "--reference", "adj-1"])).toEqual({
      kind: "adjust",
      accountId: "acct_1",
      amountToman: "100",
      reason: "refund for outage",
      reference: "adj-1",
    });
    expect(command(["adjust", "acct_1", "-12.5", "--reason", "double credit", "--reference", "adj-2"])).toMatchObject({
      amountToman: "-12.5",
    });
    expect(command(["adjust", "--reason=  typo fix  ", "--reference=r", "acct_1", "-0.000001"])).toMatchObject({
      amountToman: "-0.000001",
      reason: "typo fix",
    });
  });

  test("adjust refusals: bad or zero amounts, missing or bad reason and reference", () => {
    for (const bad of ["--5", "-", "+5", "1.2345678", "-1.2345678", "1,000", "-1e3", "abc", "5."]) {
      expect(refused(["adjust", "acct_1", "--reason", "why not", "--reference", "r", "--", bad])).toContain(
        "amount-toman must be a whole number",
      );
    }
    for (const zero of ["0", "-0", "-0.000000"]) {
      expect(refused(["adjust", "acct_1", zero, "--reason", "why not", "--reference", "r"])).toContain("must not be zero");
    }
    expect(refused(["adjust", "acct_1", "5", "--reference", "r"])).toContain("--reason is required");
    expect(refused(["adjust", "acct_1", "5", "--reason", "why not"])).toContain("--reference is required");
    expect(refused(["adjust", "acct_1", "5", "--reason", " ab ", "--reference", "r"])).toContain("--reason must be 3 to 500 characters");
    expect(refused(["adjust", "acct_1", "5", "--reason", "x".repeat(501), "--reference", "r"])).toContain(
      "--reason must be 3 to 500 characters",
    );
    expect(refused(["adjust", "acct_1", "5", "--reason", "why not", "--reference", " "])).toContain("must not be empty");
    expect(refused(["adjust", "acct_1", "--reason", "why not", "--reference", "r"])).toContain("missing <amount-toman>");
  });

  test("negative amounts are for adjust only", () => {
    expect(refused(["topup", "acct_1", "-5", "--reference", "r"])).toContain("amount-toman must be a whole number");
    expect(refused(["keys", "create", "acct_1", "ci", "--monthly-spend-cap", "-5"])).toContain("--monthly-spend-cap must be toman");
    expect(refused(["keys", "limits", "key_1", "--monthly-spend-cap", "-5"])).toContain("--monthly-spend-cap must be toman");
    expect(refused(["rates", "set", "-95000"])).toContain("toman-per-usd must be a positive whole number");
  });

  test("ledger audit", () => {
    expect(command(["ledger", "audit"])).toEqual({ kind: "ledger.audit" });
    expect(refused(["ledger"])).toContain("say audit");
    expect(refused(["ledger", "fix"])).toContain("unknown command: ledger fix");
    expect(refused(["ledger", "audit", "now"])).toContain("unexpected argument: now");
  });

  test("usage dead-letters and usage replay", () => {
    expect(command(["usage", "dead-letters"])).toEqual({ kind: "usage.deadLetters", all: false });
    expect(command(["usage", "dead-letters", "--all"])).toEqual({ kind: "usage.deadLetters", all: true });
    expect(command(["usage", "replay", "42"])).toEqual({ kind: "usage.replay", deadLetterId: "42" });
    expect(refused(["usage"])).toContain("say dead-letters or replay");
    expect(refused(["usage", "replay"])).toContain("dead-letter-id");
    expect(refused(["usage", "replay", "req_1"])).toContain("the dead letter id is a number");
    expect(refused(["usage", "replay", "1", "--all"])).toContain("--all");
  });

  test("--monthly-spend-cap: toman on keys create; toman or none on keys limits", () => {
    expect(command(["keys", "create", "acct_1", "ci", "--monthly-spend-cap", "250000.5"])).toEqual({
      kind: "keys.create",
      accountId: "acct_1",
      name: "ci",
      limits: { monthly_spend_cap_toman: "250000.5" },
    });
    expect(command(["keys", "limits", "key_1", "--monthly-spend-cap", "none"])).toEqual({
      kind: "keys.limits",
      keyId: "key_1",
      limits: { monthly_spend_cap_toman: null },
    });
    expect(command(["keys", "limits", "key_1", "--monthly-spend-cap=0"])).toMatchObject({ limits: { monthly_spend_cap_toman: "0" } });
    expect(refused(["keys", "create", "acct_1", "ci", "--monthly-spend-cap", "none"])).toContain("--monthly-spend-cap none");
    for (const bad of ["1.2345678", "1,000", "1e6", "abc", ".5", ""]) {
      expect(refused(["keys", "limits", "key_1", "--monthly-spend-cap", bad])).toContain("--monthly-spend-cap must be toman");
    }
    expect(refused(["topup", "acct_1", "5", "--reference", "r", "--monthly-spend-cap", "5"])).toBe(
      "topup does not take --monthly-spend-cap",
    );
  });
});

describe("parseInvocation: url, token, --json", () => {
  test("--url, then GW_URL, then 127.0.0.1:$PORT, then port 8080", () => {
    expect(accepted(["pools"]).url).toBe("http://127.0.0.1:8080");
    expect(accepted(["pools"], { ...env, PORT: "9000" }).url).toBe("http://127.0.0.1:9000");
    expect(accepted(["pools"], { ...env, PORT: "9000", GW_URL: "https://gw.example/" }).url).toBe("https://gw.example");
    expect(accepted(["pools", "--url", "http://10.0.0.2:8080/"], { ...env, GW_URL: "https://gw.example" }).url).toBe(
      "http://10.0.0.2:8080",
    );
  });

  test("--token wins over ADMIN_TOKEN; neither is a usage error", () => {
    expect(accepted(["pools"]).token).toBe(env.ADMIN_TOKEN);
    expect(accepted(["pools", "--token", "other-token"]).token).toBe("other-token");
    expect(refused(["pools"], {})).toContain("ADMIN_TOKEN");
    expect(refused(["pools"], { ADMIN_TOKEN: "" })).toContain("ADMIN_TOKEN");
  });

  test("--json anywhere on the line", () => {
    expect(accepted(["--json", "pools"]).json).toBe(true);
    expect(accepted(["accounts", "show", "acct_1", "--json"]).json).toBe(true);
    expect(accepted(["pools"]).json).toBe(false);
  });

  test("a bad URL is refused", () => {
    expect(refused(["pools", "--url", "not a url"])).toContain("not a URL");
    expect(refused(["pools", "--url", "ftp://host"])).toContain("http or https");
  });

  test("the token never appears in a refusal", () => {
    const token = "secret-admin-token-xyz";
    for (const argv of [
      ["pools", "--token", token, "--bogus"],
      ["pools", "--token", token, "--token", token],
      ["topup", "--token", token],
    ]) {
      expect(refused(argv)).not.toContain(token);
    }
  });
});

describe("parseInvocation: refusals", () => {
  test("missing arguments name what is missing", () => {
    expect(refused([])).toBe("no command given");
    expect(refused(["accounts", "create"])).toContain("missing <name>");
    expect(refused(["accounts", "show"])).toContain("missing <account-id>");
    expect(refused(["topup", "acct_1", "--reference", "r"])).toContain("missing <amount-toman>");
    expect(refused(["topup", "acct_1", "100"])).toContain("--reference is required");
    expect(refused(["keys", "create", "acct_1"])).toContain("missing <name>");
    expect(refused(["keys", "revoke"])).toContain("missing <key-id>");
    expect(refused(["accounts", "create", "  "])).toContain("must not be empty");
    expect(refused(["topup", "acct_1", "100", "--reference", " "])).toContain("must not be empty");
  });

  test("extra arguments and unknown commands", () => {
    expect(refused(["pools", "extra"])).toContain("unexpected argument: extra");
    expect(refused(["accounts", "show", "a", "b"])).toContain("unexpected argument: b");
    expect(refused(["accounts", "delete", "a"])).toContain("unknown command: accounts delete");
    expect(refused(["keys"])).toContain("create, limits or revoke");
    expect(refused(["wallets"])).toContain("unknown command: wallets");
  });

  test("unknown flags, flags the command does not take, repeated flags, missing values", () => {
    expect(refused(["pools", "--verbose"])).toBe("unknown flag: --verbose");
    expect(refused(["pools", "-v"])).toBe("unknown flag: -v");
    expect(refused(["pools", "--rpm", "5"])).toBe("pools does not take --rpm");
    expect(refused(["keys", "revoke", "key_1", "--reference", "r"])).toBe("keys revoke does not take --reference");
    expect(refused(["topup", "acct_1", "1", "--reference", "a", "--reference", "b"])).toBe("--reference given twice");
    expect(refused(["topup", "acct_1", "1", "--reference"])).toBe("--reference needs a value");
    expect(refused(["keys", "create", "acct_1", "ci", "--rpm", "--tpm", "5"])).toBe("--rpm needs a value");
    expect(refused(["pools", "--json=yes"])).toBe("--json takes no value");
  });

  test("limits must be positive whole numbers", () => {
    for (const bad of ["0", "-1", "1.5", "1e3", "abc", "", " 5", "007", "99999999999999999999"]) {
      expect(refused(["keys", "create", "acct_1", "ci", "--rpm", bad])).toContain("--rpm must be a positive whole number");
    }
    expect(refused(["keys", "limits", "key_1", "--concurrency-max", "none"])).toContain(
      "--concurrency-max must be a positive whole number",
    );
  });

  test("none lifts a limit only on an existing key", () => {
    expect(refused(["keys", "create", "acct_1", "ci", "--tpm", "none"])).toContain("--tpm none");
  });

  test("--allowed-models / --allowed-ips: comma-separated lists on keys create; a list or none on keys limits", () => {
    expect(
      command(["keys", "create", "acct_1", "ci", "--allowed-models", "gpt-4o-mini, phi-4", "--allowed-ips=203.0.113.0/24,::1"]),
    ).toEqual({
      kind: "keys.create",
      accountId: "acct_1",
      name: "ci",
      limits: { allowed_models: ["gpt-4o-mini", "phi-4"], allowed_ips: ["203.0.113.0/24", "::1"] },
    });
    expect(command(["keys", "limits", "key_1", "--allowed-models", "none", "--allowed-ips", "10.0.0.0/8"])).toEqual({
      kind: "keys.limits",
      keyId: "key_1",
      limits: { allowed_models: null, allowed_ips: ["10.0.0.0/8"] },
    });
    expect(refused(["keys", "create", "acct_1", "ci", "--allowed-ips", "none"])).toContain("--allowed-ips none");
    expect(refused(["keys", "limits", "key_1", "--allowed-ips", "10.0.0.0/8,10.0.0.0/40"])).toContain('not "10.0.0.0/40"');
    expect(refused(["keys", "limits", "key_1", "--allowed-models", " , "])).toContain("at least one entry");
    const many = Array.from({ length: 101 }, (_, i) => `m${i}`).join(",");
    expect(refused(["keys", "limits", "key_1", "--allowed-models", many])).toContain("not 101 entries");
  });

  test("keys limits with nothing to change", () => {
    expect(refused(["keys", "limits", "key_1"])).toContain("nothing to change");
  });

  test("amounts are whole or up to 6 decimals, and more than zero", () => {
    for (const bad of ["-5", "1.2345678", "1,000", "1e6", "abc", ".5", "5.", "0x10"]) {
      expect(refused(["topup", "acct_1", bad, "--reference", "r"])).toContain("amount-toman must be a whole number");
    }
    for (const zero of ["0", "0.000000", "00"]) {
      expect(refused(["topup", "acct_1", zero, "--reference", "r"])).toContain("more than zero");
    }
  });
});

describe("parseInvocation: paid top-ups", () => {
  test("start, list, show, complete, reject, reconcile", () => {
    expect(command(["topups", "start", "acc_1", "50000"])).toEqual({ kind: "topups.start", accountId: "acc_1", amountToman: "50000" });
    expect(command(["topups", "list"])).toEqual({ kind: "topups.list", state: undefined, accountId: undefined });
    expect(command(["topups", "list", "--state", "needs_review", "--account", "acc_1"])).toEqual({
      kind: "topups.list",
      state: "needs_review",
      accountId: "acc_1",
    });
    expect(command(["topups", "show", "top_1"])).toEqual({ kind: "topups.show", topupId: "top_1" });
    expect(command(["topups", "complete", "top_1", "--reason", " bank confirmed "])).toEqual({
      kind: "topups.review",
      topupId: "top_1",
      decision: "complete",
      reason: "bank confirmed",
    });
    expect(command(["topups", "reject", "top_1", "--reason", "never paid"])).toEqual({
      kind: "topups.review",
      topupId: "top_1",
      decision: "reject",
      reason: "never paid",
    });
    expect(command(["topups", "reject", "top_1", "--reason", "amount differs", "--reverse"])).toEqual({
      kind: "topups.review",
      topupId: "top_1",
      decision: "reject",
      reason: "amount differs",
      reverse: true,
    });
    expect(command(["topups", "reconcile"])).toEqual({ kind: "topups.reconcile" });
  });

  test("refusals say what is wrong", () => {
    expect(refused(["topups"])).toContain("say start, list, show, complete, reject or reconcile");
    expect(refused(["topups", "start", "acc_1", "-5"])).toContain("amount-toman");
    expect(refused(["topups", "start", "acc_1"])).toContain("missing <amount-toman>");
    expect(refused(["topups", "list", "--state", "paid"])).toContain("--state must be one of");
    expect(refused(["topups", "complete", "top_1"])).toContain("--reason is required");
    expect(refused(["topups", "reject", "top_1", "--reason", "no"])).toContain("--reason must be 3 to 500 characters");
    expect(refused(["topups", "show", "top_1", "--state", "verified"])).toContain("topups show does not take --state");
    expect(refused(["topups", "refund", "top_1"])).toContain("unknown command: topups refund");
    expect(refused(["topups", "complete", "top_1", "--reason", "paid", "--reverse"])).toContain("topups complete does not take --reverse");
  });
});

describe("parseInvocation: the admin API's rules", () => {
  test("accounts limits: each a whole number or default (null), at least one, bounded by the admin API's schema", () => {
    expect(command(["accounts", "limits", "acc_1", "--concurrency-max", "10", "--rpm", "default", "--key-tpm-max", "5000"])).toEqual({
      kind: "accounts.limits",
      accountId: "acc_1",
      limits: { concurrency_max: 10, rpm: null, key_tpm_max: 5000 },
    });
    expect(refused(["accounts", "limits", "acc_1"])).toContain("accounts limits: nothing to change; give --concurrency-max");
    expect(refused(["accounts", "limits", "acc_1", "--keys-max", "0"])).toContain("--keys-max must be a positive whole number");
    expect(refused(["accounts", "limits", "acc_1", "--tpm", "2147483648"])).toBe(
      '--tpm must be a positive whole number (at most 2147483647), not "2147483648"',
    );
  });

  test("bounds come from the admin API's schemas, not from the CLI", () => {
    expect(command(["keys", "create", "acct_1", "ci", "--rpm", "10000000"])).toMatchObject({ limits: { rpm: 10_000_000 } });
    expect(refused(["keys", "create", "acct_1", "ci", "--rpm", "10000001"])).toBe(
      '--rpm must be a positive whole number (at most 10000000), not "10000001"',
    );
    expect(refused(["rates", "set", "100000001"])).toContain("toman-per-usd must be a positive whole number (at most 100000000)");
    expect(command(["accounts", "create", "x".repeat(200)])).toMatchObject({ name: "x".repeat(200) });
    expect(refused(["accounts", "create", "x".repeat(201)])).toBe("name must be at most 200 characters");
    expect(refused(["topups", "start", "a".repeat(101), "5"])).toBe("account-id must be at most 100 characters");
    expect(refused(["topup", "acct_1", "5", "--reference", "r".repeat(201)])).toBe("--reference must be at most 200 characters");
  });

  test("a negative number is a word wherever it stands, and a flag's value may be negative", () => {
    expect(command(["adjust", "--reason", "why not", "acct_1", "--reference", "r", "-7"])).toMatchObject({
      accountId: "acct_1",
      amountToman: "-7",
    });
    expect(refused(["keys", "limits", "key_1", "--rpm", "-5"])).toContain(
      '--rpm must be a positive whole number (at most 10000000), not "-5"',
    );
  });
});

describe("parseInvocation: catalog", () => {
  test("catalog commands, with --by where a change is made", () => {
    expect(command(["catalog"])).toEqual({ kind: "catalog" });
    expect(command(["catalog", "set", "acme-1", "--file", "acme.json", "--by", "sara"])).toEqual({
      kind: "catalog.set",
      model: "acme-1",
      file: "acme.json",
      by: "sara",
    });
    expect(command(["catalog", "alias", "acme-1", "acme-1-2026-11-01"])).toEqual({
      kind: "catalog.alias",
      model: "acme-1",
      alias: "acme-1-2026-11-01",
    });
    expect(command(["catalog", "retire", "acme-0", "--successor", "acme-1"])).toEqual({
      kind: "catalog.retire",
      model: "acme-0",
      successor: "acme-1",
    });
    expect(command(["catalog", "changes", "--model", "acme-1"])).toEqual({ kind: "catalog.changes", model: "acme-1" });
  });

  test("a model id the catalog would refuse, or a retire without a successor, is a usage error", () => {
    expect(refused(["catalog", "alias", "acme-1", "Acme One"])).toContain("alias must be a model id");
    expect(refused(["catalog", "retire", "acme-0"])).toContain("--successor is required");
    expect(refused(["catalog", "set", "acme-1"])).toContain("--file is required");
  });
});

describe("parseInvocation: operators and audit", () => {
  test("operators add generates a password; role and ceiling are checked", () => {
    const added = command(["operators", "add", "ana", "support", "--name", "Ana", "--ceiling", "250000"]);
    expect(added).toMatchObject({ kind: "operators.add", login: "ana", role: "support", name: "Ana", ceilingToman: "250000" });
    expect((added as { password: string }).password).toMatch(/^[A-Za-z0-9]{24}$/);
    expect(refused(["operators", "add", "ana", "boss", "--name", "Ana"])).toContain("owner, finance, support or viewer");
    expect(refused(["operators", "add", "ana", "viewer"])).toContain("--name is required");
    expect(refused(["operators", "add", "ana", "support", "--name", "Ana", "--ceiling", "-1"])).toContain("amount-toman");
  });

  test("three-word commands: operators token create / revoke", () => {
    expect(command(["operators", "token", "create", "op_1", "--name", "ci"])).toEqual({
      kind: "operators.tokenCreate",
      operatorId: "op_1",
      name: "ci",
    });
    expect(command(["operators", "token", "revoke", "opt_1"])).toEqual({ kind: "operators.tokenRevoke", tokenId: "opt_1" });
    expect(command(["operators", "role", "op_1", "finance"])).toEqual({ kind: "operators.role", operatorId: "op_1", role: "finance" });
  });

  test("audit filters are checked as GET /admin/audit checks them", () => {
    expect(command(["audit", "--actor", "op_1", "--action", "wallet", "--limit", "20"])).toEqual({
      kind: "audit",
      query: { actor: "op_1", action: "wallet", limit: "20" },
    });
    expect(refused(["audit", "--from", "yesterday"])).toContain("--from and --to");
    expect(refused(["audit", "--limit", "501"])).toContain("--limit 1 to 500");
  });
});
