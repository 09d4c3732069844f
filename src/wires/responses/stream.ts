/**
 * The relay's chat frames → the Responses API's typed SSE events, each `event: <type>` with a
 * `sequence_number` counting from 0.
 *
 *   start            response.created, response.in_progress (status in_progress, no output)
 *   content delta    first: response.output_item.added (a message) + response.content_part.added;
 *                    then response.output_text.delta
 *   tool call delta  a new call closes the open message, then response.output_item.added (a
 *                    function_call); its arguments: response.function_call_arguments.delta. A
 *                    custom tool's call (a custom_tool_call) keeps its arguments until it ends:
 *                    its freeform input is inside them, readable only whole
 *   vendor block     a search the vendor ran (`delta.anthropic_block`): its call adds a
 *                    web_search_call item (response.output_item.added,
 *                    response.web_search_call.in_progress, .searching); its result completes it
 *                    (response.web_search_call.completed, response.output_item.done). The open
 *                    message stays open: text after the searches continues it
 *   usage chunk      kept for the end
 *   [DONE]           every open item done (…text.done, …content_part.done, …arguments.done,
 *                    …output_item.done; a search without its result as failed), then response.completed, or response.incomplete when
 *                    the finish reason was `length` (the output budget, or the cut at the wallet)
 *   error frame      open items done as incomplete, then response.failed with the error
 *   keep-alive       passed on as an SSE comment
 */
import type { Failure } from "../../errors.ts";
import { onlyChoice, type ChatChunk, type ChatUsage, type ChunkDelta, type ChatFrame, type VendorBlock } from "../chat.ts";
import {
  finishReasonToStatus,
  messageItem,
  messageItemId,
  outputTextPart,
  responseObject,
  type SearchCall,
  searchCallOf,
  searchResultOf,
  toolCallItem,
  type ResponsesContext,
  webSearchCallItem,
} from "./response.ts";

/** Tool calls per reply the translation tracks; more is an upstream fault, not a reason to grow. */
export const RESPONSES_STREAM_CALLS_MAX = 1_024;

interface OpenCall {
  outputIndex: number;
  callId: string;
  name: string;
  arguments: string;
}

export class ResponsesStream {
  private sequence = 0;
  private readonly output: Record<string, unknown>[] = [];
  private text: { outputIndex: number; text: string } | null = null;
  private readonly calls = new Map<number, OpenCall>();
  private openCalls: OpenCall[] = [];
  /** Searches begun and not yet answered, by the vendor's call id (bounded with the calls). */
  private readonly searches = new Map<string, { outputIndex: number; call: SearchCall }>();
  private searchCount = 0;
  private usage: ChatUsage | null = null;
  private finishReason: string | null = null;
  private ended = false;

  constructor(
    private readonly ctx: ResponsesContext,
    /** Unix seconds now, for `completed_at` (the translation reads no clock). */
    private readonly now: () => number,
  ) {}

  /** The events that open the stream. */
  start(): string {
    const response = responseObject(this.ctx, { status: "in_progress", output: [], usage: null });
    return this.event("response.created", { response }) + this.event("response.in_progress", { response });
  }

  /** The events for one relay frame (possibly none). */
  frame(frame: ChatFrame): string {
    if (this.ended) return "";
    switch (frame.kind) {
      case "keepAlive":
        return ": keep-alive\n\n";
      case "chunk":
      case "usage":
        return this.chunk(frame.chunk);
      case "done":
        return this.finish(null);
      case "error":
        return this.finish(frame.failure);
    }
  }

  private chunk(chunk: ChatChunk): string {
    if (chunk.usage) this.usage = chunk.usage;
    const choice = onlyChoice(chunk);
    if (!choice) return "";
    let out = choice.delta.anthropic_block ? this.vendorBlock(choice.delta.anthropic_block) : "";
    if (choice.text !== "") out += this.textDelta(choice.text);
    for (const call of choice.delta.tool_calls ?? []) out += this.callDelta(call);
    this.finishReason = choice.finishReason ?? this.finishReason;
    return out;
  }

  /** A search's call opens its item; its result completes it. */
  private vendorBlock(block: VendorBlock): string {
    const call = searchCallOf(block);
    if (call) {
      if (this.searchCount >= RESPONSES_STREAM_CALLS_MAX) return "";
      this.searchCount++;
      const outputIndex = this.output.length;
      this.searches.set(call.id, { outputIndex, call });
      const item = webSearchCallItem(call, null, "in_progress");
      this.output.push(item);
      const at = { output_index: outputIndex, item_id: item.id };
      return (
        this.event("response.output_item.added", { output_index: outputIndex, item }) +
        this.event("response.web_search_call.in_progress", at) +
        this.event("response.web_search_call.searching", at)
      );
    }
    const result = searchResultOf(block);
    const open = result ? this.searches.get(result.callId) : undefined;
    if (!result || !open) return "";
    this.searches.delete(result.callId);
    const item = webSearchCallItem(open.call, result.urls, result.urls ? "completed" : "failed");
    this.output[open.outputIndex] = item;
    const completed = result.urls
      ? this.event("response.web_search_call.completed", { output_index: open.outputIndex, item_id: item.id })
      : "";
    return completed + this.event("response.output_item.done", { output_index: open.outputIndex, item });
  }

