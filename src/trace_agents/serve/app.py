"""An OpenAI-compatible chat server over any `Policy` (local model, composed model, ...).

One background worker batches concurrent requests: it takes the first queued request, everything
already waiting behind it and whatever arrives within `batch_wait_ms`, up to `max_batch`, and runs
one `policy.act` for each group of identical sampling settings (`act` takes one `Sampling` per
batch) on a single generation thread, so the event loop keeps accepting and answering meanwhile.

Generation is not token-streamed internally: with `stream=true` the whole reply is generated first
and then sent as OpenAI `chat.completion.chunk` events (role, content, tool calls, finish), so
streaming clients work unchanged but see no earlier first token.

Errors use OpenAI's shape `{"error": {"message", "type", "param", "code"}}`: 400 for malformed JSON
or fields, 404 for an unknown model or route, 413 for a body or prompt over the limit, 429 when the
queue is full, 503 while shutting down, 500 when generation fails (that request only).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import random
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal

from fastapi import FastAPI, Request as HTTPRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from trace_agents.agent.format import parse_reply
from trace_agents.agent.policy import Policy, Reply, Request, Sampling
from trace_agents.types import FunctionCall, Message, ToolCall

log = logging.getLogger("trace_agents.serve")


# --------------------------------------------------------------------------- errors


class APIError(Exception):
    """An error answered in OpenAI's shape with an HTTP status."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, self.type, self.param, self.code)


def error_response(status: int, message: str, type: str = "invalid_request_error",
                   param: str | None = None, code: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": type, "param": param, "code": code}}
    return JSONResponse(body, status_code=status)


def _loc(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if p not in ("body",)) or "(body)"


def validation_error(err: ValidationError | RequestValidationError) -> APIError:
    first = err.errors()[0]
    param = _loc(tuple(first.get("loc", ())))
    more = len(err.errors()) - 1
    msg = f"field '{param}': {first['msg']}" + (f" (and {more} more problems)" if more else "")
    return APIError(400, msg, param=param, code="invalid_value")


# --------------------------------------------------------------------------- request schema


class _In(BaseModel):
    # OpenAI clients send many optional fields (user, metadata, logprobs, ...); unknown ones are ignored.
    model_config = ConfigDict(extra="ignore")


class ContentPart(_In):
    type: Literal["text"]
    text: str


class FunctionCallIn(_In):
    name: str = Field(min_length=1)
    arguments: str

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, v: str) -> str:
        # The chat template pastes arguments verbatim into the prompt: they must be a JSON object.
        try:
            ok = isinstance(json.loads(v or "{}"), dict)
        except json.JSONDecodeError:
            ok = False
        if not ok:
            raise ValueError("arguments must be a JSON object encoded as a string")
        return v or "{}"


class ToolCallIn(_In):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallIn


class ChatMessageIn(_In):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ChatMessageIn:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs 'tool_call_id'")
        if self.role in ("system", "developer", "user") and self.content is None:
            raise ValueError(f"a {self.role} message needs 'content'")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry 'tool_calls'")
        return self

    def to_message(self) -> Message:
        content = self.content
        if isinstance(content, list):
            content = "".join(p.text for p in content)
        calls = [ToolCall(id=c.id, function=FunctionCall(name=c.function.name, arguments=c.function.arguments))
                 for c in self.tool_calls or []]
        role = "system" if self.role == "developer" else self.role
        return Message(role=role, content=content or "", tool_calls=calls or None, tool_call_id=self.tool_call_id)


class FunctionDef(_In):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolDef(_In):
    type: Literal["function"]
    function: FunctionDef


class StreamOptions(_In):
    include_usage: bool = False


class ChatRequest(_In):
    model: str
    messages: list[ChatMessageIn] = Field(min_length=1)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["auto", "none"] | None = None
    """Only "auto" and "none" are supported (no forced or named calls)."""
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=1)
    stream: bool = False
    stream_options: StreamOptions | None = None


# --------------------------------------------------------------------------- batching


@dataclass
class _Job:
    request: Request
    sampling: Sampling
    seeded: bool
    future: asyncio.Future


@dataclass
class BatchStats:
    """What the worker did; tests and benchmarks read it."""

    batch_sizes: list[int] = field(default_factory=list)
    failed_batches: int = 0


