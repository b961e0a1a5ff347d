"""Stage 2: validation of an environment module (built-in or LLM-written) in a sandboxed subprocess.

`validate_module(path)` runs a child process (`python -m trace_agents.synthesis.validate ...`) that
imports the module and checks that it is a usable training environment:

- import       it imports and holds exactly one Env class (loaded the way `--env FILE.py` loads it),
               which can be instantiated
- conventions  a module docstring, a `capability` name, a `reference()` method
- seeds        `seeds("train")` and `seeds("test")` are non-empty lists of ints, disjoint
- reset        reset returns Message objects with a user message; `name`, `task_id`, `tools` are set;
               `reference()` has the expected shape; `hint()` (if any) gives text or None
- tools        every tool is a valid OpenAI function schema (JSON Schema types, required ⊆ properties)
- deterministic  the same seed gives the same messages, tools, task id and reference, on a fresh
               instance and after another seed was played
- seeds_vary   different seeds give different tasks
- reference    replaying `reference()` scores success with reward 1.0
- empty_answer an answer without tool calls does not succeed and scores < 1
- wrong_answer the reference with the first argument value of every call (or, without arguments,
               the function name) altered does not succeed
- network      the module never tried to open a network connection

Reference shape: single-turn, a list of `(name, args)` calls, replayed as ONE assistant message with
all calls (then, if the episode is not over, one text message); multi-turn, a list with one list of
`(name, args)` per user turn, replayed per turn as one message with that turn's calls followed by a
text message (an assistant message without tool calls ends a user turn).

Sandbox (what it is and is not): the child runs with RLIMIT_AS (memory), RLIMIT_CPU, RLIMIT_FSIZE
and no core files, in a fresh temporary working directory, in its own process group; the parent
enforces a wall-clock timeout and kills the whole group. "No network" is a Python-level guard:
before the module is imported, `socket.socket`, `socket.create_connection`, `socket.getaddrinfo`
(and friends) are replaced by functions raising `PermissionError("network disabled in the sandbox")`,
and every attempt is recorded (so a module that swallows the error is still reported). It is NOT an
OS sandbox: code that uses `_socket`, ctypes or a subprocess gets past it, and the filesystem is not
isolated beyond the working directory. It stops the accidents of generated code (endless loops,
runaway memory, stray downloads); it does not contain hostile code.

Results come back as JSON lines in a file (one "running" line before each check, one result line
after), so a child killed in the middle still tells which check it was running.
"""

from __future__ import annotations

import argparse
import ast
import copy
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, Field

MODULE = "trace_agents.synthesis.validate"
SEED_PREFIX = 10_000  # seeds compared for disjointness (a split may be huge)
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
JSON_TYPES = ("object", "string", "integer", "number", "boolean", "array", "null")
END_TURN = "Done."  # the text message that ends a user turn in replays


class Check(BaseModel):
    name: str
    ok: bool
    detail: str = ""


class ValidationReport(BaseModel):
    path: str
    ok: bool
    checks: list[Check] = Field(default_factory=list)
    seconds: float = 0.0

    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def text(self, timing: bool = True) -> str:
        """A readable report, for people and for the LLM's retry prompt (`timing=False` keeps the
        text reproducible, so a retry request can be answered from a cache)."""
        failed = self.failed()
        head = (f"Validation of {Path(self.path).name}: "
                + ("PASSED" if self.ok else f"FAILED ({len(failed)} of {len(self.checks)} checks failed)")
                + (f" in {self.seconds:.1f} s" if timing else ""))
        lines = [head]
        for c in self.checks:
            detail = c.detail.replace("\n", "\n       ")
            lines.append(f"[{'ok' if c.ok else 'FAIL'}] {c.name}" + (f": {detail}" if detail else ""))
        return "\n".join(lines)


# ---- parent side -----------------------------------------------------------------------------------

