/**
 * The pools that send every model to one upstream simulator: what the demo and the tests hand a
 * gateway in place of a pools file (`startGateway`'s `pools` option).
 */
import type { Catalog } from "../catalog/catalog.ts";
import type { BackendConfig, PoolsFile } from "../config.ts";

/** The simulator's concurrency cap as a backend: far above any test's or demo's load. */
const SIM_CONCURRENCY_MAX = 10_000;

/**
 * Every model of `catalog` on one backend at `simulatorUrl`, open-weight models in-country (as on
 * our own GPU hosts); a model added later gets the same backend, abroad.
 *
 *   startGateway(config, { pools: (catalog) => simulatorPools(catalog, sim.url) })
 */
export function simulatorPools(catalog: Catalog, simulatorUrl: string): PoolsFile {
  const backend = (region: "in-country" | "abroad"): BackendConfig => ({
    name: "sim",
    kind: "openai",
    url: `${simulatorUrl}/v1`,
    region,
    weight: 1,
    concurrency_max: SIM_CONCURRENCY_MAX,
  });
  const pools: PoolsFile["pools"] = {};
  for (const model of catalog.list()) pools[model.id] = { backends: [backend(model.openWeight ? "in-country" : "abroad")] };
  return { default_backends: [backend("abroad")], pools };
}
