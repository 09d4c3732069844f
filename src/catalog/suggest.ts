/**
 * The catalog ids closest to a name no model answers to, by edit distance, for the 404 that
 * names them. Bounded: names longer than `NAME_CHARS_MAX` get no suggestions (a client's model
 * field may be long; the work here must not be), and each comparison stops once it is past the
 * distance that could still be suggested.
 */

export const SUGGESTIONS_MAX = 3;
const NAME_CHARS_MAX = 64;

/** Levenshtein distance of `a` and `b`, or `limit + 1` as soon as it must exceed `limit`. */
export function editDistance(a: string, b: string, limit: number): number {
  if (Math.abs(a.length - b.length) > limit) return limit + 1;
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      const value = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + cost);
      current.push(value);
      if (value < rowMin) rowMin = value;
    }
    if (rowMin > limit) return limit + 1;
    previous = current;
  }
  return previous[b.length]!;
}

/**
 * Up to `SUGGESTIONS_MAX` model ids whose id or alias is nearest to `name`, nearest first, within
 * half the name's length.
 * @example closestIds("gpt-4o-mni", new Map([["gpt-4o-mini", "gpt-4o-mini"], ["gpt-4o", "gpt-4o"]])) // ["gpt-4o-mini", "gpt-4o"]
 */
export function closestIds(name: string, names: ReadonlyMap<string, string>): string[] {
  if (name.length === 0 || name.length > NAME_CHARS_MAX) return [];
  const limit = Math.max(2, Math.floor(name.length / 2));
  const best = new Map<string, number>();
  for (const [candidate, id] of names) {
    const distance = editDistance(name, candidate, limit);
    if (distance <= limit && distance < (best.get(id) ?? Number.POSITIVE_INFINITY)) best.set(id, distance);
  }
  return [...best]
    .sort((a, b) => a[1] - b[1] || a[0].localeCompare(b[0]))
    .slice(0, SUGGESTIONS_MAX)
    .map(([id]) => id);
}