class Batcher:
    """Queue → batches of up to `max_batch` → `policy.act` on one generation thread → futures."""

    def __init__(self, policy: Policy, max_batch: int, batch_wait_ms: float, max_queue: int):
        self.policy, self.max_batch, self.wait = policy, max(1, max_batch), batch_wait_ms / 1000
        self.max_queue = max_queue
        self.queue: asyncio.Queue[_Job] = asyncio.Queue()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="generate")
        self.stats = BatchStats()
        self.in_flight = 0  # jobs taken off the queue and not yet answered
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def submit(self, request: Request, sampling: Sampling, seeded: bool) -> Reply:
        if self.queue.qsize() >= self.max_queue:
            raise APIError(429, "server is busy: too many queued requests, retry later", "rate_limit_error",
                           code="queue_full")
        future = asyncio.get_running_loop().create_future()
        self.queue.put_nowait(_Job(request, sampling, seeded, future))
        return await future

    async def drain(self, timeout: float) -> None:
        """Wait until every queued and running request is answered, then stop the worker."""
        deadline = time.monotonic() + timeout
        while (self.queue.qsize() or self.in_flight) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self._task:
            self._task.cancel()
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def _collect(self) -> list[_Job]:
        batch = [await self.queue.get()]
        deadline = asyncio.get_running_loop().time() + self.wait
        while len(batch) < self.max_batch:
            if not self.queue.empty():  # take what is already waiting without delay
                batch.append(self.queue.get_nowait())
                continue
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self.queue.get(), left))
            except asyncio.TimeoutError:
                break
        return batch

    async def _run(self) -> None:
        while True:
            batch = await self._collect()
            self.in_flight += len(batch)
            # One `act` per distinct sampling: unseeded requests share one fresh seed per batch.
            groups: dict[tuple, list[_Job]] = {}
            for job in batch:
                key = astuple(job.sampling) if job.seeded else (*astuple(job.sampling)[:-1], None)
                groups.setdefault(key, []).append(job)
            for jobs in groups.values():
                sampling = jobs[0].sampling
                if not jobs[0].seeded:
                    sampling = Sampling(sampling.max_new_tokens, sampling.temperature, sampling.top_p,
                                        random.randrange(2**31))
                try:
                    await self._act(jobs, sampling)
                finally:
                    self.in_flight -= len(jobs)

    async def _act(self, jobs: list[_Job], sampling: Sampling) -> None:
        loop = asyncio.get_running_loop()
        try:
            replies = await loop.run_in_executor(self.executor, self.policy.act, [j.request for j in jobs], sampling)
            if len(replies) != len(jobs):
                raise RuntimeError(f"policy returned {len(replies)} replies for {len(jobs)} requests")
        except Exception as e:  # noqa: BLE001 - one failed batch must not stop the worker
            self.stats.failed_batches += 1
            if len(jobs) > 1:  # find the culprit: only the request that fails alone gets the error
                log.warning("a batch of %d failed (%s: %s); retrying one at a time", len(jobs), type(e).__name__, e)
                for j in jobs:
                    await self._act([j], sampling)
                return
            log.exception("generation failed")
            if not jobs[0].future.done():
                jobs[0].future.set_exception(e)
            return
        self.stats.batch_sizes.append(len(jobs))
        for j, reply in zip(jobs, replies):
            if not j.future.done():  # a client that went away cancelled its future
                j.future.set_result(reply)


# --------------------------------------------------------------------------- responses


class PromptCounter:
    """Prompt length in tokens, for policies that render locally (`render` + `tokenizer`).

    Counts with a private copy of the tokenizer: a fast tokenizer sets padding and truncation on
    its shared backend at every call, so using the generation thread's tokenizer from another
    thread breaks that thread's padded batch encoding."""

    def __init__(self, policy: Policy):
        render, tok = getattr(policy, "render", None), getattr(policy, "tokenizer", None)
        self.render = render if callable(render) and tok is not None else None
        self.tokenizer = copy.deepcopy(tok) if self.render else None
        self.lock = threading.Lock()

    def __call__(self, request: Request) -> int | None:
        if self.render is None:
            return None
        text = self.render(request)  # a jinja render: does not touch the tokenizer's backend
        with self.lock:
            return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def _assistant(reply: Reply, call_prefix: str) -> tuple[str | None, list[dict], str]:
    """(content, tool_calls, finish_reason) of a reply, as OpenAI sends them.

    A reply whose model text holds a malformed `<tool_call>` is returned as raw text without
    tool calls (vLLM's hermes parser does the same), so a client parsing it sees the same error
    a local rollout would."""
    message = reply.message
    if reply.text and parse_reply(reply.text, call_prefix).error:
        content, calls = reply.text, []
    else:
        calls = [c.model_dump() for c in message.tool_calls or []]
        content = message.content or ("" if not calls else None)
    finish = "length" if reply.truncated else ("tool_calls" if calls else "stop")
    return content, calls, finish


