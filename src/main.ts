/**
 * Start-up, in the order a request depends on things: config → db → bus → actors → http.
 * `bun run start` runs this file; tests and the demo call `startGateway` in-process.
 */
import { every, guardRejections, taskFailed } from "./background.ts";
import { startMemoryGuard } from "./memory.ts";
import { startLoopMonitor } from "./metrics/loop.ts";
import { KeyActorHost } from "../actors/key/host.ts";
import { PoolHost } from "../actors/pool/host.ts";
import { KEY_EVENTS, PRICE_EVENTS, WALLET_RECALLS } from "../actors/protocol.ts";
import { subjects as buildSubjects, type Subjects } from "../actors/subjects.ts";
import type { Bus } from "./bus/bus.ts";
import { LocalBus } from "./bus/local.ts";
import { NatsBus } from "./bus/nats.ts";
import { Cluster } from "./cluster.ts";
import { loadCatalog, reloadCatalog, type Catalog } from "./catalog/catalog.ts";
import { type FetchStatus, RateFetcher } from "./catalog/rates.ts";
import { CatalogPuller, type CatalogPullStatus } from "./catalog/import.ts";
import { ConfigError, loadConfig, natsSettings, type Config, type Env, type PoolsFile } from "./config.ts";
import { DataFolderLockedError, openDb, type Db } from "./db/client.ts";
import { migrate } from "./db/migrate.ts";
import { createApp } from "./http/app.ts";
import { createAccountArea, type AccountArea } from "./accountArea/index.ts";
import { paymentTopUps } from "./accountArea/topups.ts";
import { ALERT_SEND_INTERVAL_MS, sendPendingAlerts } from "./accountArea/balanceAlerts.ts";
import { SmsBudget } from "./accountArea/smsBudget.ts";
import { CONSOLE_SWEEP_INTERVAL_MS, sweepConsole } from "./accountArea/sweep.ts";
import { drainHttp } from "./http/drain.ts";
import { ensurePortFree, isAddressInUse, listenOptions, PortInUseError } from "./http/listen.ts";
import { Supervisor, workerPort, type WorkerListening } from "./workers.ts";
import { Health } from "./http/health.ts";
import { rehearse } from "./rehearsal.ts";
import type { GatewayDeps } from "./admission/deps.ts";
import { KEY_POLL_INTERVAL_MS, KeyStore } from "./keys/store.ts";
import { LAST_USE_FLUSH_MS } from "./keys/lastUse.ts";
import { expireHolds, pendingHoldTotals, renewHolds } from "./ledger/holds.ts";
import { startUsageStream } from "./ledger/stream.ts";
import { UsageWriter } from "./ledger/usage.ts";
import { DeadLetterTally, deadLetterTotals, ledgerSink, type DeadLetter } from "./ledger/deadletter.ts";
import { createLogger, type Logger } from "./log.ts";
import { LiveHub } from "./metrics/live.ts";
import { Metrics } from "./metrics/metrics.ts";
import { onInvariantBroken } from "./invariant.ts";
import { nodeName, Sampler } from "./metrics/snapshot.ts";
import { startTokenizer } from "./tokens/count.ts";
import { type OperationHandler, serveInternal } from "./internal/service.ts";
import { OPERATION_NAMES, type Operation as InternalOperation } from "./internal/wire.ts";
import { OPERATIONS as CATALOG_OPERATIONS } from "./catalog/file.ts";
import { PAID_OPERATIONS } from "./operations/paid.ts";
import { startPayments, type Payments } from "./payments/service.ts";
import { BATCH_SWEEP_INTERVAL_MS, BatchWorker } from "./batches/worker.ts";
import { JetStreamWorkQueue, LocalWorkQueue } from "./batches/queue.ts";

/**
 * Bun lets a process have only BUN_CONFIG_MAX_HTTP_REQUESTS fetches in flight (256 unless set
 * before start): every upstream request, streams included, counts. Below this the gateway warns.
 */
export const UPSTREAM_FETCHES_MIN = 4_096;

export interface Gateway {
  url: string;
  port: number;
  deps: GatewayDeps;
  keyHost: KeyActorHost;
  /** The account area's sessions, codes and top-ups. */
  console: AccountArea;
  /** Set when the node joined a cluster (NATS_URL and DATABASE_URL). */
  cluster: Cluster | null;
  /** Paid top-ups; null without ZARINPAL_MERCHANT_ID. */
  payments: Payments | null;
  /** /ready's checks; `draining` is set when stop() begins. */
  health: Health;
  /** The node's part in running batches. */
  batches: BatchWorker;
  /** Every route the node serves, as its HTTP app lists them (the hostile-input test walks them all). */
  routes: readonly { method: string; path: string }[];
  stop(): Promise<void>;
}

