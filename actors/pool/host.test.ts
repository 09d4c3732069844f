import { expect, test } from "bun:test";
import type { Catalog } from "../../src/catalog/catalog.ts";
import { PoolHost } from "./host.ts";
import { until } from "../../test/until.ts";

const catalog = {
  list: () => [
    { id: "m-1", openWeight: true },
    { id: "m-2", openWeight: true },
  ],
} as unknown as Catalog;
const backend = (name: string, url: string) => ({
  name,
  kind: "openai" as const,
  url,
  region: "in-country" as const,
  weight: 1,
  concurrency_max: 8,
});

test("preconnect opens one connection to each backend host ahead of the first request, one for a host that several pools share", async () => {
  const accepted: number[] = [];
  const listen = () =>
    Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { open: (socket) => void accepted.push(socket.localPort), data() {} } });
  const [shared, alone] = [listen(), listen()];
  try {
    const host = new PoolHost(
      catalog,
      {
        default_backends: [backend("a", `http://127.0.0.1:${shared.port}/v1`)],
        pools: {
          "m-2": { backends: [backend("a", `http://127.0.0.1:${shared.port}/v1`), backend("b", `http://127.0.0.1:${alone.port}/v1`)] },
        },
      },
      { upstreamTimeoutMs: 1000 },
    );
    host.preconnect();
    await until(() => accepted.length >= 2);
    expect(accepted.sort()).toEqual([shared.port, alone.port].sort());
  } finally {
    shared.stop(true);
    alone.stop(true);
  }
});
