/**
 * The Responses API's wire, checked against OpenAI's own spec: test/fixtures/openai/
 * responses.schema.json holds the `Response` object and the stream events with every schema they
 * reference, copied from the published OpenAPI document.
 */
import Ajv from "ajv";
import schema from "./fixtures/openai/responses.schema.json";

const ajv = new Ajv({ strict: false, validateFormats: false, allErrors: true });
ajv.addSchema(schema, "openai");

function validator(name: string) {
  const validate = ajv.getSchema(`openai#/components/schemas/${name}`);
  if (!validate) throw new Error(`no schema ${name}`);
  /** The spec's complaints about `value`; empty when it conforms. */
  return (value: unknown): string[] => (validate(value) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message}`));
}

export const responseProblems = validator("Response");

/** Each stream event's own schema, by its `type` (the union's errors would name every member). */
const eventSchemas = new Map<string, (value: unknown) => string[]>();
for (const member of (schema.components.schemas.ResponseStreamEvent as { anyOf: { $ref: string }[] }).anyOf) {
  const name = member.$ref.split("/").at(-1)!;
  const types =
    (schema.components.schemas as Record<string, { properties?: { type?: { enum?: string[] } } }>)[name]?.properties?.type?.enum ?? [];
  for (const type of types) eventSchemas.set(type, validator(name));
}

export function streamEventProblems(event: { type: string }): string[] {
  const validate = eventSchemas.get(event.type);
  return validate ? validate(event) : [`no event of type ${event.type} in the spec`];
}