export interface StartOptions {
  /** Run PGlite in memory instead of the data folder (tests). */
  inMemory?: boolean;
  log?: Logger;
  /**
   * The pools of the upstreams to serve when no pools file (DARVAZE_CONFIG) is given, built on the
   * catalog as loaded at start: the demo's and the tests' simulated upstreams (src/sim/pools.ts).
   */
  pools?: (catalog: Catalog) => PoolsFile;
}

async function openBus(config: Config, log: Logger): Promise<Bus> {
  if (!config.env.NATS_URL) return new LocalBus(log);
  return NatsBus.connect(natsSettings(config.env)!, `darvaze-${process.pid}`, log);
}

/** What stop() undoes, in reverse order of starting. */
type Cleanups = (() => Promise<void> | void)[];

/** Runs `work` every `intervalMs` until stop; a failure is logged and counted as `task`, and the next run retries. */
function repeat(cleanups: Cleanups, task: string, intervalMs: number, log: Logger, work: () => unknown): void {
  cleanups.push(every(task, intervalMs, log, work));
}

/**
 * The node's pools: the pools file's, else those given in the process. A start with neither is
 * refused before anything is opened, naming what is missing.
 */
function upstreamPools(config: Config, options: StartOptions): (catalog: Catalog) => PoolsFile {
  const file = config.pools;
  if (file) return () => file;
  if (options.pools) return options.pools;
  throw new ConfigError([
    "DARVAZE_CONFIG: is required: the pools file of the upstreams to serve (docs/routing.md); `bun run demo` serves every model from simulated upstreams instead",
  ]);
}

/** Usage records' way to the ledger: the writer, over the NATS usage log when there is one; dead letters counted. */
async function startUsage(config: Config, db: Db, bus: Bus, subjects: Subjects, cleanups: Cleanups, log: Logger) {
  const deadLetters = new DeadLetterTally();
  const onDeadLetter = (letter: DeadLetter) => {
    deadLetters.add(letter);
    log("warn", "usage_dead_lettered", { requestId: letter.requestId, source: letter.source, reason: letter.reason });
  };
  let sink = ledgerSink(db, { onDeadLetter });
  let usageLogLag: (() => Promise<number>) | undefined;
  if (bus instanceof NatsBus) {
    const prefix = config.env.DARVAZE_SUBJECT_PREFIX;
    const stream = await startUsageStream(bus.nc, db, {
      prefix,
      subject: subjects.usage,
      deadSubject: subjects.usageDead,
      log,
      onDeadLetter,
      limits: { replicas: config.env.USAGE_STREAM_REPLICAS, messagesMax: config.env.USAGE_STREAM_MESSAGES_MAX },
      connection: {
        connected: () => bus.connected,
        whenDisconnected: (watcher) => bus.whenDisconnected(watcher),
        answering: () => bus.answering(),
      },
    });
    cleanups.push(() => stream.stop());
    sink = stream.sink;
    usageLogLag = () => stream.sink.lag();
  }
  const writer = new UsageWriter(sink, log, config.env.USAGE_FLUSH_MS);
  cleanups.push(() => writer.stop());
  return { writer, deadLetters, usageLogLag };
}

/**
 * Prices and models follow the catalog's tables (on every node's price event: a rate or a catalog
 * change) and, when configured, the exchange-rate source and the catalog pull (its diff only). A
 * model added is given its pool here.
 */
