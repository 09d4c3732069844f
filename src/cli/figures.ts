/**
 * `gw customers search`, `gw accounts usage|sessions|wallet`, `gw revenue`, `gw anomalies` and
 * `gw overview`: the operators' console's reads (src/http/admin/figures.ts) from a shell. Amounts
 * print as the gateway's toman strings; `--json` gives the exact micro-toman too.
 */
import { z } from "zod";
import type { Command } from "./args.ts";

export type FigureCommand = Extract<
  Command,
  { kind: "customers.search" | "accounts.usage" | "accounts.sessions" | "accounts.wallet" | "revenue" | "anomalies" | "overview" }
>;

const FIGURE_KINDS: ReadonlySet<string> = new Set([
  "customers.search",
  "accounts.usage",
  "accounts.sessions",
  "accounts.wallet",
  "revenue",
  "anomalies",
  "overview",
]);

export function isFigureCommand(command: Command): command is FigureCommand {
  return FIGURE_KINDS.has(command.kind);
}

const withQuery = (path: string, query: Record<string, string | undefined>) => {
  const given = new URLSearchParams(Object.entries(query).filter((e): e is [string, string] => e[1] !== undefined));
  return given.size > 0 ? `${path}?${given}` : path;
};

export function figureCall(command: FigureCommand): { method: "GET"; path: string } {
  const account = (id: string) => `/admin/accounts/${encodeURIComponent(id)}`;
  switch (command.kind) {
    case "customers.search":
      return { method: "GET", path: withQuery("/admin/customers", { q: command.text }) };
    case "accounts.usage":
      return { method: "GET", path: withQuery(`${account(command.accountId)}/usage`, command.query) };
    case "accounts.sessions":
      return { method: "GET", path: `${account(command.accountId)}/sessions` };
    case "accounts.wallet":
      return { method: "GET", path: `${account(command.accountId)}/wallet` };
    case "revenue":
      return { method: "GET", path: withQuery("/admin/revenue", command.window) };
    case "anomalies":
      return { method: "GET", path: withQuery("/admin/anomalies", command.window) };
    case "overview":
      return { method: "GET", path: "/admin/overview" };
  }
}

const customers = z.object({
  data: z.array(
    z.object({ id: z.string(), name: z.string(), phone: z.string().nullable(), matched: z.string(), balance_toman: z.string() }),
  ),
});
const usage = z.object({
  data: z.array(
    z.object({
      created_at: z.string(),
      request_id: z.string(),
      key_id: z.string(),
      model: z.string(),
      status: z.number(),
      cost_toman: z.string(),
    }),
  ),
  totals: z.object({ requests: z.number(), cost_toman: z.string() }),
});
const sessions = z.object({
  data: z.array(z.object({ id: z.string(), device: z.string(), client_address: z.string().nullable(), last_used_at: z.string() })),
});
const wallet = z.object({
  moves: z.array(
    z.object({ at: z.string(), kind: z.string(), reference: z.string(), amount_toman: z.string(), reason: z.string().nullable() }),
  ),
  leases: z.array(
    z.object({ id: z.string(), key_id: z.string(), amount_toman: z.string(), posted_toman: z.string(), deadline: z.string() }),
  ),
});
const group = z.object({ key: z.string(), requests: z.number(), errors: z.number(), revenue_toman: z.string() });
const revenue = z.object({
  from: z.string(),
  requests: z.number(),
  errors: z.number(),
  revenue_toman: z.string(),
  written_off_toman: z.string(),
  reconciled: z.boolean(),
  by_model: z.array(group),
  by_vendor: z.array(group),
  by_region: z.array(group),
});
const anomalies = z.object({
  data: z.array(
    z.object({ backend: z.string().nullable(), model: z.string(), anomaly: z.string(), requests: z.number(), last_at: z.string() }),
  ),
});
const overview = z.object({
  today: revenue,
  month: revenue,
  ledger_audit: z.object({ ok: z.boolean(), failed: z.array(z.string()) }),
  dead_letters: z.object({ awaiting_replay: z.number(), written_off_toman: z.string() }),
  sms_budget: z.object({ sent: z.number(), max: z.number() }).nullable(),
  payments: z.object({ waiting: z.number(), needs_review: z.number() }).nullable(),
  pools_in_trouble: z.array(z.object({ model: z.string(), backend: z.string(), breaker: z.string() })),
});

type Table = (rows: string[][], indent: string) => string;

