/**
 * The one place where Zarinpal's unit meets ours. Zarinpal counts rial (1 toman = 10 rial); the
 * gateway counts micro-toman (1 toman = 1,000,000). So 1 rial = 100,000 micro-toman, and only
 * amounts in whole tenths of a toman can be sent.
 */
export const MICRO_TOMAN_PER_RIAL = 100_000n;

/** @example microTomanToRial(50_000n * 1_000_000n) // 500_000 */
export function microTomanToRial(micro: bigint): number {
  if (micro < 0n || micro % MICRO_TOMAN_PER_RIAL !== 0n) throw new Error(`${micro} micro-toman is not a whole number of rial`);
  const rial = micro / MICRO_TOMAN_PER_RIAL;
  if (rial > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`${micro} micro-toman is too large`);
  return Number(rial);
}

/** @example rialToMicroToman(500_000) // 50_000_000_000n */
export function rialToMicroToman(rial: number): bigint {
  if (!Number.isSafeInteger(rial) || rial < 0) throw new Error(`${rial} is not a whole number of rial`);
  return BigInt(rial) * MICRO_TOMAN_PER_RIAL;
}
