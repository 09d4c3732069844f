/**
 * Transcription (POST /v1/audio/transcriptions, gw.v1.audio.transcriptions), billed per second of audio, rounded up.
 *
 *   edge: key → multipart body within TRANSCRIPTION_FILE_BYTES_MAX (413 above) → file name
 *         extension → fields → model → the duration read from the audio data on the audio
 *         thread (never from header fields or the client; src/audio) → reserve = the file's
 *         size bound × price, or the decoded seconds when the wallet cannot hold that → pool →
 *         the transcript relayed as the upstream wrote it (JSON, or the text formats as
 *         text/plain) → settle max(decoded, the upstream's reported seconds) (seconds.ts).
 */
import { measureAudio } from "../../audio/measure.ts";
import type { PoolCall } from "../../../actors/pool/pool.ts";
import type { PricedModel } from "../../admission/model.ts";
import type { Reserve } from "../../admission/reserve.ts";
import { fail, type Failure, isFailure, zodFailure } from "../../errors.ts";
import type { Form, OperationInput } from "../input.ts";
import { type Delivered, type WholeResult, type Prepared, run, sendWhole, type Unprepared, type PaidDeps } from "../run.ts";
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

/** The form's file and fields, checked: the 413 and 400s a client expects. */
async function readForm(input: OperationInput): Promise<{ file: File; fields: TranscriptionFields } | Failure> {
  const form = await input.form(FORM_BYTES_MAX);
  if (form === null) return tooLarge();
  if (isFailure(form)) return form;
  const file = form.get("file");
  if (!(file instanceof File)) return fail("invalid_request", "The `file` field must be an uploaded audio file.", { param: "file" });
  if (file.size > TRANSCRIPTION_FILE_BYTES_MAX) return tooLarge();
  if (!audioExtensionOk(file.name)) {
    return fail("invalid_request", `Invalid file format. Supported formats: ${AUDIO_EXTENSIONS.join(", ")}.`, { param: "file" });
  }
  const parsed = transcriptionFields.safeParse(formFields(form));
  if (!parsed.success) return zodFailure(parsed.error);
  return { file, fields: parsed.data };
}

interface TranscriptionPrepared extends Prepared {
  file: File;
  fields: TranscriptionFields;
  audio: { bytes: Uint8Array; seconds: AudioSeconds };
}

/** The audio read and its seconds reserved: exact when its container tells them, else a bound counted exactly at the wallet's edge. */
async function prepareTranscription(
  read: { file: File; fields: TranscriptionFields },
  priced: PricedModel,
): Promise<TranscriptionPrepared | Unprepared> {
  const { file, fields } = read;
  const audio = await readAudio(file);
  if (isFailure(audio)) return { failure: audio, model: priced.model };
  const { units, exactUnits } = reserveSeconds(audio.seconds);
  const reserve: Reserve = {
    input: { unit: "audio_second", units, pricePer1m: priced.pricePer1m },
    tokens: 0,
    exact: exactUnits === undefined,
    ...(exactUnits !== undefined && { exactInputUnits: async () => exactUnits }),
  };
  return { ...priced, file, fields, audio, reserve };
}

/** The transcription operation: the audio's transcript, billed per second of audio. */
export function createTranscription(input: OperationInput, deps: PaidDeps): Promise<WholeResult> {
  return run(deps, input, {
    operation: "transcription",
    read: readForm,
    priced: (read) => ({ model: read.fields.model, unit: "audio_second" }),
    prepare: prepareTranscription,
    call: (admitted) => {
      const { model, fields, file, audio } = admitted.prepared;
      const build: PoolCall["build"] = (backend) =>
        backend.adapter.transcription?.buildTranscriptionRequest({
          body: { fields: upstreamFields(fields), file: new File([audio.bytes], file.name, { type: file.type }) },
          upstreamModel: backend.config.upstream_model ?? model.id,
        });
      return sendWhole(admitted, build, TRANSCRIPT_REPLY_BYTES_MAX);
    },
    deliver: async (reply, admitted): Promise<Delivered<unknown>> => {
      const { fields, audio } = admitted.prepared;
      const json = fields.response_format === "json" || fields.response_format === "verbose_json";
      return {
        used: { input: billedSeconds(audio.seconds, reportedSeconds(reply.bytes, json)) },
        reply: () => ({ contentType: json ? "application/json" : "text/plain; charset=utf-8", body: reply.bytes }),
      };
    },
  });
}
