/**
 * The operator CLI's argument parser: argv + environment → one validated invocation, or a usage
 * error. Pure (no I/O, no process globals) so every command and refusal is unit-tested; `gw.ts`
 * runs nothing until this has accepted the whole command line.
 */
import { z } from "zod";

/** Key limits as the admin API takes them: absent = unchanged, null = no limit. */
export interface KeyLimitsInput {
  concurrency_max?: number;
  rpm?: number | null;
  tpm?: number | null;
  /** Toman as an exact decimal string. */
  monthly_spend_cap_toman?: string | null;
  /** `in-country`: the key's requests stay in the country; null: no requirement. */
  residency?: "in-country" | null;
}

export type Command =
  | { kind: "help" }
  | { kind: "accounts.create"; name: string }
  | { kind: "accounts.show"; accountId: string }
  | { kind: "topup"; accountId: string; amountToman: string; reference: string }
  | { kind: "keys.create"; accountId: string; name: string; limits: KeyLimitsInput }
  | { kind: "keys.limits"; keyId: string; limits: KeyLimitsInput }
  | { kind: "keys.revoke"; keyId: string }
  | { kind: "pools" }
  /** The live pool view, redrawn each second; `once`: print the first view and exit. */
  | { kind: "top"; once: boolean }
  /** `file` holds `{"backends": [...]}` as PUT /admin/pools/{model} takes it. */
  | { kind: "pools.set"; model: string; file: string }
  | { kind: "rates.show" }
  /** `effectiveAt` is absent for "now" (the gateway's clock). */
  | { kind: "rates.set"; tomanPerUsd: number; effectiveAt?: string }
  /** `amountToman` is an exact decimal string, negative for a debit. */
  | { kind: "adjust"; accountId: string; amountToman: string; reason: string; reference: string }
  | { kind: "ledger.audit" }
  /** Paid top-ups (src/payments): `amountToman` is an exact decimal string. */
  | { kind: "topups.start"; accountId: string; amountToman: string }
  | { kind: "topups.list"; state?: string; accountId?: string }
  | { kind: "topups.show"; topupId: string }
  /** `reverse` (reject only): hand the payment back through the provider first. */
  | { kind: "topups.review"; topupId: string; decision: "complete" | "reject"; reason: string; reverse?: true }
  | { kind: "topups.reconcile" }
  /** `all`: replayed ones too, not only those awaiting replay. */
  | { kind: "usage.deadLetters"; all: boolean }
  | { kind: "usage.replay"; deadLetterId: string };

export interface Invocation {
  command: Command;
  /** The gateway's base URL, without a trailing slash. */
  url: string;
  /** Null only for `help`, which sends nothing. */
  token: string | null;
  json: boolean;
}

export type ParseResult = { ok: true; invocation: Invocation } | { ok: false; error: string };

