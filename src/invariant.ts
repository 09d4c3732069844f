/**
 * The money and slot invariants, asserted where they are kept:
 *
 *   held_covers_charged     a request is never charged more than its hold covers
 *   in_flight_non_negative  a backend's requests in flight never go below zero
 *   lease_outstanding_non_negative  a lease never has less than nothing outstanding
 *   lease_covers_charged    a lease's charges and outstanding reserves never pass its hold
 *   settled_once            an admission is settled once, never again
 *   cut_within_bounds       a cut stream's output is at least what was metered until the cut
 *                           (the proven floor) and at most what the hold covers
 *
 * A broken invariant is a bug, not an operating error. Under test (`NODE_ENV=test`, which
 * `bun test` sets, or `DARVAZE_INVARIANTS_THROW=1`) it throws, so the test that found it fails
 * loudly. In production it is reported (logged and counted in `/metrics`, wired by main.ts) and
 * the caller fails the request safe: the smaller charge, the slot given back, the second
 * settlement refused.
 */

export type InvariantName =
  | "held_covers_charged"
  | "in_flight_non_negative"
  | "lease_outstanding_non_negative"
  | "lease_covers_charged"
  | "settled_once"
  | "cut_within_bounds";

export class InvariantBroken extends Error {
  constructor(
    readonly invariant: InvariantName,
    readonly details: Record<string, unknown>,
  ) {
    super(`invariant ${invariant} broken: ${JSON.stringify(details, (_, v) => (typeof v === "bigint" ? v.toString() : v))}`);
  }
}

type Report = (invariant: InvariantName, details: Record<string, unknown>) => void;

let report: Report = (invariant, details) => console.error(new InvariantBroken(invariant, details).message);

/** Where production reports a broken invariant (the node's log and metrics). */
export function onInvariantBroken(sink: Report): void {
  report = sink;
}

function throwing(): boolean {
  return process.env.NODE_ENV === "test" || process.env.DARVAZE_INVARIANTS_THROW === "1";
}

/**
 * True when `holds`; otherwise throws under test, or reports and returns false so the caller
 * fails safe.
 * @example if (!invariant(billed <= held, "held_covers_charged", { billed, held })) billed = held;
 */
export function invariant(holds: boolean, name: InvariantName, details: Record<string, unknown>): boolean {
  if (holds) return true;
  if (throwing()) throw new InvariantBroken(name, details);
  report(name, details);
  return false;
}
