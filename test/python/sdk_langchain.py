"""langchain-openai's ChatOpenAI with its defaults, only the base URL and the key changed.
LangChain keeps the tokens of a reply's usage but not the gateway's `usage.cost`, so a whole
reply's cost is read from its `x-darvaze-cost` header, seen by an httpx event hook on the client
beneath ChatOpenAI; a stream's (whose headers go before its bill) from `GET /v1/generations/{id}`
by the reply's `x-request-id`."""

from typing import List

import httpx
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from harness import COST_HEADER, GATEWAY_URL, KEY, check, done, expect, generation_cost

told: List[int] = []
request_ids: List[str] = []


def keep_cost(response: httpx.Response) -> None:
    value = response.headers.get(COST_HEADER)
    if value is not None:
        told.append(int(value))
    request_ids.append(response.headers["x-request-id"])



def model(**options: object) -> ChatOpenAI:
    client = httpx.Client(event_hooks={"response": [keep_cost]})
    return ChatOpenAI(model="gpt-4o-mini", base_url=f"{GATEWAY_URL}/v1", api_key=KEY, http_client=client, **options)


def invoke() -> int:
    told.clear()
    reply = model(max_tokens=12).invoke("Hello, world!")
    expect(isinstance(reply.content, str) and reply.content != "", f"content: {reply.content!r}")
    expect(reply.usage_metadata is not None and reply.usage_metadata["input_tokens"] > 0, "no usage metadata")
    expect(len(told) == 1, f"replies with a cost: {len(told)}")
    return told[0]


def stream() -> int:
    request_ids.clear()
    text, usages = "", 0
    for chunk in model(max_tokens=12, stream_usage=True).stream("Hello, world!"):
        text += chunk.content if isinstance(chunk.content, str) else ""
        usages += chunk.usage_metadata is not None
    expect(text != "", "no text streamed")
    expect(usages == 1, f"chunks with usage: {usages}")
    expect(len(request_ids) == 1, f"requests: {len(request_ids)}")
    return generation_cost(request_ids[0])


class City(BaseModel):
    name: str
    population: int


def structured_output() -> int:
    told.clear()
    city = model().with_structured_output(City).invoke("A city, as JSON")
    expect(isinstance(city, City), f"parsed: {city!r}")
    expect(len(told) == 1, f"replies with a cost: {len(told)}")
    return told[0]


check("invoke", invoke)
check("stream", stream)
check("structured output", structured_output)
done()
