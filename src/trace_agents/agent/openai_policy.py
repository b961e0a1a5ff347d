"""A policy backed by any OpenAI-compatible chat completions server (vLLM, SGLang, hosted APIs).

Like `TransformersPolicy`, it never raises for one bad request: a failed call or malformed reply
becomes a `Reply` with `error` set, so a rollout records a failed step and goes on.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from trace_agents.agent.format import parse_reply
from trace_agents.agent.http import RequestFailed, post_with_retries
from trace_agents.agent.policy import Reply, Request, Sampling
from trace_agents.types import FunctionCall, Message, ToolCall

SPEC_FORM = "openai:NAME@BASE_URL (e.g. openai:Qwen/Qwen3-8B@http://127.0.0.1:8000/v1)"


class _Failed(Exception):
    """A request that failed for good; the message is what the Reply's `error` says."""


class OpenAIPolicy:
    def __init__(self, model: str, base_url: str, api_key: str | None = None, timeout: float = 120.0,
                 max_retries: int = 4, concurrency: int = 8, backoff: float = 1.0):
        self.model, self.name = model, model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_retries, self.concurrency, self.backoff = max_retries, max(1, concurrency), backoff
        key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"  # local servers accept any key
        self.client = httpx.Client(
            timeout=timeout,
            headers={"Authorization": f"Bearer {key}"},
            limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency),
        )

    @classmethod
    def from_spec(cls, spec: str, **kwargs: Any) -> OpenAIPolicy:
        """Parse the command-line form `openai:NAME@BASE_URL`."""
        prefix, _, rest = spec.partition(":")
        # The first '@' splits: model ids have none, while a URL may carry user:password@host.
        model, _, base_url = rest.partition("@")
        if prefix != "openai" or not model or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"bad model spec {spec!r}: expected {SPEC_FORM}")
        return cls(model, base_url, **kwargs)

    def act(self, requests: list[Request], sampling: Sampling) -> list[Reply]:
        if not requests:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as pool:
            return list(pool.map(lambda r: self._one(r, sampling), requests))  # map keeps order

    def close(self) -> None:
        self.client.close()

    def _one(self, request: Request, sampling: Sampling) -> Reply:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_chat() for m in request.messages],
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "seed": sampling.seed,
        }
        if request.tools:  # some servers reject an empty tools list
            body["tools"] = request.tools
        try:
            return self._read(self._post(body), request)
        except _Failed as e:
            return Reply(Message(role="assistant", content=""), "", error=str(e))

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            resp = post_with_retries(self.client, self.url, body, max_retries=self.max_retries, backoff=self.backoff)
        except RequestFailed as e:
            raise _Failed(str(e)) from None
        try:
            return resp.json()
        except ValueError:
            raise _Failed(f"HTTP {resp.status_code}: response is not JSON: {resp.text[:200]!r}") from None

    def _read(self, data: dict[str, Any], request: Request) -> Reply:
        try:
            choice = data["choices"][0]
            msg = choice["message"]
            if not isinstance(msg, dict):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            raise _Failed(f"malformed response: {json.dumps(data)[:200]}") from None
        content = msg.get("content") or ""
        raw_calls = msg.get("tool_calls") or []
        errors: list[str] = []
        if raw_calls:
            calls = []
            for i, call in enumerate(raw_calls):
                try:
                    calls.append(_native_call(call, f"{request.call_id_prefix}_{i}"))
                except (ValueError, KeyError, TypeError) as e:
                    errors.append(f"call {i}: {e}")
            message = Message(role="assistant", content=content, tool_calls=calls or None)
            text = content or json.dumps(raw_calls, ensure_ascii=False)
        else:
            # Models served without a tool parser write our Hermes `<tool_call>` text instead.
            parsed = parse_reply(content, request.call_id_prefix)
            message, text = parsed.message, content
            errors += [parsed.error] if parsed.error else []
        truncated = choice.get("finish_reason") == "length"
        if truncated:
            errors.append("truncated at max_tokens")
        usage = data.get("usage") or {}
        return Reply(message, text, "; ".join(errors) or None, int(usage.get("completion_tokens") or 0),
                     int(usage.get("prompt_tokens") or 0), truncated)


def _native_call(call: dict[str, Any], call_id: str) -> ToolCall:
    """A server's tool call with a stable id (ours, not the server's random one)."""
    fn = call["function"]
    args = fn.get("arguments") or "{}"
    if isinstance(args, dict):  # a few servers send an object instead of the documented string
        args = json.dumps(args, ensure_ascii=False)
    try:
        ok = isinstance(json.loads(args), dict)
    except json.JSONDecodeError:
        ok = False
    if not ok:
        raise ValueError(f"arguments of {fn.get('name')!r} are not a JSON object")
    return ToolCall(id=call_id, function=FunctionCall(name=fn["name"], arguments=args))