function followPrices(
  config: Config,
  db: Db,
  bus: Bus,
  subjects: Subjects,
  catalog: Catalog,
  pools: PoolHost,
  cleanups: Cleanups,
  log: Logger,
): { rateFetch: () => FetchStatus | null; catalogPull: () => CatalogPullStatus | null } {
  const env = config.env;
  const reload = () =>
    reloadCatalog(db, catalog)
      .then(() => pools.adopt())
      .catch((error: unknown) => taskFailed("catalog_reload", log, error));
  cleanups.push(bus.subscribe(PRICE_EVENTS, subjects.priceEvents, () => void reload()));
  const catalogPull = pullCatalog(config, db, catalog, cleanups, log);
  if (!env.RATE_SOURCE_URL) return { rateFetch: () => null, catalogPull };
  const fetcher = new RateFetcher(
    db,
    { url: env.RATE_SOURCE_URL, path: env.RATE_SOURCE_PATH, intervalMs: env.RATE_FETCH_INTERVAL_MS },
    () => catalog.currentVersion()?.tomanPerUsd,
    async () => {
      await reload();
      bus.publish(PRICE_EVENTS, subjects.priceEvents, { versionId: catalog.currentVersion()?.versionId ?? 0 });
    },
    log,
  );
  fetcher.start();
  cleanups.push(() => fetcher.stop());
  return { rateFetch: () => fetcher.status, catalogPull };
}

/** The scheduled pull of CATALOG_IMPORT_URL, which records its diff and applies nothing: its status (null when unset). */
function pullCatalog(config: Config, db: Db, catalog: Catalog, cleanups: Cleanups, log: Logger): () => CatalogPullStatus | null {
  const { CATALOG_IMPORT_URL: url, CATALOG_IMPORT_INTERVAL_MS: intervalMs } = config.env;
  if (!url) return () => null;
  const puller = new CatalogPuller(db, catalog, { url, intervalMs }, log);
  puller.start();
  cleanups.push(() => puller.stop());
  return () => puller.status;
}

/** Internal services call the same operations over NATS (gw.v1.<operation>). */
async function serveOperations(bus: NatsBus, deps: GatewayDeps, origin: string, cleanups: Cleanups): Promise<void> {
  const operations: Partial<Record<InternalOperation, OperationHandler>> = {};
  for (const operation of CATALOG_OPERATIONS) operations[OPERATION_NAMES[operation]] = (input) => PAID_OPERATIONS[operation](input, deps);
  const stopInternal = await serveInternal({ nc: bus.nc, subjects: deps.subjects, log: deps.log, origin, operations });
  cleanups.push(stopInternal);
}

function warnIfFetchesLimited(log: Logger): void {
  const fetchesMax = Number(process.env.BUN_CONFIG_MAX_HTTP_REQUESTS ?? 256);
  if (fetchesMax >= UPSTREAM_FETCHES_MIN) return;
  log("warn", "upstream_fetches_limited", { max: fetchesMax, fix: "start with BUN_CONFIG_MAX_HTTP_REQUESTS=16384 (bun run start does)" });
}

/** The metrics' sources: every part of the node that has a gauge. */
function gatewayMetrics(
  parts: {
    db: Db;
    bus: Bus;
    pools: PoolHost;
    keyHost: KeyActorHost;
    cluster: Cluster | null;
    payments: Payments | null;
    usage: Awaited<ReturnType<typeof startUsage>>;
    smsBudget: SmsBudget;
  },
  env: Env,
  cleanups: Cleanups,
  log: Logger,
): Metrics {
  const { db, bus, pools, keyHost, cluster, payments, usage } = parts;
  // What the metrics read of the process: the memory guard's collections, the event loop's stalls.
  // The embedded database's worker has a heap of its own, which it collects itself: its growth is
  // not what a collection on this thread can give back.
  const memory = startMemoryGuard({
    growthMib: env.GC_RSS_GROWTH_MIB,
    log,
    otherHeapsBytes: () => db.worker?.heapBytes ?? 0,
  });
  cleanups.push(() => memory.stop());
  const loop = startLoopMonitor();
  cleanups.push(() => loop.stop());
  return new Metrics({
    memoryGuard: () => memory.stats,
    eventLoop: loop.read,
    pools,
    leaseSlackMicro: () => keyHost.slackMicro(),
    usageBacklog: () => usage.writer.buffered,
    natsConnected: () => (bus instanceof NatsBus ? bus.connected : null),
    leases: () => keyHost.leaseTotals(),
    keyInFlight: () => keyHost.inFlightByClass(),
    holds: () => pendingHoldTotals(db),
    usageLogLag: usage.usageLogLag,
    deadLetters: () => usage.deadLetters.counts.values(),
    deadLettersPending: () => deadLetterTotals(db),
    keyAdmissions: () => keyHost.admissionsByPath(),
    keyRateAdmissions: cluster ? () => keyHost.rateAdmissionsByPath() : undefined,
    partitionsOwned: cluster ? () => cluster.partitionsOwned : undefined,
    topups: payments ? () => payments.topups.countsByState() : undefined,
    smsBudget: () => parts.smsBudget.today(),
  });
}

