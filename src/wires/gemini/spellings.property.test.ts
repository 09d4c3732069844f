/**
 * Both spellings of every field, by property: a generateContent body with arbitrary known fields,
 * each key of a Gemini message spelled at random in camelCase or snake_case, translates to the
 * same chat request (or the same refusal) as its all-camelCase spelling, and the user's own names
 * inside schemas, call arguments and function responses reach the chat request as written.
 */
import { expect, test } from "bun:test";
import fc from "fast-check";
import type { z } from "zod";
import { REASONING_MODELS } from "../../catalog/reasoning.ts";
import { isFailure } from "../../errors.ts";
import { countTokensRequest, generateContentRequest, generateContentToChat } from "./request.ts";
import { geminiSchema as wireSchema } from "./schema.ts";
import { snakeOf } from "./spellings.ts";

/** Values that are the user's own (JSON schemas, arguments, a function's response): never respelled. */
const FREE_FORM = new Set(["args", "parametersJsonSchema", "responseJsonSchema"]);
/** Google's schemas: their keywords are the wire's, the names under `properties` the user's. */
const SCHEMAS = new Set(["parameters", "responseSchema"]);
/** `response` is a schema on a function declaration, free-form on a function response. */
const isSchema = (key: string, owner: string) => SCHEMAS.has(key) || (key === "response" && owner === "functionDeclarations");
const isLeaf = (key: string, owner: string) =>
  isSchema(key, owner) || FREE_FORM.has(key) || (key === "response" && owner === "functionResponse");
const HOSTED = ["googleSearch", "googleSearchRetrieval", "codeExecution", "urlContext", "fileSearch", "googleMaps"];
const HOSTED_MORE = ["computerUse", "enterpriseWebSearch", "retrieval", "exaAiSearch", "parallelAiSearch", "mcpServers"];

/** Names a user may give, among them the wire's own field names in both spellings. */
const userName = fc.oneof(
  fc.constantFrom("max_output_tokens", "maxOutputTokens", "function_call", "type", "parameters_json_schema", "city"),
  fc.string({ minLength: 1, maxLength: 8 }).filter((s) => s !== "__proto__"),
);
const userObject = fc.dictionary(userName, fc.oneof(fc.string({ maxLength: 6 }), fc.integer()), { maxKeys: 4 });
const jsonSchema = fc
  .dictionary(userName, fc.constant({ type: "string" }), { maxKeys: 4 })
  .map((properties) => ({ type: "object", properties }));
const count = fc.oneof(fc.nat(9), fc.nat(9).map(String));
const schemaLeaf = {
  type: fc.constantFrom("STRING", "INTEGER", "NUMBER", "BOOLEAN", "OBJECT", "ARRAY"),
  format: fc.constantFrom("int32", "date-time", "enum"),
  title: fc.string(),
  description: fc.string(),
  nullable: fc.boolean(),
  enum: fc.array(fc.string(), { maxLength: 2 }),
  pattern: fc.constant("^a+$"),
  minimum: fc.integer(),
  maximum: fc.integer(),
  maxItems: count,
  minItems: count,
  maxLength: count,
  minLength: count,
  maxProperties: count,
  minProperties: count,
  example: userObject,
  default: userObject,
  required: fc.array(userName, { maxLength: 2 }),
  propertyOrdering: fc.array(userName, { maxLength: 2 }),
};
/** A Google schema with every keyword possible, nested through properties, items and anyOf. */
const { geminiSchema } = fc.letrec<{ geminiSchema: Record<string, unknown> }>((tie) => ({
  geminiSchema: fc.oneof(
    { depthSize: "small" },
    fc.record(schemaLeaf, { requiredKeys: [] }),
    fc.record(
      {
        ...schemaLeaf,
        properties: fc.dictionary(userName, tie("geminiSchema"), { maxKeys: 3 }),
        items: tie("geminiSchema"),
        anyOf: fc.array(tie("geminiSchema"), { maxLength: 2 }),
      },
      { requiredKeys: [] },
    ),
  ),
}));
const name = fc.stringMatching(/^[a-z][a-z0-9_]{0,11}$/);
const maybe = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined });

