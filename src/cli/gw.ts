/**
 * The operator CLI, `bun run gw <command>`: the admin HTTP API from a shell. It speaks HTTP to
 * whichever node `--url` names, so it works the same against one process or any node of a
 * cluster. Flow: parse and validate everything (args.ts) → one request → print the reply.
 *
 *   ADMIN_TOKEN=… bun run gw topup acct_1 500000 --reference invoice-42
 *
 * Exit codes: 0 ok, 1 the gateway refused, 2 usage error, 3 the gateway cannot be reached,
 * 4 `ledger audit` found violations (so a cron job or CI step can alert on it).
 * The admin token goes only into the Authorization header; nothing here prints it.
 */
import { z } from "zod";
import { microToToman } from "../catalog/prices.ts";
import { poolSchema, type PoolSpec } from "../config.ts";
import type { errorBody } from "../errors.ts";
import type { walletFields } from "../http/account/route.ts";
import { zodFailure } from "../errors.ts";
import type { deadLetterObject } from "../http/admin/deadletters.ts";
import type { backendView } from "../http/admin/pools.ts";
import type { limitsObject } from "../keys/accountLimits.ts";
import type {
  accountSettingsBody,
  adjustmentBody,
  createAccountBody,
  createKeyBody,
  keyLimitsBody,
  keyObject,
  rateBody,
  topUpBody,
} from "../http/admin/route.ts";
import type { rejectBody, startBody, topupObject } from "../http/admin/topups.ts";
import type { AuditReport } from "../ledger/audit.ts";
import type { ReconcileReport } from "../payments/reconciler.ts";
import { parseInvocation, USAGE, type Command, type Invocation } from "./args.ts";
import { EXIT, messageOf, shownUrl, unreachableText } from "./exit.ts";
import { runTop } from "./top.ts";
import { catalogCall, entryBody, isCatalogCommand, importBody, renderCatalog } from "./catalog.ts";
import { isOperatorCommand, operatorCall, renderOperators } from "./operators.ts";
import { figureCall, isFigureCommand, renderFigures } from "./figures.ts";

/** A CLI waits this long for a reply before saying the gateway cannot be reached. */
const REQUEST_TIMEOUT_MS = 15_000;
/** `rates show` lists this many of the newest price versions. */
const VERSIONS_SHOWN_MAX = 10;
/** `ledger audit` prints this many violations of a failed check. */
const VIOLATIONS_SHOWN_MAX = 3;

interface Call {
  method: "GET" | "POST" | "PATCH" | "PUT" | "DELETE";
  path: string;
  body?: unknown;
}

interface Output {
  out: (text: string) => void;
  err: (text: string) => void;
}

/** Commands answered by one request and reply. */
type Sent = Exclude<Command, { kind: "help" } | { kind: "top" }>;

type Refused = { "the admin API sends a reply this schema refuses": never };

/**
 * A reply schema checked at compile time against the type of what the admin API sends
 * (`Sent`): a field the server renames or retypes breaks the typecheck here, not an operator's
 * terminal. The schema still checks each reply at run time, as every boundary does.
 */
const accepts =
  <Sent>() =>
  <S extends z.ZodType>(schema: S & ([Sent] extends [z.input<S>] ? unknown : Refused)): S =>
    schema;

const errorReply = accepts<ReturnType<typeof errorBody>>()(
  z.object({ error: z.object({ message: z.string(), code: z.string().nullable().optional() }) }),
);

const wallet = accepts<ReturnType<typeof walletFields>>()(
  z.object({ balance_toman: z.string(), held_toman: z.string(), available_toman: z.string() }),
);

const keyReply = accepts<ReturnType<typeof keyObject>>()(
  z.object({
    id: z.string(),
    name: z.string(),
    display: z.string(),
    concurrency_max: z.number(),
    rpm: z.number().nullable(),
    tpm: z.number().nullable(),
    /** Absent from gateways older than the cap; shown as no cap. */
    monthly_spend_cap_toman: z.string().nullish(),
    residency: z.string().nullish(),
    /** Absent from gateways older than key restrictions; shown as any. */
    allowed_models: z.array(z.string()).readonly().nullish(),
    allowed_ips: z.array(z.string()).readonly().nullish(),
    revoked_at: z.string().nullable(),
  }),
);