def validate_module(path: str | Path, *, seeds: int = 5, timeout: float = 60, memory_mb: int = 2048,
                    env_kwargs: dict[str, Any] | None = None) -> ValidationReport:
    """Run every check on the module at `path` in a sandboxed child (see the module docstring).
    `seeds`: how many train seeds (plus the first test seed) are played; `timeout`: wall-clock
    seconds for the whole validation; `memory_mb`: the child's address-space limit; `env_kwargs`:
    passed to the Env class (must be JSON)."""
    path = Path(path).resolve()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="trace-validate-") as tmp:
        work, result, log = Path(tmp) / "work", Path(tmp) / "result.jsonl", Path(tmp) / "child.log"
        work.mkdir()
        cmd = [sys.executable, "-m", MODULE, str(path), "--out", str(result), "--seeds", str(seeds),
               "--memory-mb", str(memory_mb), "--cpu-seconds", str(math.ceil(timeout) + 1),
               "--env-kwargs", json.dumps(env_kwargs or {})]
        package_root = str(Path(__file__).resolve().parents[2])  # so the child imports this very package
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
        stopped = None
        with log.open("wb") as out:
            # start_new_session: the child leads its own process group, so anything it spawned dies with it.
            proc = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                stopped = f"stopped: the wall-clock limit of {timeout:g} s was reached (an endless loop?)"
            finally:
                _kill_group(proc)
        checks = _collect(result, proc.returncode, stopped, _tail(log), memory_mb, math.ceil(timeout) + 1)
    ok = bool(checks) and all(c.ok for c in checks)
    return ValidationReport(path=str(path), ok=ok, checks=checks, seconds=round(time.monotonic() - start, 3))


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _tail(log: Path, lines: int = 8, chars: int = 1500) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])[-chars:]


def _exit_reason(code: int | None, memory_mb: int, cpu_seconds: int) -> str:
    if code is not None and code < 0:
        sig = -code
        if sig == signal.SIGXCPU:
            return f"stopped: the CPU time limit of {cpu_seconds} s was reached (an endless loop?)"
        if sig == signal.SIGXFSZ:
            return "stopped: the file size limit was reached (writing a huge file?)"
        if sig == signal.SIGKILL:
            return f"killed (SIGKILL; the memory limit is {memory_mb} MB)"
        return f"the process died with signal {signal.Signals(sig).name}"
    return f"the process exited with code {code} before finishing (sys.exit or os._exit in the module?)"


def _collect(result: Path, code: int | None, stopped: str | None, log_tail: str, memory_mb: int,
             cpu_seconds: int) -> list[Check]:
    checks: list[Check] = []
    running, done = None, False
    if result.exists():
        for line in result.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill
            if "running" in item:
                running = item["running"]
            elif "check" in item:
                checks.append(Check(**item["check"]))
                running = None
            elif item.get("done"):
                done = True
    if done and not stopped:
        return checks
    reason = stopped or _exit_reason(code, memory_mb, cpu_seconds)
    detail = f"{reason} while running this check" if running else reason
    if log_tail and not stopped:
        detail += f"\noutput:\n{log_tail}"
    checks.append(Check(name=running or "sandbox", ok=False, detail=detail))
    return checks


# ---- child side: sandbox ---------------------------------------------------------------------------

def _limit(memory_mb: int, cpu_seconds: int) -> None:
    import resource

    def cap(kind: int, value: int) -> None:
        _, hard = resource.getrlimit(kind)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, value if hard == resource.RLIM_INFINITY else hard))

    cap(resource.RLIMIT_AS, memory_mb * 1024 * 1024)
    # The soft CPU limit sends SIGXCPU; the hard one, a second later, SIGKILL.
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard == resource.RLIM_INFINITY or hard > cpu_seconds:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    cap(resource.RLIMIT_FSIZE, 256 * 1024 * 1024)
    cap(resource.RLIMIT_CORE, 0)