const declaration = fc.record(
  {
    name,
    description: fc.string(),
    parameters: geminiSchema,
    parametersJsonSchema: jsonSchema,
    response: geminiSchema,
    responseJsonSchema: jsonSchema,
  },
  { requiredKeys: ["name"] },
);
const mime = fc.constantFrom("image/png", "image/jpeg");
const userPart = fc.oneof(
  fc.record({ text: fc.string(), thoughtSignature: maybe(fc.string()) }),
  fc.record({ text: fc.string(), thought: fc.constant(true) }),
  fc.record({ inlineData: fc.record({ mimeType: mime, data: fc.base64String({ maxLength: 8 }) }) }),
  fc.record({ fileData: fc.record({ mimeType: mime, fileUri: fc.webUrl() }, { requiredKeys: ["fileUri"] }) }),
);
/** A model turn that calls a function, and the user turn that answers it. */
const roundTrip = fc
  .record({ id: maybe(name), name, args: userObject, response: userObject, text: fc.string() })
  .map(({ id, name, args, response, text }) => [
    { role: "model", parts: [{ text }, { functionCall: { ...(id ? { id } : {}), name, args } }] },
    { role: "user", parts: [{ functionResponse: { ...(id ? { id } : {}), name, response } }] },
  ]);
const contents = fc
  .tuple(fc.array(userPart, { minLength: 1, maxLength: 3 }), fc.array(roundTrip, { maxLength: 2 }))
  .map(([parts, trips]) => [{ role: "user", parts }, ...trips.flat()]);

const generationConfig = fc.record(
  {
    maxOutputTokens: fc.integer({ min: 1, max: 100_000 }),
    temperature: fc.double({ min: 0, max: 2, noNaN: true }),
    topP: fc.double({ min: 0, max: 1, noNaN: true }),
    topK: fc.integer({ min: 1, max: 100 }),
    candidateCount: fc.constant(1),
    stopSequences: fc.array(fc.string(), { maxLength: 3 }),
    seed: fc.integer(),
    presencePenalty: fc.double({ min: -2, max: 2, noNaN: true }),
    frequencyPenalty: fc.double({ min: -2, max: 2, noNaN: true }),
    responseMimeType: fc.constantFrom("application/json", "text/plain"),
    responseSchema: geminiSchema,
    responseJsonSchema: jsonSchema,
    thinkingConfig: fc.record(
      {
        thinkingBudget: fc.integer({ min: -1, max: 30_000 }),
        includeThoughts: fc.boolean(),
        thinkingLevel: fc.constantFrom("low", "high"),
      },
      { requiredKeys: [] },
    ),
    responseModalities: fc.constant(["TEXT"]),
  },
  { requiredKeys: [] },
);

/** A body the wire answers, every known field possible. */
const answered = fc.record(
  {
    contents,
    systemInstruction: fc.oneof(
      fc.string(),
      fc.record({ role: maybe(fc.constant("user")), parts: fc.array(fc.record({ text: fc.string() }), { maxLength: 2 }) }),
    ),
    tools: fc.array(fc.record({ functionDeclarations: fc.array(declaration, { maxLength: 3 }) }), { maxLength: 2 }),
    toolConfig: fc.record({
      functionCallingConfig: fc.record(
        {
          mode: fc.constantFrom("MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED"),
          allowedFunctionNames: fc.array(name, { maxLength: 2 }),
        },
        { requiredKeys: [] },
      ),
    }),
    generationConfig,
    safetySettings: fc.array(
      fc.record(
        { category: fc.constant("HARM_CATEGORY_HARASSMENT"), threshold: fc.constant("BLOCK_NONE"), method: fc.constant("SEVERITY") },
        { requiredKeys: ["category"] },
      ),
      { maxLength: 2 },
    ),
  },
  { requiredKeys: ["contents"] },
);

/** A body refused for one known field: a tool Google runs, a part with no chat counterpart, a cached content. */
const refused = fc
  .tuple(answered, fc.constantFrom(...HOSTED, ...HOSTED_MORE, "executableCode", "codeExecutionResult", "cachedContent"))
  .map(([body, field]) => {
    if (field === "cachedContent") return { ...body, cachedContent: "cachedContents/x" };
    if (field === "executableCode" || field === "codeExecutionResult")
      return { ...body, contents: [{ role: "user", parts: [{ [field]: {} }] }] };
    return { ...body, tools: [...(body.tools ?? []), { [field]: {} }] };
  });