const accountLimits = accepts<ReturnType<typeof limitsObject>>()(
  z.object({
    concurrency_max: z.number(),
    rpm: z.number().nullable(),
    tpm: z.number().nullable(),
    keys_max: z.number(),
    key_concurrency_max: z.number(),
    key_rpm_max: z.number(),
    key_tpm_max: z.number(),
  }),
);
const accountLimitsReply = z.object({ id: z.string(), limits: accountLimits });
const accountReply = wallet.extend({
  id: z.string(),
  name: z.string(),
  created_at: z.string(),
  keys: z.array(keyReply).optional(),
  limits: accountLimits.optional(),
});
const topupReply = wallet.extend({ account_id: z.string(), reference: z.string(), amount_toman: z.string(), credited: z.boolean() });
const createdKeyReply = keyReply.extend({ key: z.string() });
const adjustmentReply = topupReply.extend({ reason: z.string() });

const priceVersion = z.object({ id: z.number(), toman_per_usd: z.number(), effective_at: z.string() });
const priceVersionReply = priceVersion.extend({ models: z.number() });
const ratesReply = z.object({
  current: priceVersion.nullable(),
  versions: z.array(priceVersion),
  fetch: z
    .object({
      source: z.string().nullish(),
      last_attempt_at: z.string().nullish(),
      last_success_at: z.string().nullish(),
      last_error: z.string().nullish(),
      last_rate: z.number().nullish(),
    })
    .nullish(),
});

const auditReply = accepts<AuditReport>()(
  z.object({
    ok: z.boolean(),
    checks: z.array(z.object({ name: z.string(), ok: z.boolean(), violations: z.array(z.record(z.string(), z.unknown())) })),
    write_offs_by_key: z.array(z.object({ key_id: z.string(), requests: z.number(), write_off_micro: z.string() })).default([]),
    upstream_anomalies: z
      .array(z.object({ backend: z.string().nullable(), model: z.string(), anomaly: z.string(), requests: z.number() }))
      .default([]),
    dead_letters: z.object({ awaiting_replay: z.number(), written_off_micro: z.string(), malformed: z.number().optional() }).optional(),
  }),
);

/** `replies` is jsonb, which the server types as unknown: it is checked here at run time only. */
const paidTopupReply = accepts<Omit<ReturnType<typeof topupObject>, "replies">>()(
  z.object({
    id: z.string(),
    account_id: z.string(),
    state: z.string(),
    amount_toman: z.string(),
    authority: z.string().nullable(),
    ref_id: z.string().nullable(),
    card_pan: z.string().nullable(),
    fee_toman: z.string().nullable(),
    reason: z.string().nullable(),
    attempts: z.number(),
    created_at: z.string(),
    replies: z.array(z.unknown()).optional(),
  }),
);

const reconcileReply = accepts<ReconcileReport>()(
  z.object({
    unverified_listed: z.number(),
    inquired: z.number(),
    settled: z.number(),
    verified: z.number(),
    expired: z.number(),
    reversed: z.number(),
    needs_review: z.number(),
    unanswered: z.number(),
  }),
);

const deadLetterReply = accepts<ReturnType<typeof deadLetterObject>>()(
  z.object({
    id: z.string(),
    request_id: z.string(),
    account_id: z.string(),
    source: z.string(),
    sql_state: z.string().nullable(),
    reason: z.string(),
    written_off_toman: z.string(),
    status: z.string(),
    created_at: z.string(),
  }),
);
const deadLettersReply = z.object({ data: z.array(deadLetterReply) });

const replayReply = z.object({
  id: z.string(),
  outcome: z.enum(["replayed", "already_replayed"]),
  written: z.number().optional(),
  posted_micro_toman: z.string().optional(),
});

const backendReply = accepts<ReturnType<typeof backendView>>()(
  z.object({
    name: z.string(),
    kind: z.string(),
    region: z.string(),
    weight: z.number().nullish(),
    concurrency_max: z.number().nullish(),
    in_flight: z.number(),
    concurrency_limit: z.number().nullish(),
    latency_ewma_ms: z.number(),
    ttft_ms: z.number().nullish(),
    tpot_ms: z.number().nullish(),
    breaker: z.string(),
    requests: z.number(),
    failures: z.number(),
  }),
);
const poolReply = z.object({ model: z.string(), backends: z.array(backendReply) });
const poolsReply = z.object({ data: z.array(poolReply) });

