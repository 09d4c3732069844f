/**
 * The operator CLI's argument parser: argv + environment → one validated invocation, or a usage
 * error. `node:util` parseArgs splits the words; a table says what each command takes; every
 * value is checked by the schema the admin API checks it with (src/http/admin), so a rule
 * changes in one place. Pure (no I/O, no process globals) so every command and refusal is
 * unit-tested; `gw.ts` runs nothing until this has accepted the whole command line.
 */
import { parseArgs } from "node:util";
import type { z } from "zod";
import { modelId } from "../catalog/file.ts";
import { aliasBody } from "../http/admin/catalog.ts";
import { DEAD_LETTER_ID } from "../http/admin/deadletters.ts";
import { adjustmentBody, createAccountBody, createKeyBody, keyLimitsBody, rateBody, topUpBody } from "../http/admin/route.ts";
import { accountLimitsBody } from "../keys/accountLimits.ts";
import { KEY_ALLOWED_IPS_MAX, KEY_ALLOWED_MODELS_MAX } from "../keys/restrictions.ts";
import { addOperatorBody, auditQuery } from "../http/admin/operators.ts";
import { searchQuery, windowQuery } from "../http/admin/figures.ts";
import { randomBase62 } from "../ids.ts";
import { isRole, OPERATOR_ROLES, type Role } from "../operators/roles.ts";
import { listQuery as topupListQuery, reason as reviewReason, startBody as topupStartBody } from "../http/admin/topups.ts";

/** Key limits as the admin API takes them: absent = unchanged, null = no limit. */
export type KeyLimitsInput = z.input<typeof keyLimitsBody>;
export type AccountLimitsInput = z.input<typeof accountLimitsBody>;

export type Command =
  | { kind: "help" }
  | { kind: "accounts.create"; name: string }
  | { kind: "accounts.show"; accountId: string }
  /** Each limit a number, or null for its default (src/keys/accountLimits.ts). */
  | { kind: "accounts.limits"; accountId: string; limits: AccountLimitsInput }
  | { kind: "topup"; accountId: string; amountToman: string; reference: string }
  | { kind: "keys.create"; accountId: string; name: string; limits: KeyLimitsInput }
  | { kind: "keys.limits"; keyId: string; limits: KeyLimitsInput }
  | { kind: "keys.revoke"; keyId: string }
  | { kind: "pools" }
  /** The live pool view, redrawn each second; `once`: print the first view and exit. */
  | { kind: "top"; once: boolean }
  /** `file` holds `{"backends": [...]}` as PUT /admin/pools/{model} takes it. */
  | { kind: "pools.set"; model: string; file: string }
  /** The catalog: every model with its aliases, capabilities and USD prices. */
  | { kind: "catalog" }
  /** `file` holds one model's entry as the catalog file writes it (`id` optional). */
  | { kind: "catalog.set"; model: string; file: string; by?: string }
  /** The same file: what `catalog set` would do to today's toman prices, changing nothing. */
  | { kind: "catalog.preview"; model: string; file: string }
  | { kind: "catalog.alias"; model: string; alias: string; by?: string }
  | { kind: "catalog.retire"; model: string; successor: string; by?: string }
  | { kind: "catalog.changes"; model?: string }
  /** `source`: a catalog file's path, or an https URL the gateway fetches; the diff, applied with `apply`. */
  | { kind: "catalog.import"; source: string; apply: boolean; by?: string }
  | { kind: "rates.show" }
  /** `effectiveAt` is absent for "now" (the gateway's clock). */
  | { kind: "rates.set"; tomanPerUsd: number; effectiveAt?: string }
  /** `amountToman` is an exact decimal string, negative for a debit. */
  | { kind: "adjust"; accountId: string; amountToman: string; reason: string; reference: string }
  | { kind: "ledger.audit" }
  /** Paid top-ups (src/payments): `amountToman` is an exact decimal string. */
  | { kind: "topups.start"; accountId: string; amountToman: string }
  | { kind: "topups.list"; state?: TopupState; accountId?: string }
  | { kind: "topups.show"; topupId: string }
  /** `reverse` (reject only): hand the payment back through the provider first. */
  | { kind: "topups.review"; topupId: string; decision: "complete" | "reject"; reason: string; reverse?: true }
  | { kind: "topups.reconcile" }
  /** `all`: replayed ones too, not only those awaiting replay. */
  | { kind: "usage.deadLetters"; all: boolean }
  | { kind: "usage.replay"; deadLetterId: string }
  | { kind: "operators.list" }
  /** `password` is generated as the command is read, sent once and printed once. */
  | { kind: "operators.add"; login: string; name: string; role: Role; password: string; ceilingToman?: string }
  | { kind: "operators.remove"; operatorId: string }
  | { kind: "operators.role"; operatorId: string; role: Role }
  | { kind: "operators.tokenCreate"; operatorId: string; name: string }
  | { kind: "operators.tokenRevoke"; tokenId: string }
  | { kind: "audit"; query: AuditFilters }
  /** The operators' console's reads (src/cli/figures.ts). */
  | { kind: "customers.search"; text: string }
  | { kind: "accounts.usage"; accountId: string; query: UsageFilters }
  | { kind: "accounts.sessions"; accountId: string }
  | { kind: "accounts.wallet"; accountId: string }
  | { kind: "revenue"; window: WindowFilters }
  | { kind: "anomalies"; window: WindowFilters }
  | { kind: "overview" };