export const USAGE = `usage: bun run gw <command> [flags]

commands:
  accounts create <name>                          create an account
  accounts show <account-id>                      balance, keys and recent usage
  topup <account-id> <amount-toman> --reference <ref>
                                                  credit the wallet (same reference again: credited once)
  adjust <account-id> <amount-toman> --reason <text> --reference <ref>
                                                  correct a wallet: a positive amount credits it, a
                                                  negative one (e.g. -12.5) debits it; same reference
                                                  again: applied once
  keys create <account-id> <name> [--concurrency-max N] [--rpm N] [--tpm N]
              [--monthly-spend-cap TOMAN]         create a key (shown only once)
              [--residency in-country]            (in-country: its requests never leave the country)
  keys limits <key-id> [--concurrency-max N] [--rpm N|none] [--tpm N|none]
              [--monthly-spend-cap TOMAN|none]    change a key's limits (none = no limit;
              [--residency in-country|none]       a monthly cap of 0 stops all spending)
  keys revoke <key-id>                            revoke a key
  rates show                                      the toman-per-USD rate in effect, recent price
                                                  versions and the rate fetcher's status
  rates set <toman-per-usd> [--effective-at ISO]  a new rate and price version, from now or from
                                                  the given time (with offset: 2025-03-21T00:00:00+03:30)
  ledger audit                                    check every ledger invariant (exit 4 on a violation)
  topups start <account-id> <amount-toman>        start a paid top-up; prints the payment page URL
  topups list [--state S] [--account ID]          paid top-ups, newest first, with their state
  topups show <topup-id>                          one top-up with its provider replies
  topups complete <topup-id> --reason <text>      credit a top-up in review (once)
  topups reject <topup-id> --reason <text> [--reverse]
                                                  close a top-up in review without credit
                                                  (--reverse: hand the payment back first)
  topups reconcile                                run the payment reconciler now
  usage dead-letters [--all]                      usage records the ledger refused, awaiting replay
                                                  (--all: replayed ones too)
  usage replay <dead-letter-id>                   post a dead letter after a fix (by request id,
                                                  once) and reverse its write-off
  pools                                           backends of every model pool: estimates,
                                                  in flight, limits, breakers
  pools set <model> --file <backends.json>        replace a model's backends on every node; the
                                                  file is {"backends": [{name, kind, url, region,
                                                  api_key_env?, weight?, concurrency_max?,
                                                  upstream_model?}]}
  top [--once]                                    the cluster's live pool view, redrawn each second
                                                  like top (Ctrl+C quits; --once prints one view)
  help                                            show this text

flags:
  --url URL      the gateway (default: $GW_URL, else http://127.0.0.1:$PORT, PORT default 8080)
  --token TOKEN  the admin token (default: $ADMIN_TOKEN; prefer the variable, argv is visible to ps)
  --json         print the gateway's JSON reply as it came

exit codes: 0 ok, 1 the gateway refused, 2 usage error, 3 the gateway cannot be reached,
            4 ledger audit found violations`;

const GLOBAL_FLAGS = ["url", "token", "json", "help"] as const;
const LIMIT_FLAGS = ["concurrency-max", "rpm", "tpm", "monthly-spend-cap", "residency"] as const;
const BOOLEAN_FLAGS: ReadonlySet<string> = new Set(["json", "help", "once", "reverse", "all"]);
const KNOWN_FLAGS: ReadonlySet<string> = new Set([...GLOBAL_FLAGS, ...LIMIT_FLAGS, "reference", "reason", "effective-at", "file", "once", "state", "account", "reverse", "all"]);
/** The states a paid top-up can be in (src/db/schema.ts TOPUP_STATES). */
const TOPUP_STATES = ["created", "redirected", "verifying", "verified", "failed", "expired", "needs_review", "reversed"];
/** Amounts reach the gateway as exact decimal strings; the ledger counts micro-toman. */
const AMOUNT_PATTERN = /^\d+(?:\.\d{1,6})?$/;
const AMOUNT_ZERO_PATTERN = /^0+(?:\.0+)?$/;
/** The admin API's bounds on an adjustment's reason (after trimming). */
const REASON_LENGTH_MIN = 3;
const REASON_LENGTH_MAX = 500;
/** The same check the admin API makes on `effective_at`: an ISO time with a UTC offset (or Z). */
const ISO_WITH_OFFSET = z.iso.datetime({ offset: true });

type Flags = Map<string, string | true>;

class UsageError extends Error {}

/**
 * Parses the words after `gw` against the environment (GW_URL, PORT, ADMIN_TOKEN).
 * @example parseInvocation(["keys", "revoke", "key_1"], { ADMIN_TOKEN: "t" })
 *   // { ok: true, invocation: { command: { kind: "keys.revoke", keyId: "key_1" }, url: "http://127.0.0.1:8080", token: "t", json: false } }
 */
export function parseInvocation(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): ParseResult {
  try {
    return { ok: true, invocation: invocationOf(argv, env) };
  } catch (error) {
    if (error instanceof UsageError) return { ok: false, error: error.message };
    throw error;
  }
}

