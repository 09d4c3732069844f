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
import { authorize, failed, isFailure, zodFailure } from "../guard.ts";
import { admitPaid, operationModel, readReplyBytes, residencyOf, settlePaid, unitPrice } from "../paid.ts";
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

type Form = Awaited<ReturnType<Request["formData"]>>;

function tooLarge(): Failure {
  return fail("request_too_large", `The audio file is larger than the limit of ${TRANSCRIPTION_FILE_BYTES_MAX} bytes.`, { param: "file" });
}

/** The multipart body, read within the size limit. */
async function readForm(request: Request): Promise<Form | Failure> {
  const type = request.headers.get("content-type") ?? "";
  if (!type.toLowerCase().startsWith("multipart/form-data")) {
    return fail("invalid_request", "Send the audio as multipart/form-data with a `file` field.", { param: "file" });
  }
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > FORM_BYTES_MAX) return tooLarge();
  const parts: Uint8Array[] = [];
  let total = 0;
  for await (const part of request.body ?? []) {
    total += part.byteLength;
    if (total > FORM_BYTES_MAX) return tooLarge();
    parts.push(part);
  }
  try {
    return await new Response(Buffer.concat(parts), { headers: { "content-type": type } }).formData();
  } catch {
    return fail("invalid_request", "The multipart body could not be read.", { param: "file" });
  }
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
  return fail("invalid_request", "The file is not audio whose duration could be read. Supported formats: " + AUDIO_EXTENSIONS.join(", ") + ".", { param: "file" });
}

function upstreamFields(fields: TranscriptionFields): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = { response_format: fields.response_format };
  if (fields.language !== undefined) out.language = fields.language;
  if (fields.prompt !== undefined) out.prompt = fields.prompt;
  if (fields.temperature !== undefined) out.temperature = String(fields.temperature);
  if (fields.timestamp_granularities) out["timestamp_granularities[]"] = fields.timestamp_granularities;
  return out;
}

export async function createTranscription(request: Request, requestId: string, deps: EdgeDeps): Promise<Response> {
  const key = await authorize(request, deps);
  if (isFailure(key)) return failed(key, requestId);
  const form = await readForm(request);
  if (isFailure(form)) return failed(form, requestId);
  const file = form.get("file");
  if (!(file instanceof File)) return failed(fail("invalid_request", "The `file` field must be an uploaded audio file.", { param: "file" }), requestId);
  if (file.size > TRANSCRIPTION_FILE_BYTES_MAX) return failed(tooLarge(), requestId);
  if (!audioExtensionOk(file.name)) {
    return failed(fail("invalid_request", `Invalid file format. Supported formats: ${AUDIO_EXTENSIONS.join(", ")}.`, { param: "file" }), requestId);
  }
  const parsed = transcriptionFields.safeParse(formFields(form));
  if (!parsed.success) return failed(zodFailure(parsed.error), requestId);
  const fields = parsed.data;
  const model = operationModel(deps, fields.model, "transcription");
  if (isFailure(model)) return failed(model, requestId);
  const price = unitPrice(model, "audio_second");
  if (isFailure(price)) return failed(price, requestId);
  const region = residencyOf(request);
  if (isFailure(region)) return failed(region, requestId);
  const audio = await readAudio(file);
  if (isFailure(audio)) return failed(audio, requestId);
  const { bytes, seconds } = audio;
  const pool = deps.pools.get(model.id);
  if (!pool) return failed(fail("no_healthy_backend", `No backend is configured for ${model.id}.`, { retryAfterS: 5 }), requestId);

  const reserve = reserveSeconds(seconds);
  const exactUnits = reserve.exactUnits;
  const admitted = await admitPaid(deps, {
    requestId,
    key,
    model,
    operation: "transcription",
    unit: "audio_second",
    pricePer1m: price,
    units: reserve.units,
    tokens: 0,
    exact: exactUnits === undefined,
    ...(exactUnits !== undefined && { exactUnits: async () => exactUnits }),
  });
  if ("failure" in admitted) return failed(admitted.failure, requestId, admitted.headers);

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
    await settlePaid(deps, admitted, 0, backendName, describe(reply.code).status);
    return failed(reply, requestId, admitted.headers);
  }
  const json = fields.response_format === "json" || fields.response_format === "verbose_json";
  await settlePaid(deps, admitted, billedSeconds(seconds, reportedSeconds(reply, json)), backendName, 200);
  return new Response(reply, {
    headers: { "content-type": json ? "application/json" : "text/plain; charset=utf-8", "x-request-id": requestId, ...admitted.headers },
  });
}