/** `value` with each key of a Gemini message spelled camelCase or snake_case as `snake` says; free-form values as they are. */
function respell(value: unknown, snake: () => boolean, owner = ""): unknown {
  if (Array.isArray(value)) return value.map((v) => respell(v, snake, owner));
  if (typeof value !== "object" || value === null) return value;
  return Object.fromEntries(
    Object.entries(value).map(([key, v]) => {
      const spelled = isSchema(key, owner)
        ? respellSchema(v, snake)
        : FREE_FORM.has(key) || key === "response"
          ? v
          : respell(v, snake, key);
      return [snake() ? snakeOf(key) : key, spelled];
    }),
  );
}

/** A Google schema's keywords respelled; the names under `properties` and every other value as they are. */
function respellSchema(schema: unknown, snake: () => boolean): unknown {
  const nested = (key: string, v: unknown): unknown => {
    if (key === "properties") return Object.fromEntries(Object.entries(v as object).map(([name, s]) => [name, respellSchema(s, snake)]));
    if (key === "items") return respellSchema(v, snake);
    return key === "anyOf" ? (v as unknown[]).map((s) => respellSchema(s, snake)) : v;
  };
  return Object.fromEntries(Object.entries(schema as object).map(([key, v]) => [snake() ? snakeOf(key) : key, nested(key, v)]));
}

/** Every field path a schema of the wire knows (`contents.parts.inlineData.mimeType` …), read from the zod schema itself. */
function knownPaths(schema: z.core.$ZodType, at: string, out: Set<string>): Set<string> {
  const def = schema._zod.def as unknown as Record<string, unknown>;
  if (def.type === "pipe") return knownPaths(def.out as z.core.$ZodType, at, out);
  if (def.type === "optional") return knownPaths(def.innerType as z.core.$ZodType, at, out);
  if (def.type === "array") return knownPaths(def.element as z.core.$ZodType, at, out);
  if (def.type === "union") for (const option of def.options as z.core.$ZodType[]) knownPaths(option, at, out);
  if (def.type === "object") {
    for (const [key, field] of Object.entries(def.shape as Record<string, z.core.$ZodType>)) {
      const path = at ? `${at}.${key}` : key;
      out.add(path);
      if (!isLeaf(key, at.split(".").pop()!)) knownPaths(field, path, out);
    }
  }
  return out;
}

function sentPaths(value: unknown, at: string, out: Set<string>, keywords: Set<string>): void {
  if (Array.isArray(value)) for (const v of value) sentPaths(v, at, out, keywords);
  else if (typeof value === "object" && value !== null) {
    for (const [key, v] of Object.entries(value)) {
      const path = at ? `${at}.${key}` : key;
      out.add(path);
      if (isSchema(key, at.split(".").pop()!)) schemaKeywords(v, keywords);
      else if (!isLeaf(key, at.split(".").pop()!)) sentPaths(v, path, out, keywords);
    }
  }
}

function schemaKeywords(schema: unknown, out: Set<string>): void {
  for (const [key, v] of Object.entries(schema as object)) {
    out.add(key);
    if (key === "properties") for (const s of Object.values(v as object)) schemaKeywords(s, out);
    if (key === "items") schemaKeywords(v, out);
    if (key === "anyOf") for (const s of v as unknown[]) schemaKeywords(s, out);
  }
}

const model = [...REASONING_MODELS][0]!;

