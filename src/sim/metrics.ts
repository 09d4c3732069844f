/**
 * vLLM-style Prometheus metrics, so the gateway's host scraper can be tested against the simulator.
 * Counters live for the simulator's lifetime (a log `clear()` does not reset them, as a real
 * host's counters only reset on restart).
 */

/** Distinct model names tracked; later ones are counted under `otherModelName`. */
export const simModelsMax = 1_000;
export const otherModelName = "_other";
export const defaultModelName = "sim-model";
/** Concurrent requests that fill the pretend KV cache. */
export const kvCacheRequestsMax = 256;

type ModelCounters = { success: number; promptTokens: number; generationTokens: number };

export class SimMetrics {
  readonly #models = new Map<string, ModelCounters>([[defaultModelName, counters()]]);

  /** Registers a model name as seen (for /v1/models) without counting anything. */
  see(model: string): void {
    this.#countersOf(model);
  }

  /** Tokens a host processed, whether or not the request then succeeded. */
  addTokens(model: string, promptTokens: number, generationTokens: number): void {
    const entry = this.#countersOf(model);
    entry.promptTokens += promptTokens;
    entry.generationTokens += generationTokens;
  }

  addSuccess(model: string): void {
    this.#countersOf(model).success++;
  }

  models(): string[] {
    return [...this.#models.keys()];
  }

  /** Prometheus text exposition (version 0.0.4). */
  render(running: number, waiting = 0): string {
    const lines: string[] = [];
    const kvCacheUsage = Math.min(1, running / kvCacheRequestsMax);
    gauge(lines, "vllm:num_requests_running", "Requests in model execution batches.", running);
    gauge(lines, "vllm:num_requests_waiting", "Requests waiting to be processed.", waiting);
    gauge(lines, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kvCacheUsage);
    this.#counter(lines, "vllm:request_success_total", "Finished requests.", (c) => c.success);
    this.#counter(lines, "vllm:prompt_tokens_total", "Prefill tokens processed.", (c) => c.promptTokens);
    this.#counter(lines, "vllm:generation_tokens_total", "Generation tokens processed.", (c) => c.generationTokens);
    return `${lines.join("\n")}\n`;
  }

  #counter(lines: string[], name: string, help: string, value: (c: ModelCounters) => number): void {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`);
    for (const [model, entry] of this.#models) lines.push(`${name}{${modelLabel(model)}} ${value(entry)}`);
  }

  #countersOf(model: string): ModelCounters {
    const known = this.#models.get(model);
    if (known) return known;
    const name = this.#models.size < simModelsMax ? model : otherModelName;
    const entry = this.#models.get(name) ?? counters();
    this.#models.set(name, entry);
    return entry;
  }
}

function counters(): ModelCounters {
  return { success: 0, promptTokens: 0, generationTokens: 0 };
}

function gauge(lines: string[], name: string, help: string, value: number): void {
  lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`);
  lines.push(`${name}{${modelLabel(defaultModelName)}} ${value}`);
}

/** Label values escape `\`, `"` and newlines per the exposition format. */
function modelLabel(model: string): string {
  const escaped = model.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
  return `model_name="${escaped}"`;
}