/** `gw accounts usage`'s filters, as GET /admin/accounts/{id}/usage takes them. */
export type UsageFilters = { key?: string; model?: string; from?: string; to?: string; limit?: string };
/** A window, as GET /admin/revenue and /admin/anomalies take it (ISO times with an offset). */
export type WindowFilters = { from?: string; to?: string };

/** `gw audit`'s filters, as GET /admin/audit takes them. */
export type AuditFilters = { actor?: string; action?: string; target?: string; from?: string; to?: string; limit?: string };

type TopupState = NonNullable<z.output<typeof topupListQuery>["state"]>;

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
  accounts limits <account-id> [--concurrency-max N] [--rpm N] [--tpm N] [--keys-max N]
              [--key-concurrency-max N] [--key-rpm-max N] [--key-tpm-max N]
                                                  the account's limits over all its keys, its
                                                  number of live keys, and the ceilings of keys
                                                  made in the console (default = the named default)
  topup <account-id> <amount-toman> --reference <ref>
                                                  credit the wallet (same reference again: credited once)
  adjust <account-id> <amount-toman> --reason <text> --reference <ref>
                                                  correct a wallet: a positive amount credits it, a
                                                  negative one (e.g. -12.5) debits it; same reference
                                                  again: applied once
  keys create <account-id> <name> [--concurrency-max N] [--rpm N] [--tpm N]
              [--monthly-spend-cap TOMAN]         create a key (shown only once)
              [--residency in-country]            (in-country: its requests never leave the country)
              [--allowed-models M1,M2]            (only these models, by id or alias)
              [--allowed-ips CIDR1,CIDR2]         (only from these addresses or CIDR blocks)
  keys limits <key-id> [--concurrency-max N] [--rpm N|none] [--tpm N|none]
              [--monthly-spend-cap TOMAN|none]    change a key's limits and restrictions (none =
              [--residency in-country|none]       no limit; a monthly cap of 0 stops all spending)
              [--allowed-models M1,M2|none]
              [--allowed-ips CIDR1,CIDR2|none]
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
                                                  upstream_model?, responses_api?}], paid_fields?},
                                                  1 to 64 backends, checked as the pools file is
  catalog                                         every model: aliases, limits, capabilities, USD prices
  catalog set <model> --file <entry.json> [--by NAME]
                                                  add or change a model on every node (a new price
                                                  version; the entry as src/catalog/models.json
                                                  writes one, see docs/catalog.md)
  catalog preview <model> --file <entry.json>     what catalog set would do to today's toman
                                                  prices, before and after; changes nothing
  catalog alias <model> <alias> [--by NAME]       one more name the model answers to
  catalog retire <model> --successor <id> [--by NAME]
                                                  the model answers 410 naming its successor
  catalog changes [--model ID]                    who changed the catalog, when, and how
  operators list                                  the operators and their roles (owner)
  operators add <login> <role> --name <text> [--ceiling TOMAN]
                                                  a new operator (owner, finance, support, viewer);
                                                  prints their password and TOTP URI once
                                                  (--ceiling: support's adjustments per Tehran day)
  operators role <operator-id> <role>             give an operator another role
  operators remove <operator-id>                  remove an operator, their tokens and sessions
  operators token create <operator-id> --name <text>
                                                  a personal token (dvz-op-…) for gw and scripts,
                                                  shown once; use it as --token or ADMIN_TOKEN
  operators token revoke <token-id>               revoke a personal token
  audit [--actor ID] [--action A] [--target T] [--from ISO] [--to ISO] [--limit N]
                                                  the audit trail, newest first (owner)
  customers search <text>                         customers by phone (any way written), account
                                                  id or its start, name, key id, key display or key
  accounts usage <account-id> [--key ID] [--model M] [--from DATE] [--to DATE] [--limit N]
                                                  an account's requests, newest first, and totals
  accounts sessions <account-id>                  an account's live console sessions
  accounts wallet <account-id>                    top-ups and adjustments (with reasons), leases
  revenue [--from ISO] [--to ISO]                 revenue by model, vendor and region (default:
                                                  today, Tehran time), reconciled with the ledger
  anomalies [--from ISO] [--to ISO]               upstream usage reports outside their bounds, by
                                                  backend (default: the last 30 days)
  overview                                        today's and this month's revenue, the ledger
                                                  audit, dead letters, SMS, payments, pools
  catalog import <file-or-url> [--apply] [--by NAME]
                                                  a whole catalog file's diff against the catalog
                                                  (added, prices, limits, aliases, retired, absent);
                                                  --apply applies it as one price version
  top [--once]                                    the cluster's live pool view, redrawn each second
                                                  like top (Ctrl+C quits; --once prints one view)
  help                                            show this text

flags:
  --url URL      the gateway (default: $GW_URL, else http://127.0.0.1:$PORT, PORT default 8080)
  --token TOKEN  ADMIN_TOKEN or an operator's personal token dvz-op-… (default: $ADMIN_TOKEN;
                 prefer the variable, argv is visible to ps)
  --json         print the gateway's JSON reply as it came

exit codes: 0 ok, 1 the gateway refused, 2 usage error, 3 the gateway cannot be reached,
            4 ledger audit found violations`;

/** Every flag the CLI knows; parseArgs splits them, `tokenize` holds them to this set. */
const OPTIONS = {
  url: { type: "string" },
  token: { type: "string" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
  "concurrency-max": { type: "string" },
  rpm: { type: "string" },
  tpm: { type: "string" },
  "monthly-spend-cap": { type: "string" },
  "keys-max": { type: "string" },
  "key-concurrency-max": { type: "string" },
  "key-rpm-max": { type: "string" },
  "key-tpm-max": { type: "string" },
  residency: { type: "string" },
  "allowed-models": { type: "string" },
  "allowed-ips": { type: "string" },
  reference: { type: "string" },
  reason: { type: "string" },
  "effective-at": { type: "string" },
  file: { type: "string" },
  state: { type: "string" },
  account: { type: "string" },
  once: { type: "boolean" },
  by: { type: "string" },
  successor: { type: "string" },
  model: { type: "string" },
  reverse: { type: "boolean" },
  all: { type: "boolean" },
  name: { type: "string" },
  ceiling: { type: "string" },
  actor: { type: "string" },
  action: { type: "string" },
  target: { type: "string" },
  from: { type: "string" },
  to: { type: "string" },
  limit: { type: "string" },
  apply: { type: "boolean" },
  key: { type: "string" },
} as const;
type Flag = keyof typeof OPTIONS;
type Flags = ReadonlyMap<Flag, string | true>;

const GLOBAL_FLAGS: readonly Flag[] = ["url", "token", "json", "help"];
const LIMIT_FLAGS: readonly Flag[] = ["concurrency-max", "rpm", "tpm", "monthly-spend-cap", "residency", "allowed-models", "allowed-ips"];
/** The flags of `accounts limits`, each with its field of the admin API's `limits`. */
const ACCOUNT_LIMIT_FLAGS = [
  ["concurrency-max", "concurrency_max"],
  ["rpm", "rpm"],
  ["tpm", "tpm"],
  ["keys-max", "keys_max"],
  ["key-concurrency-max", "key_concurrency_max"],
  ["key-rpm-max", "key_rpm_max"],
  ["key-tpm-max", "key_tpm_max"],
] as const satisfies readonly (readonly [Flag, keyof AccountLimitsInput])[];
/** A word like -12.5 is a value (a debit), not a cluster of short flags as parseArgs reads it. */
const NEGATIVE_NUMBER = /^-\d/;
/** How a whole number is written on a command line: no sign, exponent, separator or leading zero. */
const WHOLE_NUMBER = /^[1-9]\d*$/;
const AMOUNT_RULE = "a whole number or a decimal with at most 6 decimals";
const ISO_EXAMPLES = "like 2025-03-21T00:00:00+03:30 or 2025-03-20T20:30:00Z";

/** What one command takes; `build` runs once its flags and the number of its words are right. */
interface Spec {
  /** The words after the command's own, named as the usage names them. */
  args: readonly string[];
  flags?: readonly Flag[];
  /** Flags that must be given, each with the reason a refusal gives. */
  required?: Partial<Record<Flag, string>>;
  build: (args: readonly string[], flags: Flags) => Command;
}

const pools: Spec = { args: [], build: () => ({ kind: "pools" }) };
const reviewed =
  (decision: "complete" | "reject"): Spec["build"] =>
  ([id], flags) => {
    const review = {
      kind: "topups.review",
      topupId: nonEmpty(id, "topup-id"),
      decision,
      reason: text(reviewReason, value(flags, "reason"), "--reason"),
    } as const;
    return flags.has("reverse") ? { ...review, reverse: true } : review;
  };

/** Every command by its words; a first word with no command of its own names a group. */
const COMMANDS: Readonly<Record<string, Spec>> = {
  help: { args: [], build: () => ({ kind: "help" }) },
  "accounts create": {
    args: ["name"],
    build: ([name]) => ({ kind: "accounts.create", name: text(createAccountBody.shape.name, name, "name") }),
  },
  "accounts show": { args: ["account-id"], build: ([id]) => ({ kind: "accounts.show", accountId: nonEmpty(id, "account-id") }) },
  "accounts limits": {
    args: ["account-id"],
    flags: ACCOUNT_LIMIT_FLAGS.map(([flag]) => flag),
    build: ([id], flags) => ({ kind: "accounts.limits", accountId: nonEmpty(id, "account-id"), limits: accountLimitsOf(flags) }),
  },
  topup: {
    args: ["account-id", "amount-toman"],
    flags: ["reference"],
    required: { reference: "it makes a repeated top-up harmless" },
    build: ([id, amount], flags) => ({
      kind: "topup",
      accountId: nonEmpty(id, "account-id"),
      amountToman: creditOf(topUpBody.shape.amount_toman, amount),
      reference: text(topUpBody.shape.reference, value(flags, "reference"), "--reference"),
    }),
  },
  adjust: {
    args: ["account-id", "amount-toman"],
    flags: ["reason", "reference"],
    required: { reason: "it is kept with the correction", reference: "it makes a repeated adjustment harmless" },
    build: ([id, amount], flags) => ({
      kind: "adjust",
      accountId: nonEmpty(id, "account-id"),
      amountToman: adjustmentOf(amount),
      reason: text(adjustmentBody.shape.reason, value(flags, "reason"), "--reason"),
      reference: text(adjustmentBody.shape.reference, value(flags, "reference"), "--reference"),
    }),
  },
  "keys create": {
    args: ["account-id", "name"],
    flags: LIMIT_FLAGS,
    build: ([id, name], flags) => ({
      kind: "keys.create",
      accountId: nonEmpty(id, "account-id"),
      name: text(createKeyBody.shape.name, name, "name"),
      limits: limitsOf(flags, { noneAllowed: false }),
    }),
  },
  "keys limits": {
    args: ["key-id"],
    flags: LIMIT_FLAGS,
    build: ([id], flags) => ({ kind: "keys.limits", keyId: nonEmpty(id, "key-id"), limits: changedLimitsOf(flags) }),
  },
  "keys revoke": { args: ["key-id"], build: ([id]) => ({ kind: "keys.revoke", keyId: nonEmpty(id, "key-id") }) },
  "rates show": { args: [], build: () => ({ kind: "rates.show" }) },
  "rates set": { args: ["toman-per-usd"], flags: ["effective-at"], build: ([rate], flags) => rateOf(rate, value(flags, "effective-at")) },
  "ledger audit": { args: [], build: () => ({ kind: "ledger.audit" }) },
  "topups start": {
    args: ["account-id", "amount-toman"],
    build: ([id, amount]) => ({
      kind: "topups.start",
      accountId: text(topupStartBody.shape.account_id, id, "account-id"),
      amountToman: creditOf(topupStartBody.shape.amount_toman, amount),
    }),
  },
  "topups list": { args: [], flags: ["state", "account"], build: (_, flags) => topupsListOf(flags) },
  "topups show": { args: ["topup-id"], build: ([id]) => ({ kind: "topups.show", topupId: nonEmpty(id, "topup-id") }) },
  "topups complete": {
    args: ["topup-id"],
    flags: ["reason"],
    required: { reason: "it is kept with the decision" },
    build: reviewed("complete"),
  },
  "topups reject": {
    args: ["topup-id"],
    flags: ["reason", "reverse"],
    required: { reason: "it is kept with the decision" },
    build: reviewed("reject"),
  },
  "topups reconcile": { args: [], build: () => ({ kind: "topups.reconcile" }) },
  "usage dead-letters": { args: [], flags: ["all"], build: (_, flags) => ({ kind: "usage.deadLetters", all: flags.has("all") }) },
  "usage replay": { args: ["dead-letter-id"], build: ([id]) => replayOf(id) },
  pools,
  "pools show": pools,
  "pools set": {
    args: ["model"],
    flags: ["file"],
    required: { file: 'a JSON file: {"backends": [...]}' },
    build: ([model], flags) => poolsSetOf(model, flags),
  },
  top: { args: [], flags: ["once"], build: (_, flags) => ({ kind: "top", once: flags.has("once") }) },
  catalog: { args: [], build: () => ({ kind: "catalog" }) },
  "catalog show": { args: [], build: () => ({ kind: "catalog" }) },
  "catalog set": {
    args: ["model"],
    flags: ["file", "by"],
    required: { file: "a JSON file: one model's entry, as src/catalog/models.json writes one" },
    build: ([model], flags) => ({
      kind: "catalog.set",
      model: modelOf(model, "model"),
      file: nonEmpty(value(flags, "file"), "--file"),
      ...byOf(flags),
    }),
  },
  "catalog preview": {
    args: ["model"],
    flags: ["file"],
    required: { file: "a JSON file: one model's entry, as catalog set takes it" },
    build: ([model], flags) => ({
      kind: "catalog.preview",
      model: modelOf(model, "model"),
      file: nonEmpty(value(flags, "file"), "--file"),
    }),
  },
  "catalog alias": {
    args: ["model", "alias"],
    flags: ["by"],
    build: ([model, alias], flags) => ({
      kind: "catalog.alias",
      model: modelOf(model, "model"),
      alias: modelOf(alias, "alias"),
      ...byOf(flags),
    }),
  },
  "catalog retire": {
    args: ["model"],
    flags: ["successor", "by"],
    required: { successor: "a retired model names the model its clients should move to" },
    build: ([model], flags) => ({
      kind: "catalog.retire",
      model: modelOf(model, "model"),
      successor: modelOf(value(flags, "successor"), "--successor"),
      ...byOf(flags),
    }),
  },
  "operators list": { args: [], build: () => ({ kind: "operators.list" }) },
  "operators add": {
    args: ["login", "role"],
    flags: ["name", "ceiling"],
    required: { name: "it is shown in lists and the audit" },
    build: ([login, role], flags) => {
      const ceiling = value(flags, "ceiling");
      return {
        kind: "operators.add",
        login: text(addOperatorBody.shape.login, login, "login"),
        role: roleOf(role),
        name: text(addOperatorBody.shape.name, value(flags, "name"), "--name"),
        // Generated here: the gateway keeps only its hash, and the operator gets it from this output.
        password: randomBase62(24),
        ...(ceiling === undefined ? {} : { ceilingToman: creditOf(addOperatorBody.shape.adjust_daily_max_toman.unwrap(), ceiling) }),
      };
    },
  },
  "operators role": {
    args: ["operator-id", "role"],
    build: ([id, role]) => ({ kind: "operators.role", operatorId: nonEmpty(id, "operator-id"), role: roleOf(role) }),
  },
  "operators remove": { args: ["operator-id"], build: ([id]) => ({ kind: "operators.remove", operatorId: nonEmpty(id, "operator-id") }) },
  "operators token create": {
    args: ["operator-id"],
    flags: ["name"],
    required: { name: "it tells the operator's tokens apart" },
    build: ([id], flags) => ({
      kind: "operators.tokenCreate",
      operatorId: nonEmpty(id, "operator-id"),
      name: text(addOperatorBody.shape.name, value(flags, "name"), "--name"),
    }),
  },
  "operators token revoke": { args: ["token-id"], build: ([id]) => ({ kind: "operators.tokenRevoke", tokenId: nonEmpty(id, "token-id") }) },
  audit: { args: [], flags: ["actor", "action", "target", "from", "to", "limit"], build: (_, flags) => auditOf(flags) },
  "customers search": {
    args: ["text"],
    build: ([text]) => ({
      kind: "customers.search",
      text: checked(searchQuery.shape.q, text ?? "", "customers search: the text is 1 to 200 characters"),
    }),
  },
  "accounts usage": {
    args: ["account-id"],
    flags: ["key", "model", "from", "to", "limit"],
    build: ([id], flags) => ({
      kind: "accounts.usage",
      accountId: nonEmpty(id, "account-id"),
      query: filtersOf(flags, ["key", "model", "from", "to", "limit"]),
    }),
  },
  "accounts sessions": { args: ["account-id"], build: ([id]) => ({ kind: "accounts.sessions", accountId: nonEmpty(id, "account-id") }) },
  "accounts wallet": { args: ["account-id"], build: ([id]) => ({ kind: "accounts.wallet", accountId: nonEmpty(id, "account-id") }) },
  revenue: { args: [], flags: ["from", "to"], build: (_, flags) => ({ kind: "revenue", window: windowOf(flags, "revenue") }) },
  anomalies: { args: [], flags: ["from", "to"], build: (_, flags) => ({ kind: "anomalies", window: windowOf(flags, "anomalies") }) },
  overview: { args: [], build: () => ({ kind: "overview" }) },
  "catalog import": {
    args: ["file-or-url"],
    flags: ["apply", "by"],
    build: ([source], flags) => ({
      kind: "catalog.import",
      source: nonEmpty(source, "file-or-url"),
      apply: flags.has("apply"),
      ...byOf(flags),
    }),
  },
  "catalog changes": {
    args: [],
    flags: ["model"],
    build: (_, flags) => {
      const model = value(flags, "model");
      return { kind: "catalog.changes", ...(model === undefined ? {} : { model: modelOf(model, "--model") }) };
    },
  },
};

/** A model id or alias as the catalog takes one. */
function modelOf(given: string | undefined, what: string): string {
  return checked(
    modelId,
    given ?? "",
    `${what} must be a model id (lower-case letters, digits, \`.\`, \`_\`, \`:\`, \`-\`), not ${JSON.stringify(given)}`,
  );
}