class _NetworkGuard:
    """Python-level "no network": the socket entry points raise PermissionError and are recorded."""

    def __init__(self, module_path: str):
        self.module_path, self.attempts = module_path, []

    def install(self) -> None:
        import socket

        guard = self

        def blocked(what: str) -> Callable[..., Any]:
            def refuse(*args: Any, **kwargs: Any) -> Any:
                guard.record(what, args)
                raise PermissionError(f"network disabled in the sandbox ({what} refused)")
            return refuse

        class NoSocket(socket.socket):  # a class, so that `class X(socket.socket)` still imports
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                guard.record("socket.socket", args)
                raise PermissionError("network disabled in the sandbox (socket.socket refused)")

        socket.socket = NoSocket  # type: ignore[misc]
        for name in ("create_connection", "create_server", "getaddrinfo", "gethostbyname", "gethostbyname_ex",
                     "socketpair", "fromfd"):
            if hasattr(socket, name):
                setattr(socket, name, blocked(f"socket.{name}"))

    def record(self, what: str, args: tuple) -> None:
        frames = [f for f in traceback.extract_stack() if f.filename == self.module_path]
        where = f" at line {frames[-1].lineno} ({frames[-1].line})" if frames else ""
        self.attempts.append(f"{what}({', '.join(repr(a) for a in args)[:120]}){where}")


# ---- child side: checks ----------------------------------------------------------------------------

class _Fail(Exception):
    """A failed check; the message is the detail."""


def _describe(e: BaseException, module_path: str) -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != __file__]
    shown = [f for f in frames if f.filename == module_path][-3:] or frames[-3:]
    where = "".join(f"\n  {Path(f.filename).name}, line {f.lineno}, in {f.name}: {(f.line or '').strip()}"
                    for f in shown)
    return f"{type(e).__name__}: {e}{where}"


