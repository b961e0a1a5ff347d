import json
import threading
from contextlib import contextmanager

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