/** `--by`: the operator's name in the catalog's audit. */
function byOf(flags: Flags): { by?: string } {
  const by = value(flags, "by");
  return by === undefined ? {} : { by: text(aliasBody.shape.by.unwrap(), by, "--by") };
}

function roleOf(given: string | undefined): Role {
  if (given !== undefined && isRole(given)) return given;
  throw new UsageError(`the role is one of ${listed([...OPERATOR_ROLES])}, not ${JSON.stringify(given)}`);
}

function auditOf(flags: Flags): Command {
  const query: AuditFilters = {};
  for (const name of ["actor", "action", "target", "from", "to", "limit"] as const) {
    const given = value(flags, name);
    if (given !== undefined) query[name] = given;
  }
  checked(auditQuery, query, `audit: the filters are not what the gateway takes (--from and --to ${ISO_EXAMPLES}; --limit 1 to 500)`);
  return { kind: "audit", query };
}

/** The given flags among `names`, as a query. */
function filtersOf<F extends Flag>(flags: Flags, names: readonly F[]): { [K in F]?: string } {
  const query: { [K in F]?: string } = {};
  for (const name of names) {
    const given = value(flags, name);
    if (given !== undefined) query[name] = given;
  }
  return query;
}

function windowOf(flags: Flags, command: string): WindowFilters {
  const window = filtersOf(flags, ["from", "to"]);
  checked(windowQuery, window, `${command}: --from and --to are ISO times with an offset, ${ISO_EXAMPLES}`);
  return window;
}

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
  const json = flags.has("json");
  if (command.kind === "help") return { command, url: "", token: null, json };
  const url = urlOf(value(flags, "url") ?? env.GW_URL ?? `http://127.0.0.1:${env.PORT || "8080"}`);
  const token = value(flags, "token") ?? env.ADMIN_TOKEN ?? "";
  if (token.trim() === "") throw new UsageError("no admin token: set ADMIN_TOKEN (or pass --token)");
  return { command, url, token, json };
}

