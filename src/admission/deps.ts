/** The gateway's services every layer below the entry points uses, built once by main.ts; each consumer takes the part it needs (`Pick<GatewayDeps, …>`). */
import type { Subjects } from "../../actors/subjects.ts";
import type { PoolHost } from "../../actors/pool/host.ts";
import type { Bus } from "../bus/bus.ts";
import type { Catalog } from "../catalog/catalog.ts";
import type { Env } from "../config.ts";
import type { Db } from "../db/client.ts";
import type { KeyStore } from "../keys/store.ts";
import type { UsageWriter } from "../ledger/usage.ts";
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics/metrics.ts";
import type { Payments } from "../payments/service.ts";

export interface GatewayDeps {
  env: Env;
  db: Db;
  bus: Bus;
  subjects: Subjects;
  catalog: Catalog;
  keys: KeyStore;
  pools: PoolHost;
  writer: UsageWriter;
  metrics: Metrics;
  log: Logger;
  /** Paid top-ups; null when no payment provider is configured. */
  payments?: Payments | null;
}
