"""The Berkeley Function Calling Leaderboard as a target environment (PyPI `bfcl-eval`, Apache-2.0).

Categories: `simple_python`, `multiple`, `parallel` (one assistant turn, scored by BFCL's AST checker)
and `multi_turn_base` (several user turns on BFCL's stateful tool classes, scored by its multi-turn
checker: state equality and result subset after every turn). The seed of a task is the number at the
end of its id (`simple_python_17` -> 17).

Split: within each category, ids are ranked by sha256 and the first half is `test` (held out: never
used for training, warm-up or analysis), the rest `train` (see `hash_split`).

Tool calls run in-process by calling the tool class's methods directly (no `eval`); the checker,
which does `eval` call strings, runs in a subprocess with a time limit (bfcl_checker.py).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from trace_agents.agent.format import to_openai_tool
from trace_agents.envs.base import EnvError, Split, Step, hash_split
from trace_agents.envs.bfcl_checker import shared_checker
from trace_agents.types import Message, Verdict

CATEGORIES = ("simple_python", "multiple", "parallel", "multi_turn_base")
SINGLE_TURN = tuple(c for c in CATEGORIES if not c.startswith("multi_turn"))
# Categories whose train tasks the target drills may borrow (synthesis/target_drills.py). The live ones
# (user-contributed requests, one call each) are not envs of their own: their ids are not numbered seeds.
BORROWABLE = (*SINGLE_TURN, "live_simple", "live_multiple")
MAX_STEPS_PER_TURN = 20  # BFCL's own MAXIMUM_STEP_LIMIT


def _data_dir() -> Path:
    try:
        import bfcl_eval
    except ImportError:
        raise ImportError("BFCL needs the package bfcl-eval: run `make test` or `pip install --no-deps bfcl-eval==2026.3.23`") from None
    return Path(bfcl_eval.__file__).parent / "data"


def _read_lines(path: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["id"]: r for r in rows}


@lru_cache(maxsize=None)
def load_category(category: str) -> tuple[dict[str, dict], dict[str, dict]]:
    """(entries, possible answers) of a category, keyed by task id."""
    data = _data_dir()
    return (
        _read_lines(data / f"BFCL_v4_{category}.json"),
        _read_lines(data / "possible_answer" / f"BFCL_v4_{category}.json"),
    )


@lru_cache(maxsize=None)
def split_of(category: str) -> dict[str, Split]:
    return hash_split(list(load_category(category)[0]))


@lru_cache(maxsize=None)
def single_call_train_ids(category: str) -> tuple[str, ...]:
    """The category's train task ids whose answer is one call, sorted."""
    answers = load_category(category)[1]
    return tuple(sorted(i for i, s in split_of(category).items() if s == "train" and len(answers[i]["ground_truth"]) == 1))


@lru_cache(maxsize=None)
def offer_counts(category: str) -> tuple[int, ...]:
    """How many functions each of those train tasks offers (one entry per task): the drills'
    `like_target` option draws its offer sizes from these."""
    entries = load_category(category)[0]
    return tuple(len(entries[i]["function"]) for i in single_call_train_ids(category))


@lru_cache(maxsize=None)
def _class_docs(class_name: str) -> tuple[dict, ...]:
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    path = _data_dir() / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]
    return tuple(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def call_string(name: str, args: dict[str, Any]) -> str | None:
    """BFCL's call-string form `name(k=repr(v), ...)`, or None when a name is not an identifier
    (such a call could not run and must never reach the checker's eval)."""
    if not name.isidentifier() or not all(isinstance(k, str) and k.isidentifier() for k in args):
        return None
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"


def _result_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)


def execute_call(methods: dict[str, Any], name: str, args: dict | None) -> str:
    """Run one tool call on live tool-class instances by direct method call (no eval); errors come
    back as text the model can read, worded as BFCL's executor words them."""
    if args is None:
        return "Error during execution: arguments are not a JSON object"
    if name not in methods:
        return f"Error during execution: name '{name}' is not defined"
    try:
        return _result_text(methods[name](**args))
    except Exception as e:  # the tool classes raise on bad arguments; the model sees the error
        return f"Error during execution: {e}"


# ---- partial credit (single-turn) -----------------------------------------------------------------
# Why: a GRPO group whose rollouts all fail teaches nothing, and on the capability drills most dropped
# groups are all-fail (issue 7). Grading how near a failed reply came gives those groups a reward spread.
# The success a run reports is always BFCL's own checker; this only shapes training rewards.
def _norm(value: Any) -> Any:
    """Values compared the way BFCL forgives them: strings without spaces and , . / - _ * ^ and
    case, numbers as floats. The string rule is bfcl_eval's ast_checker.standardize_string (less its
    ' -> " swap); not imported, because that module pulls BFCL's model config into this process, which
    is why the checker runs in a subprocess (bfcl_checker.py)."""
    if isinstance(value, str):
        return re.sub(r"[ ,./\-_*^]", "", value).lower()
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    return value


