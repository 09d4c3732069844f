/**
 * Start-up, in the order a request depends on things: config → db → bus → actors → http.
 * `bun run start` runs this file; tests and the demo call `startGateway` in-process.
 */
import { startMemoryGuard } from "./memory.ts";
import { startLoopMonitor } from "./metrics/loop.ts";
import { KeyActorHost } from "../actors/key/host.ts";
import { PoolHost, simulatorPools } from "../actors/pool/host.ts";
import { KEY_EVENTS, PRICE_EVENTS, WALLET_RECALLS } from "../actors/protocol.ts";
import { subjects as buildSubjects, type Subjects } from "../actors/subjects.ts";
import type { Bus } from "./bus/bus.ts";
import { LocalBus } from "./bus/local.ts";
import { NatsBus } from "./bus/nats.ts";
import { Cluster } from "./cluster.ts";
import { loadCatalog, reloadCatalog, type Catalog } from "./catalog/catalog.ts";
import { RateFetcher } from "./catalog/rates.ts";
import { ConfigError, loadConfig, natsSettings, type Config, type Env } from "./config.ts";
import { DataFolderLockedError, openDb, type Db } from "./db/client.ts";
import { migrate } from "./db/migrate.ts";
import { createApp } from "./http/app.ts";
import { createConsole, type Console } from "./console/index.ts";
import { paymentTopUps } from "./console/topups.ts";
import { CONSOLE_SWEEP_INTERVAL_MS, sweepConsole } from "./console/sweep.ts";
import { drainHttp } from "./http/drain.ts";
import { ensurePortFree, isAddressInUse, listenOptions, PortInUseError } from "./http/listen.ts";
import { Health } from "./http/health.ts";
import type { EdgeDeps } from "./http/deps.ts";
import { KEY_POLL_INTERVAL_MS, KeyStore } from "./keys/store.ts";
import { LAST_USE_FLUSH_MS } from "./keys/lastUse.ts";
import { expireHolds, pendingHoldTotals } from "./ledger/holds.ts";
import { startUsageStream } from "./ledger/stream.ts";
import { UsageWriter } from "./ledger/usage.ts";
import { DeadLetterTally, deadLetterTotals, ledgerSink, type DeadLetter } from "./ledger/deadletter.ts";
import { createLogger, type Logger } from "./log.ts";
import { LiveHub } from "./metrics/live.ts";
import { Metrics } from "./metrics/metrics.ts";
import { nodeName, Sampler } from "./metrics/snapshot.ts";
import { warmTokenizer } from "./tokens/count.ts";
import { startSimulator, type SimOptions, type Simulator } from "./sim/server.ts";
import { serveInternal } from "./internal/service.ts";
import { chat } from "./http/chat/route.ts";
import { createEmbeddings } from "./http/embeddings/route.ts";
import { createImages } from "./http/images/route.ts";
import { createSpeech } from "./http/audio/speech.ts";
import { createTranscription } from "./http/audio/transcription.ts";
import { startPayments, type Payments } from "./payments/service.ts";

/**
 * Bun lets a process have only BUN_CONFIG_MAX_HTTP_REQUESTS fetches in flight (256 unless set
 * before start): every upstream request, streams included, counts. Below this the gateway warns.
 */
export const UPSTREAM_FETCHES_MIN = 4_096;

export interface Gateway {
  url: string;
  port: number;
  deps: EdgeDeps;
  keyHost: KeyActorHost;
  /** The account area's sessions, codes and top-ups. */
  console: Console;
  /** Set when the node joined a cluster (NATS_URL and DATABASE_URL). */
  cluster: Cluster | null;
  simulator: Simulator | null;
  /** Paid top-ups; null without ZARINPAL_MERCHANT_ID. */
  payments: Payments | null;
  /** /ready's checks; `draining` is set when stop() begins. */
  health: Health;
  stop(): Promise<void>;
}

export interface StartOptions {
  /** Run PGlite in memory instead of the data folder (tests). */
  inMemory?: boolean;
  log?: Logger;
  /** Options of the simulated upstreams started when no pools file is given (the demo's human pace). */
  simulator?: Partial<SimOptions>;
}

async function openBus(config: Config): Promise<Bus> {
  if (!config.env.NATS_URL) return new LocalBus();
  return NatsBus.connect(natsSettings(config.env)!, `darvaze-${process.pid}`);
}

/** What stop() undoes, in reverse order of starting. */
type Cleanups = (() => Promise<void> | void)[];

