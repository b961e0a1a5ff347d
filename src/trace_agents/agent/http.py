"""POST with retries for OpenAI-compatible servers, shared by the rollout policy and the LLM analyst.
Kept free of torch so that light tools can import it."""

from __future__ import annotations

import json
import random
import time
from typing import Any, Callable

import httpx


class RequestFailed(Exception):
    """A request that failed for good; the message says why (status and the server's words)."""


def post_with_retries(
    client: httpx.Client, url: str, body: dict[str, Any], *, max_retries: int, backoff: float,
    on_retry: Callable[[], None] | None = None,
) -> httpx.Response:
    """The first response with status < 400. Connection errors, timeouts, 429 and 5xx are retried
    with exponential backoff; other 4xx would fail again and are not."""
    for attempt in range(max_retries + 1):
        last = attempt == max_retries
        try:
            resp = client.post(url, json=body)
        except httpx.TransportError as e:  # connection refused/reset, timeouts
            if last:
                raise RequestFailed(f"request failed after {attempt + 1} attempts: {type(e).__name__}: {e}") from None
        else:
            if resp.status_code < 400:
                return resp
            if last or not (resp.status_code == 429 or resp.status_code >= 500):
                raise RequestFailed(f"HTTP {resp.status_code} after {attempt + 1} attempts: {server_message(resp)}")
        if on_retry:
            on_retry()
        # Jitter keeps concurrent workers from retrying in lockstep.
        time.sleep(backoff * 2**attempt * (0.5 + random.random()))
    raise AssertionError("unreachable")


def server_message(resp: httpx.Response) -> str:
    """The error text a server sent: OpenAI's {"error": {"message"}}, FastAPI's {"detail"}, or raw."""
    try:
        data = resp.json()
        err = data.get("error", data.get("detail", data)) if isinstance(data, dict) else data
        msg = err.get("message", err) if isinstance(err, dict) else err
        return msg if isinstance(msg, str) else json.dumps(msg)[:300]
    except ValueError:
        return resp.text[:300] or resp.reason_phrase
