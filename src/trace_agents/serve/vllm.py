"""Serving the adapters with vLLM: the exact `vllm serve` command, and a task-level routing proxy.

Our adapters are plain PEFT folders, so vLLM serves each one under its own model name
(`--enable-lora --lora-modules name=path ...`) and batches requests for different adapters
together. What vLLM cannot do is our composed model's *per-token* routing (a gate choosing an
expert for every token inside one sequence): a vLLM request runs one adapter from start to end.
The proxy here therefore routes per *request*: a task-level router looks at the conversation and
tools, picks one adapter (or the base model) and forwards the request to vLLM under that name.
For token-level routing serve the composed model with `trace-agents serve --composed DIR`.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Callable

import httpx
from fastapi import FastAPI, Request as HTTPRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from trace_agents.agent.format import CHAT_TEMPLATE
from trace_agents.types import atomic_write_text, write_json

# What vLLM documents (checked 2026 against docs.vllm.ai):
# - features/lora.md, "Serving LoRA Adapters": `vllm serve BASE --enable-lora --lora-modules name=path ...`;
#   the server takes the other LoRA settings (`max_loras`, `max_lora_rank`, `max_cpu_loras`) as flags;
#   each adapter is then requested as `"model": name`.
# - features/lora.md, "Dynamically serving LoRA Adapters": `export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`,
#   then POST /v1/load_lora_adapter {"lora_name", "lora_path"} (and /v1/unload_lora_adapter {"lora_name"}).
# - api/vllm/config/lora (v0.14): `MaxLoRARanks = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]`;
#   `max_loras` is "max number of LoRAs in a single batch" (>= 1).
# - features/tool_calling.md: `--enable-auto-tool-choice --tool-call-parser hermes` parses our
#   `<tool_call>{json}</tool_call>` replies; `--chat-template FILE` sets the prompt template.
# - serving/openai_compatible_server.md: `--host`, `--port`, `--served-model-name`.
VLLM_FLAGS = frozenset({
    "--host", "--port", "--served-model-name", "--enable-lora", "--max-loras", "--max-lora-rank",
    "--lora-modules", "--enable-auto-tool-choice", "--tool-call-parser", "--chat-template",
})
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
VLLM_RUNTIME_LORA_ENV = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
VLLM_LOAD_LORA_ENDPOINT = "/v1/load_lora_adapter"


class ExportError(ValueError):
    """Adapters or settings that cannot become a vLLM command; the message says what to fix."""


# --------------------------------------------------------------------------- the command


def find_adapters(run_dir: str | Path) -> dict[str, Path]:
    """Adapter folders (those holding adapter_config.json) under `run_dir`, by name.

    A folder named `adapter` takes its parent's name (training writes `<capability>/adapter`);
    checkpoint copies (anything under a `checkpoints` folder) are skipped."""
    root = Path(run_dir)
    if not root.is_dir():
        raise ExportError(f"{root}: not a folder (give a run folder or an adapter folder)")
    found: dict[str, Path] = {}
    for cfg in sorted(root.rglob("adapter_config.json")):
        folder = cfg.parent
        if "checkpoints" in folder.relative_to(root).parts:
            continue
        name = (folder.parent if folder.name == "adapter" and folder != root else folder).name
        if name in found:
            raise ExportError(f"two adapters would both be named {name!r}: {found[name]} and {folder}; rename one")
        found[name] = folder.resolve()
    if not found:
        raise ExportError(f"{root}: no adapter folders (adapter_config.json) found; train adapters first")
    return found


def adapter_rank(folder: str | Path) -> int:
    """The largest LoRA rank in a PEFT folder (`r`, or any per-module `rank_pattern` value)."""
    path = Path(folder) / "adapter_config.json"
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ExportError(f"{path}: cannot read the adapter config ({e})") from None
    if not isinstance(cfg.get("r"), int):
        raise ExportError(f"{path}: field 'r' (the LoRA rank) is missing or not an integer")
    return max([cfg["r"], *[v for v in (cfg.get("rank_pattern") or {}).values() if isinstance(v, int)]])


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts for --max-lora-rank that fits `rank`."""
    for allowed in VLLM_MAX_LORA_RANKS:
        if rank <= allowed:
            return allowed
    raise ExportError(f"LoRA rank {rank} is above vLLM's largest --max-lora-rank ({VLLM_MAX_LORA_RANKS[-1]})")


def _base_from_adapters(adapters: dict[str, Path]) -> str:
    bases = set()
    for folder in adapters.values():
        cfg = json.loads((Path(folder) / "adapter_config.json").read_text())
        bases.add(cfg.get("base_model_name_or_path") or "")
    if len(bases) != 1 or "" in bases:
        raise ExportError(
            f"cannot tell the base model from the adapters (they name {sorted(bases)}); give it with --base-model"
        )
    return bases.pop()