const isFlag = (name: string): name is Flag => Object.hasOwn(OPTIONS, name);

/**
 * parseArgs splits argv (`--flag value`, `--flag=value`, `-h`, `--` ends the flags); it runs
 * loose so that negative numbers stay words and each refusal says what is wrong in our words.
 */
function tokenize(argv: readonly string[]): { positionals: string[]; flags: Flags } {
  const { tokens } = parseArgs({ args: [...argv], options: OPTIONS, strict: false, allowPositionals: true, tokens: true });
  const positionals: string[] = [];
  const flags = new Map<Flag, string | true>();
  let negativeAt = -1;
  for (const token of tokens) {
    if (token.kind === "option-terminator") continue;
    if (token.kind === "positional") {
      positionals.push(token.value);
      continue;
    }
    const word = argv[token.index]!;
    if (NEGATIVE_NUMBER.test(word)) {
      // parseArgs reads -12.5 as four short flags, each token pointing at the same word.
      if (token.index !== negativeAt) positionals.push(word);
      negativeAt = token.index;
      continue;
    }
    if (!isFlag(token.name)) throw new UsageError(`unknown flag: ${token.rawName}`);
    const name = token.name;
    if (flags.has(name)) throw new UsageError(`--${name} given twice`);
    if (OPTIONS[name].type === "boolean") {
      if (token.value !== undefined) throw new UsageError(`--${name} takes no value`);
      flags.set(name, true);
    } else {
      if (token.value === undefined || (!token.inlineValue && token.value.startsWith("--")))
        throw new UsageError(`--${name} needs a value`);
      flags.set(name, token.value);
    }
  }
  return { positionals, flags };
}

