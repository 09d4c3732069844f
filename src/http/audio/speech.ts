/**
 * POST /v1/audio/speech, billed per input character (exact, known before the call).
 *
 *   edge: key → body → model → reserve = characters × price → pool → the audio relayed as the
 *         upstream sends it, with the content type of the asked format.
 *   Settled once, when the upstream accepts the request: a vendor charges for the whole input
 *   then, whether or not the client reads the audio to its end.
 */
import { describe, fail } from "../../errors.ts";
import type { EdgeDeps } from "../deps.ts";
import { admit, enter } from "../../admission/admission.ts";
import { failed, isFailure, zodFailure } from "../guard.ts";
import { type PaidContext, pricedModel, refused } from "../paid.ts";
import type { OperationInput } from "../request.ts";
import { SPEECH_CONTENT_TYPES, speechRequest } from "./schema.ts";

export async function createSpeech(input: OperationInput, deps: EdgeDeps): Promise<Response> {
  const { requestId } = input;
  const ctx: PaidContext = { requestId, operation: "speech", startedMs: performance.now() };
  const caller = await enter(deps, input.credentials);
  if (isFailure(caller)) return refused(deps, ctx, null, caller);
  const raw = await input.json(deps.env.BODY_BYTES_MAX);
  if (isFailure(raw)) return refused(deps, ctx, caller, raw);
  const parsed = speechRequest.safeParse(raw.value);
  if (!parsed.success) return refused(deps, ctx, caller, zodFailure(parsed.error));
  const body = parsed.data;
  const priced = pricedModel(deps, caller, body.model, "speech", "character");
  if (isFailure(priced)) return refused(deps, ctx, caller, priced);
  const { model, pricePer1m, pool } = priced;

  const characters = [...body.input].length;
  const admitted = await admit(deps, {
    requestId,
    caller,
    model,
    operation: "speech",
    startedMs: ctx.startedMs,
    reserve: { input: { unit: "character", units: characters, pricePer1m }, tokens: 0, exact: true },
  });
  if ("failure" in admitted) return failed(admitted.failure, requestId, admitted.headers);
  const region = caller.region;

  const sent = await pool
    .send({
      requestId,
      region,
      build: (backend) => backend.adapter.speech?.buildSpeechRequest({ body, upstreamModel: backend.config.upstream_model ?? model.id }),
    })
    .catch((error: Error) => ({
      kind: "failed" as const,
      backend: null,
      failure: fail("upstream_error", `The upstream call failed: ${error.message}`),
    }));
  if (sent.kind === "failed") {
    await admitted.settle({ input: 0 }, sent.backend?.name ?? null, describe(sent.failure.code).status);
    return failed(sent.failure, requestId, admitted.headers);
  }
  await admitted.settle({ input: characters }, sent.backend.name, 200);
  const upstream = sent.reply.response.body;
  let done = false;
  const end = (completed: boolean) => {
    if (done) return;
    done = true;
    sent.reply.close(completed ? "done" : "abandoned");
  };
  const reader = upstream?.getReader();
  // Pulled one upstream read per client read: a slow client slows the upstream read, and
  // the upstream timeout still bounds the whole reply.
  const relay = new ReadableStream<Uint8Array>({
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
  return new Response(relay, {
    headers: { "content-type": SPEECH_CONTENT_TYPES[body.response_format], "x-request-id": requestId, ...admitted.headers },
  });
}