/**
 * Runs one command line and returns the exit code; all printing goes through `output`.
 * @example await runGw(["pools"], { GW_URL: "http://127.0.0.1:8080", ADMIN_TOKEN: "…" }) // 0
 */
export async function runGw(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
  output: Output = consoleOutput,
): Promise<number> {
  const parsed = parseInvocation(argv, env);
  if (!parsed.ok) {
    output.err(`error: ${parsed.error}\n\n${USAGE}`);
    return EXIT.usage;
  }
  const { invocation } = parsed;
  if (invocation.command.kind === "help") {
    output.out(USAGE);
    return EXIT.ok;
  }
  if (invocation.command.kind === "top") {
    return runTop(invocation, invocation.command.once, {
      ...output,
      rows: () => process.stdout.rows,
      color: process.stdout.isTTY === true,
    });
  }
  return execute(invocation, invocation.command, output);
}

async function execute(invocation: Invocation, command: Sent, output: Output): Promise<number> {
  let response: Response;
  let text: string;
  try {
    response = await send(invocation, callFor(command, await fileBody(command, output)));
    text = await response.text();
  } catch (error) {
    if (error instanceof FileUnreadable) return EXIT.usage;
    output.err(unreachableText(invocation.url, reasonOf(error)));
    return EXIT.unreachable;
  }
  const reply = parseJson(text);
  if (invocation.json && reply !== undefined) output.out(text);
  if (!response.ok) {
    output.err(refusalOf(response.status, reply));
    return EXIT.refused;
  }
  const code = reply === undefined ? null : outcomeOf(command, reply);
  const rendered = code === null || invocation.json ? null : render(command, reply);
  if (code === null || (!invocation.json && rendered === null)) {
    output.err(`error: unexpected reply from ${shownUrl(invocation.url)} (HTTP ${response.status}); is this a Darvaze gateway?`);
    return EXIT.refused;
  }
  if (rendered !== null) output.out(rendered);
  return code;
}

/**
 * The exit code a successful reply stands for, with or without --json: 0, except for an audit
 * that found violations. Null when the reply cannot be judged.
 */
function outcomeOf(command: Sent, reply: unknown): number | null {
  if (command.kind !== "ledger.audit") return EXIT.ok;
  const parsed = auditReply.pick({ ok: true }).safeParse(reply);
  if (!parsed.success) return null;
  return parsed.data.ok ? EXIT.ok : EXIT.auditFailed;
}

class FileUnreadable extends Error {}

/**
 * The file a command sends (pools set, catalog set), read and checked by the schema the admin API
 * checks it with before anything is sent, so a mistake in it is a usage error naming the field.
 */
async function fileBody(command: Sent, output: Output): Promise<unknown> {
  if (command.kind === "catalog.set" || command.kind === "catalog.preview" || command.kind === "catalog.import") {
    try {
      return command.kind === "catalog.import"
        ? await importBody(command)
        : await entryBody(command.model, command.file, "by" in command ? command.by : undefined);
    } catch (error) {
      output.err(`error: ${messageOf(error)}`);
      throw new FileUnreadable();
    }
  }
  if (command.kind !== "pools.set") return undefined;
  let raw: unknown;
  try {
    raw = JSON.parse(await Bun.file(command.file).text());
  } catch (error) {
    output.err(`error: cannot read ${command.file} as JSON: ${messageOf(error)}`);
    throw new FileUnreadable();
  }
  const parsed = poolSchema.safeParse(raw);
  if (parsed.success) return parsed.data;
  output.err(`error: ${command.file} is not a pool the gateway takes: ${zodFailure(parsed.error).message}`);
  throw new FileUnreadable();
}