test("every known field, in either spelling at random, reaches the chat request as its camelCase spelling does", () => {
  const sent = new Set<string>();
  const keywords = new Set<string>();
  fc.assert(
    fc.property(
      fc.oneof({ arbitrary: answered, weight: 4 }, { arbitrary: refused, weight: 1 }),
      fc.infiniteStream(fc.boolean()),
      fc.boolean(),
      (body, coins, stream) => {
        const flips = coins[Symbol.iterator]();
        const spelled = respell(body, () => flips.next().value as boolean);
        const camel = generateContentToChat(body, model, stream);
        expect(generateContentToChat(spelled, model, stream)).toEqual(camel);
        expect(countTokensRequest.safeParse(spelled).data).toEqual(countTokensRequest.safeParse(body).data);
        expect(isFailure(camel)).toBe(refusedOne(body));
      },
    ),
    { numRuns: 300 },
  );
  // What the generator covers, from a sample of fixed seed: the same every run, so a field it can
  // produce but rarely does cannot make the coverage check pass one run and fail the next.
  const bodies = fc.oneof({ arbitrary: answered, weight: 4 }, { arbitrary: refused, weight: 1 });
  for (const body of fc.sample(bodies, { numRuns: 5_000, seed: 1 })) {
    sentPaths({ ...body, systemInstruction: undefined }, "", sent, keywords);
    if (body.systemInstruction !== undefined) sent.add("systemInstruction");
  }
  // systemInstruction is a content: its fields are the contents' own, generated there.
  const known = new Set(
    [...knownPaths(generateContentRequest, "", new Set())].map((path) => path.replace(/^systemInstruction\./, "contents.")),
  );
  expect([...known].filter((path) => !sent.has(path))).toEqual([]);
  expect([...sent].filter((path) => !known.has(path))).toEqual([]);
  const schemaDef = (wireSchema as unknown as z.ZodLazy)._zod.def.getter() as z.ZodPipe<z.ZodType, z.ZodObject>;
  expect([...keywords].sort()).toEqual(Object.keys(schemaDef._zod.def.out.shape).sort());
}, 120_000);

function refusedOne(body: Record<string, unknown>): boolean {
  const json = JSON.stringify(body);
  return (
    "cachedContent" in body ||
    /"(executableCode|codeExecutionResult)"/.test(json) ||
    [...HOSTED, ...HOSTED_MORE].some((t) => json.includes(`{"${t}":{}}`))
  );
}

test("the user's own names in schemas, arguments and responses arrive as written, whatever their spelling", () => {
  fc.assert(
    fc.property(declaration, roundTrip, fc.infiniteStream(fc.boolean()), (d, trip, coins) => {
      const flips = coins[Symbol.iterator]();
      const body = respell(
        { contents: [{ role: "user", parts: [{ text: "hi" }] }, ...trip], tools: [{ functionDeclarations: [d] }] },
        () => flips.next().value as boolean,
      );
      const out = generateContentToChat(body, "gpt-4o-mini", false);
      if (isFailure(out)) throw new Error(out.message);
      const [tool] = out.chat.tools as { function: { parameters?: unknown } }[];
      if (d.parametersJsonSchema) expect(tool!.function.parameters).toEqual(d.parametersJsonSchema);
      else if (d.parameters) expect(propertyNames(tool!.function.parameters)).toEqual(propertyNames(d.parameters));
      const messages = out.chat.messages as { role: string; content: unknown; tool_calls?: { function: { arguments: string } }[] }[];
      const call = (trip[0]!.parts[1] as { functionCall: { args: unknown } }).functionCall;
      expect(JSON.parse(messages.find((m) => m.tool_calls)!.tool_calls![0]!.function.arguments)).toEqual(call.args);
      const response = (trip[1]!.parts[0] as { functionResponse: { response: Record<string, unknown> } }).functionResponse.response;
      const [only, ...more] = Object.keys(response);
      const text = messages.find((m) => m.role === "tool")!.content as string;
      const own = only === "output" || only === "content" ? response[only] : undefined;
      if (more.length === 0 && typeof own === "string") expect(text).toBe(own);
      else expect(JSON.parse(text)).toEqual(response);
    }),
    { numRuns: 200 },
  );
});

/** The names under `properties` at every depth of a schema, by where they are. */
function propertyNames(schema: unknown, at = ""): string[] {
  const { properties, items, anyOf } = schema as { properties?: Record<string, unknown>; items?: unknown; anyOf?: unknown[] };
  return [
    ...Object.entries(properties ?? {}).flatMap(([name, s]) => [`${at}/${name}`, ...propertyNames(s, `${at}/${name}`)]),
    ...(items ? propertyNames(items, `${at}[]`) : []),
    ...(anyOf ?? []).flatMap((s, i) => propertyNames(s, `${at}|${i}`)),
  ];
}
