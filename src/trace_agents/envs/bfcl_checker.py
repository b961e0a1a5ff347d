"""BFCL's own checkers, run in a long-lived subprocess with a per-job time limit.

Why a subprocess: the multi-turn checker `eval()`s call strings built from model output, and both
checkers run model-chosen values through BFCL code; a hang or crash must cost one verdict, not the
run. Why long-lived: importing the checkers once and piping JSON jobs is ~1 ms per verdict, where a
fresh process per verdict would cost seconds.

Protocol: one JSON job per line on stdin, one JSON result per line on the original stdout (BFCL's
own prints are sent to stderr).
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import select
import subprocess
import sys
import threading
import types
from typing import Any

TIMEOUT_S = 20.0
_MEMORY_LIMIT = 4 * 1024**3


def _stub_model_config() -> None:
    """bfcl_eval.constants.model_config imports every API client library; the AST checker only needs
    `MODEL_CONFIG_MAPPING[name].underscore_to_dot`, which is False for us (we keep dotted names)."""

    class _Config:
        underscore_to_dot = False

    stub = types.ModuleType("bfcl_eval.constants.model_config")
    stub.MODEL_CONFIG_MAPPING = _Mapping(_Config())  # type: ignore[attr-defined]
    sys.modules["bfcl_eval.constants.model_config"] = stub


class _Mapping(dict):
    def __init__(self, default):
        super().__init__()
        self._default = default

    def __missing__(self, key):
        return self._default


_names = itertools.count()


def _check(job: dict[str, Any]) -> dict[str, Any]:
    if job["kind"] == "ast":
        from bfcl_eval.constants.enums import Language
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

        return ast_checker(job["functions"], job["output"], job["answer"], Language.PYTHON, job["category"], "trace_agents")
    if job["kind"] == "multi_turn":
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

        # Tool instances are cached in module globals keyed by model name + test id: a fresh name per
        # job keeps episodes apart, and we drop the instances afterwards so memory stays flat.
        name = f"trace_agents_{os.getpid()}_{next(_names)}"
        try:
            return multi_turn_checker(job["decoded"], job["ground_truth"], job["entry"], job["category"], name)
        finally:
            g = vars(multi_turn_utils)
            for key in [k for k in g if k.startswith(name)]:
                del g[key]
    raise ValueError(f"unknown job kind {job['kind']!r}")


def _worker() -> None:
    _stub_model_config()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # BFCL prints go to stderr, never into our protocol
    sys.stdout = sys.stderr
    for line in sys.stdin:
        try:
            result = _check(json.loads(line))
        except Exception as e:  # one bad job must not end the worker
            result = {"valid": False, "error_type": "checker:exception", "error": [f"{type(e).__name__}: {e}"]}
        out.write(json.dumps(result, default=str) + "\n")
        out.flush()


def _limit_memory() -> None:
    import resource

    # Never above an inherited hard limit (raising it fails, e.g. inside the validator's sandbox).
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _MEMORY_LIMIT if hard == resource.RLIM_INFINITY else min(_MEMORY_LIMIT, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


class CheckerProcess:
    """Client side: sends jobs to the worker, restarts it after a timeout or crash."""

    def __init__(self, timeout: float = TIMEOUT_S):
        self.timeout = timeout
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        return subprocess.Popen(
            [sys.executable, "-m", "trace_agents.envs.bfcl_checker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env=env, preexec_fn=_limit_memory if os.name == "posix" else None,
        )

    def check(self, job: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            proc, ready = self._proc, []
            try:
                proc.stdin.write(json.dumps(job) + "\n")  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
                ready, _, _ = select.select([proc.stdout], [], [], self.timeout)
                line = proc.stdout.readline() if ready else ""  # type: ignore[union-attr]
            except (BrokenPipeError, OSError):
                line = ""
            if line:
                return json.loads(line)
            kind = "checker:crash" if ready or proc.poll() is not None else "checker:timeout"
            self.close()
            return {"valid": False, "error_type": kind, "error": [f"checker gave no answer within {self.timeout:.0f}s"]}

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None


_shared: CheckerProcess | None = None


def shared_checker() -> CheckerProcess:
    """One worker per process, closed at exit."""
    global _shared
    if _shared is None:
        _shared = CheckerProcess()
        atexit.register(_shared.close)
    return _shared


if __name__ == "__main__":
    _worker()
