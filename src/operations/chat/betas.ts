/**
 * The `anthropic-beta` names the gateway knows (the Messages wire's header, a chat body's
 * `anthropic.betas`), each with what it does to the vendor's bill. A name not listed is refused
 * with a 400 naming it: a switch the gateway does not know is one it cannot price. Listed names
 * are passed on to Anthropic backends and dropped for the others, which do not read them.
 *
 * Sources: "traffic" is what Claude Code 2.1.332 sends (recorded by test/clients-cli.test.ts and
 * test/messages.test.ts), "cli" a name in its binary, "sdk" @anthropic-ai/sdk 1.12.0's
 * `AnthropicBeta`; what each does is from https://docs.anthropic.com/en/api/beta-headers and the
 * feature's page.
 */

/**
 * `free`: no price effect (what it enables is billed in units the request already covers);
 * `long_context`: lets the prompt pass the standard window, above which the vendor bills its
 * long-context rate; `refused`: it bills something the catalog has no price for.
 */
export type BetaClass = "free" | "long_context" | "refused";

export interface KnownBeta {
  class: BetaClass;
  source: "traffic" | "cli" | "sdk";
  /** Why it has that class, for the docs and the refusal's message. */
  why: string;
}

/** The prompt tokens Anthropic bills at its standard rate; above, context-1m's long-context rate (https://docs.anthropic.com/en/docs/build-with-claude/context-windows#1m-token-context-window). */
export const STANDARD_WINDOW_TOKENS = 200_000;

export const ANTHROPIC_BETAS: ReadonlyMap<string, KnownBeta> = new Map<string, KnownBeta>([
  ["claude-code-20250219", { class: "free", source: "traffic", why: "names Claude Code's requests; no field or unit of its own" }],
  [
    "interleaved-thinking-2025-05-14",
    { class: "free", source: "traffic", why: "thinking between tool calls: output tokens within max_tokens" },
  ],
  [
    "context-management-2025-06-27",
    { class: "free", source: "traffic", why: "`context_management` edits clear old content: less input, never more" },
  ],
  [
    "per-turn-control-2026-07-01",
    { class: "free", source: "traffic", why: "per-turn settings of fields the wire checks; no unit of its own" },
  ],
  [
    "mid-conversation-tool-changes-2026-07-01",
    { class: "free", source: "traffic", why: "tools may change between turns; tools are counted as input" },
  ],
  ["thinking-token-count-2026-05-13", { class: "free", source: "traffic", why: "reports thinking tokens in usage; no price" }],
  [
    "advanced-tool-use-2025-11-20",
    {
      class: "free",
      source: "traffic",
      why: "deferred tool loading; the server tools it enables must be declared in `tools`, where the wire refuses them",
    },
  ],
  ["effort-2025-11-24", { class: "free", source: "traffic", why: "`output_config.effort`: output within max_tokens" }],
  ["token-efficient-tools-2025-02-19", { class: "free", source: "sdk", why: "fewer output tokens for tool calls" }],
  ["fine-grained-tool-streaming-2025-05-14", { class: "free", source: "sdk", why: "streams tool input without buffering; no price" }],
  ["prompt-caching-2024-07-31", { class: "free", source: "sdk", why: "cache reads and writes are priced units of the catalog" }],
  ["extended-cache-ttl-2025-04-11", { class: "free", source: "cli", why: "1-hour cache writes, priced as `cache_write_1h`" }],
  ["output-128k-2025-02-19", { class: "free", source: "sdk", why: "a max_tokens up to 128K: output within max_tokens and the hold" }],
  ["token-counting-2024-11-01", { class: "free", source: "sdk", why: "token counting, which is free" }],
  ["structured-outputs-2025-11-13", { class: "free", source: "sdk", why: "`output_config.format`: output within max_tokens" }],
  ["structured-outputs-2025-12-15", { class: "free", source: "cli", why: "`output_config.format`: output within max_tokens" }],
  ["model-context-window-exceeded-2025-08-26", { class: "free", source: "sdk", why: "a stop reason instead of an error; no price" }],
  [
    "web-search-2025-03-05",
    { class: "free", source: "cli", why: "the web search tool, priced per call when declared (`web_search_call`)" },
  ],
  [
    "context-1m-2025-08-07",
    {
      class: "long_context",
      source: "cli",
      why: `a prompt above ${STANDARD_WINDOW_TOKENS.toLocaleString("en")} tokens is billed at the long-context rate, which the catalog has no price for`,
    },
  ],
  ["fast-mode-2026-02-01", { class: "refused", source: "cli", why: "fast mode is billed at a premium rate the catalog has no price for" }],
  [
    "code-execution-2025-05-22",
    { class: "refused", source: "sdk", why: "code execution bills container time, which the catalog has no price for" },
  ],
  ["skills-2025-10-02", { class: "refused", source: "sdk", why: "skills run in a code execution container, billed by time" }],
  [
    "computer-use-2024-10-22",
    { class: "refused", source: "sdk", why: "the computer use tool adds system prompt tokens the request does not hold" },
  ],
  [
    "computer-use-2025-01-24",
    { class: "refused", source: "sdk", why: "the computer use tool adds system prompt tokens the request does not hold" },
  ],
  [
    "computer-use-2025-11-24",
    { class: "refused", source: "sdk", why: "the computer use tool adds system prompt tokens the request does not hold" },
  ],
  ["mcp-client-2025-04-04", { class: "refused", source: "sdk", why: "remote MCP servers' results are input the request does not hold" }],
  ["mcp-client-2025-11-20", { class: "refused", source: "sdk", why: "remote MCP servers' results are input the request does not hold" }],
  ["files-api-2025-04-14", { class: "refused", source: "cli", why: "files kept with the vendor, read as input the request does not hold" }],
  ["oauth-2025-04-20", { class: "refused", source: "cli", why: "a claude.ai login; the gateway calls Anthropic with its own key" }],
]);

/** What a request's betas ask: a 400 naming the first unknown or refused one, else whether one lifts the standard window. */
export type BetasVerdict = { longContext: boolean } | { refused: string; message: string };

/**
 * @example betasVerdict(["claude-code-20250219", "effort-2025-11-24"]) // { longContext: false }
 * @example betasVerdict(["context-1m-2025-08-07"]) // { longContext: true }
 */
export function betasVerdict(betas: readonly string[] | undefined): BetasVerdict {
  let longContext = false;
  for (const name of betas ?? []) {
    const known = ANTHROPIC_BETAS.get(name);
    if (!known)
      return {
        refused: name,
        message: `Unknown anthropic-beta \`${name}\`: the gateway passes on only the betas it can price (docs/api.md).`,
      };
    if (known.class === "refused") return { refused: name, message: `anthropic-beta \`${name}\` is not supported: ${known.why}.` };
    if (known.class === "long_context") longContext = true;
  }
  return { longContext };
}
