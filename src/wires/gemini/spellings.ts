/**
 * Google's API reads every field of a request in two spellings, proto3's JSON mapping: the
 * lowerCamelCase JSON name and the proto field's own snake_case name (`maxOutputTokens`,
 * `max_output_tokens`). The official Python SDK sends some fields snake_case
 * (`parameters_json_schema`, `thinking_budget`, `mime_type` …), Google's curl examples others.
 *
 * `geminiObject` is the one place both are read: an object of the wire whose known camelCase
 * keys are also taken in snake_case, then checked strictly (any other key is a 400 naming it).
 * Only the keys of that object are respelled: a value it holds as free-form (a function's
 * schema, `functionCall.args`, `functionResponse.response`) keeps the user's own names.
 */
import { z } from "zod";

/** A proto field's name from its JSON name: `maxOutputTokens` → `max_output_tokens`. */
export const snakeOf = (name: string): string => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

const isPlain = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);

/**
 * A strict object of Gemini's wire that reads each of its fields in either spelling; one field
 * sent in both is a 400 naming both.
 * @example geminiObject({ maxOutputTokens: z.number() }).parse({ max_output_tokens: 3 }) // { maxOutputTokens: 3 }
 */
export function geminiObject<S extends z.ZodRawShape>(shape: S) {
  const camelOf = new Map<string, string>();
  for (const name of Object.keys(shape)) if (snakeOf(name) !== name) camelOf.set(snakeOf(name), name);
  return z.preprocess((input, ctx) => {
    if (!isPlain(input) || !Object.keys(input).some((key) => camelOf.has(key))) return input;
    // Entries, not assignments: a `__proto__` key stays a key, which the strict check names.
    const out: [string, unknown][] = [];
    for (const [key, value] of Object.entries(input)) {
      const camel = camelOf.get(key);
      if (camel === undefined) out.push([key, value]);
      else if (Object.hasOwn(input, camel)) {
        ctx.addIssue({ code: "custom", path: [camel], message: `\`${key}\` and \`${camel}\` are one field in two spellings; send one.` });
      } else out.push([camel, value]);
    }
    return Object.fromEntries(out);
  }, z.strictObject(shape));
}