def resolve_base_model(name: str) -> str:
    """What vLLM loads for a MODEL name: the embedded model's converted folder, else `name` itself."""
    if name == "smollm2-135m":
        from trace_agents.models import smollm2_folder

        return str(smollm2_folder())
    if name == "tiny-random":
        raise ExportError("tiny-random exists only in memory; vLLM needs a transformers folder or hub id")
    return name


def vllm_command(
    adapters: str | Path | dict[str, str | Path],
    base_model: str | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: str | None = None,
    max_lora_rank: int | None = None,
    chat_template: str | Path | None = None,
    tool_call_parser: str | None = "hermes",
) -> list[str]:
    """argv of `vllm serve` for the base model with every adapter as a LoRA module.

    adapters: a run folder (searched with `find_adapters`) or {name: adapter folder}.
    base_model: what vLLM loads; default: the `base_model_name_or_path` the adapters record.
    max_lora_rank: default: the largest adapter rank rounded up to a value vLLM accepts.
    chat_template: a template file; the adapters were trained on our template, so pass it.
    """
    found = find_adapters(adapters) if isinstance(adapters, (str, Path)) else {k: Path(v) for k, v in adapters.items()}
    if not found:
        raise ExportError("no adapters given")
    for name in found:
        if not name or any(c.isspace() for c in name) or "=" in name:
            raise ExportError(f"adapter name {name!r} cannot be a vLLM model name (no spaces or '=')")
    base = resolve_base_model(base_model) if base_model else _base_from_adapters(found)
    needed = max(adapter_rank(p) for p in found.values())
    if max_lora_rank is None:
        max_lora_rank = vllm_max_lora_rank(needed)
    elif max_lora_rank not in VLLM_MAX_LORA_RANKS or max_lora_rank < needed:
        raise ExportError(
            f"--max-lora-rank {max_lora_rank}: must be one of {VLLM_MAX_LORA_RANKS} and at least {needed}"
        )
    served = served_model_name or base
    if served in found:
        raise ExportError(f"the base model's served name {served!r} equals an adapter name; rename one")
    argv = ["vllm", "serve", base, "--host", host, "--port", str(port), "--served-model-name", served,
            "--enable-lora", "--max-loras", str(len(found)), "--max-lora-rank", str(max_lora_rank),
            "--lora-modules", *[f"{name}={Path(path).resolve()}" for name, path in found.items()]]
    if tool_call_parser:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", tool_call_parser]
    if chat_template:
        argv += ["--chat-template", str(Path(chat_template).resolve())]
    return argv


def export_vllm(run_dir: str | Path, out: str | Path | None = None, *, base_model: str | None = None,
                host: str = "127.0.0.1", port: int = 8000, served_model_name: str | None = None,
                max_lora_rank: int | None = None) -> dict[str, Any]:
    """Write `vllm_serve.sh`, `chat_template.jinja` and `vllm.json` into `out` (default RUN_DIR/vllm).
    Returns what vllm.json holds: the argv, the environment, the adapters and the proxy settings."""
    adapters = find_adapters(run_dir)
    out = Path(out) if out else Path(run_dir) / "vllm"
    out.mkdir(parents=True, exist_ok=True)
    template = out / "chat_template.jinja"
    atomic_write_text(template, CHAT_TEMPLATE)
    argv = vllm_command(adapters, base_model, host=host, port=port, served_model_name=served_model_name,
                        max_lora_rank=max_lora_rank, chat_template=template)
    served = argv[argv.index("--served-model-name") + 1]
    base_url = f"http://{host}:{port}"
    lines = ["#!/usr/bin/env bash", "# Written by `trace-agents export-vllm`: the base model with every adapter",
             "# as a LoRA module; each adapter is served under its own model name.", "set -euo pipefail",
             *[f"export {k}={v}" for k, v in VLLM_RUNTIME_LORA_ENV.items()],
             "# Runtime updating lets you hot-load another adapter without a restart:",
             f"#   curl -X POST {base_url}{VLLM_LOAD_LORA_ENDPOINT} -H 'Content-Type: application/json' \\",
             """#     -d '{"lora_name": "NAME", "lora_path": "/abs/path/to/adapter"}'""",
             "# vLLM runs one adapter per request (no per-token routing): route requests with the proxy.",
             "exec " + " \\\n  ".join(_argv_lines(argv)), ""]
    script = out / "vllm_serve.sh"
    atomic_write_text(script, "\n".join(lines))
    script.chmod(0o755)
    info = {"command": argv, "env": VLLM_RUNTIME_LORA_ENV, "base_model": argv[2], "served_model_name": served,
            "adapters": {k: str(v) for k, v in adapters.items()}, "upstream": base_url + "/v1",
            "script": str(script), "chat_template": str(template)}
    write_json(out / "vllm.json", info)
    return info