function commandOf(positionals: readonly string[], flags: Flags): Command {
  const [first, second, third] = positionals;
  if (first === undefined) throw new UsageError("no command given");
  const words = [`${first} ${second} ${third}`, `${first} ${second}`, first].find((w) => Object.hasOwn(COMMANDS, w));
  if (words === undefined) {
    const subs = Object.keys(COMMANDS).flatMap((w) => (w.startsWith(`${first} `) ? [w.slice(first.length + 1)] : []));
    if (subs.length === 0) throw new UsageError(`unknown command: ${first}`);
    throw new UsageError(second === undefined ? `${first}: say ${listed(subs)}` : `unknown command: ${first} ${second}`);
  }
  const spec = COMMANDS[words]!;
  for (const name of flags.keys()) {
    if (!GLOBAL_FLAGS.includes(name) && !spec.flags?.includes(name)) throw new UsageError(`${words} does not take --${name}`);
  }
  const args = positionals.slice(words.split(" ").length);
  if (args.length < spec.args.length) throw new UsageError(`${words}: missing <${spec.args[args.length]}>`);
  if (args.length > spec.args.length) throw new UsageError(`${words}: unexpected argument: ${args[spec.args.length]}`);
  for (const [name, why] of Object.entries(spec.required ?? {})) {
    if (!isFlag(name) || !flags.has(name)) throw new UsageError(`${words}: --${name} is required (${why})`);
  }
  return spec.build(args, flags);
}

