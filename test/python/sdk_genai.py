"""Google's google-genai client (Python) with its defaults, only the base URL and the key changed.
A whole reply's cost is its `x-darvaze-cost` header (the SDK keeps the raw headers in
`sdk_http_response`); a stream's, whose headers go before its bill, is the billed cost of its
request from `GET /v1/generations/{id}`, by the reply's `x-request-id`. Automatic function calling
makes several requests for one call: an httpx event hook sees each reply, so every one is counted."""

from typing import List, Optional, Tuple

import httpx
from google import genai
from google.genai import errors, types

from harness import COST_HEADER, GATEWAY_URL, KEY, check, done, expect, generation_cost, header_micro

MODEL = "gemini-2.5-flash"
# Each reply of the current check: its request id and the cost header, when it has one.
replies: List[Tuple[str, Optional[str]]] = []


def keep_reply(response: httpx.Response) -> None:
    replies.append((response.headers["x-request-id"], response.headers.get(COST_HEADER)))


client = genai.Client(
    api_key=KEY,
    http_options=types.HttpOptions(base_url=GATEWAY_URL, client_args={"event_hooks": {"response": [keep_reply]}}),
)



def replies_cost() -> int:
    """What the check's replies were billed: each one's header, or a stream's generation record."""
    total = 0
    for request_id, header in replies:
        total += int(header) if header is not None else generation_cost(request_id)
    replies.clear()
    return total


def generate_content() -> int:
    reply = client.models.generate_content(
        model=MODEL, contents="Hello, world!", config=types.GenerateContentConfig(max_output_tokens=16)
    )
    expect(bool(reply.text), "no text")
    expect(reply.usage_metadata is not None and reply.usage_metadata.prompt_token_count > 0, "no usage metadata")
    header_micro(reply.sdk_http_response.headers)  # type: ignore[union-attr]
    return replies_cost()


def stream() -> int:
    text, request_id = "", None
    for chunk in client.models.generate_content_stream(
        model=MODEL, contents="Hello, world!", config=types.GenerateContentConfig(max_output_tokens=16)
    ):
        text += chunk.text or ""
        request_id = request_id or chunk.sdk_http_response.headers.get("x-request-id")  # type: ignore[union-attr]
    expect(text != "", "no text streamed")
    expect(request_id is not None, "no x-request-id")
    return replies_cost()


def automatic_function_calling() -> int:
    asked = []

    def get_weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"Sunny in {city}"

    reply = client.models.generate_content(
        model=MODEL,
        contents="Call get_weather for Tehran, then tell me the weather.",
        config=types.GenerateContentConfig(tools=[get_weather], max_output_tokens=64),
    )
    expect(len(asked) == 1 and isinstance(asked[0], str) and asked[0] != "", f"get_weather called with {asked!r}")
    expect(bool(reply.text), "no text after the function's result")
    history = reply.automatic_function_calling_history or []
    expect(len(history) >= 3, f"history: {len(history)} turns")
    expect(len(replies) == 2, f"requests: {len(replies)} (the call, then the answer after its result)")
    header_micro(reply.sdk_http_response.headers)  # type: ignore[union-attr]
    return replies_cost()


def embed_content() -> int:
    reply = client.models.embed_content(model="gemini-embedding-001", contents=["Salaam", "Hello"])
    expect(reply.embeddings is not None and len(reply.embeddings) == 2, f"embeddings: {reply.embeddings!r}")
    expect(len(reply.embeddings[0].values or []) > 0, "an empty vector")  # type: ignore[index]
    header_micro(reply.sdk_http_response.headers)  # type: ignore[union-attr]
    return replies_cost()


def count_tokens() -> None:
    replies.clear()
    counted = client.models.count_tokens(model=MODEL, contents="Hello, world!")
    expect((counted.total_tokens or 0) > 0, f"total_tokens: {counted.total_tokens}")


def wrong_key() -> None:
    wrong = genai.Client(api_key="sk-dvz-wrong", http_options=types.HttpOptions(base_url=GATEWAY_URL))
    try:
        wrong.models.generate_content(model=MODEL, contents="Hello")
        raise AssertionError("a wrong key was accepted")
    except errors.ClientError as error:
        expect(error.code in (400, 401, 403), f"status {error.code}")


def unknown_model() -> None:
    try:
        client.models.generate_content(model="gemini-no-such-model", contents="Hello")
        raise AssertionError("an unknown model was served")
    except errors.ClientError as error:
        expect(error.code == 404, f"status {error.code}")


def free(name: str, call) -> None:  # type: ignore[no-untyped-def]
    """A call that costs nothing: its replies are not counted (and must carry no charge)."""
    def run() -> None:
        call()
        expect(all(header in (None, "0") for _, header in replies), f"{name} was charged: {replies!r}")
        replies.clear()

    check(name, run)


check("generate_content", generate_content)
check("stream", stream)
check("automatic function calling", automatic_function_calling)
check("embed_content", embed_content)
free("count_tokens", count_tokens)
free("error: wrong key", wrong_key)
free("error: unknown model", unknown_model)
done()
