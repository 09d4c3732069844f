"""What every client script shares: the gateway's address and key from the environment, and
`check`, which runs one call, prints its outcome as a JSON line for test/python.test.ts, and
keeps the cost its reply told (micro-toman) so the test can hold their sum to the wallet's drop."""

import json
import os
import sys
import time
import traceback
from typing import Callable, Optional

import httpx

GATEWAY_URL = os.environ["DARVAZE_GATEWAY_URL"]
KEY = os.environ["DARVAZE_KEY"]
COST_HEADER = "x-darvaze-cost"
GENERATION_WAIT_S = 20


def emit(kind: str, **fields: object) -> None:
    print(json.dumps({"kind": kind, **fields}), flush=True)


def check(name: str, call: Callable[[], Optional[int]]) -> None:
    """Runs `call`; it returns the micro-toman its reply told (None or 0 for a free call) or raises."""
    try:
        cost = call() or 0
        emit("check", name=name, ok=True, cost_micro=str(cost))
    except Exception as error:  # the test prints what failed, with where
        detail = "".join(traceback.format_exception(error))[-4000:]
        emit("check", name=name, ok=False, error=f"{type(error).__name__}: {error}"[:1000], detail=detail)


def micro(toman: object) -> int:
    """A reply's `usage.cost` (toman, a JSON number with micro-toman precision) as micro-toman."""
    if not isinstance(toman, (int, float)) or isinstance(toman, bool):
        raise AssertionError(f"usage.cost is not a number: {toman!r}")
    scaled = round(toman * 1_000_000)
    if scaled / 1_000_000 != toman:
        raise AssertionError(f"usage.cost {toman!r} is finer than a micro-toman")
    return scaled


def header_micro(headers: object) -> int:
    value = headers.get(COST_HEADER)  # type: ignore[attr-defined]
    if value is None or not str(value).isdigit():
        raise AssertionError(f"{COST_HEADER} is {value!r}")
    return int(value)


def generation_cost(request_id: str) -> int:
    """The billed cost of one request (GET /v1/generations/{id}), once its usage record is written."""
    deadline = time.monotonic() + GENERATION_WAIT_S
    while True:
        reply = httpx.get(f"{GATEWAY_URL}/v1/generations/{request_id}", headers={"authorization": f"Bearer {KEY}"})
        if reply.status_code == 200:
            return int(reply.json()["cost_micro_toman"])
        expect(reply.status_code == 404 and time.monotonic() < deadline, f"generation {request_id}: {reply.status_code}")
        time.sleep(0.1)


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def done() -> None:
    emit("done")
    sys.stdout.flush()
