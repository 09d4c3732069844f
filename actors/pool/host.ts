/**
 * The pool actors of this node, one per catalog model, built from the pools file. Without a
 * pools file every model is served by the default backends (the embedded simulator when no
 * real upstream is configured); open-weight models count as in-country there, as they would be
 * on our own GPU hosts.
 */
import type { BackendConfig, PoolsFile } from "../../src/config.ts";
import type { Catalog } from "../../src/catalog/catalog.ts";
import { PoolActor, type PoolOptions } from "./pool.ts";

export class PoolHost {
  private readonly pools = new Map<string, PoolActor>();

  constructor(catalog: Catalog, file: PoolsFile, options: PoolOptions) {
    for (const model of catalog.list()) {
      const backends = file.pools[model.id]?.backends ?? file.default_backends;
      if (backends.length > 0) this.pools.set(model.id, new PoolActor(model.id, backends, options));
    }
  }

  get(model: string): PoolActor | undefined {
    return this.pools.get(model);
  }

  /** Whether the model can be served without its traffic leaving the country. */
  inCountry(model: string): boolean {
    return this.pools.get(model)?.backends.some((b) => b.config.region === "in-country") ?? false;
  }

  all(): PoolActor[] {
    return [...this.pools.values()];
  }
}

/** Pools for the embedded simulator: every model, one backend, open-weight models in-country. */
export function simulatorPools(catalog: Catalog, simulatorUrl: string): PoolsFile {
  const pools: PoolsFile["pools"] = {};
  for (const model of catalog.list()) {
    const backend: BackendConfig = {
      name: "sim",
      kind: "openai",
      url: `${simulatorUrl}/v1`,
      region: model.openWeight ? "in-country" : "abroad",
      weight: 1,
      concurrency_max: 10_000,
    };
    pools[model.id] = { backends: [backend] };
  }
  return { default_backends: [], pools };
}