/** Runs `task` every `intervalMs` until stop. */
function repeat(cleanups: Cleanups, intervalMs: number, task: () => void): void {
  const timer = setInterval(task, intervalMs);
  cleanups.push(() => clearInterval(timer));
}

/** The configured pools file, or simulated upstreams when none is given. */
async function upstreams(config: Config, options: StartOptions, catalog: Catalog, cleanups: Cleanups, log: Logger) {
  if (config.pools) return { poolsFile: config.pools, simulator: null };
  const simulator = await startSimulator({ port: 0, ...options.simulator });
  cleanups.push(() => simulator.stop());
  log("info", "simulated_upstreams", { url: simulator.url });
  return { poolsFile: simulatorPools(catalog, simulator.url), simulator };
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
    });
    cleanups.push(() => stream.stop());
    sink = stream.sink;
    usageLogLag = () => stream.sink.lag();
  }
  const writer = new UsageWriter(sink, log, config.env.USAGE_FLUSH_MS);
  cleanups.push(() => writer.stop());
  return { writer, deadLetters, usageLogLag };
}

/** Prices follow the catalog's table (on every node's price event) and, when configured, the exchange-rate source. */
function followPrices(
  config: Config,
  db: Db,
  bus: Bus,
  subjects: Subjects,
  catalog: Catalog,
  cleanups: Cleanups,
  log: Logger,
): RateFetcher | null {
  const env = config.env;
  const reload = () => reloadCatalog(db, catalog).catch((error: Error) => log("error", "catalog_reload_failed", { error: error.message }));
  cleanups.push(bus.subscribe(PRICE_EVENTS, subjects.priceEvents, () => void reload()));
  if (!env.RATE_SOURCE_URL) return null;
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
  return fetcher;
}

/** Internal services call the same handlers over NATS (gw.v1.<operation>). */
async function serveOperations(bus: NatsBus, deps: EdgeDeps, origin: string, cleanups: Cleanups): Promise<void> {
  const stopInternal = await serveInternal({
    nc: bus.nc,
    subjects: deps.subjects,
    log: deps.log,
    origin,
    chat: (input) => chat(deps, input),
    operations: {
      embeddings: (input) => createEmbeddings(input, deps),
      "images.generations": (input) => createImages(input, deps),
      "audio.speech": (input) => createSpeech(input, deps),
      "audio.transcriptions": (input) => createTranscription(input, deps),
    },
  });
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
  },
  env: Env,
  cleanups: Cleanups,
  log: Logger,
): Metrics {
  const { db, bus, pools, keyHost, cluster, payments, usage } = parts;
  // What the metrics read of the process: the memory guard's collections, the event loop's stalls.
  const memory = startMemoryGuard({ growthMib: env.GC_RSS_GROWTH_MIB, log });
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
    bus instanceof NatsBus && env.DATABASE_URL ? new Cluster({ bus, db, keys, subjects, prefix: env.DARVAZE_SUBJECT_PREFIX, log }) : null;
  const keyHost = new KeyActorHost(
    { db, keys, writer, log, leaseTtlMs: env.LEASE_TTL_MS },
    (recall) => bus.publish(WALLET_RECALLS, subjects.walletRecalls, recall),
    cluster ? { shares: cluster.shares, permits: cluster.permits } : undefined,
  );
  cleanups.push(() => keyHost.releaseAll());
  cleanups.push(keyHost.serve(bus, subjects));
  if (cluster) {
    await cluster.start();
    cleanups.push(() => cluster.leave());
    cleanups.push(bus.subscribe(KEY_EVENTS, subjects.keyEvents, (event) => cluster.keyChanged(event.keyId)));
  }
  return { cluster, keyHost };
}

