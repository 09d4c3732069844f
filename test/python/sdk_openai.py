"""The official openai client (Python) with its defaults, only the base URL and the key changed."""

import asyncio
import io
import math
import struct
import tempfile
import time
import wave
from pathlib import Path

import openai
from pydantic import BaseModel

from harness import GATEWAY_URL, KEY, check, done, expect, header_micro, micro

client = openai.OpenAI(base_url=f"{GATEWAY_URL}/v1", api_key=KEY)
HELLO = [{"role": "user", "content": "Hello, world!"}]


def chat_plain() -> int:
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=HELLO, max_tokens=12)
    completion = raw.parse()
    expect(bool(completion.choices[0].message.content), "no content")
    told = micro(completion.usage.cost)  # type: ignore[union-attr]
    expect(header_micro(raw.headers) == told, "the header and usage.cost differ")
    return told


def chat_stream() -> int:
    stream = client.chat.completions.create(
        model="gpt-4o-mini", messages=HELLO, max_tokens=12, stream=True, stream_options={"include_usage": True}
    )
    text, costs = "", []
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage is not None:
            costs.append(micro(chunk.usage.cost))  # type: ignore[attr-defined]
    expect(text != "", "the stream carried no text")
    expect(len(costs) == 1, f"usage chunks: {len(costs)}")
    return costs[0]


def chat_tools() -> int:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ]
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Call get_weather for Tehran"}], tools=tools
    )
    completion = raw.parse()
    calls = completion.choices[0].message.tool_calls or []
    expect(len(calls) == 1 and calls[0].function.name == "get_weather", f"tool calls: {calls!r}")
    expect("city" in calls[0].function.arguments, f"arguments: {calls[0].function.arguments}")
    return header_micro(raw.headers)


class City(BaseModel):
    name: str
    population: int


def chat_parse() -> int:
    completion = client.chat.completions.parse(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "A city, as JSON"}], response_format=City
    )
    parsed = completion.choices[0].message.parsed
    expect(isinstance(parsed, City), f"parsed: {parsed!r}")
    return micro(completion.usage.cost)  # type: ignore[union-attr]


def chat_async() -> int:
    async def call() -> int:
        async_client = openai.AsyncOpenAI(base_url=f"{GATEWAY_URL}/v1", api_key=KEY)
        try:
            raw = await async_client.chat.completions.with_raw_response.create(
                model="gpt-4o-mini", messages=HELLO, max_tokens=8
            )
            return header_micro(raw.headers)
        finally:
            await async_client.close()

    return asyncio.run(call())


def embeddings_base64_default() -> int:
    raw = client.embeddings.with_raw_response.create(model="text-embedding-3-small", input=["Salaam", "Hello"])
    result = raw.parse()
    expect(len(result.data) == 2, f"embeddings: {len(result.data)}")
    vector = result.data[0].embedding
    expect(len(vector) > 0 and all(isinstance(x, float) for x in vector), "not a float vector")
    return header_micro(raw.headers)


def images(response_format: str) -> int:
    raw = client.images.with_raw_response.generate(
        model="dall-e-3", prompt="A lighthouse at dusk", size="1024x1024", response_format=response_format
    )
    image = raw.parse().data[0]
    if response_format == "url":
        expect(bool(image.url) and image.url.startswith("http"), f"url: {image.url!r}")
    else:
        expect(bool(image.b64_json), "no b64_json")
    return header_micro(raw.headers)


def speech_streamed_to_file() -> int:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "speech.mp3"
        with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input="Salaam, donya!"
        ) as response:
            response.stream_to_file(path)
            told = header_micro(response.headers)
        expect(path.stat().st_size > 0, "an empty audio file")
    return told


def wav_tone(seconds: float) -> bytes:
    rate = 16_000
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        frames = b"".join(
            struct.pack("<h", int(8_000 * math.sin(2 * math.pi * 440 * i / rate))) for i in range(int(rate * seconds))
        )
        out.writeframes(frames)
    return buffer.getvalue()


def transcription() -> int:
    raw = client.audio.transcriptions.with_raw_response.create(
        model="whisper-1", file=("tone.wav", wav_tone(1.5), "audio/wav")
    )
    expect(isinstance(raw.parse().text, str), "no text")
    return header_micro(raw.headers)


def responses_plain() -> int:
    raw = client.responses.with_raw_response.create(model="gpt-4o-mini", input="Hello!", max_output_tokens=16)
    response = raw.parse()
    expect(response.output_text != "", "no output text")
    told = micro(response.usage.cost)  # type: ignore[union-attr]
    expect(header_micro(raw.headers) == told, "the header and usage.cost differ")
    return told


def responses_stream() -> int:
    costs, text = [], ""
    for event in client.responses.create(model="gpt-4o-mini", input="Hello!", max_output_tokens=16, stream=True):
        if event.type == "response.output_text.delta":
            text += event.delta
        if event.type in ("response.completed", "response.incomplete"):
            costs.append(micro(event.response.usage.cost))  # type: ignore[union-attr]
    expect(text != "", "no text streamed")
    expect(len(costs) == 1, f"final events: {len(costs)}")
    return costs[0]


def models() -> None:
    ids = [model.id for model in client.models.list()]
    expect("gpt-4o-mini" in ids, "gpt-4o-mini is not listed")
    expect(client.models.retrieve("gpt-4o-mini").id == "gpt-4o-mini", "retrieve")


def wrong_key_fails_at_once() -> None:
    started = time.monotonic()
    wrong = openai.OpenAI(base_url=f"{GATEWAY_URL}/v1", api_key="sk-dvz-wrong")
    try:
        wrong.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
        raise AssertionError("a wrong key was accepted")
    except openai.AuthenticationError:
        pass
    # The SDK retries 408, 409, 429 and 5xx with back-off (0.5 s and more): a 401 must not be one of them.
    expect(time.monotonic() - started < 0.5, f"took {time.monotonic() - started:.2f} s: retried?")


def unknown_model() -> None:
    try:
        client.chat.completions.create(model="no-such-model", messages=HELLO)
        raise AssertionError("an unknown model was served")
    except openai.NotFoundError as error:
        expect(error.status_code == 404, f"status {error.status_code}")


def over_limit_max_tokens() -> None:
    try:
        client.chat.completions.create(model="gpt-4o-mini", messages=HELLO, max_tokens=200_000)
        raise AssertionError("max_tokens above the model's limits was admitted")
    except openai.BadRequestError as error:
        expect(error.status_code == 400, f"status {error.status_code}")


check("chat", chat_plain)
check("chat stream with usage", chat_stream)
check("chat tools", chat_tools)
check("chat parse with pydantic", chat_parse)
check("chat async", chat_async)
check("embeddings (base64 by default)", embeddings_base64_default)
check("images url", lambda: images("url"))
check("images b64_json", lambda: images("b64_json"))
check("speech streamed to a file", speech_streamed_to_file)
check("transcription of a WAV", transcription)
check("responses", responses_plain)
check("responses stream", responses_stream)
check("models", models)
check("error: wrong key, no retries", wrong_key_fails_at_once)
check("error: unknown model", unknown_model)
check("error: max_tokens over the limit", over_limit_max_tokens)
done()
