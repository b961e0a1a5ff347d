"""The OpenAI-compatible server, the vLLM command and the routing proxy, over real loopback HTTP.

The server runs uvicorn in a thread; the official `openai` client talks to it. A scripted policy
makes tool-call replies deterministic (the tiny random model writes noise); one test uses the
real tiny model for plain text.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fastapi import FastAPI, Request as HTTPRequest
from fastapi.responses import JSONResponse, StreamingResponse
from openai import APIStatusError, OpenAI

from trace_agents.agent.openai_policy import OpenAIPolicy
from trace_agents.agent.policy import Reply, Request, Sampling, TransformersPolicy
from trace_agents.serve.app import PromptCounter, create_app, load_policy, running
from trace_agents.serve.vllm import (
    VLLM_FLAGS, VLLM_MAX_LORA_RANKS, ExportError, create_proxy, export_vllm, find_adapters, vllm_command,
)
from trace_agents.types import FunctionCall, Message, ToolCall

MODEL = "scripted"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


class ScriptedPolicy:
    """Answers by the last user message: 'weather <city>' → a tool call; 'boom' → the batch raises;
    'slow' → waits 0.5 s; after a tool result → plain text. Records every batch size."""

    name = "scripted"

    def __init__(self, delay: float = 0.0):
        self.batches: list[int] = []
        self.delay = delay
        self.lock = threading.Lock()

    def act(self, requests: list[Request], sampling: Sampling) -> list[Reply]:
        with self.lock:
            self.batches.append(len(requests))
        time.sleep(self.delay)
        return [self._one(r) for r in requests]

    def _one(self, r: Request) -> Reply:
        last = r.messages[-1]
        if last.role == "tool":
            text = f"It is {json.loads(last.content)['temp']} degrees."
            return Reply(Message(role="assistant", content=text), text, new_tokens=5, prompt_tokens=20)
        said = last.content or ""
        if said == "boom":
            raise RuntimeError("scripted failure")
        if said == "slow":
            time.sleep(0.5)
        if said.startswith("weather "):
            args = json.dumps({"city": said.split(" ", 1)[1]})
            call = ToolCall(id=f"{r.call_id_prefix}_0", function=FunctionCall(name="get_weather", arguments=args))
            text = f'<tool_call>{{"name": "get_weather", "arguments": {args}}}</tool_call>'
            message = Message(role="assistant", content="", tool_calls=[call])
            return Reply(message, text, new_tokens=12, prompt_tokens=30)
        if said == "broken":  # a malformed call in the model's text
            text = '<tool_call>{"name": "get_weather", "arguments": {oops}</tool_call>'
            return Reply(Message(role="assistant", content=""), text, error="call 0: bad", new_tokens=9)
        return Reply(Message(role="assistant", content=f"echo: {said}"), f"echo: {said}", new_tokens=3, prompt_tokens=8)


@pytest.fixture(scope="module")
def scripted():
    policy = ScriptedPolicy(delay=0.05)
    app = create_app(policy, MODEL, max_batch=8, batch_wait_ms=50, max_body_bytes=20_000)
    with running(app) as url:
        yield policy, url, OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)


def ask(client: OpenAI, text: str, **kw):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], **kw)


def still_serving(client: OpenAI) -> None:
    assert ask(client, "ping").choices[0].message.content == "echo: ping"


def test_tool_call_round_trip(scripted):
    _, _, client = scripted
    first = ask(client, "weather Paris", tools=TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert first.usage.prompt_tokens == 30 and first.usage.completion_tokens == 12
    # Send the call back with its result: the assistant turn and tool message must be accepted.
    messages = [{"role": "user", "content": "weather Paris"}, choice.message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp": 21})}]
    second = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "It is 21 degrees."
    assert second.choices[0].finish_reason == "stop" and not second.choices[0].message.tool_calls


def test_malformed_model_call_comes_back_as_text(scripted):
    _, _, client = scripted
    choice = ask(client, "broken", tools=TOOLS).choices[0]
    assert not choice.message.tool_calls and "<tool_call>" in choice.message.content


def test_streaming_assembles_the_same_reply(scripted):
    _, _, client = scripted
    plain = ask(client, "weather Oslo", tools=TOOLS).choices[0].message
    chunks = list(ask(client, "weather Oslo", tools=TOOLS, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    calls: dict[int, dict] = {}
    finish = None
    for c in chunks:
        if not c.choices:
            assert c.usage.completion_tokens == 12  # the usage chunk
            continue
        finish = c.choices[0].finish_reason or finish
        for tc in c.choices[0].delta.tool_calls or []:
            slot = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            slot["id"] = tc.id or slot["id"]
            slot["name"] += tc.function.name or ""
            slot["arguments"] += tc.function.arguments or ""
    assert finish == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        (t.function.name, json.loads(t.function.arguments)) for t in plain.tool_calls]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "" and all(c["id"].startswith("call_") for c in calls.values())
    streamed = "".join(c.choices[0].delta.content or "" for c in ask(client, "hello", stream=True) if c.choices)
    assert streamed == "echo: hello"


@pytest.mark.parametrize("body, status, code", [
    (b'{"model": "scripted", "messages": [', 400, "invalid_json"),
    (b'[1, 2]', 400, "invalid_json"),
    (json.dumps({"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}).encode(), 400, "invalid_value"),
    (json.dumps({"model": MODEL, "messages": []}).encode(), 400, "invalid_value"),
    (json.dumps({"model": MODEL, "messages": [{"role": "tool", "content": "x"}]}).encode(), 400, "invalid_value"),
    (json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**6}).encode(),
     400, "invalid_value"),
    (json.dumps({"model": "gpt-99", "messages": [{"role": "user", "content": "hi"}]}).encode(), 404, "model_not_found"),
    (json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 30_000}]}).encode(),
     413, "request_too_large"),
])
def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(scripted, body, status, code):
    _, url, client = scripted
    resp = httpx.post(url + "/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["code"] == code and err["message"] and set(err) == {"message", "type", "param", "code"}
    still_serving(client)


def test_openai_client_sees_4xx_and_unknown_routes(scripted):
    _, url, client = scripted
    with pytest.raises(APIStatusError) as e:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 404
    assert httpx.get(url + "/nothing-here").json()["error"]["code"] == "not_found"
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert httpx.get(url.removesuffix("/v1") + "/health").json() == {"status": "ok"}


def test_a_failing_generation_is_a_500_for_that_request_only(scripted):
    _, _, client = scripted
    with pytest.raises(APIStatusError) as e:
        ask(client, "boom")
    assert e.value.status_code == 500 and "scripted failure" in str(e.value)
    still_serving(client)
    # In one batch with others, only the failing request gets the 500.
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(ask, client, text) for text in ("a", "boom", "b", "c")]
        results = [f.exception() or f.result().choices[0].message.content for f in futures]
    assert results[0] == "echo: a" and results[2:] == ["echo: b", "echo: c"]
    assert isinstance(results[1], APIStatusError) and results[1].status_code == 500


def test_concurrent_requests_are_batched(scripted):
    policy, _, client = scripted
    before = len(policy.batches)
    with ThreadPoolExecutor(16) as pool:
        replies = list(pool.map(lambda i: ask(client, f"n{i}").choices[0].message.content, range(16)))
    assert replies == [f"echo: n{i}" for i in range(16)]  # each answer reaches its own client
    sizes = policy.batches[before:]
    assert sum(sizes) == 16 and max(sizes) > 1 and max(sizes) <= 8


def test_openai_policy_works_against_the_server(scripted):
    _, url, _ = scripted
    policy = OpenAIPolicy.from_spec(f"openai:{MODEL}@{url}", max_retries=0)
    try:
        reqs = [Request([Message(role="user", content="weather Rome")], tools=TOOLS, call_id_prefix="t0"),
                Request([Message(role="user", content="hi")], call_id_prefix="t1")]
        a, b = policy.act(reqs, Sampling(max_new_tokens=32))
    finally:
        policy.close()
    assert a.error is None and a.message.tool_calls[0].function.name == "get_weather"
    assert a.message.tool_calls[0].id == "t0_0" and b.message.content == "echo: hi" and b.error is None


def test_graceful_shutdown_finishes_in_flight_requests():
    app = create_app(ScriptedPolicy(), MODEL, max_batch=4, batch_wait_ms=5)
    with ThreadPoolExecutor(2) as pool:
        with running(app) as url:
            client = OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
            pending = [pool.submit(ask, client, "slow") for _ in range(2)]
            time.sleep(0.2)  # both are generating when the server is told to stop
        assert [p.result().choices[0].message.content for p in pending] == ["echo: slow"] * 2


def test_real_tiny_model_plain_text_and_prompt_limit(tiny):
    model, tok = tiny
    app = create_app(TransformersPolicy(model, tok, name="tiny"), "tiny", max_batch=4, max_prompt_tokens=200)
    with running(app) as url:
        client = OpenAI(base_url=url, api_key="x", max_retries=0, timeout=60)
        kw = dict(model="tiny", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0)
        full = client.chat.completions.create(**kw)
        text = full.choices[0].message.content
        assert isinstance(text, str) and full.usage.completion_tokens >= 1
        assert full.choices[0].finish_reason in ("stop", "length", "tool_calls")
        streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(**kw, stream=True))
        assert streamed == text  # greedy: the same reply either way
        with pytest.raises(APIStatusError) as e:
            client.chat.completions.create(**{**kw, "messages": [{"role": "user", "content": "word " * 400}]})
        assert e.value.status_code == 413 and e.value.body["code"] == "context_length_exceeded"
        assert client.chat.completions.create(**kw).choices[0].message.content == text
        # Concurrent requests: prompt counting must not disturb the batched encoding.
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(client.chat.completions.create, **{**kw, "messages": [
                {"role": "user", "content": "word " * (i * 7)}]}) for i in range(1, 9)]
            assert all(f.result().choices[0].message.role == "assistant" for f in futures)
        assert app.state.batcher.stats.failed_batches == 0
    # Counting never shares the generation thread's tokenizer (its padding state is per call).
    assert PromptCounter(TransformersPolicy(model, tok)).tokenizer is not tok


def test_composed_folder_without_composed_json_is_refused(tmp_path):
    from trace_agents.models import ModelError

    with pytest.raises(ModelError, match="composed.json"):
        load_policy("tiny-random", tmp_path)


# --------------------------------------------------------------------------- vLLM path


def make_adapter(folder, r, base="/models/base"):
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": r, "lora_alpha": r, "base_model_name_or_path": base,
         "target_modules": ["q_proj", "v_proj"]}))
    (folder / "adapter_model.safetensors").write_bytes(b"")
    return folder


def flags(argv):
    return [a for a in argv if a.startswith("--")]


def test_vllm_command_uses_only_documented_flags_and_the_right_rank(tmp_path):
    run = tmp_path / "run"
    make_adapter(run / "train" / "precondition_verification" / "adapter", 12)
    make_adapter(run / "train" / "tool_calling_precision" / "adapter", 4)
    make_adapter(run / "train" / "tool_calling_precision" / "checkpoints" / "step_1" / "adapter", 64)  # skipped
    argv = vllm_command(run, port=8011)
    assert argv[:3] == ["vllm", "serve", "/models/base"]
    assert set(flags(argv)) <= VLLM_FLAGS and len(flags(argv)) == len(set(flags(argv)))
    value = lambda f: argv[argv.index(f) + 1]  # noqa: E731
    assert value("--max-lora-rank") == "16" and int(value("--max-lora-rank")) in VLLM_MAX_LORA_RANKS
    assert value("--max-loras") == "2" and value("--port") == "8011" and value("--served-model-name") == "/models/base"
    mods = argv[argv.index("--lora-modules") + 1: argv.index("--lora-modules") + 3]
    assert mods == [f"precondition_verification={run.resolve()}/train/precondition_verification/adapter",
                    f"tool_calling_precision={run.resolve()}/train/tool_calling_precision/adapter"]
    assert "--enable-lora" in argv and value("--tool-call-parser") == "hermes"
    for r, expected in [(1, 1), (8, 8), (9, 16), (16, 16), (33, 64), (300, 320), (512, 512)]:
        assert vllm_command({"a": make_adapter(tmp_path / f"r{r}", r)}, "b")[argv.index("--max-lora-rank") + 1] \
            == str(expected)
    with pytest.raises(ExportError, match="largest"):
        vllm_command({"a": make_adapter(tmp_path / "huge", 1024)}, "b")
    with pytest.raises(ExportError, match="one of"):
        vllm_command(run, max_lora_rank=24)


def test_export_vllm_writes_script_with_runtime_lora_env(tmp_path):
    run = tmp_path / "run"
    make_adapter(run / "a1" / "adapter", 16, base="")
    with pytest.raises(ExportError, match="--base-model"):
        export_vllm(run)
    info = export_vllm(run, base_model="Qwen/Qwen3-8B", served_model_name="base")
    script = (run / "vllm" / "vllm_serve.sh").read_text()
    assert "export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in script and "/v1/load_lora_adapter" in script
    assert "--lora-modules a1=" in script and "--chat-template" in script and script.count("exec vllm serve") == 1
    assert json.loads((run / "vllm" / "vllm.json").read_text())["command"] == info["command"]
    assert (run / "vllm" / "chat_template.jinja").read_text().startswith("{%- set sys")
    assert find_adapters(run) == {"a1": (run / "a1" / "adapter").resolve()}


def fake_multi_lora_server(seen: list[dict]) -> FastAPI:
    """A stand-in for `vllm serve --enable-lora`: answers as whichever model was named."""
    served = {"base", "precision", "verification"}
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(http: HTTPRequest):
        body = await http.json()
        seen.append({**body, "authorization": http.headers.get("authorization")})
        if body["model"] not in served:
            return JSONResponse({"error": {"message": "no such model", "type": "NotFoundError", "param": None,
                                           "code": 404}}, 404)
        if body["messages"][-1]["content"] == "upstream-400":
            return JSONResponse({"error": {"message": "bad thing", "type": "BadRequestError", "param": None,
                                           "code": 400}}, 400)
        text = f"answered by {body['model']}"
        if body.get("stream"):
            def events():
                for delta in ({"role": "assistant", "content": ""}, {"content": text}):
                    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                             "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                    yield f"data: {json.dumps(chunk)}\n\n"
                yield "data: [DONE]\n\n"
            return StreamingResponse(events(), media_type="text/event-stream")
        return {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    return app


def test_routing_proxy_forwards_to_the_chosen_adapter():
    seen: list[dict] = []
    routed: list[tuple] = []

    def router(messages, tools):  # scripted task-level router
        routed.append((messages[-1]["content"], [t["function"]["name"] for t in tools]))
        text = messages[-1]["content"]
        return "precision" if "call" in text else "verification" if "check" in text else None

    with running(fake_multi_lora_server(seen)) as upstream:
        proxy = create_proxy(upstream, router, ["precision", "verification"], "base")
        with running(proxy) as url:
            client = OpenAI(base_url=url, api_key="secret", max_retries=0, timeout=30)
            ask_ = lambda text, **kw: client.chat.completions.create(  # noqa: E731
                model=kw.pop("model", "trace-routed"), messages=[{"role": "user", "content": text}], **kw)
            assert ask_("please call it", tools=TOOLS).choices[0].message.content == "answered by precision"
            assert ask_("check first").choices[0].message.content == "answered by verification"
            assert ask_("just chat").choices[0].message.content == "answered by base"
            assert ask_("pinned", model="verification").choices[0].message.content == "answered by verification"
            streamed = "".join(c.choices[0].delta.content or "" for c in ask_("call again", stream=True))
            assert streamed == "answered by precision"
            raw = httpx.post(url + "/chat/completions", headers={"Authorization": "Bearer k"},
                             json={"model": "trace-routed", "messages": [{"role": "user", "content": "check"}]})
            assert raw.headers["x-trace-adapter"] == "verification"
            with pytest.raises(APIStatusError) as e:  # upstream errors keep their status
                ask_("upstream-400")
            assert e.value.status_code == 400 and "bad thing" in str(e.value)
            with pytest.raises(APIStatusError) as e:
                ask_("hi", model="gpt-99")
            assert e.value.status_code == 404
            assert httpx.post(url + "/chat/completions", content=b"{oops").status_code == 400
    assert [s["model"] for s in seen] == ["precision", "verification", "base", "verification", "precision",
                                        "verification", "base"]
    assert seen[0]["tools"] == TOOLS and seen[0]["authorization"] == "Bearer secret"
    assert routed[0] == ("please call it", ["get_weather"]) and len(routed) == 6  # pinned requests skip the router


def test_proxy_maps_a_dead_upstream_to_502():
    proxy = create_proxy("http://127.0.0.1:9/v1", lambda m, t: None, [], "base", timeout=2)
    with running(proxy) as url:
        resp = httpx.post(url + "/chat/completions",
                          json={"model": "trace-routed", "messages": [{"role": "user", "content": "hi"}]})
    assert resp.status_code == 502 and resp.json()["error"]["code"] == "upstream_error"
