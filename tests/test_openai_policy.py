"""OpenAIPolicy against a fake OpenAI-compatible server (stdlib http.server on a free local port).

The last user message picks the server's behaviour, so one server serves every scenario.
"""

from __future__ import annotations

import json
import random
import socket
import time

import pytest
from conftest import FakeOpenAI, JSONHandler, completion, serving

from trace_agents.agent.openai_policy import OpenAIPolicy
from trace_agents.agent.policy import Request, Sampling
from trace_agents.types import Message

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]


class Handler(JSONHandler):
    def do_POST(self):
        srv: FakeOpenAI = self.server  # type: ignore[assignment]
        if self.path != "/v1/chat/completions":
            return self.send(404, {"error": {"message": f"no route {self.path}"}})
        body = self.read_json()
        scenario = body["messages"][-1]["content"]
        with srv.lock:
            srv.bodies.append(body)
            srv.hits[scenario] = srv.hits.get(scenario, 0) + 1
            hits = srv.hits[scenario]
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
        try:
            self.respond(scenario, hits)
        finally:
            with srv.lock:
                srv.in_flight -= 1

    def respond(self, scenario, hits):
        if scenario == "native":
            calls = [
                {"id": "srv_a", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
                {"id": "srv_b", "type": "function", "function": {"name": "add", "arguments": "[1, 2]"}},
                {"id": "srv_c", "type": "function", "function": {"name": "mul", "arguments": {"x": 3}}},
            ]
            return self.send(200, completion(None, calls, "tool_calls"))
        if scenario == "hermes":
            text = 'Adding.\n<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
            return self.send(200, completion(text))
        if scenario == "flaky":
            if hits <= 2:
                return self.send(500, {"error": {"message": "overloaded"}})
            return self.send(200, completion("ok"))
        if scenario == "down":
            return self.send(503, {"error": {"message": "still down"}})
        if scenario == "bad":
            return self.send(400, {"error": {"message": "max_tokens is too large"}})
        if scenario == "long":
            return self.send(200, completion("and so on and so", finish="length"))
        if scenario.startswith("echo "):
            time.sleep(random.uniform(0.0, 0.05))  # replies finish out of order
            return self.send(200, completion(scenario))
        return self.send(200, completion("?"))


@pytest.fixture
def server():
    with serving(FakeOpenAI(Handler)) as srv:
        yield srv


@pytest.fixture
def policy(server):
    p = OpenAIPolicy("fake-model", server.url, timeout=5, backoff=0.01)
    yield p
    p.close()


def req(text, tools=None, prefix="t0"):
    return Request([Message(role="user", content=text)], tools or [], call_id_prefix=prefix)


def test_native_tool_calls_get_stable_ids_and_bad_arguments_are_dropped(policy, server):
    (reply,) = policy.act([req("native", TOOLS, prefix="ep3_t1")], Sampling(max_new_tokens=64))
    calls = reply.message.tool_calls
    assert [c.id for c in calls] == ["ep3_t1_0", "ep3_t1_2"]
    assert calls[0].function.arguments == '{"a": 1, "b": 2}'  # kept as the server's string
    assert calls[1].function.parsed_arguments() == {"x": 3}
    assert "call 1" in reply.error and "not a JSON object" in reply.error
    assert json.loads(reply.text)[0]["function"]["name"] == "add"  # no content: text shows the calls
    assert (reply.new_tokens, reply.prompt_tokens, reply.truncated) == (7, 11, False)
    body = server.bodies[0]
    assert body["model"] == "fake-model" and body["tools"] == TOOLS
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["seed"]) == (64, 0.0, 1.0, 0)
    assert body["messages"] == [{"role": "user", "content": "native"}]


def test_hermes_text_is_parsed_and_empty_tools_are_not_sent(policy, server):
    (reply,) = policy.act([req("hermes", prefix="p")], Sampling())
    assert reply.error is None
    assert reply.message.content == "Adding."
    (call,) = reply.message.tool_calls
    assert call.id == "p_0" and call.function.name == "add"
    assert call.function.parsed_arguments() == {"a": 1, "b": 2}
    assert reply.text.startswith("Adding.")
    assert "tools" not in server.bodies[0]


def test_retries_on_500_then_succeeds(policy, server):
    (reply,) = policy.act([req("flaky")], Sampling())
    assert reply.error is None and reply.message.content == "ok"
    assert server.hits["flaky"] == 3


def test_gives_up_after_max_retries(server):
    p = OpenAIPolicy("m", server.url, max_retries=2, backoff=0.01)
    (reply,) = p.act([req("down")], Sampling())
    p.close()
    assert server.hits["down"] == 3
    assert "503" in reply.error and "still down" in reply.error
    assert reply.message.role == "assistant" and not reply.message.tool_calls


def test_400_is_not_retried(policy, server):
    (reply,) = policy.act([req("bad")], Sampling())
    assert server.hits["bad"] == 1
    assert "400" in reply.error and "max_tokens is too large" in reply.error
    assert reply.message.content == "" and reply.text == ""


def test_length_finish_marks_truncated(policy):
    (reply,) = policy.act([req("long")], Sampling())
    assert reply.truncated and "truncated" in reply.error
    assert reply.message.content == "and so on and so"


def test_connection_error_becomes_error_reply():
    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = OpenAIPolicy("m", f"http://127.0.0.1:{port}/v1", max_retries=1, backoff=0.01, timeout=2)
    (reply,) = p.act([req("x")], Sampling())
    p.close()
    assert "ConnectError" in reply.error


def test_order_is_preserved_under_concurrency(policy, server):
    texts = [f"echo {i}" for i in range(24)]
    replies = policy.act([req(t) for t in texts] + [req("bad")], Sampling())
    assert [r.text for r in replies[:-1]] == texts
    assert "400" in replies[-1].error  # one failure does not disturb the others
    assert server.max_in_flight > 1
    assert policy.act([], Sampling()) == []


def test_from_spec(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    p = OpenAIPolicy.from_spec("openai:Qwen/Qwen3-8B@http://127.0.0.1:8000/v1")
    assert (p.model, p.url) == ("Qwen/Qwen3-8B", "http://127.0.0.1:8000/v1/chat/completions")
    assert p.client.headers["Authorization"] == "Bearer EMPTY"
    p.close()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    p = OpenAIPolicy.from_spec("openai:gpt-4o-mini@https://api.openai.com/v1/")
    assert p.url == "https://api.openai.com/v1/chat/completions"
    assert p.client.headers["Authorization"] == "Bearer sk-test"
    p.close()
    for bad in ["Qwen/Qwen3-8B", "openai:Qwen3-8B", "openai:@http://x/v1", "openai:m@localhost:8000", "vllm:m@http://x"]:
        with pytest.raises(ValueError, match="openai:NAME@BASE_URL"):
            OpenAIPolicy.from_spec(bad)
