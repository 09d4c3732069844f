/**
 * `gw operators …` and `gw audit`: the operators and the audit trail (src/http/admin/operators.ts)
 * from a shell. ADMIN_TOKEN makes the first owner on the machine; `operators add` prints the new
 * operator's password (generated here, never sent anywhere else) and TOTP enrolment URI, once.
 */
import { z } from "zod";
import { microToToman } from "../catalog/prices.ts";
import type { addOperatorBody, auditQuery, changeOperatorBody, tokenBody } from "../http/admin/operators.ts";
import type { Command } from "./args.ts";

export type OperatorCommand = Extract<Command, { kind: `operators${string}` | "audit" }>;

const operatorReply = z.object({
  id: z.string(),
  login: z.string(),
  name: z.string(),
  role: z.string(),
  adjust_daily_max_micro_toman: z.string(),
  created_at: z.string(),
});
const addedReply = operatorReply.extend({ otpauth_uri: z.string() });
const tokenReply = z.object({
  id: z.string(),
  operator_id: z.string(),
  name: z.string(),
  display: z.string(),
  token: z.string().optional(),
});
const auditReply = z.object({
  data: z.array(
    z.object({
      id: z.string(),
      at: z.string(),
      actor: z.string(),
      role: z.string(),
      via: z.string(),
      action: z.string(),
      target: z.string(),
      reason: z.string().nullable(),
      amount_micro_toman: z.string().nullable(),
    }),
  ),
});

export function isOperatorCommand(command: Command): command is OperatorCommand {
  return command.kind.startsWith("operators.") || command.kind === "audit";
}

export function operatorCall(command: OperatorCommand) {
  const one = (id: string) => `/admin/operators/${encodeURIComponent(id)}`;
  switch (command.kind) {
    case "operators.list":
      return { method: "GET" as const, path: "/admin/operators" };
    case "operators.add":
      return {
        method: "POST" as const,
        path: "/admin/operators",
        body: {
          login: command.login,
          name: command.name,
          role: command.role,
          password: command.password,
          ...(command.ceilingToman === undefined ? {} : { adjust_daily_max_toman: command.ceilingToman }),
        } satisfies z.input<typeof addOperatorBody>,
      };
    case "operators.remove":
      return { method: "DELETE" as const, path: one(command.operatorId) };
    case "operators.role":
      return {
        method: "PATCH" as const,
        path: one(command.operatorId),
        body: { role: command.role } satisfies z.input<typeof changeOperatorBody>,
      };
    case "operators.tokenCreate":
      return {
        method: "POST" as const,
        path: `${one(command.operatorId)}/tokens`,
        body: { name: command.name } satisfies z.input<typeof tokenBody>,
      };
    case "operators.tokenRevoke":
      return { method: "DELETE" as const, path: `/admin/operator-tokens/${encodeURIComponent(command.tokenId)}` };
    case "audit": {
      const filters: { [K in keyof z.input<typeof auditQuery>]?: string } = command.query;
      const query = new URLSearchParams(Object.entries(filters).filter((e): e is [string, string] => e[1] !== undefined));
      return { method: "GET" as const, path: `/admin/audit${query.size > 0 ? `?${query}` : ""}` };
    }
  }
}

type Table = (rows: string[][], indent: string) => string;

function operatorRow(o: z.infer<typeof operatorReply>): string[] {
  return [o.id, o.login, o.name, o.role, microToToman(BigInt(o.adjust_daily_max_micro_toman)), o.created_at];
}

/** The reply as an operator reads it, or null when it is not the shape the command expects. */
export function renderOperators(command: OperatorCommand, reply: unknown, table: Table): string | null {
  const header = ["ID", "LOGIN", "NAME", "ROLE", "SUPPORT CEILING/DAY", "CREATED"];
  switch (command.kind) {
    case "operators.list": {
      const parsed = z.object({ data: z.array(operatorReply) }).safeParse(reply);
      return parsed.success ? table([header, ...parsed.data.data.map(operatorRow)], "") : null;
    }
    case "operators.add": {
      const parsed = addedReply.safeParse(reply);
      if (!parsed.success) return null;
      return [
        `operator ${parsed.data.id} (${parsed.data.login}, ${parsed.data.role})`,
        `  password  ${command.password}`,
        `  totp      ${parsed.data.otpauth_uri}`,
        "shown only this once: hand both to the operator over a safe channel; they add the URI to an authenticator app.",
      ].join("\n");
    }
    case "operators.remove":
    case "operators.role": {
      const parsed = operatorReply.safeParse(reply);
      return parsed.success ? table([header, operatorRow(parsed.data)], "") : null;
    }
    case "operators.tokenCreate":
    case "operators.tokenRevoke": {
      const parsed = tokenReply.safeParse(reply);
      if (!parsed.success) return null;
      const t = parsed.data;
      return t.token ? `token ${t.id} for ${t.operator_id}: ${t.token}\nshown only this once.` : `token ${t.id} (${t.display}) revoked`;
    }
    case "audit": {
      const parsed = auditReply.safeParse(reply);
      if (!parsed.success) return null;
      if (parsed.data.data.length === 0) return "no audit rows";
      const rows = parsed.data.data.map((r) => [
        r.id,
        r.at,
        r.actor,
        r.role,
        r.via,
        r.action,
        r.target,
        r.amount_micro_toman === null ? "-" : microToToman(BigInt(r.amount_micro_toman)),
        r.reason ?? "-",
      ]);
      return table([["ID", "AT", "ACTOR", "ROLE", "VIA", "ACTION", "TARGET", "TOMAN", "REASON"], ...rows], "");
    }
  }
}