/** "a", "a or b", "a, b or c". */
function listed(words: readonly string[]): string {
  return words.length === 1 ? words[0]! : `${words.slice(0, -1).join(", ")} or ${words.at(-1)}`;
}

function value(flags: Flags, name: Flag): string | undefined {
  const given = flags.get(name);
  return typeof given === "string" ? given : undefined;
}

/** An id the gateway looks up (a path segment): any text but blank. */
function nonEmpty(given: string | undefined, what: string): string {
  const trimmed = given?.trim() ?? "";
  if (trimmed === "") throw new UsageError(`${what} must not be empty`);
  return trimmed;
}

/** Text as the admin API's `schema` takes it (trimmed, within its lengths). */
function text(schema: z.ZodString, given: string | undefined, what: string): string {
  const parsed = schema.safeParse(given ?? "");
  if (parsed.success) return parsed.data;
  const [min, max] = [schema.minLength ?? 0, schema.maxLength];
  if (min > 1) throw new UsageError(`${what} must be ${min} to ${max} characters`);
  throw new UsageError((given ?? "").trim() === "" ? `${what} must not be empty` : `${what} must be at most ${max} characters`);
}

/** `given` if the admin API's `schema` accepts it; else the usage error `refusal`. */
function checked<T>(schema: z.ZodType<T, unknown>, given: unknown, refusal: string): T {
  const parsed = schema.safeParse(given);
  if (!parsed.success) throw new UsageError(refusal);
  return parsed.data;
}