  /** Searches that got no result by the end: done as failed. */
  private closeSearches(): string {
    let out = "";
    for (const { outputIndex, call } of this.searches.values()) {
      const item = webSearchCallItem(call, null, "failed");
      this.output[outputIndex] = item;
      out += this.event("response.output_item.done", { output_index: outputIndex, item });
    }
    this.searches.clear();
    return out;
  }

  private textDelta(delta: string): string {
    let out = "";
    if (!this.text) {
      this.text = { outputIndex: this.output.length, text: "" };
      this.output.push(messageItem(this.ctx, "", "in_progress"));
      out += this.event("response.output_item.added", {
        output_index: this.text.outputIndex,
        item: messageItem(this.ctx, "", "in_progress"),
      });
      out += this.event("response.content_part.added", { ...this.textAt(), part: outputTextPart("") });
    }
    this.text.text += delta;
    return out + this.event("response.output_text.delta", { ...this.textAt(), delta, logprobs: [] });
  }

  private textAt() {
    return { item_id: messageItemId(this.ctx), output_index: this.text!.outputIndex, content_index: 0 };
  }

  private callDelta(delta: NonNullable<ChunkDelta["tool_calls"]>[number]): string {
    let out = "";
    let call = this.calls.get(delta.index);
    if (!call) {
      if (this.calls.size >= RESPONSES_STREAM_CALLS_MAX) return "";
      out += this.closeText("completed");
      call = {
        outputIndex: this.output.length,
        callId: delta.id ?? `call_${this.ctx.requestId}_${delta.index}`,
        name: delta.function?.name ?? "",
        arguments: "",
      };
      this.calls.set(delta.index, call);
      this.openCalls.push(call);
      const item = toolCallItem(this.ctx, call, "in_progress");
      this.output.push(item);
      out += this.event("response.output_item.added", { output_index: call.outputIndex, item });
    }
    const piece = delta.function?.arguments ?? "";
    if (piece === "") return out;
    call.arguments += piece;
    if (this.isCustom(call)) return out;
    return (
      out +
      this.event("response.function_call_arguments.delta", {
        item_id: toolCallItem(this.ctx, call, "in_progress").id,
        output_index: call.outputIndex,
        delta: piece,
      })
    );
  }

  private isCustom(call: OpenCall): boolean {
    return this.ctx.toolNames?.get(call.name)?.kind === "custom";
  }

  private closeText(status: "completed" | "incomplete"): string {
    if (!this.text) return "";
    const { outputIndex, text } = this.text;
    this.text = null;
    const at = { item_id: messageItemId(this.ctx), output_index: outputIndex, content_index: 0 };
    const item = messageItem(this.ctx, text, status);
    this.output[outputIndex] = item;
    return (
      this.event("response.output_text.done", { ...at, text, logprobs: [] }) +
      this.event("response.content_part.done", { ...at, part: outputTextPart(text) }) +
      this.event("response.output_item.done", { output_index: outputIndex, item })
    );
  }

  private closeCalls(status: "completed" | "incomplete"): string {
    let out = "";
    for (const call of this.openCalls) {
      const item = toolCallItem(this.ctx, call, status);
      this.output[call.outputIndex] = item;
      const at = { item_id: item.id, output_index: call.outputIndex };
      if (this.isCustom(call)) {
        out += this.event("response.custom_tool_call_input.delta", { ...at, delta: item.input });
        out += this.event("response.custom_tool_call_input.done", { ...at, input: item.input });
      } else out += this.event("response.function_call_arguments.done", { ...at, name: item.name, arguments: call.arguments });
      out += this.event("response.output_item.done", { output_index: call.outputIndex, item });
    }
    this.openCalls = [];
    return out;
  }

  private finish(failure: Failure | null): string {
    this.ended = true;
    const { status } = failure ? { status: "failed" as const } : finishReasonToStatus(this.finishReason);
    const itemStatus = status === "completed" ? "completed" : "incomplete";
    const out = this.closeSearches() + this.closeText(itemStatus) + this.closeCalls(itemStatus);
    const response = responseObject(this.ctx, {
      status,
      output: this.output,
      usage: this.usage,
      finishReason: this.finishReason,
      failure: failure ?? undefined,
      completedAt: this.now(),
    });
    return out + this.event(`response.${status}`, { response });
  }

  private event(type: string, fields: Record<string, unknown>): string {
    return `event: ${type}\ndata: ${JSON.stringify({ type, ...fields, sequence_number: this.sequence++ })}\n\n`;
  }
}