/** The key actors of this node, sharing keys' limits with the cluster's other nodes when there is one (NATS and PostgreSQL). */
async function startKeyActors(
  config: Config,
  parts: { db: Db; bus: Bus; subjects: Subjects; keys: KeyStore; writer: UsageWriter },
  cleanups: Cleanups,
  log: Logger,
): Promise<{ cluster: Cluster | null; keyHost: KeyActorHost }> {
  const { db, bus, subjects, keys, writer } = parts;
  const env = config.env;
  const cluster =
    bus instanceof NatsBus && env.DATABASE_URL
      ? new Cluster({ bus, db, keys, subjects, prefix: env.DARVAZE_SUBJECT_PREFIX, kvReplicas: env.NATS_KV_REPLICAS, log })
      : null;
  const keyHost = new KeyActorHost(
    { db, keys, writer, log, leaseTtlMs: env.LEASE_TTL_MS, keyIdleMs: env.KEY_IDLE_MS },
    (recall) => bus.publish(WALLET_RECALLS, subjects.walletRecalls, recall),
    cluster ? { shares: cluster.shares, permits: cluster.permits } : undefined,
  );
  cleanups.push(() => keyHost.releaseAll());
  cleanups.push(keyHost.serve(bus, subjects));
  if (cluster) {
    keyHost.liveNodes = () => cluster.liveNodes;
    await cluster.start();
    cleanups.push(() => cluster.leave());
    cleanups.push(bus.subscribe(KEY_EVENTS, subjects.keyEvents, (event) => cluster.keyChanged(event.keyId)));
  }
  return { cluster, keyHost };
}

/** The key store, forgetting a key on its change event, polling changes and flushing keys' last use. */
function startKeyStore(env: Env, parts: { db: Db; bus: Bus; subjects: Subjects }, cleanups: Cleanups, log: Logger): KeyStore {
  const { db, bus, subjects } = parts;
  const keys = new KeyStore(db, { prefix: env.KEY_PREFIX, pepper: env.KEY_PEPPER });
  cleanups.push(bus.subscribe(KEY_EVENTS, subjects.keyEvents, (event) => keys.forget(event.keyId)));
  repeat(cleanups, "key_poll", KEY_POLL_INTERVAL_MS, log, () => keys.pollChanges());
  const flushLastUse = () => keys.lastUse.flush(db);
  // The last notes, once the timer below has stopped.
  cleanups.push(async () => {
    await flushLastUse().catch((error: unknown) => taskFailed("key_last_use", log, error));
  });
  repeat(cleanups, "key_last_use", LAST_USE_FLUSH_MS, log, flushLastUse);
  return keys;
}

/** Renews this node's holds and expires those of nodes gone, every HOLD_SWEEP_INTERVAL_MS. */
function sweepHolds(env: Env, db: Db, keyHost: KeyActorHost, cleanups: Cleanups, log: Logger): void {
  repeat(cleanups, "hold_sweep", env.HOLD_SWEEP_INTERVAL_MS, log, async () => {
    // This node's leases first: a hold ends by its node's close, or by expiry once its node is gone.
    await renewHolds(db, keyHost.openHolds(), env.LEASE_TTL_MS);
    const expired = await expireHolds(db, { graceMs: env.HOLD_EXPIRY_GRACE_MS });
    if (expired > 0) log("warn", "holds_expired", { wallets: expired });
  });
}

/** The app listening on HOST:PORT, drained on shutdown: requests in flight finish (bounded), then the rest unwinds. */
function listenApp(app: ReturnType<typeof createApp>, env: Env, cleanups: Cleanups, log: Logger): void {
  try {
    app.listen(listenOptions(env));
  } catch (error) {
    // Taken since ensurePortFree looked.
    throw isAddressInUse(error) ? new PortInUseError(env.HOST, env.PORT) : error;
  }
  const server = app.server!;
  cleanups.push(() => drainHttp(server, env.SHUTDOWN_DRAIN_MS, log));
}