function revenueText(r: z.infer<typeof revenue>, table: Table): string {
  const head = `revenue since ${r.from}: ${r.revenue_toman} toman, ${r.requests} requests, ${r.errors} errors, written off ${r.written_off_toman} toman${r.reconciled ? "" : " (NOT reconciled with the ledger's usage transfers)"}`;
  const rows = (title: string, groups: z.infer<typeof group>[]) =>
    groups.length === 0
      ? []
      : [
          `${title}`,
          table(
            [["KEY", "REQUESTS", "ERRORS", "TOMAN"], ...groups.map((g) => [g.key, String(g.requests), String(g.errors), g.revenue_toman])],
            "  ",
          ),
        ];
  return [head, ...rows("by model", r.by_model), ...rows("by vendor", r.by_vendor), ...rows("by region", r.by_region)].join("\n");
}

function overviewText(o: z.infer<typeof overview>, table: Table): string {
  return [
    `today: ${o.today.revenue_toman} toman, ${o.today.requests} requests, ${o.today.errors} errors`,
    `this month: ${o.month.revenue_toman} toman, ${o.month.requests} requests, ${o.month.errors} errors`,
    `ledger audit: ${o.ledger_audit.ok ? "ok" : `FAILED: ${o.ledger_audit.failed.join("; ")}`}`,
    `dead letters awaiting replay: ${o.dead_letters.awaiting_replay} (${o.dead_letters.written_off_toman} toman written off)`,
    `sms today: ${o.sms_budget ? `${o.sms_budget.sent} of ${o.sms_budget.max}` : "no account area"}`,
    `payments: ${o.payments ? `${o.payments.waiting} waiting, ${o.payments.needs_review} in review` : "not configured"}`,
    o.pools_in_trouble.length === 0
      ? "pools: every breaker closed"
      : `pools in trouble:\n${table([["MODEL", "BACKEND", "BREAKER"], ...o.pools_in_trouble.map((p) => [p.model, p.backend, p.breaker])], "  ")}`,
  ].join("\n");
}

function parsedWith<T>(schema: z.ZodType<T>, reply: unknown, format: (value: T) => string): string | null {
  const parsed = schema.safeParse(reply);
  return parsed.success ? format(parsed.data) : null;
}

/** The reply as an operator reads it, or null when it is not the shape the command expects. */
export function renderFigures(command: FigureCommand, reply: unknown, table: Table): string | null {
  switch (command.kind) {
    case "customers.search":
      return parsedWith(customers, reply, (r) =>
        r.data.length === 0
          ? "no customer matches"
          : table(
              [
                ["ID", "NAME", "PHONE", "MATCHED", "BALANCE"],
                ...r.data.map((c) => [c.id, c.name, c.phone ?? "-", c.matched, c.balance_toman]),
              ],
              "",
            ),
      );
    case "accounts.usage":
      return parsedWith(usage, reply, (r) =>
        [
          `${r.totals.requests} requests, ${r.totals.cost_toman} toman`,
          table(
            [
              ["AT", "REQUEST", "KEY", "MODEL", "STATUS", "TOMAN"],
              ...r.data.map((u) => [u.created_at, u.request_id, u.key_id, u.model, String(u.status), u.cost_toman]),
            ],
            "",
          ),
        ].join("\n"),
      );
    case "accounts.sessions":
      return parsedWith(sessions, reply, (r) =>
        r.data.length === 0
          ? "no live sessions"
          : table(
              [["ID", "DEVICE", "ADDRESS", "LAST USED"], ...r.data.map((s) => [s.id, s.device, s.client_address ?? "-", s.last_used_at])],
              "",
            ),
      );
    case "accounts.wallet":
      return parsedWith(wallet, reply, (r) =>
        [
          table(
            [
              ["AT", "KIND", "REFERENCE", "TOMAN", "REASON"],
              ...r.moves.map((m) => [m.at, m.kind, m.reference, m.amount_toman, m.reason ?? "-"]),
            ],
            "",
          ),
          r.leases.length === 0
            ? "no leases held"
            : table(
                [
                  ["LEASE", "KEY", "HELD", "POSTED", "DEADLINE"],
                  ...r.leases.map((l) => [l.id, l.key_id, l.amount_toman, l.posted_toman, l.deadline]),
                ],
                "",
              ),
        ].join("\n"),
      );
    case "revenue":
      return parsedWith(revenue, reply, (r) => revenueText(r, table));
    case "anomalies":
      return parsedWith(anomalies, reply, (r) =>
        r.data.length === 0
          ? "no upstream anomalies"
          : table(
              [
                ["BACKEND", "MODEL", "ANOMALY", "REQUESTS", "LAST"],
                ...r.data.map((a) => [a.backend ?? "-", a.model, a.anomaly, String(a.requests), a.last_at]),
              ],
              "",
            ),
      );
    case "overview":
      return parsedWith(overview, reply, (o) => overviewText(o, table));
  }
}
