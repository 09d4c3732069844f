/**
 * POST /v1/audio/transcriptions, billed per second of audio, rounded up.
 *
 *   edge: key → multipart body within TRANSCRIPTION_FILE_BYTES_MAX (413 above) → file name
 *         extension → fields → model → the duration read from the audio data on the audio
 *         thread (never from header fields or the client; src/audio) → reserve = the file's
 *         size bound × price, or the decoded seconds when the wallet cannot hold that → pool →
 *         the transcript relayed as the upstream wrote it (JSON, or the text formats as
 *         text/plain) → settle max(decoded, the upstream's reported seconds) (seconds.ts).
 */
import { measureAudio } from "../../audio/measure.ts";
import { describe, fail, type Failure } from "../../errors.ts";
import type { EdgeDeps } from "../deps.ts";
import { admit, enter } from "../../admission/admission.ts";
import { failed, isFailure, zodFailure } from "../guard.ts";
import { type PaidContext, pricedModel, readReplyBytes, refused } from "../paid.ts";
import type { Form, OperationInput } from "../request.ts";
import {
  AUDIO_EXTENSIONS,
  audioExtensionOk,
  TRANSCRIPTION_FILE_BYTES_MAX,
  TRANSCRIPTION_FORM_OVERHEAD_BYTES_MAX,
  transcriptionFields,
  type TranscriptionFields,
} from "./schema.ts";
import { audioSeconds, billedSeconds, reportedSeconds, reserveSeconds, type AudioSeconds } from "./seconds.ts";

/** The largest transcript read from an upstream. */
export const TRANSCRIPT_REPLY_BYTES_MAX = 8 * 1024 * 1024;
const FORM_BYTES_MAX = TRANSCRIPTION_FILE_BYTES_MAX + TRANSCRIPTION_FORM_OVERHEAD_BYTES_MAX;

function tooLarge(): Failure {
  return fail("request_too_large", `The audio file is larger than the limit of ${TRANSCRIPTION_FILE_BYTES_MAX} bytes.`, { param: "file" });
}

/** The text fields as the schema expects them; `timestamp_granularities[]` and the bare name both count. */
function formFields(form: Form): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  for (const name of ["model", "language", "prompt", "response_format", "temperature"]) {
    const value = form.get(name);
    if (typeof value === "string") fields[name] = value;
  }
  const granularities = [...form.getAll("timestamp_granularities[]"), ...form.getAll("timestamp_granularities")];
  if (granularities.length > 0) fields.timestamp_granularities = granularities.map(String);
  return fields;
}

/** The file's bytes and its seconds, read from its audio data. */
async function readAudio(file: File): Promise<{ bytes: Uint8Array; seconds: AudioSeconds } | Failure> {
  const measured = await measureAudio(new Uint8Array(await file.arrayBuffer())).catch(() => null);
  if (!measured) return fail("service_unavailable", "The audio file could not be read right now; try again shortly.", { retryAfterS: 1 });
  const duration = measured.duration;
  if (duration && duration.seconds !== 0) return { bytes: measured.bytes, seconds: audioSeconds(duration, measured.bytes.byteLength) };
  return fail("invalid_request", `The file is not audio whose duration could be read. Supported formats: ${AUDIO_EXTENSIONS.join(", ")}.`, {
    param: "file",
  });
}

function upstreamFields(fields: TranscriptionFields): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = { response_format: fields.response_format };
  if (fields.language !== undefined) out.language = fields.language;
  if (fields.prompt !== undefined) out.prompt = fields.prompt;
  if (fields.temperature !== undefined) out.temperature = String(fields.temperature);
  if (fields.timestamp_granularities) out["timestamp_granularities[]"] = fields.timestamp_granularities;
  return out;
}

export async function createTranscription(input: OperationInput, deps: EdgeDeps): Promise<Response> {
  const { requestId } = input;
  const ctx: PaidContext = { requestId, operation: "transcription", startedMs: performance.now() };
  const caller = await enter(deps, input.credentials);
  if (isFailure(caller)) return refused(deps, ctx, null, caller);
  const form = await input.form(FORM_BYTES_MAX);
  if (form === null) return refused(deps, ctx, caller, tooLarge());
  if (isFailure(form)) return refused(deps, ctx, caller, form);
  const file = form.get("file");
  if (!(file instanceof File))
    return refused(deps, ctx, caller, fail("invalid_request", "The `file` field must be an uploaded audio file.", { param: "file" }));
  if (file.size > TRANSCRIPTION_FILE_BYTES_MAX) return refused(deps, ctx, caller, tooLarge());
  if (!audioExtensionOk(file.name)) {
    return refused(
      deps,
      ctx,
      caller,
      fail("invalid_request", `Invalid file format. Supported formats: ${AUDIO_EXTENSIONS.join(", ")}.`, { param: "file" }),
    );
  }
  const parsed = transcriptionFields.safeParse(formFields(form));
  if (!parsed.success) return refused(deps, ctx, caller, zodFailure(parsed.error));
  const fields = parsed.data;
  const priced = pricedModel(deps, caller, fields.model, "transcription", "audio_second");
  if (isFailure(priced)) return refused(deps, ctx, caller, priced);
  const { model, pricePer1m, pool } = priced;
  const audio = await readAudio(file);
  if (isFailure(audio)) return refused(deps, ctx, caller, audio, model);
  const { bytes, seconds } = audio;

  const reserve = reserveSeconds(seconds);
  const exactUnits = reserve.exactUnits;
  const admitted = await admit(deps, {
    requestId,
    caller,
    model,
    operation: "transcription",
    startedMs: ctx.startedMs,
    reserve: {
      input: { unit: "audio_second", units: reserve.units, pricePer1m },
      tokens: 0,
      exact: exactUnits === undefined,
      ...(exactUnits !== undefined && { exactInputUnits: async () => exactUnits }),
    },
  });
  if ("failure" in admitted) return failed(admitted.failure, requestId, admitted.headers);
  const region = caller.region;

  let backendName: string | null = null;
  const reply = await (async () => {
    const sent = await pool.send({
      requestId,
      region,
      build: (backend) =>
        backend.adapter.transcription?.buildTranscriptionRequest({
          body: { fields: upstreamFields(fields), file: new File([bytes], file.name, { type: file.type }) },
          upstreamModel: backend.config.upstream_model ?? model.id,
        }),
    });
    backendName = sent.backend?.name ?? null;
    if (sent.kind === "failed") return sent.failure;
    return readReplyBytes(sent, TRANSCRIPT_REPLY_BYTES_MAX);
  })().catch((error: Error) => fail("upstream_error", `The upstream call failed: ${error.message}`));
  if (isFailure(reply)) {
    await admitted.settle({ input: 0 }, backendName, describe(reply.code).status);
    return failed(reply, requestId, admitted.headers);
  }
  const json = fields.response_format === "json" || fields.response_format === "verbose_json";
  await admitted.settle({ input: billedSeconds(seconds, reportedSeconds(reply, json)) }, backendName, 200);
  return new Response(reply, {
    headers: { "content-type": json ? "application/json" : "text/plain; charset=utf-8", "x-request-id": requestId, ...admitted.headers },
  });
}