function callFor(command: Sent, body?: unknown): Call {
  if (isOperatorCommand(command)) return operatorCall(command);
  if (isFigureCommand(command)) return figureCall(command);
  // The operator's login names catalog changes in the catalog's audit unless --by does.
  if (isCatalogCommand(command)) return catalogCall(command, process.env.USER, body);
  switch (command.kind) {
    case "pools.set":
      return { method: "PUT", path: `/admin/pools/${encodeURIComponent(command.model)}`, body: body as PoolSpec };
    case "accounts.create":
    case "accounts.show":
    case "accounts.limits":
    case "topup":
    case "keys.create":
    case "keys.limits":
      return accountCall(command);
    case "keys.revoke":
      return { method: "DELETE", path: `/admin/keys/${encodeURIComponent(command.keyId)}` };
    case "pools":
      return { method: "GET", path: "/admin/pools" };
    case "adjust":
      return {
        method: "POST",
        path: `/admin/accounts/${encodeURIComponent(command.accountId)}/adjustments`,
        body: { amount_toman: command.amountToman, reason: command.reason, reference: command.reference } satisfies z.input<
          typeof adjustmentBody
        >,
      };
    case "rates.show":
      return { method: "GET", path: "/admin/rates" };
    case "rates.set":
      return {
        method: "POST",
        path: "/admin/rates",
        body: { toman_per_usd: command.tomanPerUsd, effective_at: command.effectiveAt } satisfies z.input<typeof rateBody>,
      };
    case "ledger.audit":
      return { method: "GET", path: "/admin/ledger/audit" };
    case "topups.start":
    case "topups.list":
    case "topups.show":
    case "topups.review":
    case "topups.reconcile":
      return topupsCall(command);
    case "usage.deadLetters":
      return { method: "GET", path: `/admin/usage/dead-letters?status=${command.all ? "all" : "dead"}` };
    case "usage.replay":
      return { method: "POST", path: `/admin/usage/dead-letters/${encodeURIComponent(command.deadLetterId)}/replay` };
  }
}

type Kinds<K extends Sent["kind"]> = Extract<Sent, { kind: K }>;

/** An account's calls: create, show, set limits, top up; its keys' creation and limits. */
function accountCall(
  command: Kinds<"accounts.create" | "accounts.show" | "accounts.limits" | "topup" | "keys.create" | "keys.limits">,
): Call {
  switch (command.kind) {
    case "accounts.create":
      return { method: "POST", path: "/admin/accounts", body: { name: command.name } satisfies z.input<typeof createAccountBody> };
    case "accounts.show":
      return { method: "GET", path: `/admin/accounts/${encodeURIComponent(command.accountId)}` };
    case "accounts.limits":
      return {
        method: "PATCH",
        path: `/admin/accounts/${encodeURIComponent(command.accountId)}`,
        body: { limits: command.limits } satisfies z.input<typeof accountSettingsBody>,
      };
    case "topup":
      return {
        method: "POST",
        path: `/admin/accounts/${encodeURIComponent(command.accountId)}/topups`,
        body: { amount_toman: command.amountToman, reference: command.reference } satisfies z.input<typeof topUpBody>,
      };
    case "keys.create":
      return {
        method: "POST",
        path: `/admin/accounts/${encodeURIComponent(command.accountId)}/keys`,
        body: { name: command.name, ...command.limits } satisfies z.input<typeof createKeyBody>,
      };
    case "keys.limits":
      return {
        method: "PATCH",
        path: `/admin/keys/${encodeURIComponent(command.keyId)}`,
        body: command.limits satisfies z.input<typeof keyLimitsBody>,
      };
  }
}

/** The paid top-ups' calls (src/payments): start, list, show, review, reconcile. */
function topupsCall(command: Kinds<"topups.start" | "topups.list" | "topups.show" | "topups.review" | "topups.reconcile">): Call {
  switch (command.kind) {
    case "topups.start":
      return {
        method: "POST",
        path: "/admin/topups",
        body: { account_id: command.accountId, amount_toman: command.amountToman } satisfies z.input<typeof startBody>,
      };
    case "topups.list": {
      const query = new URLSearchParams();
      if (command.state) query.set("state", command.state);
      if (command.accountId) query.set("account_id", command.accountId);
      return { method: "GET", path: `/admin/topups${query.size > 0 ? `?${query}` : ""}` };
    }
    case "topups.show":
      return { method: "GET", path: `/admin/topups/${encodeURIComponent(command.topupId)}` };
    case "topups.review":
      return {
        method: "POST",
        path: `/admin/topups/${encodeURIComponent(command.topupId)}/${command.decision}`,
        body: { reason: command.reason, ...(command.reverse ? { reverse: true } : {}) } satisfies z.input<typeof rejectBody>,
      };
    case "topups.reconcile":
      return { method: "POST", path: "/admin/topups/reconcile" };
  }
}

