"""Serving: an OpenAI-compatible server over any policy (`app.py`), and the vLLM path for the
adapters with a task-level routing proxy (`vllm.py`)."""

from trace_agents.serve.app import ServeError, create_app, load_policy, running, serve_app
from trace_agents.serve.vllm import (
    ExportError,
    create_proxy,
    export_vllm,
    find_adapters,
    load_router,
    serve_proxy,
    vllm_command,
)

__all__ = [
    "ExportError", "ServeError", "create_app", "create_proxy", "export_vllm", "find_adapters", "load_policy",
    "load_router", "running", "serve_app", "serve_proxy", "vllm_command",
]
