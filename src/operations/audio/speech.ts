/**
 * Speech (POST /v1/audio/speech, gw.v1.audio.speech), billed per input character (exact, known before the call).
 *
 *   edge: key → body → model → reserve = characters × price → pool → the audio relayed as the
 *         upstream sends it, with the content type of the asked format.
 *   Settled once, when the upstream accepts the request: a vendor charges for the whole input
 *   then, whether or not the client reads the audio to its end.
 */
import type { SendOutcome } from "../../../actors/pool/pool.ts";
import type { Reserve } from "../../admission/reserve.ts";
import { type OperationInput, readJson } from "../input.ts";
import { type Delivered, type WholeResult, run, send, type PaidDeps } from "../run.ts";
import { SPEECH_CONTENT_TYPES, speechRequest } from "./schema.ts";

/** The speech operation: audio of the input text, billed per character. */
export function createSpeech(input: OperationInput, deps: PaidDeps): Promise<WholeResult> {
  return run(deps, input, {
    operation: "speech",
    read: (input) => readJson(input, deps.env, speechRequest),
    priced: (body) => ({ model: body.model, unit: "character" }),
    prepare: async (body, priced) => {
      const characters = [...body.input].length;
      const reserve: Reserve = { input: { unit: "character", units: characters, pricePer1m: priced.pricePer1m }, tokens: 0, exact: true };
      return { ...priced, body, characters, reserve };
    },
    call: (admitted) => {
      const { body, model } = admitted.prepared;
      return send(admitted, (backend) =>
        backend.adapter.speech?.buildSpeechRequest({ body, upstreamModel: backend.config.upstream_model ?? model.id }),
      );
    },
    deliver: async (sent, admitted): Promise<Delivered<unknown>> => ({
      used: { input: admitted.prepared.characters },
      reply: () => ({ contentType: SPEECH_CONTENT_TYPES[admitted.prepared.body.response_format], body: audioRelay(sent) }),
    }),
  });
}

/**
 * The upstream's audio, pulled one upstream read per client read: a slow client slows the
 * upstream read, and the upstream timeout still bounds the whole reply.
 */
function audioRelay(sent: Extract<SendOutcome, { kind: "reply" }>): ReadableStream<Uint8Array> {
  const upstream = sent.reply.response.body;
  let done = false;
  const end = (completed: boolean) => {
    if (done) return;
    done = true;
    sent.reply.close(completed ? "done" : "abandoned");
  };
  const reader = upstream?.getReader();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (!reader) {
        end(true);
        return controller.close();
      }
      try {
        const chunk = await reader.read();
        if (chunk.done) {
          end(true);
          return controller.close();
        }
        controller.enqueue(chunk.value);
      } catch (error) {
        end(false);
        controller.error(error);
      }
    },
    cancel() {
      end(false);
      reader?.cancel().catch(() => {});
    },
  });
}