def _usage(reply: Reply) -> dict[str, int]:
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.new_tokens,
            "total_tokens": reply.prompt_tokens + reply.new_tokens}


def _completion(cid: str, created: int, model: str, reply: Reply, call_prefix: str) -> dict[str, Any]:
    content, calls, finish = _assistant(reply, call_prefix)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {"id": cid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": _usage(reply)}


def _chunks(cid: str, created: int, model: str, reply: Reply, call_prefix: str,
            include_usage: bool) -> Iterator[str]:
    content, calls, finish = _assistant(reply, call_prefix)

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        obj = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    if content:
        yield chunk({"content": content})
    for i, call in enumerate(calls):
        fn = call["function"]
        yield chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                     "function": {"name": fn["name"], "arguments": ""}}]})
        yield chunk({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]})
    yield chunk({}, finish)
    if include_usage:
        obj = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": [], "usage": _usage(reply)}
        yield f"data: {json.dumps(obj)}\n\n"
    yield "data: [DONE]\n\n"


# --------------------------------------------------------------------------- app


async def _read_body(http: HTTPRequest, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes `limit` bytes (chunked bodies too)."""
    too_big = APIError(413, f"request body is larger than {limit} bytes", param=None, code="request_too_large")
    declared = http.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_big
    parts, size = [], 0
    async for part in http.stream():
        size += len(part)
        if size > limit:
            raise too_big
        parts.append(part)
    return b"".join(parts)


def create_app(
    policy: Policy,
    model_name: str,
    *,
    max_batch: int = 16,
    batch_wait_ms: float = 10.0,
    max_prompt_tokens: int = 8192,
    max_body_bytes: int = 4 * 1024 * 1024,
    max_completion_tokens: int = 4096,
    default_max_tokens: int = 256,
    max_queue: int = 1024,
    drain_timeout_s: float = 60.0,
) -> FastAPI:
    """The FastAPI app serving `policy` under `model_name`.

    max_batch: requests per `policy.act` at most (1 = one at a time).
    batch_wait_ms: how long the worker waits for more requests after the first of a batch.
    max_prompt_tokens: longer prompts get 413 (only for policies that expose render + tokenizer).
    max_body_bytes: larger request bodies get 413 before they are parsed.
    max_completion_tokens: a larger max_tokens gets 400.
    default_max_tokens: new tokens per reply when the request names none.
    max_queue: requests waiting beyond this get 429.
    drain_timeout_s: on shutdown, how long queued and running requests may take to finish.
    """
    state: dict[str, Any] = {"accepting": True}
    count_prompt = PromptCounter(policy)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher = Batcher(policy, max_batch, batch_wait_ms, max_queue)
        app.state.batcher = batcher
        batcher.start()
        try:
            yield
        finally:
            # uvicorn has stopped accepting connections and waited for open requests; whatever
            # is still queued or generating gets up to drain_timeout_s to finish.
            state["accepting"] = False
            await batcher.drain(drain_timeout_s)

    app = FastAPI(title="trace-agents", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.exception_handler(APIError)
    async def _api_error(_: HTTPRequest, exc: APIError):
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(_: HTTPRequest, exc: RequestValidationError):
        return validation_error(exc).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: HTTPRequest, exc: StarletteHTTPException):
        code = "not_found" if exc.status_code == 404 else None
        return error_response(exc.status_code, str(exc.detail), code=code)

    @app.exception_handler(Exception)
    async def _unexpected(_: HTTPRequest, exc: Exception):
        log.exception("unexpected error")
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}", "server_error")

    def model_card() -> dict[str, Any]:
        return {"id": model_name, "object": "model", "created": 0, "owned_by": "trace-agents"}

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model:path}")
    async def model(model: str):
        if model != model_name:
            raise APIError(404, f"model {model!r} not found; this server serves {model_name!r}", param="model",
                           code="model_not_found")
        return model_card()

    @app.post("/v1/chat/completions")
    async def chat(http: HTTPRequest):
        if not state["accepting"]:
            raise APIError(503, "server is shutting down", "server_error", code="shutting_down")
        raw = await _read_body(http, max_body_bytes)
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise APIError(400, f"request body is not valid JSON: {e}", code="invalid_json") from None
        if not isinstance(data, dict):
            raise APIError(400, "request body must be a JSON object", code="invalid_json")
        try:
            req = ChatRequest.model_validate(data)
        except ValidationError as e:
            raise validation_error(e) from None
        if req.model != model_name:
            raise APIError(404, f"model {req.model!r} not found; this server serves {model_name!r}",
                           param="model", code="model_not_found")
        max_tokens = req.max_completion_tokens or req.max_tokens or default_max_tokens
        if max_tokens > max_completion_tokens:
            raise APIError(400, f"max_tokens is {max_tokens}, this server allows at most {max_completion_tokens}",
                           param="max_tokens", code="invalid_value")

        call_prefix = "call_" + uuid.uuid4().hex[:12]
        tools = [] if req.tool_choice == "none" else [t.model_dump(exclude_none=True) for t in req.tools or []]
        request = Request(messages=[m.to_message() for m in req.messages], tools=tools, call_id_prefix=call_prefix)
        n_prompt = await asyncio.to_thread(count_prompt, request)
        if n_prompt is not None and n_prompt > max_prompt_tokens:
            raise APIError(413, f"prompt is {n_prompt} tokens, this server allows at most {max_prompt_tokens}",
                           param="messages", code="context_length_exceeded")
        sampling = Sampling(
            max_new_tokens=max_tokens,
            temperature=1.0 if req.temperature is None else req.temperature,  # OpenAI's defaults
            top_p=1.0 if req.top_p is None else req.top_p,
            seed=req.seed or 0,
        )
        try:
            reply = await app.state.batcher.submit(request, sampling, seeded=req.seed is not None)
        except APIError:
            raise
        except Exception as e:  # noqa: BLE001 - this request fails, the server goes on
            return error_response(500, f"generation failed: {type(e).__name__}: {e}", "server_error")

        cid, created = "chatcmpl-" + uuid.uuid4().hex, int(time.time())
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return StreamingResponse(_chunks(cid, created, model_name, reply, call_prefix, include_usage),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        return _completion(cid, created, model_name, reply, call_prefix)

    return app


# --------------------------------------------------------------------------- running


class ServeError(ValueError):
    """A serve configuration that cannot work; the message says what to change."""


def load_policy(model: str, composed: str | Path | None = None, *, device: str | None = None,
                dtype: str = "float32", batch_size: int = 16) -> Policy:
    """The policy to serve: `model` alone, or `model` composed with the adapters in `composed`.

    The composed model comes from `trace_agents.compose.load_composed_policy`."""
    from trace_agents.agent.policy import make_policy

    if composed is not None and not Path(composed).is_dir():
        raise ServeError(f"--composed {composed}: not a folder (give the output folder of `trace-agents compose`)")
    return make_policy(model, composed=str(composed) if composed else None, device=device, dtype=dtype,
                       batch_size=batch_size)


def serve_app(model: str, composed: str | Path | None = None, host: str = "127.0.0.1", port: int = 8000, *,
              served_model_name: str | None = None, device: str | None = None, dtype: str = "float32",
              max_batch: int = 16, log_level: str = "info", **app_kwargs: Any) -> None:
    """Build the policy and serve it with uvicorn until interrupted (Ctrl-C / SIGTERM drain first)."""
    import uvicorn

    policy = load_policy(model, composed, device=device, dtype=dtype, batch_size=max_batch)
    name = served_model_name or (Path(composed).name if composed else model)
    app = create_app(policy, name, max_batch=max_batch, **app_kwargs)
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=60)


@contextmanager
def running(app: FastAPI, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> Iterator[str]:
    """Serve `app` on a uvicorn thread; yields the base URL (`http://host:port/v1`). On exit the
    server shuts down gracefully: open requests finish first. For tests and benchmarks."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=30)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()