/** A count or a rate: written as a plain whole number, within the admin API's bounds. */
function wholeNumber(schema: z.ZodNumber, given: string, what: string): number {
  const refusal = `${what} must be a positive whole number (at most ${schema.maxValue}), not ${JSON.stringify(given)}`;
  if (!WHOLE_NUMBER.test(given)) throw new UsageError(refusal);
  return checked(schema, Number(given), refusal);
}

/** A credit's amount (top-ups): the admin API's rule, and more than zero; sent as typed. */
function creditOf(schema: z.ZodType<bigint, unknown>, given: string | undefined): string {
  const amount = given?.trim() ?? "";
  const micro = checked(schema, amount, `amount-toman must be ${AMOUNT_RULE}, not ${JSON.stringify(amount)}`);
  if (micro === 0n) throw new UsageError("amount-toman must be more than zero");
  return amount;
}

/** An adjustment's amount: like a credit's, but a leading minus makes it a debit. */
function adjustmentOf(given: string | undefined): string {
  const amount = given?.trim() ?? "";
  const refusal = `amount-toman must be ${AMOUNT_RULE}, negative for a debit (e.g. -12.5), not ${JSON.stringify(amount)}`;
  if (checked(adjustmentBody.shape.amount_toman, amount, refusal) === 0n) throw new UsageError("amount-toman must not be zero");
  return amount;
}

function rateOf(rate: string | undefined, effectiveAt: string | undefined): Command {
  const tomanPerUsd = wholeNumber(rateBody.shape.toman_per_usd, rate ?? "", "toman-per-usd");
  if (effectiveAt === undefined) return { kind: "rates.set", tomanPerUsd };
  const refusal = `--effective-at must be an ISO time with an offset, ${ISO_EXAMPLES}, not ${JSON.stringify(effectiveAt)}`;
  return { kind: "rates.set", tomanPerUsd, effectiveAt: checked(rateBody.shape.effective_at.unwrap(), effectiveAt, refusal) };
}

function topupsListOf(flags: Flags): Command {
  const state = value(flags, "state");
  const states = topupListQuery.shape.state.unwrap();
  const account = value(flags, "account");
  return {
    kind: "topups.list",
    state:
      state === undefined
        ? undefined
        : checked(states, state, `--state must be one of ${states.options.join(", ")}, not ${JSON.stringify(state)}`),
    accountId: account === undefined ? undefined : nonEmpty(account, "--account"),
  };
}

function replayOf(id: string | undefined): Command {
  if (id === undefined || !DEAD_LETTER_ID.test(id)) {
    throw new UsageError(`usage replay: the dead letter id is a number (from \`usage dead-letters\`), not ${JSON.stringify(id)}`);
  }
  return { kind: "usage.replay", deadLetterId: id };
}

function poolsSetOf(model: string | undefined, flags: Flags): Command {
  return { kind: "pools.set", model: nonEmpty(model, "model"), file: nonEmpty(value(flags, "file"), "--file") };
}

