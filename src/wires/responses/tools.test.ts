/**
 * Codex's request (recorded from `codex exec` 0.169.0 with only a provider block) through the
 * Responses wire: its `additional_tools` item's namespaces and custom tools become flat function
 * tools, and the calls come back as the tools it offered, in the reply and in the stream.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { isFailure } from "../../errors.ts";
import type { ChatFrame } from "../chat.ts";
import { sseEvents } from "../../../test/wireFixtures.ts";
import { responsesToChat } from "./request.ts";
import { chatToResponse, type ResponsesContext } from "./response.ts";
import { ResponsesStream } from "./stream.ts";

const CODEX = JSON.parse(readFileSync(join(import.meta.dir, "../../../test/fixtures/clients/codex-exec.json"), "utf8")).body as Record<
  string,
  any
>;

function translated(body: Record<string, unknown>) {
  const out = responsesToChat(body);
  if (isFailure(out)) throw new Error(`${out.param}: ${out.message}`);
  return out;
}

const context = (body: Record<string, unknown>): ResponsesContext => {
  const t = translated(body);
  return { requestId: "req_1", model: String(body.model), createdAt: 1_732_000_000, request: t.request, toolNames: t.toolNames };
};

const chunk = (delta: Record<string, unknown>, finish: string | null = null): ChatFrame => ({
  kind: "chunk",
  chunk: { choices: [{ index: 0, delta, finish_reason: finish }] },
});

describe("Codex's recorded request", () => {
  test("is answered: every namespace member a flat function tool, custom tools take their input as one string", () => {
    const { chat, toolNames } = translated(CODEX);
    const tools = chat.tools as { function: { name: string; parameters: any } }[];
    const namespaces = CODEX.input[0].tools as { name: string; tools: { name: string; type: string }[] }[];
    const members = namespaces.flatMap((ns) => ns.tools.map((t) => `${ns.name}__${t.name}`));
    expect(tools.map((t) => t.function.name)).toEqual(members);
    expect(toolNames.get("clock__sleep")).toEqual({ name: "sleep", namespace: "clock", kind: "function" });
    expect(toolNames.get("functions__exec")).toEqual({ name: "exec", namespace: "functions", kind: "custom" });
    const exec = tools.find((t) => t.function.name === "functions__exec")!;
    expect(exec.function.parameters).toMatchObject({ type: "object", required: ["input"], properties: { input: { type: "string" } } });
    expect(exec.function.parameters.properties.input.description).toContain("PRAGMA_LINE");
    // The developer messages stay in order, as system-like messages before the user's.
    const roles = (chat.messages as { role: string }[]).map((m) => m.role);
    expect(roles).toEqual(["developer", "developer", "developer", "developer", "user", "user"]);
    expect(chat).toMatchObject({
      model: "gpt-6.1-sol",
      tool_choice: "auto",
      parallel_tool_calls: false,
      reasoning_effort: "low",
      stream: true,
    });
  });

  test("hosted tools are left out and a choice of one leaves the choice to the model", () => {
    const { chat } = translated({
      model: "gpt-4o",
      input: "Hi",
      tools: [{ type: "web_search" }, { type: "function", name: "f", parameters: {} }],
      tool_choice: { type: "web_search" },
    });
    expect(chat.tools).toEqual([{ type: "function", function: { name: "f", parameters: {} } }]);
    expect(chat.tool_choice).toBe("auto");
    expect(translated({ model: "gpt-4o", input: "Hi", tools: [{ type: "web_search" }] }).chat.tools).toBeUndefined();
  });

  test("web_search goes on as Anthropic's web search, max_tool_calls as its max_uses, location and domains as they are", () => {
    const location = { type: "approximate", country: "IR", city: "Tehran" };
    const { chat } = translated({
      model: "claude-sonnet-4",
      input: "News?",
      max_tool_calls: 2,
      tools: [{ type: "web_search", user_location: location, filters: { allowed_domains: ["example.com"] } }],
    });
    expect(chat.anthropic).toEqual({
      web_search: {
        type: "web_search_20250305",
        name: "web_search",
        max_uses: 2,
        user_location: location,
        allowed_domains: ["example.com"],
      },
    });
    expect(translated({ model: "gpt-4o", input: "Hi", tools: [{ type: "file_search" }] }).chat.anthropic).toBeUndefined();
  });

  test("earlier calls of namespaced and custom tools go back under their flat names", () => {
    const { chat } = translated({
      model: "gpt-6.1-sol",
      input: [
        { type: "additional_tools", role: "developer", tools: CODEX.input[0].tools },
        { role: "user", content: "run it" },
        { type: "custom_tool_call", call_id: "c1", namespace: "functions", name: "exec", input: "print(1)" },
        { type: "custom_tool_call_output", call_id: "c1", output: "1" },
        { type: "function_call", call_id: "c2", namespace: "clock", name: "sleep", arguments: '{"duration_ms":1}' },
        { type: "function_call_output", call_id: "c2", output: "slept" },
        { type: "web_search_call", id: "ws_1", status: "completed" },
      ],
    });
    expect((chat.messages as unknown[]).slice(1)).toEqual([
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "functions__exec", arguments: '{"input":"print(1)"}' } }],
      },
      { role: "tool", tool_call_id: "c1", content: "1" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c2", type: "function", function: { name: "clock__sleep", arguments: '{"duration_ms":1}' } }],
      },
      { role: "tool", tool_call_id: "c2", content: "slept" },
    ]);
  });

  test.each([
    [{ tools: [{ type: "namespace", name: "a", tools: [{ type: "web_search" }] }] }, "tools.0.tools.0.type"],
    [
      {
        tools: [
          { type: "function", name: "f" },
          { type: "function", name: "f" },
        ],
      },
      "tools.1.name",
    ],
    [{ tool_choice: { type: "function", name: "missing" } }, "tool_choice"],
  ])("%j is refused, naming %s", (extra, param) => {
    const out = responsesToChat({ model: "gpt-4o", input: "Hi", ...extra });
    expect(isFailure(out) ? out.param : out).toBe(param);
  });
});

describe("calls back as the tools offered", () => {
  const calls = [
    { id: "c1", type: "function", function: { name: "functions__exec", arguments: '{"input":"print(1)"}' } },
    { id: "c2", type: "function", function: { name: "clock__sleep", arguments: '{"duration_ms":5}' } },
  ];

  test("a whole reply: a custom_tool_call with its input, a function_call with its namespace", () => {
    const reply = { choices: [{ message: { content: null, tool_calls: calls }, finish_reason: "tool_calls" }] };
    const response = chatToResponse(reply, context(CODEX), 1_732_000_001) as { output: unknown[] };
    expect(response.output).toEqual([
      {
        type: "custom_tool_call",
        id: "ctc_c1",
        call_id: "c1",
        name: "exec",
        namespace: "functions",
        input: "print(1)",
        status: "completed",
      },
      {
        type: "function_call",
        id: "fc_c2",
        call_id: "c2",
        name: "sleep",
        namespace: "clock",
        arguments: '{"duration_ms":5}',
        status: "completed",
      },
    ]);
  });

  test("a stream: the custom call's input whole at its end, the function's arguments as they come", () => {
    const stream = new ResponsesStream(context(CODEX), () => 1_732_000_009);
    const frames: ChatFrame[] = [
      chunk({ tool_calls: [{ index: 0, id: "c1", function: { name: "functions__exec", arguments: '{"input":' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '"print(1)"}' } }] }),
      chunk({ tool_calls: [{ index: 1, id: "c2", function: { name: "clock__sleep", arguments: '{"duration_ms":5}' } }] }),
      chunk({}, "tool_calls"),
      { kind: "done" },
    ];
    const events = sseEvents(stream.start() + frames.map((f) => stream.frame(f)).join("")).map((e) => e.data);
    expect(events.map((e) => e.type)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.custom_tool_call_input.delta",
      "response.custom_tool_call_input.done",
      "response.output_item.done",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(events[2]!.item).toMatchObject({ type: "custom_tool_call", name: "exec", namespace: "functions", input: "" });
    expect(events[3]!.item).toMatchObject({ type: "function_call", name: "sleep", namespace: "clock" });
    expect(events[6]).toMatchObject({ item_id: "ctc_c1", output_index: 0, input: "print(1)" });
    expect(events[8]).toMatchObject({ item_id: "fc_c2", name: "sleep", arguments: '{"duration_ms":5}' });
    const done = events.at(-1)!.response as { output: { type: string }[] };
    expect(done.output.map((o) => o.type)).toEqual(["custom_tool_call", "function_call"]);
  });
});
