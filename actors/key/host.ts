/**
 * Hosts the key actors of the partitions this node serves, behind the bus. A request for a key
 * is routed by partition (`subjects.keyAdmit(partitionOf(keyId))`); on one node every partition
 * is served here, so every admission is an in-process call. Idle actors are dropped when there
 * are more than `KEY_ACTORS_MAX`.
 */
import type { Bus, Unsubscribe } from "../../src/bus/bus.ts";
import { fail } from "../../src/errors.ts";
import { ADMIT, SETTLE, type AdmitReply, type AdmitTicket, type SettleReply, type Settlement } from "../protocol.ts";
import { KEY_PARTITIONS, type Subjects } from "../subjects.ts";
import { KeyActor, type KeyActorDeps } from "./actor.ts";

export const KEY_ACTORS_MAX = 100_000;

export class KeyActorHost {
  private readonly actors = new Map<string, KeyActor>();

  constructor(private readonly deps: KeyActorDeps) {}

  private actor(keyId: string): KeyActor {
    let actor = this.actors.get(keyId);
    if (!actor) {
      if (this.actors.size >= KEY_ACTORS_MAX) this.evictIdle();
      actor = new KeyActor(keyId, this.deps);
      this.actors.set(keyId, actor);
    }
    return actor;
  }

  private evictIdle(): void {
    for (const [id, actor] of this.actors) {
      if (actor.inFlight === 0) this.actors.delete(id);
      if (this.actors.size < KEY_ACTORS_MAX / 2) return;
    }
  }

  async admit(ticket: AdmitTicket): Promise<AdmitReply> {
    const key = await this.deps.keys.get(ticket.keyId);
    if (!key || key.revokedAt) return { ok: false, failure: fail("invalid_api_key", "This API key has been revoked.") };
    return this.actor(ticket.keyId).admit(ticket, key);
  }

  settle(settlement: Settlement): Promise<SettleReply> {
    return this.actor(settlement.keyId).settle(settlement);
  }

  /** Slots in use for a key on this node (tests and metrics). */
  inFlight(keyId: string): number {
    return this.actors.get(keyId)?.inFlight ?? 0;
  }

  /** Serves the given partitions (default all) on the bus, shared with other nodes by queue group. */
  serve(bus: Bus, subjects: Subjects, partitions: number[] = [...Array(KEY_PARTITIONS).keys()]): Unsubscribe {
    const stops = partitions.flatMap((p) => [
      bus.serve(ADMIT, subjects.keyAdmit(p), (t) => this.admit(t), { queue: "keys" }),
      bus.serve(SETTLE, subjects.keySettle(p), (s) => this.settle(s), { queue: "keys" }),
    ]);
    return () => stops.forEach((stop) => stop());
  }
}
