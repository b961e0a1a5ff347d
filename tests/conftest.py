import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trace_agents.types import FunctionCall, Message, ToolCall


def call(name: str, args: dict, i: int = 0) -> ToolCall:
    return ToolCall(id=f"call_{i}", function=FunctionCall(name=name, arguments=json.dumps(args)))


def assistant(*calls: ToolCall, content: str = "") -> Message:
    return Message(role="assistant", content=content, tool_calls=list(calls) or None)


@pytest.fixture(scope="session")
def tiny():
    """(model, tokenizer) of the 2-layer random model; built once per test session."""
    from trace_agents.models import load_model

    return load_model("tiny-random", device="cpu")


@contextmanager
def serving(server):
    """Run an http.server instance on its loopback port in a daemon thread; always shut it down."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class FakeOpenAI(ThreadingHTTPServer):
    """A loopback OpenAI-compatible server for tests (run it with `serving`): `handler` answers each
    request; the handler records bodies, hits per scenario and concurrency here, under `lock`."""

    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        super().__init__(("127.0.0.1", 0), handler)
        self.lock = threading.Lock()
        self.bodies: list[dict] = []
        self.hits: dict = {}
        self.in_flight = self.max_in_flight = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/v1"


class JSONHandler(BaseHTTPRequestHandler):
    """Reads a JSON request body and sends JSON replies; subclasses write `do_POST`."""

    timeout = 5  # a stuck client cannot hold a handler thread forever

    def log_message(self, *args):  # keep pytest output clean
        pass

    def read_json(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def send(self, status: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (timeout tests)
            pass


def completion(content: str | None = None, tool_calls: list | None = None, finish: str = "stop") -> dict:
    """A chat-completions reply with one choice."""
    message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7}}