export async function startGateway(config: Config, options: StartOptions = {}): Promise<Gateway> {
  const env = config.env;
  const log = options.log ?? createLogger(env.LOG_LEVEL);
  const cleanups: Cleanups = [];
  const stop = async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
  };
  try {
    ensurePortFree(env.HOST, env.PORT);
    const db: Db = await openGatewayDb(env, options.inMemory);
    cleanups.push(() => db.close());
    const applied = await migrate(db);
    if (applied.length > 0) log("info", "migrated", { applied });
    const catalog = await loadCatalog(db);
    warmTokenizer();

    const bus = await openBus(config);
    cleanups.push(() => bus.close());
    const subjects = buildSubjects(env.DARVAZE_SUBJECT_PREFIX);

    const { poolsFile, simulator } = await upstreams(config, options, catalog, cleanups, log);

    const keys = new KeyStore(db, { prefix: env.KEY_PREFIX, pepper: env.KEY_PEPPER });
    cleanups.push(bus.subscribe(KEY_EVENTS, subjects.keyEvents, (event) => keys.forget(event.keyId)));
    repeat(cleanups, KEY_POLL_INTERVAL_MS, () => {
      keys.pollChanges().catch((error: Error) => log("warn", "key_poll_failed", { error: error.message }));
    });
    const flushLastUse = () => keys.lastUse.flush(db).catch((error: Error) => log("warn", "key_last_use_failed", { error: error.message }));
    cleanups.push(async () => void (await flushLastUse())); // the last notes, once the timer below has stopped
    repeat(cleanups, LAST_USE_FLUSH_MS, flushLastUse);
    const { writer, deadLetters, usageLogLag } = await startUsage(config, db, bus, subjects, cleanups, log);
    const { cluster, keyHost } = await startKeyActors(config, { db, bus, subjects, keys, writer }, cleanups, log);
    const pools = new PoolHost(catalog, poolsFile, { upstreamTimeoutMs: env.UPSTREAM_TIMEOUT_MS });
    cleanups.push(await pools.start({ db, bus, subjects, log, env: process.env }));
    if (cluster) await cluster.startQuotas(pools);

    repeat(cleanups, env.HOLD_SWEEP_INTERVAL_MS, () => {
      expireHolds(db).then(
        (n) => n > 0 && log("warn", "holds_expired", { wallets: n }),
        (error: Error) => log("error", "hold_sweep_failed", { error: error.message }),
      );
    });
    const rateFetcher = followPrices(config, db, bus, subjects, catalog, cleanups, log);

    // The callback URL needs the listen address, known only once the server is up.
    let origin = `http://${env.HOST}:${env.PORT}`;
    const payments = startPayments(env, db, log, () => origin);
    if (payments) cleanups.push(() => payments.stop());

    const usage = { writer, deadLetters, usageLogLag };
    const metrics = gatewayMetrics({ db, bus, pools, keyHost, cluster, payments, usage }, env, cleanups, log);
    const live = new LiveHub({ bus, subject: subjects.metricsPools, sampler: new Sampler(nodeName(), pools, metrics.traffic), log });
    live.start();
    cleanups.push(() => live.stop());
    await bus.flush(); // every subscription is on the broker before the first request arrives
    const deps: EdgeDeps = { env, db, bus, subjects, catalog, keys, pools, writer, metrics, log, payments };
    const health = new Health(deps);
    const area = createConsole(env, db, log, { topUps: payments ? paymentTopUps(payments.topups) : undefined });
    repeat(cleanups, CONSOLE_SWEEP_INTERVAL_MS, () => {
      sweepConsole(db).catch((error: Error) => log("warn", "console_sweep_failed", { error: error.message }));
    });
    const app = createApp(deps, { rateFetch: () => rateFetcher?.status ?? null, live, health, console: area });
    try {
      app.listen(listenOptions(env));
    } catch (error) {
      // Taken since ensurePortFree looked.
      throw isAddressInUse(error) ? new PortInUseError(env.HOST, env.PORT) : error;
    }
    const server = app.server!;
    // Shutdown: stop accepting, let requests in flight finish (bounded), then the rest unwinds.
    cleanups.push(() => drainHttp(server, env.SHUTDOWN_DRAIN_MS, log));
    if (bus instanceof NatsBus) await serveOperations(bus, deps, env.PUBLIC_URL ?? `http://${env.HOST}:${app.server!.port}`, cleanups);
    const port = app.server!.port!;
    const url = `http://${env.HOST}:${port}`;
    origin = url;
    warnIfFetchesLimited(log);
    // Pushed last, so it runs first when stopping: /ready answers 503 while the node drains.
    cleanups.push(() => void (health.draining = true));
    log("info", "listening", { url, database: db.engine, bus: bus.kind });
    return { url, port, deps, keyHost, console: area, cluster, simulator, payments, health, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** The gateway's database: PostgreSQL at DATABASE_URL, else PGlite in the data folder (in memory for tests). */
function openGatewayDb(env: Env, inMemory: boolean | undefined): Promise<Db> {
  return openDb({
    databaseUrl: env.DATABASE_URL,
    dataFolder: inMemory ? null : env.DARVAZE_DATA,
    pglite: { thread: env.PGLITE_THREAD, workerNice: env.PGLITE_WORKER_NICE },
  });
}

/** Turns start-up failures into one clear message and exit code 1. */
export async function runMain(start: () => Promise<Gateway>): Promise<Gateway> {
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
  await runMain(() => startGateway(loadConfig()));
}