def _argv_lines(argv: list[str]) -> list[str]:
    """argv split before each flag, for a readable multi-line shell command."""
    lines: list[str] = []
    for arg in argv:
        if arg.startswith("--") or not lines:
            lines.append(shlex.quote(arg))
        else:
            lines[-1] += " " + shlex.quote(arg)
    return lines


# --------------------------------------------------------------------------- the proxy

Router = Callable[[list[dict[str, Any]], list[dict[str, Any]]], "str | None"]
"""(messages, tools) -> adapter name, or None for the base model."""


def _error(status: int, message: str, type: str = "invalid_request_error", code: str | None = None,
           param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type, "param": param, "code": code}}, status)


def create_proxy(upstream_url: str, router: Router, adapters: list[str], base_name: str, *,
                 served_name: str = "trace-routed", timeout: float = 600.0,
                 api_key: str | None = None) -> FastAPI:
    """A FastAPI app that routes each chat request to one adapter on an OpenAI-compatible
    multi-LoRA server (vLLM) at `upstream_url` (ending in /v1).

    Requests for `served_name` are routed: `router(messages, tools)` names an adapter, or None for
    the base model (`base_name`), and the request is forwarded with `model` set to that name.
    Requests naming an adapter or the base directly are forwarded as they are (to pin one).
    Streaming is passed through; upstream errors keep their status; the chosen name is returned
    in the `x-trace-adapter` header."""
    upstream = upstream_url.rstrip("/")
    known = set(adapters) | {base_name}
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state["client"] = httpx.AsyncClient(timeout=timeout)
        try:
            yield
        finally:
            await state["client"].aclose()

    app = FastAPI(title="trace-agents routing proxy", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        names = [served_name, *adapters, base_name]
        return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "trace-agents"}
                                           for n in names]}

    @app.post("/v1/chat/completions")
    async def chat(http: HTTPRequest):
        try:
            body = json.loads(await http.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return _error(400, f"request body is not valid JSON: {e}", code="invalid_json")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "request body must be a JSON object with a 'messages' list", param="messages")
        asked = body.get("model")
        if asked == served_name:
            try:
                choice = await asyncio.to_thread(router, body["messages"], body.get("tools") or [])
            except Exception as e:  # noqa: BLE001 - a router failure fails this request only
                return _error(500, f"router failed: {type(e).__name__}: {e}", "server_error")
            target = base_name if choice is None else choice
            if target not in known:
                return _error(500, f"router chose {target!r}, which is not one of {sorted(known)}", "server_error")
        elif asked in known:
            target = asked
        else:
            return _error(404, f"model {asked!r} not found; use {served_name!r} (routed) or one of {sorted(known)}",
                          code="model_not_found", param="model")
        body["model"] = target
        headers = {"Content-Type": "application/json"}
        auth = http.headers.get("authorization") or (f"Bearer {api_key}" if api_key else None)
        if auth:
            headers["Authorization"] = auth
        client: httpx.AsyncClient = state["client"]
        try:
            req = client.build_request("POST", upstream + "/chat/completions", json=body, headers=headers)
            resp = await client.send(req, stream=True)
        except httpx.HTTPError as e:
            return _error(502, f"upstream {upstream} failed: {type(e).__name__}: {e}", "server_error",
                          code="upstream_error")
        out_headers = {"x-trace-adapter": target}
        media = resp.headers.get("content-type", "application/json")
        if body.get("stream") and resp.status_code < 400:
            return StreamingResponse(resp.aiter_raw(), status_code=resp.status_code, media_type=media,
                                     headers=out_headers, background=BackgroundTask(resp.aclose))
        try:
            content = await resp.aread()
        finally:
            await resp.aclose()
        return Response(content, status_code=resp.status_code, media_type=media, headers=out_headers)

    return app


def load_router(composed: str | Path, device: str | None = None):
    """The task-level router fitted with a composed model (`trace-agents compose`): a callable
    (messages, tools) -> adapter name or None, with `.router.names` the adapters it can choose."""
    from trace_agents.compose import load_task_router

    try:
        return load_task_router(Path(composed), device=device)
    except (OSError, ValueError, KeyError) as e:
        raise ExportError(f"--composed {composed}: no usable task router ({e})") from None


def serve_proxy(upstream_url: str, router: Router, adapters: list[str], base_name: str, *,
                host: str = "127.0.0.1", port: int = 8001, served_name: str = "trace-routed",
                log_level: str = "info") -> None:
    """Run the routing proxy with uvicorn until interrupted."""
    import uvicorn

    app = create_proxy(upstream_url, router, adapters, base_name, served_name=served_name)
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=60)
