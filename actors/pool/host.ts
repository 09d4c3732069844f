/**
 * The pool actors of this node, one per catalog model, built from the pools file and then from
 * the `pools` table, whose rows override the file.
 *
 *   change:  PUT /admin/pools/{model} writes the row, applies it here at once and publishes a
 *            pool event; every node re-reads that row on the event, and polls the table for
 *            rows changed since its last look every `POOL_POLL_INTERVAL_MS` in case an event
 *            was lost. A change keeps the state of backends that did not change.
 *   learn:   host metrics and health probes (probe.ts); estimates shared between nodes (stats.ts).
 *
 * A model without a pool of its own in the file is served by the file's default backends.
 */
import type { Bus } from "../../src/bus/bus.ts";
import { resolveBackends, type BackendConfig, type PaidFields, type PoolsFile } from "../../src/config.ts";
import type { Catalog } from "../../src/catalog/catalog.ts";
import type { Db } from "../../src/db/client.ts";
import { every, runTask } from "../../src/background.ts";
import { newId } from "../../src/ids.ts";
import type { Logger } from "../../src/log.ts";
import { POOL_EVENTS, POOL_STATS } from "../protocol.ts";
import type { Subjects } from "../subjects.ts";
import { PoolActor, type PoolOptions } from "./pool.ts";
import { Prober } from "./probe.ts";
import { foldStats, POOL_STATS_INTERVAL_MS, statsOf } from "./stats.ts";
import { loadPool, loadPools, type PoolRow } from "./savedPools.ts";

export const POOL_POLL_INTERVAL_MS = 1_000;
/** The poll looks this far behind its last high-water mark: commits land out of order. */
const POOL_POLL_OVERLAP_MS = 5_000;

export interface PoolSync {
  db: Db;
  bus: Bus;
  subjects: Subjects;
  log: Logger;
  env: Record<string, string | undefined>;
}

export class PoolHost {
  private readonly pools = new Map<string, PoolActor>();
  /** The `updated_at` of the row each model was last built from. */
  private readonly applied = new Map<string, number>();
  readonly node = newId("node");
  private pollCursor = new Date(0);

  constructor(
    private readonly catalog: Catalog,
    private readonly file: PoolsFile,
    private readonly options: PoolOptions,
  ) {
    for (const note of file.deprecated ?? []) options.log?.("warn", "pools_file_deprecated", { note });
    this.adopt();
  }

  /**
   * Gives every catalog model without a pool the pools file's backends for it (or its default
   * backends): at start-up, and after each catalog change, so a model an operator adds is served
   * on every node without a restart. A `pools` row for it is applied by the next poll.
   */
  adopt(): void {
    for (const model of this.catalog.list()) {
      if (this.pools.has(model.id)) continue;
      const backends = this.file.pools[model.id]?.backends ?? this.file.default_backends;
      if (backends.length > 0) this.apply(model.id, backends, this.file.pools[model.id]?.paid_fields);
    }
  }

  get(model: string): PoolActor | undefined {
    return this.pools.get(model);
  }

  /** Whether the model can be served without its traffic leaving the country. */
  inCountry(model: string): boolean {
    return this.pools.get(model)?.hasRegion("in-country") ?? false;
  }

  all(): PoolActor[] {
    return [...this.pools.values()];
  }

  /** Replaces a model's backends and paid fields on this node (state kept for backends that did not change). */
  apply(model: string, backends: BackendConfig[], paidFields?: PaidFields): void {
    let pool = this.pools.get(model);
    if (pool) pool.update(backends);
    else this.pools.set(model, (pool = new PoolActor(model, backends, this.options)));
    pool.paidFields = paidFields;
  }

  /**
   * Loads the table's rows, then follows changes (events and a poll), probes hosts and shares
   * statistics with other nodes until the returned stop function runs.
   */
  async start(sync: PoolSync): Promise<() => void> {
    await this.sync(sync);
    const stopPolling = every("pool_poll", POOL_POLL_INTERVAL_MS, sync.log, () => this.sync(sync));
    const unsubscribeEvents = sync.bus.subscribe(POOL_EVENTS, sync.subjects.poolEvents, ({ model }) => {
      runTask("pool_reload", sync.log, async () => {
        const row = await loadPool(sync.db, model);
        if (row) this.applyRow(row, sync);
      });
    });
    const unsubscribeStats = sync.bus.subscribe(POOL_STATS, sync.subjects.poolStats, (stats) => {
      if (stats.node === this.node) return;
      const pool = this.pools.get(stats.model);
      if (pool) foldStats(pool, stats);
    });
    const stopSharing = every("pool_stats_share", POOL_STATS_INTERVAL_MS, sync.log, () => {
      for (const pool of this.pools.values()) {
        const stats = statsOf(this.node, pool);
        if (stats) sync.bus.publish(POOL_STATS, sync.subjects.poolStats, stats);
      }
    });
    const prober = new Prober(
      () => this.all(),
      () => performance.now(),
      sync.log,
    );
    prober.start();
    return () => {
      stopPolling();
      stopSharing();
      prober.stop();
      unsubscribeEvents();
      unsubscribeStats();
    };
  }

  /**
   * Opens a connection to every backend's host ahead of the first request (DNS, TCP and, for
   * https, TLS: Bun's `fetch.preconnect`, kept in its pool for the first fetch), so the first
   * request to a host does not wait for one. Each host once, however many pools share it.
   */
  preconnect(): void {
    const origins = new Set<string>();
    for (const pool of this.pools.values()) for (const b of pool.backends) origins.add(URL.parse(b.config.url)?.origin ?? "");
    origins.delete("");
    for (const origin of origins) fetch.preconnect(origin);
  }

  /** Records that this node built the model from the row (it applied it itself). */
  markApplied(row: PoolRow): void {
    this.applied.set(row.model, row.updatedAt.getTime());
  }

  /** Applies a row unless this node already built the model from it (or a newer one). */
  applyRow(row: PoolRow, sync: Pick<PoolSync, "env" | "log">): void {
    if (!this.catalog.get(row.model)) return;
    if ((this.applied.get(row.model) ?? -1) >= row.updatedAt.getTime()) return;
    const { backends, problems } = resolveBackends(row.backends, sync.env);
    for (const problem of problems) sync.log("warn", "pool_backend_key_missing", { model: row.model, problem });
    this.apply(row.model, backends, row.paidFields);
    this.applied.set(row.model, row.updatedAt.getTime());
    sync.log("info", "pool_applied", { model: row.model, backends: backends.map((b) => b.name) });
  }

  private async sync(sync: PoolSync): Promise<void> {
    try {
      const since = this.pollCursor.getTime() === 0 ? undefined : new Date(this.pollCursor.getTime() - POOL_POLL_OVERLAP_MS);
      const { rows, invalid } = await loadPools(sync.db, since);
      for (const model of invalid) sync.log("error", "pool_row_invalid", { model });
      for (const row of rows) {
        if (row.updatedAt > this.pollCursor) this.pollCursor = row.updatedAt;
        this.applyRow(row, sync);
      }
    } catch (error) {
      sync.log("warn", "pool_poll_failed", { error: (error as Error).message });
    }
  }
}
