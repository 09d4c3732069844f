"""The official anthropic client (Python) with its defaults, only the base URL and the key changed."""

import time

import anthropic

from harness import GATEWAY_URL, KEY, check, done, expect, header_micro, micro

client = anthropic.Anthropic(base_url=GATEWAY_URL, api_key=KEY)
MODEL = "claude-sonnet-4"
HELLO = [{"role": "user", "content": "Hello, world!"}]


def create() -> int:
    raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=16, messages=HELLO)
    message = raw.parse()
    expect(message.content[0].type == "text" and message.content[0].text != "", f"content: {message.content!r}")
    told = micro(message.usage.cost)  # type: ignore[attr-defined]
    expect(header_micro(raw.headers) == told, "the header and usage.cost differ")
    return told


def stream() -> int:
    text, costs = "", []
    with client.messages.stream(model=MODEL, max_tokens=16, messages=HELLO) as events:
        for event in events:
            if event.type == "text":
                text += event.text
            if event.type == "message_delta":
                costs.append(micro(event.usage.cost))  # type: ignore[attr-defined]
        final = events.get_final_message()
    expect(text != "" and final.content[0].text == text, "the stream's text and its final message differ")
    expect(len(costs) == 1, f"message_delta events: {len(costs)}")
    return costs[0]


def tools() -> int:
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=256,
        tools=[
            {
                "name": "get_weather",
                "description": "The weather in a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }
        ],
        messages=[{"role": "user", "content": "Call get_weather for Tehran"}],
    )
    message = raw.parse()
    uses = [block for block in message.content if block.type == "tool_use"]
    expect(len(uses) == 1 and uses[0].name == "get_weather", f"content: {message.content!r}")
    expect(isinstance(uses[0].input, dict) and "city" in uses[0].input, f"input: {uses[0].input!r}")
    expect(message.stop_reason == "tool_use", f"stop_reason: {message.stop_reason}")
    return header_micro(raw.headers)


def count_tokens() -> None:
    counted = client.messages.count_tokens(model=MODEL, messages=HELLO)
    expect(counted.input_tokens > 0, f"input_tokens: {counted.input_tokens}")


def wrong_key_fails_at_once() -> None:
    started = time.monotonic()
    wrong = anthropic.Anthropic(base_url=GATEWAY_URL, api_key="sk-dvz-wrong")
    try:
        wrong.messages.create(model=MODEL, max_tokens=16, messages=HELLO)
        raise AssertionError("a wrong key was accepted")
    except anthropic.AuthenticationError as error:
        expect(error.body["type"] == "error", f"body: {error.body!r}")  # type: ignore[index]
    expect(time.monotonic() - started < 0.5, f"took {time.monotonic() - started:.2f} s: retried?")


def unknown_model() -> None:
    try:
        client.messages.create(model="claude-no-such-model", max_tokens=16, messages=HELLO)
        raise AssertionError("an unknown model was served")
    except anthropic.NotFoundError as error:
        expect(error.status_code == 404, f"status {error.status_code}")


def over_limit_max_tokens() -> None:
    # Streamed: for a whole reply the SDK itself refuses a max_tokens this large before sending it.
    try:
        client.messages.create(model=MODEL, max_tokens=1_000_000, messages=HELLO, stream=True)
        raise AssertionError("max_tokens above the model's limits was admitted")
    except anthropic.BadRequestError as error:
        expect(error.body["error"]["type"] == "invalid_request_error", f"body: {error.body!r}")  # type: ignore[index]


check("create", create)
check("stream", stream)
check("tools", tools)
check("count_tokens", count_tokens)
check("error: wrong key, no retries", wrong_key_fails_at_once)
check("error: unknown model", unknown_model)
check("error: max_tokens over the limit", over_limit_max_tokens)
done()