function invocationOf(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): Invocation {
  const { positionals, flags } = tokenize(argv);
  const command = flags.has("help") ? ({ kind: "help" } as const) : commandOf(positionals, flags);
  const json = flags.get("json") === true;
  if (command.kind === "help") return { command, url: "", token: null, json };
  const url = urlOf(stringFlag(flags, "url") ?? env.GW_URL ?? `http://127.0.0.1:${env.PORT || "8080"}`);
  const token = stringFlag(flags, "token") ?? env.ADMIN_TOKEN ?? "";
  if (token.trim() === "") throw new UsageError("no admin token: set ADMIN_TOKEN (or pass --token)");
  return { command, url, token, json };
}

/** Splits argv into positionals and `--flag value` / `--flag=value` pairs; `--` ends the flags. */
function tokenize(argv: readonly string[]): { positionals: string[]; flags: Flags } {
  const positionals: string[] = [];
  const flags: Flags = new Map();
  for (let i = 0; i < argv.length; i++) {
    const word = argv[i]!;
    if (word === "--") {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    const flag = word === "-h" ? "--help" : word;
    if (!flag.startsWith("--")) {
      // A negative number is left to the value checks, which say what is wrong with it.
      if (flag.startsWith("-") && flag.length > 1 && !/^-\d/.test(flag)) throw new UsageError(`unknown flag: ${flag}`);
      positionals.push(flag);
      continue;
    }
    const eq = flag.indexOf("=");
    const name = flag.slice(2, eq === -1 ? undefined : eq);
    if (!KNOWN_FLAGS.has(name)) throw new UsageError(`unknown flag: --${name}`);
    if (flags.has(name)) throw new UsageError(`--${name} given twice`);
    if (BOOLEAN_FLAGS.has(name)) {
      if (eq !== -1) throw new UsageError(`--${name} takes no value`);
      flags.set(name, true);
      continue;
    }
    const value = eq === -1 ? argv[++i] : flag.slice(eq + 1);
    if (value === undefined || (eq === -1 && value.startsWith("--"))) throw new UsageError(`--${name} needs a value`);
    flags.set(name, value);
  }
  return { positionals, flags };
}

function commandOf(positionals: readonly string[], flags: Flags): Command {
  const [word, ...rest] = positionals;
  switch (word) {
    case undefined:
      throw new UsageError("no command given");
    case "help":
      return { kind: "help" };
    case "accounts":
      return accountsCommand(rest, flags);
    case "topup":
      return topupCommand(rest, flags);
    case "keys":
      return keysCommand(rest, flags);
    case "adjust":
      return adjustCommand(rest, flags);
    case "rates":
      return ratesCommand(rest, flags);
    case "ledger":
      return ledgerCommand(rest, flags);
    case "topups":
      return topupsCommand(rest, flags);
    case "pools":
      return poolsCommand(rest, flags);
    case "usage":
      return usageCommand(rest, flags);
    case "top":
      allowFlags(flags, ["once"], "top");
      arity(rest, [], "top");
      return { kind: "top", once: flags.get("once") === true };
    default:
      throw new UsageError(`unknown command: ${word}`);
  }
}

function poolsCommand(words: readonly string[], flags: Flags): Command {
  const [sub, ...rest] = words;
  if (sub === undefined || sub === "show") {
    allowFlags(flags, [], "pools");
    arity(rest, [], "pools");
    return { kind: "pools" };
  }
  if (sub === "set") {
    allowFlags(flags, ["file"], "pools set");
    const [model] = arity(rest, ["model"], "pools set");
    const file = stringFlag(flags, "file");
    if (file === undefined) throw new UsageError('pools set: --file is required (a JSON file: {"backends": [...]})');
    return { kind: "pools.set", model: nonEmpty(model, "model"), file: nonEmpty(file, "--file") };
  }
  arity(words, [], "pools");
  throw new UsageError(`unknown command: pools ${sub}`);
}

function accountsCommand(words: readonly string[], flags: Flags): Command {
  const [sub, ...rest] = words;
  allowFlags(flags, [], `accounts ${sub ?? ""}`.trim());
  if (sub === "create") {
    const [name] = arity(rest, ["name"], "accounts create");
    return { kind: "accounts.create", name: nonEmpty(name, "name") };
  }
  if (sub === "show") {
    const [accountId] = arity(rest, ["account-id"], "accounts show");
    return { kind: "accounts.show", accountId: nonEmpty(accountId, "account-id") };
  }
  throw new UsageError(sub === undefined ? "accounts: say create or show" : `unknown command: accounts ${sub}`);
}

function topupCommand(words: readonly string[], flags: Flags): Command {
  allowFlags(flags, ["reference"], "topup");
  const [accountId, amount] = arity(words, ["account-id", "amount-toman"], "topup");
  const reference = stringFlag(flags, "reference");
  if (reference === undefined) throw new UsageError("topup: --reference is required (it makes a repeated top-up harmless)");
  return { kind: "topup", accountId: nonEmpty(accountId, "account-id"), amountToman: amountOf(amount), reference: nonEmpty(reference, "--reference") };
}

function adjustCommand(words: readonly string[], flags: Flags): Command {
  allowFlags(flags, ["reason", "reference"], "adjust");
  const [accountId, amount] = arity(words, ["account-id", "amount-toman"], "adjust");
  const reason = stringFlag(flags, "reason");
  if (reason === undefined) throw new UsageError("adjust: --reason is required (it is kept with the correction)");
  const reference = stringFlag(flags, "reference");
  if (reference === undefined) throw new UsageError("adjust: --reference is required (it makes a repeated adjustment harmless)");
  const trimmedReason = reason.trim();
  if (trimmedReason.length < REASON_LENGTH_MIN || trimmedReason.length > REASON_LENGTH_MAX) {
    throw new UsageError(`--reason must be ${REASON_LENGTH_MIN} to ${REASON_LENGTH_MAX} characters`);
  }
  return {
    kind: "adjust",
    accountId: nonEmpty(accountId, "account-id"),
    amountToman: signedAmountOf(amount),
    reason: trimmedReason,
    reference: nonEmpty(reference, "--reference"),
  };
}

function ratesCommand(words: readonly string[], flags: Flags): Command {
  const [sub, ...rest] = words;
  if (sub === "show") {
    allowFlags(flags, [], "rates show");
    arity(rest, [], "rates show");
    return { kind: "rates.show" };
  }
  if (sub === "set") {
    allowFlags(flags, ["effective-at"], "rates set");
    const [rate] = arity(rest, ["toman-per-usd"], "rates set");
    const tomanPerUsd = positiveInteger(rate!, "toman-per-usd");
    const effectiveAt = stringFlag(flags, "effective-at");
    if (effectiveAt === undefined) return { kind: "rates.set", tomanPerUsd };
    if (!ISO_WITH_OFFSET.safeParse(effectiveAt).success) {
      throw new UsageError(`--effective-at must be an ISO time with an offset, like 2025-03-21T00:00:00+03:30 or 2025-03-20T20:30:00Z, not ${JSON.stringify(effectiveAt)}`);
    }
    return { kind: "rates.set", tomanPerUsd, effectiveAt };
  }
  throw new UsageError(sub === undefined ? "rates: say show or set" : `unknown command: rates ${sub}`);
}

function ledgerCommand(words: readonly string[], flags: Flags): Command {
  const [sub, ...rest] = words;
  if (sub === "audit") {
    allowFlags(flags, [], "ledger audit");
    arity(rest, [], "ledger audit");
    return { kind: "ledger.audit" };
  }
  throw new UsageError(sub === undefined ? "ledger: say audit" : `unknown command: ledger ${sub}`);
}

function topupsCommand(words: readonly string[], flags: Flags): Command {
  const [sub, ...rest] = words;
  switch (sub) {
    case "start": {
      allowFlags(flags, [], "topups start");
      const [accountId, amount] = arity(rest, ["account-id", "amount-toman"], "topups start");
      return { kind: "topups.start", accountId: nonEmpty(accountId, "account-id"), amountToman: amountOf(amount) };
    }
    case "list": {
      allowFlags(flags, ["state", "account"], "topups list");
      arity(rest, [], "topups list");
      const state = stringFlag(flags, "state");
      if (state !== undefined && !TOPUP_STATES.includes(state)) throw new UsageError(`--state must be one of ${TOPUP_STATES.join(", ")}, not ${JSON.stringify(state)}`);
      const account = stringFlag(flags, "account");
      return { kind: "topups.list", state, accountId: account === undefined ? undefined : nonEmpty(account, "--account") };
    }
    case "show": {
      allowFlags(flags, [], "topups show");
      const [topupId] = arity(rest, ["topup-id"], "topups show");
      return { kind: "topups.show", topupId: nonEmpty(topupId, "topup-id") };
    }
    case "complete":
    case "reject": {
      allowFlags(flags, sub === "reject" ? ["reason", "reverse"] : ["reason"], `topups ${sub}`);
      const [topupId] = arity(rest, ["topup-id"], `topups ${sub}`);
      const reason = stringFlag(flags, "reason")?.trim();
      if (reason === undefined) throw new UsageError(`topups ${sub}: --reason is required (it is kept with the decision)`);
      if (reason.length < REASON_LENGTH_MIN || reason.length > REASON_LENGTH_MAX) throw new UsageError(`--reason must be ${REASON_LENGTH_MIN} to ${REASON_LENGTH_MAX} characters`);
      const reviewed = { kind: "topups.review", topupId: nonEmpty(topupId, "topup-id"), decision: sub, reason } as const;
      return flags.get("reverse") === true ? { ...reviewed, reverse: true } : reviewed;
    }
    case "reconcile":
      allowFlags(flags, [], "topups reconcile");
      arity(rest, [], "topups reconcile");
      return { kind: "topups.reconcile" };
    default:
      throw new UsageError(sub === undefined ? "topups: say start, list, show, complete, reject or reconcile" : `unknown command: topups ${sub}`);
  }
}

function usageCommand(words: readonly string[], flags: Flags): Command {
  const [sub, ...rest] = words;
  if (sub === "dead-letters") {
    allowFlags(flags, ["all"], "usage dead-letters");
    arity(rest, [], "usage dead-letters");
    return { kind: "usage.deadLetters", all: flags.get("all") === true };
  }
  if (sub === "replay") {
    allowFlags(flags, [], "usage replay");
    const [id] = arity(rest, ["dead-letter-id"], "usage replay");
    if (!/^[1-9][0-9]{0,18}$/.test(id!)) throw new UsageError(`usage replay: the dead letter id is a number (from \`usage dead-letters\`), not ${JSON.stringify(id)}`);
    return { kind: "usage.replay", deadLetterId: id! };
  }
  throw new UsageError(sub === undefined ? "usage: say dead-letters or replay" : `unknown command: usage ${sub}`);
}

function keysCommand(words: readonly string[], flags: Flags): Command {
  const [sub, ...rest] = words;
  if (sub === "create") {
    allowFlags(flags, LIMIT_FLAGS, "keys create");
    const [accountId, name] = arity(rest, ["account-id", "name"], "keys create");
    return { kind: "keys.create", accountId: nonEmpty(accountId, "account-id"), name: nonEmpty(name, "name"), limits: limitsOf(flags, { noneAllowed: false }) };
  }
  if (sub === "limits") {
    allowFlags(flags, LIMIT_FLAGS, "keys limits");
    const [keyId] = arity(rest, ["key-id"], "keys limits");
    const limits = limitsOf(flags, { noneAllowed: true });
    if (Object.keys(limits).length === 0) throw new UsageError("keys limits: nothing to change; give --concurrency-max, --rpm, --tpm, --monthly-spend-cap or --residency");
    return { kind: "keys.limits", keyId: nonEmpty(keyId, "key-id"), limits };
  }
  if (sub === "revoke") {
    allowFlags(flags, [], "keys revoke");
    const [keyId] = arity(rest, ["key-id"], "keys revoke");
    return { kind: "keys.revoke", keyId: nonEmpty(keyId, "key-id") };
  }
  throw new UsageError(sub === undefined ? "keys: say create, limits or revoke" : `unknown command: keys ${sub}`);
}

/** Refuses flags that the command does not take (the global ones are always allowed). */
function allowFlags(flags: Flags, allowed: readonly string[], command: string): void {
  for (const name of flags.keys()) {
    if (!(GLOBAL_FLAGS as readonly string[]).includes(name) && !allowed.includes(name)) {
      throw new UsageError(`${command} does not take --${name}`);
    }
  }
}

/** Exactly `names.length` positionals, or a usage error naming what is missing or extra. */
function arity(words: readonly string[], names: readonly string[], command: string): string[] {
  if (words.length < names.length) throw new UsageError(`${command}: missing <${names[words.length]}>`);
  if (words.length > names.length) throw new UsageError(`${command}: unexpected argument: ${words[names.length]}`);
  return [...words];
}

function nonEmpty(value: string | undefined, what: string): string {
  const trimmed = value?.trim() ?? "";
  if (trimmed === "") throw new UsageError(`${what} must not be empty`);
  return trimmed;
}

function stringFlag(flags: Flags, name: string): string | undefined {
  const value = flags.get(name);
  return typeof value === "string" ? value : undefined;
}

function amountOf(text: string | undefined): string {
  const amount = text?.trim() ?? "";
  if (!AMOUNT_PATTERN.test(amount)) {
    throw new UsageError(`amount-toman must be a whole number or a decimal with at most 6 decimals, not ${JSON.stringify(amount)}`);
  }
  if (AMOUNT_ZERO_PATTERN.test(amount)) throw new UsageError("amount-toman must be more than zero");
  return amount;
}

/** An adjustment's amount: like a top-up's, but a leading minus makes it a debit. */
function signedAmountOf(text: string | undefined): string {
  const amount = text?.trim() ?? "";
  const negative = amount.startsWith("-");
  const magnitude = negative ? amount.slice(1) : amount;
  if (!AMOUNT_PATTERN.test(magnitude)) {
    throw new UsageError(`amount-toman must be a whole number or a decimal with at most 6 decimals, negative for a debit (e.g. -12.5), not ${JSON.stringify(amount)}`);
  }
  if (AMOUNT_ZERO_PATTERN.test(magnitude)) throw new UsageError("amount-toman must not be zero");
  return amount;
}

function limitsOf(flags: Flags, options: { noneAllowed: boolean }): KeyLimitsInput {
  const limits: KeyLimitsInput = {};
  const concurrency = stringFlag(flags, "concurrency-max");
  if (concurrency !== undefined) limits.concurrency_max = positiveInteger(concurrency, "--concurrency-max");
  for (const name of ["rpm", "tpm"] as const) {
    const value = stringFlag(flags, name);
    if (value === undefined) continue;
    if (value === "none" && !options.noneAllowed) throw new UsageError(`--${name} none: a new key has no ${name} limit unless you give one`);
    limits[name] = value === "none" ? null : positiveInteger(value, `--${name}`);
  }
  const cap = stringFlag(flags, "monthly-spend-cap");
  if (cap !== undefined) {
    if (cap === "none" && !options.noneAllowed) throw new UsageError("--monthly-spend-cap none: a new key has no monthly spend cap unless you give one");
    if (cap !== "none" && !AMOUNT_PATTERN.test(cap)) {
      throw new UsageError(`--monthly-spend-cap must be toman as a whole number or a decimal with at most 6 decimals${options.noneAllowed ? ", or none" : ""}, not ${JSON.stringify(cap)}`);
    }
    limits.monthly_spend_cap_toman = cap === "none" ? null : cap;
  }
  const residency = stringFlag(flags, "residency");
  if (residency !== undefined) {
    if (residency !== "in-country" && !(residency === "none" && options.noneAllowed)) {
      throw new UsageError(`--residency must be in-country${options.noneAllowed ? " or none" : ""}, not ${JSON.stringify(residency)}`);
    }
    limits.residency = residency === "none" ? null : "in-country";
  }
  return limits;
}

function positiveInteger(text: string, what: string): number {
  const value = Number(text);
  if (!/^[1-9]\d*$/.test(text) || !Number.isSafeInteger(value)) throw new UsageError(`${what} must be a positive whole number, not ${JSON.stringify(text)}`);
  return value;
}

function urlOf(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new UsageError(`the gateway URL is not a URL: ${JSON.stringify(text)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new UsageError(`the gateway URL must be http or https, not ${url.protocol}`);
  return url.toString().replace(/\/+$/, "");
}
