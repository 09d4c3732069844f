/**
 * Google's Schema (a function's `parameters`, generationConfig's `responseSchema`): an OpenAPI
 * subset with upper-case type names, itself a message of the wire, so each keyword is read in
 * either spelling (google-genai for Python sends `any_of`, `max_items`, `property_ordering` …) and
 * any other keyword is a 400 naming it, as Google's API answers. The names under `properties`
 * are the user's and stay as sent. Its keywords are the two SDKs' own (the Developer API's:
 * google-genai refuses `additional_properties`, `defs` and `ref` outside Vertex).
 */
import { z } from "zod";
import { geminiObject } from "./spellings.ts";

export interface GeminiSchema {
  type?: string;
  format?: string;
  title?: string;
  description?: string;
  nullable?: boolean;
  enum?: string[];
  pattern?: string;
  minimum?: number;
  maximum?: number;
  maxItems?: number;
  minItems?: number;
  maxLength?: number;
  minLength?: number;
  maxProperties?: number;
  minProperties?: number;
  example?: unknown;
  default?: unknown;
  required?: string[];
  propertyOrdering?: string[];
  properties?: Record<string, GeminiSchema>;
  items?: GeminiSchema;
  anyOf?: GeminiSchema[];
}

/** proto3's int64 in JSON: a number or a decimal string; JSON Schema's counts are numbers. */
const count = z
  .union([z.number().int().min(0), z.string().regex(/^\d{1,15}$/)])
  .transform(Number)
  .optional();

export const geminiSchema: z.ZodType<GeminiSchema, unknown> = z.lazy(() => schemaObject);

const schemaObject = geminiObject({
  type: z.string().max(32).optional(),
  format: z.string().optional(),
  title: z.string().optional(),
  description: z.string().optional(),
  nullable: z.boolean().optional(),
  enum: z.array(z.string()).optional(),
  pattern: z.string().optional(),
  minimum: z.number().optional(),
  maximum: z.number().optional(),
  maxItems: count,
  minItems: count,
  maxLength: count,
  minLength: count,
  maxProperties: count,
  minProperties: count,
  example: z.unknown().optional(),
  default: z.unknown().optional(),
  required: z.array(z.string()).optional(),
  propertyOrdering: z.array(z.string()).optional(),
  properties: z.record(z.string(), geminiSchema).optional(),
  items: geminiSchema.optional(),
  anyOf: z.array(geminiSchema).optional(),
});

/**
 * A Google schema as JSON Schema: its type names in lower case, its nested schemas the same way;
 * the keywords' camelCase names are JSON Schema's.
 * @example schemaToJsonSchema({ type: "ARRAY", items: { type: "INTEGER" } }) // { type: "array", items: { type: "integer" } }
 */
export function schemaToJsonSchema(schema: GeminiSchema): Record<string, unknown> {
  const { type, properties, items, anyOf, ...rest } = schema;
  return {
    ...(type !== undefined ? { type: type.toLowerCase() } : {}),
    ...rest,
    ...(properties ? { properties: Object.fromEntries(Object.entries(properties).map(([name, s]) => [name, schemaToJsonSchema(s)])) } : {}),
    ...(items ? { items: schemaToJsonSchema(items) } : {}),
    ...(anyOf ? { anyOf: anyOf.map(schemaToJsonSchema) } : {}),
  };
}
