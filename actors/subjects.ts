/**
 * Every NATS subject the gateway uses is built here and nowhere else. Subjects are
 * `<prefix>.v1.…`; the prefix (default `gw`) lets test runs and staging share one NATS server.
 */

/** Keys hash into this many partitions; a partition is the unit of key-actor ownership. */
export const KEY_PARTITIONS = 64;

const TOKEN = /^[A-Za-z0-9_-]+$/;
/** Operation names as OpenAI's paths spell them, dotted: `chat.completions`, `audio.speech`. */
const OPERATION = /^[a-z]+(\.[a-z]+)*$/;

/**
 * A model id as one subject token: characters NATS gives meaning to (`.`, `*`, `>`, spaces) become
 * `_`, so `llama-3.3-70b` is `llama-3_3-70b`.
 */
export function subjectToken(text: string): string {
  return text.replace(/[^A-Za-z0-9_-]/g, "_") || "_";
}

/** FNV-1a over the key id: stable across nodes and releases. */
export function partitionOf(keyId: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < keyId.length; i++) {
    hash ^= keyId.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0) % KEY_PARTITIONS;
}

export interface Subjects {
  /** Admissions for the keys of one partition. */
  keyAdmit(partition: number): string;
  /** Settlements for the keys of one partition. */
  keySettle(partition: number): string;
  /** Reserve extensions of admitted streams, for the keys of one partition. */
  keyExtend(partition: number): string;
  /** Live meter events of streams, per model, for operators. */
  meter(model: string): string;
  /** Every operation served to internal services over NATS: `gw.v1.<operation>`. */
  operation(name: string): string;
  /** Credit grants from an internal service's caller to one of its streams. */
  streamCredit(streamId: string): string;
  /** Cancels one stream to an internal service. */
  streamCancel(streamId: string): string;
  /** Slot grants for the keys of one partition: served by the partition's owner only. */
  keyGrant(partition: number): string;
  /** Rate and spend permits for the keys of one partition: served by the partition's owner only. */
  keyPermits(partition: number): string;
  /** A partition changed owner, for every node (delegates re-register their shares at once). */
  partitionEvents: string;
  /** Key revocations and limit changes, for every node. */
  keyEvents: string;
  /** Lease recalls for a wallet that ran short, for every node. */
  walletRecalls: string;
  /** What each node's purse of an account holds, asked of every node (a gather). */
  walletPurses: string;
  /** Price version changes (a new exchange rate), for every node. */
  priceEvents: string;
  /** Batches of usage records, into the durable usage stream. */
  usage: string;
  /** Usage records the ledger refused, into the dead-letter stream. */
  usageDead: string;
  /** Batches' work items (a batch to check, a line to run, a batch to finish), into the work-queue stream. */
  batchWork: string;
  /** Each node's 1 Hz pool snapshot, for the cluster's live view. */
  metricsPools: string;
  /** Run-time pool changes, for every node. */
  poolEvents: string;
  /** Each node's backend estimates, once a second, for every node. */
  poolStats: string;
}

export function subjects(prefix: string): Subjects {
  if (!TOKEN.test(prefix)) throw new Error(`subject prefix must be one token of letters, digits, _ or -: ${prefix}`);
  const base = `${prefix}.v1`;
  const token = (t: string) => {
    if (!TOKEN.test(t)) throw new Error(`not a subject token: ${t}`);
    return t;
  };
  const partition = (p: number) => {
    if (!Number.isInteger(p) || p < 0 || p >= KEY_PARTITIONS) throw new RangeError(`no key partition ${p}`);
    return p;
  };
  return {
    keyAdmit: (p) => `${base}.keys.${partition(p)}.admit`,
    keySettle: (p) => `${base}.keys.${partition(p)}.settle`,
    keyExtend: (p) => `${base}.keys.${partition(p)}.extend`,
    meter: (model) => `${base}.meter.${subjectToken(model)}`,
    operation: (name) => {
      if (!OPERATION.test(name)) throw new Error(`not an operation name: ${name}`);
      return `${base}.${name}`;
    },
    streamCredit: (id) => `${base}.streams.${token(id)}.credit`,
    streamCancel: (id) => `${base}.streams.${token(id)}.cancel`,
    keyGrant: (p) => `${base}.keys.${partition(p)}.grant`,
    keyPermits: (p) => `${base}.keys.${partition(p)}.permits`,
    partitionEvents: `${base}.events.partitions`,
    keyEvents: `${base}.events.keys`,
    walletRecalls: `${base}.events.wallets`,
    walletPurses: `${base}.wallets.purses`,
    priceEvents: `${base}.events.prices`,
    usage: `${base}.usage`,
    usageDead: `${base}.usage.dead`,
    batchWork: `${base}.batches.work`,
    metricsPools: `${base}.metrics.pools`,
    poolEvents: `${base}.events.pools`,
    poolStats: `${base}.pools.stats`,
  };
}