export async function startGateway(config: Config, options: StartOptions = {}): Promise<Gateway> {
  const env = config.env;
  const log = options.log ?? createLogger(env.LOG_LEVEL);
  const cleanups: Cleanups = [];
  const stop = async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
  };
  try {
    const poolsOf = upstreamPools(config, options);
    if (env.DARVAZE_WORKER_INDEX === undefined) ensurePortFree(env.HOST, env.PORT); // a worker's supervisor looked
    const db: Db = await openGatewayDb(env, options.inMemory, log);
    cleanups.push(() => db.close());
    const applied = await migrate(db);
    if (applied.length > 0) log("info", "migrated", { applied });
    const catalog = await loadCatalog(db);
    startTokenizer({ msPerKey: env.TOKENIZER_MS_PER_KEY });

    const bus = await openBus(config, log);
    cleanups.push(() => bus.close());
    const subjects = buildSubjects(env.DARVAZE_SUBJECT_PREFIX);

    const keys = startKeyStore(env, { db, bus, subjects }, cleanups, log);
    const { writer, deadLetters, usageLogLag } = await startUsage(config, db, bus, subjects, cleanups, log);
    const { cluster, keyHost } = await startKeyActors(config, { db, bus, subjects, keys, writer }, cleanups, log);
    const pools = new PoolHost(catalog, poolsOf(catalog), { upstreamTimeoutMs: env.UPSTREAM_TIMEOUT_MS, log });
    cleanups.push(await pools.start({ db, bus, subjects, log, env: process.env }));
    pools.preconnect();
    if (cluster) await cluster.startQuotas(pools);

    sweepHolds(env, db, keyHost, cleanups, log);
    const fetches = followPrices(config, db, bus, subjects, catalog, pools, cleanups, log);

    // The callback URL needs the listen address, known only once the server is up.
    let origin = `http://${env.HOST}:${env.PORT}`;
    const payments = startPayments(env, db, log, () => origin);
    if (payments) cleanups.push(() => payments.stop());

    const usage = { writer, deadLetters, usageLogLag };
    const smsBudget = new SmsBudget(db, { dailyMax: env.SMS_DAILY_BUDGET_MAX, log });
    const metrics = gatewayMetrics({ db, bus, pools, keyHost, cluster, payments, usage, smsBudget }, env, cleanups, log);
    onInvariantBroken((invariant, details) => {
      log("error", "invariant_broken", { invariant, ...details });
      metrics.broken(invariant);
    });
    const live = new LiveHub({ bus, subject: subjects.metricsPools, sampler: new Sampler(nodeName(), pools, metrics.traffic), log });
    live.start();
    cleanups.push(() => live.stop());
    await bus.flush(); // every subscription is on the broker before the first request arrives
    const deps: GatewayDeps = { env, db, bus, subjects, catalog, keys, pools, writer, metrics, log, payments };
    const health = new Health(deps);
    const area = startAccountArea(env, db, { payments, smsBudget }, cleanups, log);
    // Lines yield to the live requests in flight on this node's server, once it listens.
    let server: { pendingRequests: number } | undefined;
    const batches = await startBatches(deps, cleanups, () => server?.pendingRequests ?? 0);
    // The partitions taken at start grow no share until their quiet period ends: a first request would wait it out.
    await cluster?.quietOver();
    const app = createApp(deps, { ...fetches, live, health, console: area, batches });
    if (env.START_REHEARSAL) await rehearse(deps);
    listenApp(app, env, cleanups, log);
    server = app.server!;
    if (bus instanceof NatsBus) await serveOperations(bus, deps, env.PUBLIC_URL ?? `http://${env.HOST}:${app.server!.port}`, cleanups);
    const port = app.server!.port!;
    const url = `http://${env.HOST}:${port}`;
    origin = url;
    warnIfFetchesLimited(log);
    // Pushed last, so it runs first when stopping: /ready answers 503 while the node drains.
    cleanups.push(() => void (health.draining = true));
    log("info", "listening", { url, database: db.engine, bus: bus.kind });
    if (env.DARVAZE_WORKER_INDEX !== undefined) listenAsWorker(env, env.DARVAZE_WORKER_INDEX, app, url, cleanups);
    return { url, port, deps, keyHost, console: area, cluster, payments, health, batches, routes: routesOf(app), stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** The account area, its sweep of expired sessions and codes, and its balance alerts. */
function startAccountArea(
  env: Env,
  db: Db,
  parts: { payments: Payments | null; smsBudget: SmsBudget },
  cleanups: Cleanups,
  log: Logger,
): AccountArea {
  const { payments, smsBudget } = parts;
  const area = createAccountArea(env, db, log, { topUps: payments ? paymentTopUps(payments.topups) : undefined, smsBudget });
  repeat(cleanups, "console_sweep", CONSOLE_SWEEP_INTERVAL_MS, log, () => sweepConsole(db));
  repeat(cleanups, "balance_alerts", ALERT_SEND_INTERVAL_MS, log, () => sendPendingAlerts(db, area.sender, log));
  return area;
}

/**
 * Batches' work on this node: with NATS the cluster's work-queue stream, embedded an in-process
 * queue filled again from the database at start; the window's sweep.
 */
async function startBatches(deps: GatewayDeps, cleanups: Cleanups, liveInFlight: () => number): Promise<BatchWorker> {
  const { bus, log } = deps;
  const queue =
    bus instanceof NatsBus
      ? await JetStreamWorkQueue.open(bus.nc, {
          prefix: deps.env.DARVAZE_SUBJECT_PREFIX,
          subject: deps.subjects.batchWork,
          log,
          replicas: deps.env.USAGE_STREAM_REPLICAS,
        })
      : new LocalWorkQueue(log);
  const worker = new BatchWorker({ deps, queue, liveInFlight });
  if (!(bus instanceof NatsBus)) await worker.recover();
  worker.start();
  cleanups.push(() => worker.stop());
  repeat(cleanups, "batch_sweep", BATCH_SWEEP_INTERVAL_MS, log, () => worker.sweep());
  return worker;
}

/** The app's routes, for tests that walk every one of them. */
function routesOf(app: { routes: { method: string; path: string }[] }): { method: string; path: string }[] {
  return app.routes.map((r) => ({ method: r.method, path: r.path }));
}

/**
 * A worker of several (WORKERS): it also answers on a port of its own (WORKER_PORT_BASE + its
 * index, the same app, so each worker's `/metrics` can be scraped), then tells its supervisor it listens.
 */
function listenAsWorker(
  env: Env,
  index: number,
  app: { fetch: (request: Request) => Response | Promise<Response> },
  url: string,
  cleanups: Cleanups,
): void {
  const port = workerPort(env, index);
  const own = Bun.serve({ ...listenOptions(env), port, reusePort: false, fetch: (request) => app.fetch(request) });
  cleanups.push(() => own.stop(true));
  const listening: WorkerListening = { event: "listening", url, ownUrl: `http://${env.HOST}:${port}` };
  process.send?.(listening);
}

/** The gateway's database: PostgreSQL at DATABASE_URL, else PGlite in the data folder (in memory for tests). */
function openGatewayDb(env: Env, inMemory: boolean | undefined, log: Logger): Promise<Db> {
  return openDb({
    databaseUrl: env.DATABASE_URL,
    dataFolder: inMemory ? null : env.DARVAZE_DATA,
    pglite: { thread: env.PGLITE_THREAD, workerNice: env.PGLITE_WORKER_NICE, log },
  });
}

/** Turns start-up failures into one clear message and exit code 1; a rejection nobody handled later is logged and counted, not fatal. */
export async function runMain(start: () => Promise<Gateway>, log: Logger = createLogger("info")): Promise<Gateway> {
  guardRejections(log);
  try {
    const gateway = await start();
    const shutdown = async () => {
      await gateway.stop();
      process.exit(0);
    };
    process.once("SIGINT", shutdown);
    process.once("SIGTERM", shutdown);
    return gateway;
  } catch (error) {
    if (error instanceof ConfigError || error instanceof DataFolderLockedError || error instanceof PortInUseError) {
      console.error(`darvaze: ${error.message}`);
    } else {
      console.error("darvaze: failed to start:", error);
    }
    process.exit(1);
  }
}

if (import.meta.main) {
  const config = loadOrExit();
  if (config.env.WORKERS > 1 && config.env.DARVAZE_WORKER_INDEX === undefined) {
    process.exit(await superviseOrExit(config));
  }
  await runMain(() => startGateway(config));
}

function loadOrExit(): Config {
  try {
    return loadConfig();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    console.error(`darvaze: ${error.message}`);
    process.exit(1);
  }
}

/** The host's workers (WORKERS), supervised until SIGTERM or SIGINT; the exit code. */
async function superviseOrExit(config: Config): Promise<number> {
  const log = createLogger(config.env.LOG_LEVEL);
  try {
    return await new Supervisor(config, log).run();
  } catch (error) {
    console.error(`darvaze: ${error instanceof ConfigError || error instanceof PortInUseError ? error.message : error}`);
    return 1;
  }
}
