/**
 * OpenAI chat wire format, as pure string builders. Stream frames are concatenated from a
 * per-reply prefix instead of JSON.stringify-ing an object per token: the simulator is the
 * benchmark ceiling, so the per-token cost is one short string concatenation.
 */

export type SimUsage = {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens: number };
};

export type WireFinishReason = "stop" | "length" | "tool_calls";

export type ChunkFramesOptions = {
  id: string;
  /** The tier each chunk says served it (`service_tier`); absent when the request asked for none. */
  serviceTier?: string | null;
  /** Unix seconds. */
  created: number;
  model: string;
  promptTokens: number;
  /** Prompt tokens reported as read from the cache (`prompt_tokens_details.cached_tokens`). */
  cachedTokens?: number;
  /** `stream_options.include_usage`: non-usage chunks carry `"usage":null`, then a usage chunk. */
  includeUsage: boolean;
  /** vLLM's `stream_options.continuous_usage_stats`: every chunk carries usage so far. */
  continuousUsage: boolean;
  /** Reported usage is the true one times this (SimOptions.usageScale). */
  usageScale?: number;
};

export const doneFrame = "data: [DONE]\n\n";

/** OpenAI's usage; `cachedTokens` (a part of the prompt) is reported only when there are some. */
export function usageOf(promptTokens: number, completionTokens: number, cachedTokens = 0, scale = 1): SimUsage {
  promptTokens = Math.round(promptTokens * scale);
  completionTokens = Math.round(completionTokens * scale);
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    ...(cachedTokens > 0 ? { prompt_tokens_details: { cached_tokens: cachedTokens } } : {}),
  };
}

function usageJson(promptTokens: number, completionTokens: number, cachedTokens = 0, scale = 1): string {
  promptTokens = Math.round(promptTokens * scale);
  completionTokens = Math.round(completionTokens * scale);
  return (
    `{"prompt_tokens":${promptTokens},"completion_tokens":${completionTokens},` +
    `"total_tokens":${promptTokens + completionTokens}` +
    (cachedTokens > 0 ? `,"prompt_tokens_details":{"cached_tokens":${cachedTokens}}}` : "}")
  );
}

/** Builds the `data: {...}\n\n` frames of one streamed reply. */
export class ChunkFrames {
  readonly #prefix: string;
  readonly #options: ChunkFramesOptions;

  constructor(options: ChunkFramesOptions) {
    this.#options = options;
    const tier = options.serviceTier ? `"service_tier":${JSON.stringify(options.serviceTier)},` : "";
    this.#prefix =
      `data: {"id":${JSON.stringify(options.id)},"object":"chat.completion.chunk",` +
      `"created":${options.created},"model":${JSON.stringify(options.model)},${tier}"choices":`;
  }

  /** The opening chunk of choice `index`: `delta: { role: "assistant", content: "" }`. */
  role(index = 0): string {
    return this.#choice(`{"role":"assistant","content":""}`, "null", 0, index);
  }

  /** One token of choice `index`; `completionTokens` counts it (all choices). */
  content(delta: string, completionTokens: number, index = 0): string {
    return this.#choice(`{"content":${JSON.stringify(delta)}}`, "null", completionTokens, index);
  }

  /** The opening chunk of a tool call: role, call id and function name, empty arguments. */
  toolStart(id: string, name: string, index = 0): string {
    const call = { index: 0, id, type: "function", function: { name, arguments: "" } };
    return this.#choice(`{"role":"assistant","content":null,"tool_calls":[${JSON.stringify(call)}]}`, "null", 0, index);
  }

  /** A piece of the tool call's arguments; `completionTokens` counts the pieces so far (all choices). */
  toolArguments(piece: string, completionTokens: number, index = 0): string {
    return this.#choice(`{"tool_calls":[{"index":0,"function":{"arguments":${JSON.stringify(piece)}}}]}`, "null", completionTokens, index);
  }

  /** The empty-delta chunk that carries the finish reason of choice `index`. */
  finish(reason: WireFinishReason, completionTokens: number, index = 0): string {
    return this.#choice("{}", `"${reason}"`, completionTokens, index);
  }

  /** The usage-only chunk sent after `finish` when `include_usage` was requested. */
  usage(completionTokens: number): string {
    return `${this.#prefix}[],"usage":${usageJson(this.#options.promptTokens, completionTokens, this.#options.cachedTokens, this.#options.usageScale)}}\n\n`;
  }

  #choice(delta: string, finishReason: string, completionTokens: number, index: number): string {
    return (
      `${this.#prefix}[{"index":${index},"delta":${delta},"logprobs":null,"finish_reason":${finishReason}}]` +
      `${this.#usageTail(completionTokens)}}\n\n`
    );
  }

  #usageTail(completionTokens: number): string {
    const { continuousUsage, includeUsage, promptTokens, cachedTokens, usageScale } = this.#options;
    if (continuousUsage) return `,"usage":${usageJson(promptTokens, completionTokens, cachedTokens, usageScale)}`;
    return includeUsage ? `,"usage":null` : "";
  }
}

export type CompletionBodyOptions = {
  id: string;
  created: number;
  model: string;
  content: string | null;
  /** A tool call replaces the content. */
  toolCall?: { id: string; name: string; arguments: string } | null;
  finishReason: WireFinishReason;
  /** Null omits the field, like an upstream that reports no usage. */
  usage: SimUsage | null;
  /** Choices, each with the same message (`n`); 1 when absent. */
  choices?: number;
  /** The tier the reply says served it (`service_tier`); absent when the request asked for none. */
  serviceTier?: string | null;
};

/** The non-streamed `chat.completion` object. */
export function completionBody(options: CompletionBodyOptions): string {
  return JSON.stringify({
    id: options.id,
    object: "chat.completion",
    created: options.created,
    model: options.model,
    ...(options.serviceTier ? { service_tier: options.serviceTier } : {}),
    choices: Array.from({ length: options.choices ?? 1 }, (_, index) => ({
      index,
      message: {
        role: "assistant",
        content: options.content,
        refusal: null,
        ...(options.toolCall
          ? {
              tool_calls: [
                {
                  id: options.toolCall.id,
                  type: "function",
                  function: { name: options.toolCall.name, arguments: options.toolCall.arguments },
                },
              ],
            }
          : {}),
      },
      logprobs: null,
      finish_reason: options.finishReason,
    })),
    ...(options.usage ? { usage: options.usage } : {}),
  });
}

export type WireErrorOptions = {
  message: string;
  type: string;
  param?: string | null;
  code?: string | null;
};

/** OpenAI's error shape: `{"error":{"message","type","param","code"}}`. */
export function errorBody({ message, type, param = null, code = null }: WireErrorOptions): string {
  return JSON.stringify({ error: { message, type, param, code } });
}