def _cut(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + " ..."


def _pair(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[0], str) and isinstance(x[1], dict)


def reference_turns(ref: Any) -> tuple[bool, list[list[tuple[str, dict]]]]:
    """(multi_turn, calls per turn) of a `reference()` value; ValueError if it has another shape."""
    if not isinstance(ref, (list, tuple)):
        raise ValueError(f"reference() must return a list, got {type(ref).__name__}")
    if all(_pair(x) for x in ref):
        return False, [[(n, a) for n, a in ref]]
    if all(isinstance(t, (list, tuple)) and all(_pair(x) for x in t) for t in ref):
        return True, [[(n, a) for n, a in t] for t in ref]
    raise ValueError("reference() must return a list of (name, args) pairs (single-turn) or a list with one "
                     f"such list per user turn (multi-turn); args must be dicts. Got: {_cut(ref, 200)}")


def tool_schema_errors(tool: Any) -> list[str]:
    """Problems of one OpenAI tool schema (empty if it is valid)."""
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
        return [f'a tool must be {{"type": "function", "function": {{...}}}}, got {_cut(tool, 120)}']
    fn = tool["function"]
    name = fn.get("name")
    where = f"tool {name!r}"
    errors = []
    if not isinstance(name, str) or not NAME_RE.match(name):
        errors.append(f"{where}: function.name must match {NAME_RE.pattern}")
    if "description" in fn and not isinstance(fn["description"], str):
        errors.append(f"{where}: function.description must be a string")
    params = fn.get("parameters")
    if not isinstance(params, dict) or params.get("type") != "object" or not isinstance(params.get("properties"), dict):
        errors.append(f'{where}: function.parameters must be {{"type": "object", "properties": {{...}}, "required": [...]}}')
    else:
        errors += _schema_errors(params, f"{where} parameters")
    return errors


def _schema_errors(schema: Any, where: str) -> list[str]:
    if not isinstance(schema, dict):
        return [f"{where}: a schema must be a JSON object, got {_cut(schema, 80)}"]
    errors = []
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if kind is None and not any(k in schema for k in ("anyOf", "oneOf", "allOf", "enum", "const")):
        errors.append(f"{where}: no type")
    for k in kinds:
        if k is not None and k not in JSON_TYPES:
            errors.append(f"{where}: type {k!r} is not a JSON Schema type (use one of {', '.join(JSON_TYPES)})")
    if "object" in kinds:
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            errors.append(f"{where}: properties must be an object")
            props = {}
        for key, sub in props.items():
            errors += _schema_errors(sub, f"{where}.{key}")
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            errors.append(f"{where}: required must be a list of property names")
        elif missing := [r for r in required if r not in props]:
            errors.append(f"{where}: required names {missing} that are not in properties")
    if "array" in kinds and "items" in schema:
        items = schema["items"]
        for i, sub in enumerate(items if isinstance(items, list) else [items]):
            errors += _schema_errors(sub, f"{where}.items" + (f"[{i}]" if isinstance(items, list) else ""))
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            subs = schema[key]
            if not isinstance(subs, list) or not subs:
                errors.append(f"{where}: {key} must be a non-empty list")
            else:
                for i, sub in enumerate(subs):
                    errors += _schema_errors(sub, f"{where}.{key}[{i}]")
    if "enum" in schema and (not isinstance(schema["enum"], list) or not schema["enum"]):
        errors.append(f"{where}: enum must be a non-empty list")
    return errors


def _altered(value: Any) -> Any:
    """A value that differs from `value` (and is not "close" to it for a tolerant checker)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1 + abs(value)
    if isinstance(value, str):
        return value + "_wrong" if value else "wrong"
    if isinstance(value, list):
        return value[:-1] if value else ["wrong"]
    if isinstance(value, dict):
        if not value:
            return {"wrong": 1}
        key = next(iter(value))
        return {**value, key: _altered(value[key])}
    return "wrong"


def wrong_turns(turns: list[list[tuple[str, dict]]]) -> tuple[list[list[tuple[str, dict]]], str]:
    """The reference with the first argument value of EVERY call altered (or its name, for a call
    without arguments), and a description of the changes. Every call, not only the first: in a
    state-checked task the first call is often a read-only lookup whose arguments leave the final
    state unchanged. ValueError if there is no call to alter."""
    turns, changes = copy.deepcopy(turns), []
    for calls in turns:
        for i, (name, args) in enumerate(calls):
            if args:
                key = next(iter(args))
                new = _altered(args[key])
                calls[i] = (name, {**args, key: new})
                changes.append(f"{name}: {key!r} {_cut(args[key], 60)} -> {_cut(new, 60)}")
            else:
                calls[i] = (name + "_wrong", args)
                changes.append(f"{name} -> {name}_wrong")
    if not changes:
        raise ValueError("reference() has no tool call to alter")
    more = f" (and {len(changes) - 3} more)" if len(changes) > 3 else ""
    return turns, "; ".join(changes[:3]) + more


class _Runner:
    def __init__(self, path: str, n_seeds: int, env_kwargs: dict, out: Any, memory_mb: int, guard: _NetworkGuard):
        self.path, self.n_seeds, self.env_kwargs, self.out = path, n_seeds, env_kwargs, out
        self.memory_mb, self.guard, self.fatal = memory_mb, guard, False

    def emit(self, item: dict) -> None:
        self.out.write(json.dumps(item) + "\n")
        self.out.flush()

    def check(self, name: str, fn: Callable[[], str | None]) -> bool:
        if self.fatal:
            return False
        self.emit({"running": name})
        detail, ok, out_of_memory = "", False, False
        try:
            detail, ok = fn() or "", True
        except _Fail as e:
            detail = str(e)
        except MemoryError:
            out_of_memory = True  # build no text here: the memory is only freed once we leave this clause
        except SystemExit as e:
            detail = f"the module called sys.exit({e.code!r})"
        except Exception as e:
            detail = _describe(e, self.path)
        if out_of_memory:
            self.fatal = True
            detail = f"stopped: MemoryError, the memory limit of {self.memory_mb} MB was reached"
        self.emit({"check": {"name": name, "ok": ok, "detail": detail}})
        return ok

    def run(self) -> None:
        steps = [("import", self.load), ("conventions", self.conventions), ("seeds", self.seeds),
                 ("reset", self.reset)]
        required = {"import", "seeds", "reset"}  # the rest cannot run without these
        for name, fn in steps:
            if not self.check(name, fn) and name in required:
                break
        else:
            for name, fn in [("tools", self.tools), ("deterministic", self.deterministic),
                             ("seeds_vary", self.seeds_vary), ("reference", self.reference),
                             ("empty_answer", self.empty_answer), ("wrong_answer", self.wrong_answer)]:
                self.check(name, fn)
        if self.guard.attempts:
            self.emit({"check": {"name": "network", "ok": False, "detail": (
                f"the module tried to use the network {len(self.guard.attempts)} time(s), first: "
                f"{self.guard.attempts[0]}; environments must not use the network (network disabled in the sandbox)")}})
        elif not self.fatal:
            self.emit({"check": {"name": "network", "ok": True, "detail": "no network access attempted"}})
        self.emit({"done": True})

    # -- the checks ----------------------------------------------------------------------------------
    def new(self) -> Any:
        return self.cls(**self.env_kwargs)

    def load(self) -> str:
        from trace_agents.envs.base import EnvError, _env_class_from_module

        try:
            self.cls = _env_class_from_module(Path(self.path))
        except EnvError as e:
            raise _Fail(f"{e} (helper classes must not define all four methods)") from None
        self.new()
        return f"class {self.cls.__name__}"

    def conventions(self) -> str:
        problems = []
        if not ast.get_docstring(ast.parse(Path(self.path).read_text(encoding="utf-8"))):
            problems.append("no module docstring (say which capability it trains and why it transfers)")
        capability = getattr(self.cls, "capability", None)
        if not isinstance(capability, str) or not capability:
            problems.append('no class attribute `capability = "<capability name>"`')
        if not callable(getattr(self.cls, "reference", None)):
            problems.append("no method reference() giving the reference solution of the current task")
        if problems:
            raise _Fail("; ".join(problems))
        return f"capability {capability!r}"

    def seeds(self) -> str:
        env = self.new()
        splits = {}
        for split in ("train", "test"):
            value = env.seeds(split)
            seeds = list(itertools.islice(iter(value), SEED_PREFIX))
            if not seeds:
                raise _Fail(f'seeds("{split}") is empty')
            bad = [s for s in seeds if not isinstance(s, int) or isinstance(s, bool)]
            if bad:
                raise _Fail(f'seeds("{split}") must hold ints, found {_cut(bad[:3], 80)}')
            splits[split] = seeds
        shared = sorted(set(splits["train"]) & set(splits["test"]))
        if shared:
            raise _Fail(f"train and test seeds overlap ({len(shared)} shared, e.g. {shared[:5]}): "
                        "a test task must never be a training task")
        self.train, self.test = splits["train"], splits["test"]
        self.sample = self.train[:self.n_seeds] + self.test[:1]
        return f"{len(self.train)} train and {len(self.test)} test seeds (first {SEED_PREFIX} of each compared)"

    def snapshot(self, env: Any, seed: int) -> dict[str, Any]:
        """Everything a seed determines, as JSON (so values compare exactly); raises _Fail on bad types."""
        from trace_agents.types import Message

        messages = env.reset(seed)
        if not isinstance(messages, list) or not messages or not all(isinstance(m, Message) for m in messages):
            raise _Fail(f"reset({seed}) must return a non-empty list of trace_agents.types.Message, "
                        f"got {_cut(repr(messages), 120)}")
        if not any(m.role == "user" for m in messages):
            raise _Fail(f"reset({seed}) returned no user message")
        for attr in ("name", "task_id"):
            if not isinstance(getattr(env, attr, None), str) or not getattr(env, attr):
                raise _Fail(f"after reset({seed}), env.{attr} must be a non-empty string")
        if not isinstance(env.tools, list) or not env.tools:
            raise _Fail(f"after reset({seed}), env.tools must be a non-empty list of tool schemas")
        ref = env.reference()
        reference_turns(ref)
        try:
            snap = {"messages": [m.model_dump(exclude_none=True) for m in messages], "tools": json.loads(json.dumps(env.tools)),
                    "task_id": env.task_id, "reference": json.loads(json.dumps(ref))}
        except (TypeError, ValueError) as e:
            raise _Fail(f"seed {seed}: tools and reference() must be plain JSON data ({e})") from None
        if callable(getattr(env, "hint", None)):
            hint = env.hint()
            if hint is not None and not isinstance(hint, str):
                raise _Fail(f"hint() must return text or None, got {type(hint).__name__}")
            snap["hint"] = hint
        return snap

    def reset(self) -> str:
        env = self.new()
        snap = self.snapshot(env, self.train[0])
        multi, turns = reference_turns(env.reference())
        kind = f"multi-turn ({len(turns)} user turns)" if multi else "single-turn"
        return f"seed {self.train[0]}: task {snap['task_id']!r}, {len(snap['tools'])} tools, {kind} reference"

    def tools(self) -> str:
        env, errors, names = self.new(), {}, set()  # error -> seeds that show it
        for seed in self.sample:
            env.reset(seed)
            seen = [t.get("function", {}).get("name") if isinstance(t, dict) else None for t in env.tools]
            found = [e for t in env.tools for e in tool_schema_errors(t)]
            if len(set(seen)) < len(seen):
                found.append(f"duplicate tool names {sorted({n for n in seen if seen.count(n) > 1}, key=str)}")
            for e in found:
                errors.setdefault(e, []).append(seed)
            names.update(n for n in seen if isinstance(n, str))
        if errors:
            lines = [f"{e} (seeds {', '.join(map(str, seeds))})" for e, seeds in errors.items()]
            raise _Fail("\n".join(lines[:8]) + (f"\n(and {len(lines) - 8} more)" if len(lines) > 8 else ""))
        return f"{len(names)} valid tool schemas: {', '.join(sorted(names))[:300]}"

    def deterministic(self) -> str:
        other = self.train[1] if len(self.train) > 1 else self.test[0]
        for seed in self.train[:self.n_seeds]:
            env = self.new()
            first = self.snapshot(env, seed)
            env.reset(other)
            again = self.snapshot(env, seed)  # same instance, after another task
            fresh = self.snapshot(self.new(), seed)  # a new instance
            for label, snap in (("after another seed was played", again), ("on a new instance", fresh)):
                diff = [k for k in first if first[k] != snap.get(k)]
                if diff:
                    key = diff[0]
                    raise _Fail(f"reset({seed}) is not deterministic: {', '.join(diff)} differ {label}; "
                                f"{key} was {_cut(first[key], 200)}, then {_cut(snap.get(key), 200)}. "
                                "Draw everything from random.Random(seed) and keep no state across episodes.")
        return f"first {min(self.n_seeds, len(self.train))} train seeds reproduce exactly"

    def seeds_vary(self) -> str:
        tasks = {json.dumps([s["messages"], s["reference"]], sort_keys=True)
                 for s in (self.snapshot(self.new(), seed) for seed in self.sample)}
        if len(self.sample) > 1 and len(tasks) == 1:
            raise _Fail(f"all {len(self.sample)} seeds {self.sample} give the same task and reference")
        return f"{len(tasks)} distinct tasks from {len(self.sample)} seeds"

    def play(self, env: Any, replies: list[list[tuple[str, dict]] | None], multi: bool) -> Any:
        """Play one episode: each item is one user turn's calls (None: an empty answer). Returns the verdict."""
        from trace_agents.types import FunctionCall, Message, ToolCall, Verdict

        done, k = False, 0
        for turn, calls in enumerate(replies):
            if done:
                raise _Fail(f"the episode ended after user turn {turn} of {len(replies)} (step() returned "
                            "done=True too early)")
            if calls:
                tool_calls = [ToolCall(id=f"call_{turn}_{i}", function=FunctionCall(name=n, arguments=json.dumps(a)))
                              for i, (n, a) in enumerate(calls)]
                done, k = self.step(env, Message(role="assistant", content="", tool_calls=tool_calls)), k + 1
            if not done:  # a message without tool calls ends the turn (and a single-turn episode)
                done, k = self.step(env, Message(role="assistant", content=END_TURN if calls else "")), k + 1
        if not done:
            raise _Fail(f"the episode did not end after {k} assistant messages (an assistant message "
                        "without tool calls must end the user turn; after the last turn step() must return done=True)")
        verdict = env.verdict()
        if not isinstance(verdict, Verdict):
            raise _Fail(f"verdict() must return trace_agents.types.Verdict, got {type(verdict).__name__}")
        if not math.isfinite(verdict.reward) or not 0.0 <= verdict.reward <= 1.0:
            raise _Fail(f"verdict().reward must be in [0, 1], got {verdict.reward}")
        return verdict

    @staticmethod
    def step(env: Any, message: Any) -> bool:
        from trace_agents.types import Message

        result = env.step(message)
        messages, done = getattr(result, "messages", None), getattr(result, "done", None)
        if not isinstance(messages, list) or not all(isinstance(m, Message) for m in messages) or not isinstance(done, bool):
            raise _Fail("step() must return trace_agents.envs.base.Step(messages=[Message, ...], done=bool), "
                        f"got {_cut(repr(result), 120)}")
        return done

    def each_seed(self, play: Callable[[Any, int, bool, list], str | None]) -> list[str]:
        problems = []
        for seed in self.sample:
            env = self.new()
            env.reset(seed)
            multi, turns = reference_turns(env.reference())
            try:
                problem = play(env, seed, multi, turns)
            except _Fail as e:
                problem = f"seed {seed}: {e}"
            if problem:
                problems.append(problem)
        return problems

    def reference(self) -> str:
        def play(env: Any, seed: int, multi: bool, turns: list) -> str | None:
            v = self.play(env, turns, multi)
            if not (v.success and abs(v.reward - 1.0) < 1e-9):
                return (f"seed {seed}: the reference solution scored reward {v.reward}, success {v.success} "
                        f"(want 1.0, True); reference {_cut(env.reference(), 200)}; details {_cut(v.details, 300)}")
            return None

        if problems := self.each_seed(play):
            raise _Fail("\n".join(problems[:3]))
        return f"reward 1.0 and success on seeds {self.sample}"

    def empty_answer(self) -> str:
        def play(env: Any, seed: int, multi: bool, turns: list) -> str | None:
            v = self.play(env, [None] * len(turns), multi)
            if v.success or v.reward >= 1.0:
                return (f"seed {seed}: an answer without any tool call scored reward {v.reward}, success {v.success} "
                        "(want success False and reward < 1)")
            return None

        if problems := self.each_seed(play):
            raise _Fail("\n".join(problems[:3]))
        return "no success without tool calls"

    def wrong_answer(self) -> str:
        changes = []

        def play(env: Any, seed: int, multi: bool, turns: list) -> str | None:
            try:
                wrong, change = wrong_turns(turns)
            except ValueError as e:
                raise _Fail(str(e)) from None
            try:
                v = self.play(env, wrong, multi)
            except _Fail:
                raise
            except Exception as e:  # the model will send wrong values: the env must score them, not crash
                raise _Fail(f"on a wrong answer ({change}): {_describe(e, self.path)}") from None
            changes.append(change)
            if v.success:
                return f"seed {seed}: a wrong answer ({change}) still scored success (reward {v.reward})"
            return None

        if problems := self.each_seed(play):
            raise _Fail("\n".join(problems[:3]))
        return f"altered answers fail, e.g. {changes[0]}" if changes else "altered answers fail"


def _child(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description="Validate one environment module "
                                     "(the child process of validate_module; prefer calling that).")
    parser.add_argument("path")
    parser.add_argument("--out", required=True, help="JSON lines file for the results")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--memory-mb", type=int, default=2048)
    parser.add_argument("--cpu-seconds", type=int, default=61)
    parser.add_argument("--env-kwargs", default="{}")
    ns = parser.parse_args(argv)
    import trace_agents.envs.base  # noqa: F401  (imported before the limits and guard apply)
    import trace_agents.types  # noqa: F401

    _limit(ns.memory_mb, ns.cpu_seconds)
    path = str(Path(ns.path).resolve())
    guard = _NetworkGuard(path)
    guard.install()
    with open(ns.out, "a", encoding="utf-8") as out:
        _Runner(path, ns.seeds, json.loads(ns.env_kwargs), out, ns.memory_mb, guard).run()


if __name__ == "__main__":
    _child(sys.argv[1:])