def _accepts(options: list, value: Any) -> bool:
    """Is `value` among a possible answer's accepted values? Dict options nest an accepted list per
    key; '' accepts a value left out."""
    for option in options:
        if isinstance(option, dict) and isinstance(value, dict):
            if all(_accepts(o, value.get(k, "")) for k, o in option.items()) and set(value) <= set(option):
                return True
        elif _norm(option) == _norm(value):
            return True
    return False


def closeness(calls: list[tuple[str, dict]], answer: list[dict]) -> float:
    """How near parsed calls come to BFCL's possible answer, in [0, 1]: per expected call a third for
    any parsed call, a third for the right function, a third times the share of its params with an
    accepted value (best call each); averaged, and scaled down by surplus calls."""
    if not calls or not answer:
        return 0.0
    scores = []
    for expected in answer:
        (name, params), = expected.items()
        best = 1 / 3
        for called, args in calls:
            if called == name:
                hits = sum(_accepts(options, args.get(p, "")) for p, options in params.items())
                best = max(best, 2 / 3 + hits / max(1, len(params)) / 3)
        scores.append(best)
    return sum(scores) / len(scores) * min(1.0, len(answer) / len(calls))


def first_accepted(options: dict) -> dict:
    """BFCL possible answers list the accepted values of each param, dict params nesting the same
    form per key: take the first of each, dropping params whose first is '' (may be left out)."""
    def unwrap(value):
        if isinstance(value, dict):
            return first_accepted(value)
        return [unwrap(v) for v in value] if isinstance(value, list) else value

    return {k: unwrap(copy.deepcopy(v[0])) for k, v in options.items() if v and v[0] != ""}