/** The limits a key is created with: each flag checked by the admin API's rule for its field. */
function limitsOf(flags: Flags, options: { noneAllowed: boolean }): KeyLimitsInput {
  const fields = keyLimitsBody.shape;
  const limits: KeyLimitsInput = {};
  const concurrency = value(flags, "concurrency-max");
  if (concurrency !== undefined) limits.concurrency_max = wholeNumber(fields.concurrency_max.unwrap(), concurrency, "--concurrency-max");
  for (const name of ["rpm", "tpm"] as const) {
    const given = value(flags, name);
    if (given === undefined) continue;
    limits[name] = lifted(given, name, `${name} limit`, options) ? null : wholeNumber(fields[name].unwrap().unwrap(), given, `--${name}`);
  }
  const cap = value(flags, "monthly-spend-cap");
  if (cap !== undefined && !lifted(cap, "monthly-spend-cap", "monthly spend cap", options)) {
    const orNone = options.noneAllowed ? ", or none" : "";
    checked(
      fields.monthly_spend_cap_toman,
      cap,
      `--monthly-spend-cap must be toman as ${AMOUNT_RULE}${orNone}, not ${JSON.stringify(cap)}`,
    );
    limits.monthly_spend_cap_toman = cap.trim();
  } else if (cap !== undefined) limits.monthly_spend_cap_toman = null;
  const residency = value(flags, "residency");
  if (residency !== undefined) {
    const lift = options.noneAllowed && residency === "none";
    const refusal = `--residency must be in-country${options.noneAllowed ? " or none" : ""}, not ${JSON.stringify(residency)}`;
    limits.residency = lift ? null : checked(fields.residency.unwrap().unwrap(), residency, refusal);
  }
  const models = value(flags, "allowed-models");
  if (models !== undefined) {
    limits.allowed_models = lifted(models, "allowed-models", "model allowlist", options)
      ? null
      : allowlistOf(fields.allowed_models.unwrap().unwrap(), models, "--allowed-models", `model ids, at most ${KEY_ALLOWED_MODELS_MAX}`);
  }
  const ips = value(flags, "allowed-ips");
  if (ips !== undefined) {
    limits.allowed_ips = lifted(ips, "allowed-ips", "address allowlist", options)
      ? null
      : allowlistOf(
          fields.allowed_ips.unwrap().unwrap(),
          ips,
          "--allowed-ips",
          `IPv4 or IPv6 addresses or CIDR blocks (e.g. 203.0.113.0/24,2001:db8::/32), at most ${KEY_ALLOWED_IPS_MAX}`,
        );
  }
  return limits;
}

/** A comma-separated allowlist, each entry and the count checked by the admin API's rule. */
function allowlistOf(schema: z.ZodType<string[], unknown>, given: string, flag: string, rule: string): string[] {
  const entries = given
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry !== "");
  if (entries.length === 0) throw new UsageError(`${flag} must name at least one entry (comma-separated ${rule})`);
  const parsed = schema.safeParse(entries);
  if (parsed.success) return parsed.data;
  const at = parsed.error.issues[0]?.path[0];
  const wrong = typeof at === "number" ? `, not ${JSON.stringify(entries[at])}` : `, not ${entries.length} entries`;
  throw new UsageError(`${flag} must be comma-separated ${rule}${wrong}`);
}

/** `none` lifts a limit of an existing key; a new key has none unless given one. */
function lifted(given: string, flag: Flag, what: string, options: { noneAllowed: boolean }): boolean {
  if (given !== "none") return false;
  if (!options.noneAllowed) throw new UsageError(`--${flag} none: a new key has no ${what} unless you give one`);
  return true;
}

/** An account's limits to change: each a whole number or `default`, at least one. */
function accountLimitsOf(flags: Flags): AccountLimitsInput {
  const fields = accountLimitsBody.shape;
  const limits: AccountLimitsInput = {};
  for (const [flag, field] of ACCOUNT_LIMIT_FLAGS) {
    const given = value(flags, flag);
    if (given === undefined) continue;
    limits[field] = given === "default" ? null : wholeNumber(fields[field].unwrap().unwrap(), given, `--${flag}`);
  }
  const names = ACCOUNT_LIMIT_FLAGS.map(([flag]) => `--${flag}`);
  checked(accountLimitsBody, limits, `accounts limits: nothing to change; give ${listed(names)}`);
  return limits;
}

/** Limits to change: at least one, as the admin API requires. */
function changedLimitsOf(flags: Flags): KeyLimitsInput {
  const limits = limitsOf(flags, { noneAllowed: true });
  const names = LIMIT_FLAGS.map((name) => `--${name}`);
  checked(keyLimitsBody, limits, `keys limits: nothing to change; give ${listed(names)}`);
  return limits;
}

function urlOf(given: string): string {
  let url: URL;
  try {
    url = new URL(given);
  } catch {
    throw new UsageError(`the gateway URL is not a URL: ${JSON.stringify(given)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new UsageError(`the gateway URL must be http or https, not ${url.protocol}`);
  return url.toString().replace(/\/+$/, "");
}
