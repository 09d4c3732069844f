/**
 * The Responses wire's tools as chat's function tools, and the calls back. Chat backends take only
 * flat function tools, so what Codex and the Agents SDK send is flattened, and every call the
 * model makes is mapped back to the tool the client offered:
 *
 *   function tool                     → a function tool of the same name
 *   custom tool (freeform input)      → a function tool whose one string argument `input` is the
 *                                       freeform text; a call comes back as `custom_tool_call`
 *   namespace {name, tools}           → its function and custom tools, each named
 *                                       `<namespace>__<name>`; a call comes back with its own name
 *                                       and `namespace`
 *   `additional_tools` input items    → their tools, as if in `tools`
 *   hosted tools (web_search, file_search, computer use, code interpreter, MCP, …)
 *                                     → left out of the function tools: no chat backend runs them,
 *                                       and a run that is not priced must not be started. The model
 *                                       answers without them, so the session goes on. `web_search`
 *                                       alone goes on to Anthropic backends as their web search
 *                                       (request.ts webSearchToAnthropic), bounded and billed per
 *                                       call (src/operations/chat/hosted.ts).
 *
 * Hook for the other hosted tools: a backend that runs them (an OpenAI Responses backend) could be
 * sent `omitted` once `max_tool_calls` is bounded inside the hold and each call's price is billed.
 */
import { z } from "zod";
import { fail, type Failure } from "../../errors.ts";
import { zodFailureAt } from "../fields.ts";
import { FUNCTION_NAME_CHARS_MAX } from "../../tokens/count.ts";

/** Between a namespace and a tool's name in the flat name the backend sees. */
export const NAMESPACE_SEPARATOR = "__";

const functionTool = z.strictObject({
  type: z.literal("function"),
  name: z.string().min(1),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
});
const customTool = z.strictObject({
  type: z.literal("custom"),
  name: z.string().min(1),
  description: z.string().nullish(),
  format: z.strictObject({ type: z.string(), syntax: z.string().nullish(), definition: z.string().nullish() }).nullish(),
});
const namespaceTool = z.strictObject({
  type: z.literal("namespace"),
  name: z.string().min(1),
  description: z.string().nullish(),
  tools: z.array(z.looseObject({ type: z.string() })),
});

/** The client's tool behind a flat name. */
export interface OfferedTool {
  name: string;
  namespace?: string;
  kind: "function" | "custom";
}

/** Flat name → the tool the client offered: how calls are mapped back. */
export type ToolNames = ReadonlyMap<string, OfferedTool>;

export interface ChatTools {
  tools: unknown[];
  names: ToolNames;
  /** Hosted tools left out, by type, in the order offered. */
  omitted: string[];
}

/** @example flatToolName("clock", "sleep") // "clock__sleep" */
export const flatToolName = (namespace: string | null | undefined, name: string) =>
  namespace ? `${namespace}${NAMESPACE_SEPARATOR}${name}` : name;

function customParameters(tool: z.infer<typeof customTool>): Record<string, unknown> {
  const format = tool.format;
  const grammar =
    format?.type === "grammar" && format.definition ? ` It must match this ${format.syntax ?? ""} grammar:\n${format.definition}` : "";
  return {
    type: "object",
    properties: { input: { type: "string", description: `The tool's whole input, as free text.${grammar}` } },
    required: ["input"],
    additionalProperties: false,
  };
}

class ToolFlattener {
  readonly tools: unknown[] = [];
  readonly names = new Map<string, OfferedTool>();
  readonly omitted: string[] = [];

  /** Adds one offered tool (and a namespace's members); a Failure names the one at fault. */
  add(raw: { type: string }, at: string, namespace?: string): Failure | null {
    if (raw.type === "function" || raw.type === "custom") return this.member(raw, at, namespace);
    if (raw.type === "namespace" && !namespace) {
      const group = namespaceTool.safeParse(raw);
      if (!group.success) return zodFailureAt(group.error, at);
      for (const [i, member] of group.data.tools.entries()) {
        if (member.type !== "function" && member.type !== "custom") {
          return fail("invalid_request", "A namespace holds function and custom tools only.", { param: `${at}.tools.${i}.type` });
        }
        const failure = this.member(member, `${at}.tools.${i}`, group.data.name);
        if (failure) return failure;
      }
      return null;
    }
    this.omitted.push(raw.type);
    return null;
  }

  private member(raw: { type: string }, at: string, namespace: string | undefined): Failure | null {
    const tool = raw.type === "custom" ? customTool.safeParse(raw) : functionTool.safeParse(raw);
    if (!tool.success) return zodFailureAt(tool.error, at);
    const flat = flatToolName(namespace, tool.data.name);
    if (flat.length > FUNCTION_NAME_CHARS_MAX)
      return fail("invalid_request", `Tool name \`${flat}\` is longer than ${FUNCTION_NAME_CHARS_MAX} characters.`, {
        param: `${at}.name`,
      });
    if (this.names.has(flat)) return fail("invalid_request", `Tool \`${flat}\` is offered twice.`, { param: `${at}.name` });
    this.names.set(flat, { name: tool.data.name, kind: tool.data.type, ...(namespace ? { namespace } : {}) });
    const description = tool.data.description ? { description: tool.data.description } : {};
    if (tool.data.type === "custom") {
      this.tools.push({ type: "function", function: { name: flat, ...description, parameters: customParameters(tool.data) } });
      return null;
    }
    const { parameters, strict } = tool.data as z.infer<typeof functionTool>;
    this.tools.push({
      type: "function",
      function: {
        name: flat,
        ...description,
        parameters: parameters ?? { type: "object", properties: {} },
        ...(strict != null ? { strict } : {}),
      },
    });
    return null;
  }
}

/**
 * The request's tools (`tools`, then each `additional_tools` item's, in order) as chat tools.
 * @example responsesToolsToChat([{ tools: [{ type: "namespace", name: "clock", tools: [sleep] }], at: "tools" }])
 *   // { tools: [{ type: "function", function: { name: "clock__sleep", … } }], names: Map { "clock__sleep" → … }, omitted: [] }
 */
export function responsesToolsToChat(groups: { tools: { type: string }[]; at: string }[]): ChatTools | Failure {
  const flattener = new ToolFlattener();
  for (const group of groups) {
    for (const [i, tool] of group.tools.entries()) {
      const failure = flattener.add(tool, `${group.at}.${i}`);
      if (failure) return failure;
    }
  }
  return { tools: flattener.tools, names: flattener.names, omitted: flattener.omitted };
}

/** The freeform input inside a flattened custom tool's arguments (the raw text when they are not the expected JSON). */
export function customInputOf(argumentsText: string): string {
  try {
    const parsed = JSON.parse(argumentsText) as { input?: unknown };
    return typeof parsed?.input === "string" ? parsed.input : argumentsText;
  } catch {
    return argumentsText;
  }
}
