import { expect, test } from "bun:test";
import type { KV } from "nats";
import { silentLogger } from "../../src/log.ts";
import { KEY_PARTITIONS } from "../subjects.ts";
import { PARTITION_OWNER_MS_MAX, PartitionLeases } from "./partitions.ts";

/** The few KV operations the leases use, in memory, with JetStream's revision semantics. */
class FakeKv {
  private seq = 0;
  readonly entries = new Map<string, { value: string; revision: number }>();
  /** Nodes whose operations time out (cut off from NATS). */
  readonly cutOff = new Set<string>();

  for(node: string): KV {
    const check = () => {
      if (this.cutOff.has(node)) throw new Error("timeout");
    };
    const wrongSequence = () => Object.assign(new Error("wrong last sequence"), { api_error: { err_code: 10071 } });
    const kv = {
      put: async (k: string, v: string) => {
        check();
        this.entries.set(k, { value: v, revision: ++this.seq });
        return this.seq;
      },
      create: async (k: string, v: string) => {
        check();
        if (this.entries.has(k)) throw wrongSequence();
        this.entries.set(k, { value: v, revision: ++this.seq });
        return this.seq;
      },
      update: async (k: string, v: string, revision: number) => {
        check();
        if (this.entries.get(k)?.revision !== revision) throw wrongSequence();
        this.entries.set(k, { value: v, revision: ++this.seq });
        return this.seq;
      },
      delete: async (k: string) => {
        check();
        this.entries.delete(k);
      },
      keys: async () => {
        check();
        const keys = [...this.entries.keys()];
        return (async function* () {
          yield* keys;
        })();
      },
    };
    return kv as unknown as KV;
  }

  /** What the server does when a lease's TTL passes without an update. */
  expire(key: string): void {
    this.entries.delete(key);
  }
}

function node(kv: FakeKv, name: string, clock: { ms: number }) {
  const owned = new Map<number, bigint>();
  const lost: number[] = [];
  const leases = new PartitionLeases(
    kv.for(name),
    name,
    {
      acquired: async (p, fence) => {
        owned.set(p, fence);
        return true;
      },
      lost: (p) => {
        owned.delete(p);
        lost.push(p);
      },
    },
    silentLogger,
    () => clock.ms,
  );
  return { leases, owned, lost };
}

test("partitions spread over the nodes, each owned by one node, with fencing tokens that grow", async () => {
  const kv = new FakeKv();
  const clock = { ms: 0 };
  const a = node(kv, "a", clock);
  await a.leases.tick();
  expect(a.owned.size).toBe(KEY_PARTITIONS);
  const b = node(kv, "b", clock);
  const firstFence = a.owned.get(0)!;
  for (let i = 0; i < 3; i++) {
    await b.leases.tick();
    await a.leases.tick();
  }
  expect(a.owned.size).toBe(KEY_PARTITIONS / 2);
  expect(b.owned.size).toBe(KEY_PARTITIONS / 2);
  for (let p = 0; p < KEY_PARTITIONS; p++) expect(a.owned.has(p) !== b.owned.has(p)).toBe(true);
  for (const [p, fence] of b.owned) expect(fence).toBeGreaterThan(a.lost.includes(p) ? firstFence : 0n);
});

test("a node that cannot renew stops acting as owner before its lease can expire", async () => {
  const kv = new FakeKv();
  const clock = { ms: 0 };
  const a = node(kv, "a", clock);
  await a.leases.tick();
  expect(a.leases.owns(5)).toBe(true);
  kv.cutOff.add("a");
  clock.ms = PARTITION_OWNER_MS_MAX - 1;
  await a.leases.tick();
  expect(a.leases.owns(5)).toBe(true);
  clock.ms = PARTITION_OWNER_MS_MAX;
  expect(a.leases.owns(5)).toBe(false); // before the tick: every grant checks owns()
  await a.leases.tick();
  expect(a.owned.size).toBe(0);
  expect(a.lost.length).toBe(KEY_PARTITIONS);
});

test("a dead node's partitions go to the live node once its leases expire", async () => {
  const kv = new FakeKv();
  const clock = { ms: 0 };
  const a = node(kv, "a", clock);
  const b = node(kv, "b", clock);
  for (let i = 0; i < 3; i++) {
    await a.leases.tick();
    await b.leases.tick();
  }
  expect(b.owned.size).toBe(KEY_PARTITIONS / 2);
  // a dies: the server expires its membership and leases after the TTL.
  for (const key of [...kv.entries.keys()]) if (kv.entries.get(key)!.value === "a" || key === "n.a") kv.expire(key);
  await b.leases.tick();
  expect(b.owned.size).toBe(KEY_PARTITIONS);
});

test("a renewal refused because another node holds the partition drops it at once", async () => {
  const kv = new FakeKv();
  const clock = { ms: 0 };
  const a = node(kv, "a", clock);
  await a.leases.tick();
  kv.entries.set("p.3", { value: "intruder", revision: 10_000 });
  await a.leases.tick();
  expect(a.owned.has(3)).toBe(false);
  expect(a.lost).toContain(3);
});
