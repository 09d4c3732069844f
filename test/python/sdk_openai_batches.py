"""Files and batches through the official openai client (Python) with its defaults, only the base URL
and the key changed: upload, a batch run to its end, its output read back, each line's body the shape
of a live reply; an embeddings batch; a cancel that lands mid-batch. Each check returns what its
requests were billed (the batch's `cost_micro_toman`, a gateway field the client keeps as an extra),
so the test holds their sum to the wallet's drop: only the lines that ran are paid."""

import io
import json
import os
import time
from typing import Callable

import openai
from openai.types import Batch, CreateEmbeddingResponse
from openai.types.chat import ChatCompletion

from harness import GATEWAY_URL, KEY, check, done, expect, header_micro, micro

client = openai.OpenAI(base_url=f"{GATEWAY_URL}/v1", api_key=KEY)
# Between polls: a batch's reads are free but within the key's FREE_RPM (test/batchPoll.ts BATCH_POLL_MS).
POLL_S = int(os.environ["DARVAZE_BATCH_POLL_MS"]) / 1000
BATCH_WAIT_S = 60
CANCEL_LINES = 30


def chat_line(custom_id: str, text: str) -> dict:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}], "max_tokens": 12},
    }


def run_batch(lines: list, endpoint: str) -> Batch:
    """Uploads the lines as a JSONL file (purpose batch) and creates a batch on it."""
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    uploaded = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    expect(uploaded.purpose == "batch" and uploaded.bytes == len(data), f"file: {uploaded!r}")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h")  # type: ignore[arg-type]
    expect(batch.status == "validating", f"a new batch is {batch.status}")
    return batch


def poll(batch_id: str, done_when: Callable[[Batch], bool]) -> Batch:
    deadline = time.monotonic() + BATCH_WAIT_S
    while True:
        batch = client.batches.retrieve(batch_id)
        if done_when(batch):
            return batch
        expect(time.monotonic() < deadline, f"batch {batch_id} still {batch.status} after {BATCH_WAIT_S} s")
        time.sleep(POLL_S)


def output_lines(file_id: str) -> list:
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines() if line]


def cost_of(batch: Batch) -> int:
    value = getattr(batch, "cost_micro_toman", None)
    expect(isinstance(value, str) and value.isdigit(), f"cost_micro_toman is {value!r}")
    return int(value)  # type: ignore[arg-type]


def same_shape(line_body: dict, live_body: dict, what: str) -> None:
    """The line's body has the live reply's fields, and its usage the live usage's."""
    expect(sorted(line_body) == sorted(live_body), f"{what}: {sorted(line_body)} vs live {sorted(live_body)}")
    expect(sorted(line_body["usage"]) == sorted(live_body["usage"]), f"{what} usage: {line_body['usage']} vs {live_body['usage']}")


def chat_batch() -> int:
    live = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Hello"}], max_tokens=12
    )
    live_cost = header_micro(live.headers)
    live_body = live.http_response.json()
    batch = run_batch([chat_line("a", "Hello"), chat_line("b", "Good day"), chat_line("c", "Third")], "/v1/chat/completions")
    batch = poll(batch.id, lambda b: b.status == "completed")
    expect(batch.request_counts is not None and batch.request_counts.completed == 3, f"counts: {batch.request_counts}")
    expect(batch.error_file_id is None and batch.output_file_id is not None, f"files: {batch.output_file_id}, {batch.error_file_id}")
    lines = output_lines(batch.output_file_id)  # type: ignore[arg-type]
    expect([line["custom_id"] for line in lines] == ["a", "b", "c"], f"custom ids: {[line['custom_id'] for line in lines]}")
    told = 0
    for line in lines:
        expect(line["error"] is None and line["response"]["status_code"] == 200, f"line: {line}")
        body = line["response"]["body"]
        completion = ChatCompletion.model_validate(body)
        expect(completion.object == "chat.completion" and bool(completion.choices[0].message.content), f"body: {body}")
        same_shape(body, live_body, "chat line")
        told += micro(body["usage"]["cost"])
    expect(told == cost_of(batch) and told > 0, f"the lines' usage.cost add to {told}, the batch says {cost_of(batch)}")
    return live_cost + cost_of(batch)


def embeddings_batch() -> int:
    live = client.embeddings.with_raw_response.create(model="text-embedding-3-small", input="hi", encoding_format="float")
    live_cost = header_micro(live.headers)
    live_body = live.http_response.json()
    lines = [
        {"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings", "body": {"model": "text-embedding-3-small", "input": "hi"}}
        for i in (1, 2)
    ]
    batch = poll(run_batch(lines, "/v1/embeddings").id, lambda b: b.status == "completed")
    results = output_lines(batch.output_file_id)  # type: ignore[arg-type]
    expect([r["custom_id"] for r in results] == ["e1", "e2"], f"custom ids: {[r['custom_id'] for r in results]}")
    for r in results:
        body = r["response"]["body"]
        reply = CreateEmbeddingResponse.model_validate(body)
        expect(reply.object == "list" and len(reply.data[0].embedding) > 0, f"body: {str(body)[:300]}")
        same_shape(body, live_body, "embeddings line")
    expect(cost_of(batch) > 0, "the embeddings batch cost nothing")
    return live_cost + cost_of(batch)


def cancel_mid_batch() -> int:
    lines = [chat_line(f"c{i}", f"Line {i}") for i in range(CANCEL_LINES)]
    batch = run_batch(lines, "/v1/chat/completions")
    # Some lines have run, the rest wait: the cancel lands mid-way.
    poll(batch.id, lambda b: b.status == "in_progress" and b.request_counts is not None and b.request_counts.completed >= 1)
    cancelling = client.batches.cancel(batch.id)
    expect(cancelling.status in ("cancelling", "cancelled"), f"cancel answered {cancelling.status}")
    batch = poll(batch.id, lambda b: b.status == "cancelled")
    counts = batch.request_counts
    expect(counts is not None and 1 <= counts.completed + counts.failed < CANCEL_LINES, f"lines run: {counts}")
    results = output_lines(batch.output_file_id)  # type: ignore[arg-type]
    expect(len(results) == counts.completed, f"{len(results)} output lines for {counts.completed} completed")  # type: ignore[union-attr]
    told = sum(micro(r["response"]["body"]["usage"]["cost"]) for r in results)
    expect(told == cost_of(batch), f"the run lines' usage.cost add to {told}, the batch says {cost_of(batch)}")
    expect(client.batches.cancel(batch.id).status == "cancelled", "a second cancel moved it")
    return cost_of(batch)


check("chat batch: files.create, batches.create, poll, files.content", chat_batch)
check("embeddings batch", embeddings_batch)
check("cancel mid-batch", cancel_mid_batch)
done()