function send(invocation: Invocation, call: Call): Promise<Response> {
  const headers: Record<string, string> = { authorization: `Bearer ${invocation.token}` };
  if (call.body !== undefined) headers["content-type"] = "application/json";
  return fetch(invocation.url + call.path, {
    method: call.method,
    headers,
    body: call.body === undefined ? undefined : JSON.stringify(call.body),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
}

/** The formatted reply, or null when it is not the shape this command expects. */
// biome-ignore lint/complexity/noExcessiveLinesPerFunction: a declarative table, one renderer per command.
function render(command: Sent, reply: unknown): string | null {
  if (isOperatorCommand(command)) return renderOperators(command, reply, table);
  if (isFigureCommand(command)) return renderFigures(command, reply, table);
  switch (command.kind) {
    case "accounts.create":
      return renderWith(
        accountReply,
        reply,
        (a) =>
          `account created\n${fields([
            ["id", a.id],
            ["name", a.name],
            ["balance", `${a.balance_toman} toman`],
          ])}`,
      );
    case "accounts.show":
      return renderWith(accountReply, reply, renderAccount);
    case "accounts.limits":
      return renderWith(accountLimitsReply, reply, (a) => `limits set\n${fields([["id", a.id], ...accountLimitRows(a.limits)])}`);
    case "topup":
      return renderWith(topupReply, reply, renderTopup);
    case "keys.create":
      return renderWith(createdKeyReply, reply, renderCreatedKey);
    case "keys.limits":
      return renderWith(
        keyReply,
        reply,
        (k) =>
          `limits changed\n${fields([
            ["id", k.id],
            ["limits", limitsText(k)],
            ["monthly cap", capText(k)],
            ["residency", k.residency ?? "any"],
            ...restrictionRows(k),
          ])}`,
      );
    case "keys.revoke":
      return renderWith(
        keyReply,
        reply,
        (k) =>
          `key revoked\n${fields([
            ["id", k.id],
            ["name", k.name],
            ["revoked at", k.revoked_at ?? "-"],
          ])}`,
      );
    case "catalog":
    case "catalog.set":
    case "catalog.preview":
    case "catalog.alias":
    case "catalog.retire":
    case "catalog.changes":
    case "catalog.import":
      return renderCatalog(command, reply, table);
    case "pools":
      return renderWith(poolsReply, reply, renderPools);
    case "pools.set":
      return renderWith(poolReply, reply, (p) => `pool set: ${p.model}, on every node within a second\n${renderPools({ data: [p] })}`);
    case "adjust":
      return renderWith(adjustmentReply, reply, renderAdjustment);
    case "rates.show":
      return renderWith(ratesReply, reply, renderRates);
    case "rates.set":
      return renderWith(
        priceVersionReply,
        reply,
        (v) =>
          `rate set: ${v.toman_per_usd} toman per USD\n${fields([
            ["version", String(v.id)],
            ["effective", v.effective_at],
            ["models", `${v.models} priced`],
          ])}`,
      );
    case "ledger.audit":
      return renderWith(auditReply, reply, renderAudit);
    case "topups.start":
      return renderWith(
        paidTopupReply.extend({ redirect_url: z.string() }),
        reply,
        (p) => `top-up started: send the customer to\n\n    ${p.redirect_url}\n\n${renderPaidTopup(p)}`,
      );
    case "topups.list":
      return renderWith(z.object({ data: z.array(paidTopupReply) }), reply, renderPaidTopups);
    case "topups.show":
    case "topups.review":
      return renderWith(paidTopupReply, reply, (p) =>
        [renderPaidTopup(p), ...(p.replies ?? []).map((r, i) => `  reply ${i + 1}  ${JSON.stringify(r)}`)].join("\n"),
      );
    case "topups.reconcile":
      return renderWith(
        reconcileReply,
        reply,
        (r) => `reconciled\n${fields(Object.entries(r).map(([k, v]) => [k.replaceAll("_", " "), String(v)] as const))}`,
      );
    case "usage.deadLetters":
      return renderWith(deadLettersReply, reply, renderDeadLetters);
    case "usage.replay":
      return renderWith(replayReply, reply, (r) =>
        r.outcome === "already_replayed"
          ? `dead letter ${r.id} was replayed before; nothing changed`
          : r.written === 0
            ? `dead letter ${r.id} replayed: its request was already billed, so nothing was posted; its write-off is reversed`
            : `dead letter ${r.id} replayed: posted ${r.posted_micro_toman} micro-toman, write-off reversed`,
      );
  }
}

function renderWith<T>(schema: z.ZodType<T>, reply: unknown, format: (value: T) => string): string | null {
  const parsed = schema.safeParse(reply);
  return parsed.success ? format(parsed.data) : null;
}

/** An account's limits as rows: over all its keys, and the console's ceilings. */
function accountLimitRows(l: z.infer<typeof accountLimits>): [string, string][] {
  const perMinute = (n: number | null, unit: string) => (n === null ? `no ${unit} limit` : `${n} ${unit}`);
  return [
    ["account limits", `${l.concurrency_max} concurrent, ${perMinute(l.rpm, "rpm")}, ${perMinute(l.tpm, "tpm")}, ${l.keys_max} live keys`],
    ["console key ceilings", `${l.key_concurrency_max} concurrent, ${l.key_rpm_max} rpm, ${l.key_tpm_max} tpm`],
  ];
}

function renderAccount(a: z.infer<typeof accountReply>): string {
  const keys = a.keys ?? [];
  const head = fields([
    ["id", a.id],
    ["name", a.name],
    ["created", a.created_at],
    ["balance", `${a.balance_toman} toman`],
    ["held", `${a.held_toman} toman`],
    ["available", `${a.available_toman} toman`],
    ["keys", String(keys.length)],
    ...(a.limits ? accountLimitRows(a.limits) : []),
  ]);
  if (keys.length === 0) return head;
  const rows = keys.map((k) => [k.id, k.name, k.display, limitsText(k), capText(k), k.revoked_at ? `revoked ${k.revoked_at}` : "active"]);
  return `${head}\n${table([["ID", "NAME", "KEY", "LIMITS", "MONTHLY CAP", "STATE"], ...rows], "  ")}`;
}

function renderTopup(t: z.infer<typeof topupReply>): string {
  const head = t.credited
    ? `credited ${t.amount_toman} toman to ${t.account_id}`
    : `already credited: reference ${JSON.stringify(t.reference)} was used before for this amount; nothing changed`;
  return `${head}\n${fields([
    ["reference", t.reference],
    ["balance", `${t.balance_toman} toman`],
    ["available", `${t.available_toman} toman`],
  ])}`;
}

function renderCreatedKey(k: z.infer<typeof createdKeyReply>): string {
  return [
    "key created",
    fields([
      ["id", k.id],
      ["name", k.name],
      ["limits", limitsText(k)],
      ["monthly cap", capText(k)],
      ["residency", k.residency ?? "any"],
      ...restrictionRows(k),
    ]),
    "",
    `    ${k.key}`,
    "",
    "This key is shown only once: copy it now. The gateway keeps only a hash of it.",
  ].join("\n");
}

function renderAdjustment(a: z.infer<typeof adjustmentReply>): string {
  const debit = a.amount_toman.startsWith("-");
  const head = !a.credited
    ? `already applied: reference ${JSON.stringify(a.reference)} was used before for this adjustment; nothing changed`
    : debit
      ? `debited ${a.amount_toman.slice(1)} toman from ${a.account_id}`
      : `credited ${a.amount_toman} toman to ${a.account_id}`;
  return `${head}\n${fields([
    ["reference", a.reference],
    ["reason", a.reason],
    ["balance", `${a.balance_toman} toman`],
    ["available", `${a.available_toman} toman`],
  ])}`;
}

function renderRates(r: z.infer<typeof ratesReply>): string {
  const parts: string[] = [];
  const current = r.current;
  parts.push(
    current
      ? `rate in effect\n${fields([
          ["toman per USD", String(current.toman_per_usd)],
          ["version", String(current.id)],
          ["effective", current.effective_at],
        ])}`
      : "no rate in effect: no price version has started yet",
  );
  if (r.versions.length > 0) {
    // The gateway lists versions oldest first by effective time; a later one is still to come.
    const stateOf = (v: z.infer<typeof priceVersion>): string => {
      if (!current) return "scheduled";
      if (v.id === current.id) return "current";
      const [at, currentAt] = [Date.parse(v.effective_at), Date.parse(current.effective_at)];
      return at > currentAt || (at === currentAt && v.id > current.id) ? "scheduled" : "past";
    };
    const shown = r.versions.slice(-VERSIONS_SHOWN_MAX).reverse();
    const rows = shown.map((v) => [String(v.id), String(v.toman_per_usd), v.effective_at, stateOf(v)]);
    const title = r.versions.length > shown.length ? `price versions (newest ${shown.length} of ${r.versions.length})` : "price versions";
    parts.push(`${title}\n${table([["VERSION", "TOMAN/USD", "EFFECTIVE", "STATE"], ...rows], "  ")}`);
  }
  const f = r.fetch;
  parts.push(
    f
      ? `rate fetch\n${fields([
          ["source", f.source ?? "-"],
          ["last attempt", f.last_attempt_at ?? "never"],
          ["last success", f.last_success_at ?? "never"],
          ["last rate", f.last_rate === null || f.last_rate === undefined ? "-" : String(f.last_rate)],
          ["last error", f.last_error ?? "none"],
        ])}`
      : "rate fetch: not configured (the rate changes only by `rates set`)",
  );
  return parts.join("\n\n");
}

function renderPaidTopup(p: z.infer<typeof paidTopupReply>): string {
  return fields([
    ["id", p.id],
    ["account", p.account_id],
    ["state", p.state],
    ["amount", `${p.amount_toman} toman`],
    ["authority", p.authority ?? "-"],
    ["ref id", p.ref_id ?? "-"],
    ["card", p.card_pan ?? "-"],
    ["fee", p.fee_toman === null ? "-" : `${p.fee_toman} toman (recorded, not deducted)`],
    ["attempts", String(p.attempts)],
    ["reason", p.reason ?? "-"],
  ]);
}

function renderPaidTopups(list: { data: z.infer<typeof paidTopupReply>[] }): string {
  if (list.data.length === 0) return "no top-ups";
  const rows = list.data.map((p) => [
    p.id,
    p.account_id,
    p.state,
    `${p.amount_toman} toman`,
    p.ref_id ?? "-",
    p.created_at,
    p.reason ?? "",
  ]);
  return table([["ID", "ACCOUNT", "STATE", "AMOUNT", "REF ID", "CREATED", "REASON"], ...rows], "");
}

function renderAudit(a: z.infer<typeof auditReply>): string {
  const lines: string[] = [];
  for (const check of a.checks) {
    if (check.ok) {
      lines.push(`  ok      ${check.name}`);
      continue;
    }
    const count = check.violations.length;
    lines.push(`  FAILED  ${check.name} (${count} violation${count === 1 ? "" : "s"} listed)`);
    for (const violation of check.violations.slice(0, VIOLATIONS_SHOWN_MAX)) {
      lines.push(
        `          ${Object.entries(violation)
          .map(([name, value]) => `${name}=${typeof value === "string" ? value : JSON.stringify(value)}`)
          .join(" ")}`,
      );
    }
    if (count > VIOLATIONS_SHOWN_MAX) lines.push(`          … and ${count - VIOLATIONS_SHOWN_MAX} more (--json lists them)`);
  }
  if (a.write_offs_by_key.length > 0) lines.push("  written off (metered, not charged), by key:");
  for (const w of a.write_offs_by_key) {
    lines.push(
      `          ${w.key_id}  ${microToToman(BigInt(w.write_off_micro))} toman in ${w.requests} request${w.requests === 1 ? "" : "s"}`,
    );
  }
  if (a.upstream_anomalies.length > 0)
    lines.push("  upstream anomalies (usage reports outside the bounds: over clamped, under raised), by backend:");
  for (const u of a.upstream_anomalies) {
    lines.push(`          ${u.backend ?? "-"}  ${u.model}  ${u.anomaly}  in ${u.requests} request${u.requests === 1 ? "" : "s"}`);
  }
  const failed = a.checks.filter((c) => !c.ok).length;
  const dead = a.dead_letters;
  if (dead && dead.awaiting_replay > 0) {
    lines.push(
      `  note    ${dead.awaiting_replay} dead-lettered usage record(s) await replay, ${dead.written_off_micro} micro-toman written off (bun run gw usage dead-letters)`,
    );
  }
  if (dead?.malformed) {
    lines.push(
      `  note    ${dead.malformed} malformed message(s) on the usage subject, not records: nothing to bill (bun run gw usage dead-letters)`,
    );
  }
  lines.push(a.ok ? `ledger audit: ok (${a.checks.length} checks)` : `ledger audit: FAILED (${failed} of ${a.checks.length} checks)`);
  return lines.join("\n");
}

function renderDeadLetters(d: z.infer<typeof deadLettersReply>): string {
  if (d.data.length === 0) return "no dead letters";
  const rows = d.data.map((l) => [
    l.id,
    l.status,
    l.request_id,
    l.account_id,
    l.source,
    l.sql_state ?? "-",
    l.written_off_toman,
    l.created_at,
    l.reason,
  ]);
  return table([["ID", "STATUS", "REQUEST", "ACCOUNT", "SOURCE", "SQLSTATE", "WRITTEN OFF", "AT", "REASON"], ...rows], "  ");
}

function renderPools(p: z.infer<typeof poolsReply>): string {
  if (p.data.length === 0) return "no pools";
  const header = ["MODEL", "BACKEND", "KIND", "REGION", "WEIGHT", "IN FLIGHT", "TTFT", "TPOT", "BREAKER", "REQUESTS", "FAILURES"];
  const rows = p.data.flatMap((pool) =>
    pool.backends.map((b) => [
      pool.model,
      b.name,
      b.kind,
      b.region,
      String(b.weight ?? "-"),
      `${b.in_flight}/${b.concurrency_limit ?? b.concurrency_max ?? "-"}`,
      `${b.ttft_ms ?? b.latency_ewma_ms} ms`,
      b.tpot_ms == null ? "-" : `${b.tpot_ms} ms`,
      b.breaker,
      String(b.requests),
      String(b.failures),
    ]),
  );
  return table([header, ...rows], "");
}

function limitsText(k: { concurrency_max: number; rpm: number | null; tpm: number | null }): string {
  return `concurrency ${k.concurrency_max}, rpm ${k.rpm ?? "none"}, tpm ${k.tpm ?? "none"}`;
}

/** A key's model and address allowlists; null or absent: any. */
function restrictionRows(k: { allowed_models?: readonly string[] | null; allowed_ips?: readonly string[] | null }): [string, string][] {
  const listed = (entries: readonly string[] | null | undefined) => (entries == null ? "any" : entries.join(", ") || "none");
  return [
    ["models", listed(k.allowed_models)],
    ["addresses", listed(k.allowed_ips)],
  ];
}

function capText(k: { monthly_spend_cap_toman?: string | null | undefined }): string {
  return k.monthly_spend_cap_toman == null ? "none" : `${k.monthly_spend_cap_toman} toman`;
}

/** `label  value` lines with the values aligned, indented by two spaces. */
function fields(rows: readonly (readonly [string, string])[]): string {
  const width = Math.max(...rows.map(([label]) => label.length));
  return rows.map(([label, value]) => `  ${label.padEnd(width)}  ${value}`).join("\n");
}

/** Rows of cells with every column padded to its widest cell. */
function table(rows: readonly (readonly string[])[], indent: string): string {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => (row[column] ?? "").length)));
  return rows
    .map(
      (row) =>
        indent +
        row
          .map((cell, column) => cell.padEnd(widths[column]!))
          .join("  ")
          .trimEnd(),
    )
    .join("\n");
}

function refusalOf(status: number, reply: unknown): string {
  const parsed = errorReply.safeParse(reply);
  if (!parsed.success) return `error: the gateway answered HTTP ${status} without an error body`;
  return `error: ${parsed.data.error.message} (${parsed.data.error.code ?? `HTTP ${status}`})`;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

const errorCode = z.object({ code: z.string() });

function reasonOf(error: unknown): string {
  if (error instanceof Error && error.name === "TimeoutError") return `no reply within ${REQUEST_TIMEOUT_MS / 1000} s`;
  const coded = errorCode.safeParse(error);
  return coded.success ? coded.data.code : messageOf(error);
}

const consoleOutput: Output = {
  out: (text) => process.stdout.write(`${text}\n`),
  err: (text) => process.stderr.write(`${text}\n`),
};

if (import.meta.main) {
  process.exitCode = await runGw(process.argv.slice(2), process.env);
}