class BfclEnv:
    """One BFCL category; one episode at a time. `partial_credit` p > 0 (single-turn only): a failed
    reply earns p * closeness(...) instead of 0 (training shaping; success stays BFCL's verdict)."""

    def __init__(self, category: str, max_steps_per_turn: int = MAX_STEPS_PER_TURN, partial_credit: float = 0.0):
        if not 0.0 <= partial_credit < 1.0:
            raise ValueError(f"partial_credit must be in [0, 1) so a right answer pays most, got {partial_credit}")
        if partial_credit and category.startswith("multi_turn"):
            raise ValueError(f"partial_credit scores single-turn calls; {category!r} is multi-turn, leave it 0")
        self.category = category
        self.partial_credit = partial_credit
        # the AST checker's rules: `simple_python`'s checks the first offered function, `multiple`'s
        # finds the answer's function among those offered (envs that offer more functions need it)
        self.checker_category = category
        self.name = f"bfcl/{category}"
        self.max_steps_per_turn = max_steps_per_turn
        self.multi_turn = category.startswith("multi_turn")
        self.task_id = ""
        self.tools: list[dict[str, Any]] = []

    def seeds(self, split: Split) -> list[int]:
        ids = [i for i, s in split_of(self.category).items() if s == split]
        return sorted(int(i.rsplit("_", 1)[1]) for i in ids)

    def reset(self, seed: int) -> list[Message]:
        return self._open(self.category, seed)

    def _open(self, category: str, seed: int | str) -> list[Message]:
        """Start task `seed` of `category` (the env's own, or for drills a category they borrow from)."""
        entries, answers = load_category(category)
        self.task_id = f"{category}_{seed}"
        if self.task_id not in entries:
            raise KeyError(f"{self.name} has no task with seed {seed} (id {self.task_id})")
        self.entry, self.answer = entries[self.task_id], answers[self.task_id]["ground_truth"]
        self.calls: list[tuple[str, dict]] = []  # single-turn: every call of the reply
        self.turn, self.steps_in_turn = 0, 0
        self.decoded: list[list[list[str]]] = [[]]  # multi-turn: per turn, per step, call strings
        if self.multi_turn:
            functions = [f for c in self.entry["involved_classes"] for f in _class_docs(c)]
            self._instances, self._methods = self._load_instances()
        else:
            functions = self.entry["function"]
        self.functions = functions
        self.tools = [to_openai_tool(f) for f in functions]
        return [Message(**m) for m in self.entry["question"][0]]

    # ---- single-turn -------------------------------------------------------------------------
    def reference(self) -> list[tuple[str, dict]]:
        """One accepted reply to the current single-turn task: every call, each param at its first
        accepted value (`first_accepted`)."""
        if self.multi_turn:
            raise EnvError(f"{self.name} is multi-turn: its answers are checked by state, not by a reference reply")
        return [(name, first_accepted(params)) for call in self.answer for name, params in call.items()]

    def _canonical_name(self, name: str) -> str:
        """Servers that forbid dots in tool names see `math_factorial` for `math.factorial`;
        map such a name back, as BFCL does for those models."""
        names = {f["name"] for f in self.functions}
        if name in names:
            return name
        matches = [n for n in names if n.replace(".", "_") == name]
        return matches[0] if len(matches) == 1 else name

    def step(self, message: Message) -> Step:
        parsed = []
        for call in message.tool_calls or []:
            try:
                parsed.append((self._canonical_name(call.function.name), call.function.parsed_arguments()))
            except ValueError:
                parsed.append((call.function.name, None))
        if not self.multi_turn:
            self.calls = [(n, a) for n, a in parsed if a is not None]
            return Step(done=True)
        return self._multi_turn_step(message, parsed)

    # ---- multi-turn --------------------------------------------------------------------------
    def _load_instances(self):
        from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES

        instances = {}
        for class_name in self.entry["involved_classes"]:
            instance = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)()
            if class_name not in STATELESS_CLASSES:
                config = copy.deepcopy(self.entry["initial_config"].get(class_name, {}))
                instance._load_scenario(config, long_context=False)
            instances[class_name] = instance
        methods = {
            name: method
            for instance in instances.values()
            for name, method in inspect.getmembers(instance, inspect.ismethod)
            if not name.startswith("_")
        }
        return instances, methods

    def _execute(self, name: str, args: dict | None) -> str:
        return execute_call(self._methods, name, args)

    def _multi_turn_step(self, message: Message, parsed: list[tuple[str, dict | None]]) -> Step:
        if not parsed:
            return self._next_turn([])
        results = [
            Message(role="tool", tool_call_id=c.id, content=self._execute(n, a))
            for c, (n, a) in zip(message.tool_calls or [], parsed)
        ]
        strings = [s for n, a in parsed if a is not None and (s := call_string(n, a))]
        self.decoded[self.turn].append(strings)
        self.steps_in_turn += 1
        if self.steps_in_turn >= self.max_steps_per_turn:
            return self._next_turn(results)
        return Step(messages=results)

    def _next_turn(self, pending: list[Message]) -> Step:
        self.turn += 1
        self.steps_in_turn = 0
        questions = self.entry["question"]
        if self.turn >= len(questions):
            return Step(messages=pending, done=True)
        self.decoded.append([])
        return Step(messages=pending + [Message(**m) for m in questions[self.turn]])

    # ---- verdict -----------------------------------------------------------------------------
    def verdict(self) -> Verdict:
        return self._multi_turn_verdict() if self.multi_turn else self._ast_verdict()

    def _ast_verdict(self) -> Verdict:
        details: dict[str, Any] = {"category": self.category, "calls": [{"name": n, "arguments": a} for n, a in self.calls]}
        if not self.calls:
            return Verdict(reward=0.0, success=False, details={**details, "failure": "no_tool_call"})
        result = shared_checker().check({
            "kind": "ast", "category": self.checker_category, "functions": self.entry["function"],
            "output": [{n: a} for n, a in self.calls], "answer": self.answer,
        })
        ok = bool(result.get("valid"))
        failure = None if ok else result.get("error_type", "unknown")
        details.update(failure=failure, errors=result.get("error", []))
        if ok or not self.partial_credit:
            return Verdict(reward=float(ok), success=ok, details=details)
        near = closeness(self.calls, self.answer)
        return Verdict(reward=self.partial_credit * near, success=False, details={**details, "closeness": near})

    def _multi_turn_verdict(self) -> Verdict:
        n_turns = len(self.entry["question"])
        decoded = (self.decoded + [[] for _ in range(n_turns)])[:n_turns]
        entry = {k: v for k, v in self.entry.items() if k != "function"}

        def check(upto: int) -> dict:
            return shared_checker().check({
                "kind": "multi_turn", "category": self.category, "entry": entry,
                "decoded": decoded[:upto], "ground_truth": self.answer[:upto],
            })

        # Per-turn verdicts: the checker run on turns 0..t (it stops at the first failing turn).
        per_turn = [check(t + 1) for t in range(n_turns)]
        final = per_turn[-1]
        ok = bool(final.get("valid"))
        turns = [{"turn": t, "valid": bool(r.get("valid")), "error_type": r.get("error_type")} for t, r in enumerate(per_turn)]
        details = {
            "category": self.category, "turns": turns, "turns_passed": sum(t["valid"] for t in turns),
            "failure": None if ok else final.get("error_type", "unknown"),
            "errors": [final.get("error_message")] if final.get("error_message") else final.get("error", []),
            "decoded": decoded,
        }
        return Verdict(reward=float(ok), success=ok, details=details)
