"""Sandboxed validation of environment modules: a good module passes every check, each kind of broken
module fails the right check with a readable report, and modules that loop forever, allocate without
bound or open a socket are stopped and reported while this test process carries on."""

from __future__ import annotations

import socket
import textwrap
import time

import pytest

from trace_agents.synthesis.validate import (ValidationReport, reference_turns, tool_schema_errors, validate_module,
                                             wrong_turns)

GOOD = textwrap.dedent('''
    """Trains tool_calling_precision: call add(a, b) with the two numbers in the request."""
    import json
    import random

    from trace_agents.envs.base import Step
    from trace_agents.types import Message, Verdict

    TOOL = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


    class AddEnv:
        capability = "tool_calling_precision"
        name = "synthetic/add"

        def __init__(self):
            self.task_id, self.tools, self.calls = "", [TOOL], []

        def seeds(self, split):
            return list(range(100)) if split == "train" else list(range(100, 150))

        def reset(self, seed):
            rng = random.Random(seed)
            self.a, self.b = rng.randint(-99, 99), rng.randint(-99, 99)
            self.task_id, self.calls = f"add_{seed}", []
            return [Message(role="user", content=f"Add {self.a} and {self.b}.")]

        def step(self, message):
            for call in message.tool_calls or []:
                try:
                    self.calls.append((call.function.name, json.loads(call.function.arguments)))
                except ValueError:
                    self.calls.append((call.function.name, None))
            return Step(done=True)

        def verdict(self):
            want = self.reference()[0]
            ok = bool(self.calls) and list(self.calls[0]) == list(want)
            return Verdict(reward=float(ok), success=ok, details={"calls": self.calls})

        def reference(self):
            return [("add", {"a": self.a, "b": self.b})]

        def hint(self):
            return "Copy both numbers exactly."
''')

# Two user turns on a counter: set it, then add to it. Every turn's end state is checked.
MULTI = textwrap.dedent('''
    """Trains multi_step_task_completion: keep a counter right across two user requests."""
    import json
    import random

    from trace_agents.envs.base import Step
    from trace_agents.types import Message, Verdict

    def tool(name, arg):
        return {"type": "function", "function": {"name": name, "description": name, "parameters": {
            "type": "object", "properties": {arg: {"type": "integer"}}, "required": [arg]}}}


    class CounterEnv:
        capability = "multi_step_task_completion"
        name = "synthetic/counter"

        def __init__(self):
            self.task_id, self.tools = "", [tool("set_counter", "value"), tool("add_to_counter", "amount")]

        def seeds(self, split):
            return list(range(50)) if split == "train" else list(range(50, 60))

        def reset(self, seed):
            rng = random.Random(seed)
            self.start, self.amount = rng.randint(0, 50), rng.randint(1, 9)
            self.requests = [f"Set the counter to {self.start}.", f"Now add {self.amount} to it."]
            self.want = [self.start, self.start + self.amount]
            self.task_id, self.turn, self.value, self.ends = f"counter_{seed}", 0, None, []
            return [Message(role="user", content=self.requests[0])]

        def step(self, message):
            if not message.tool_calls:
                self.ends.append(self.value)
                self.turn += 1
                if self.turn == len(self.requests):
                    return Step(done=True)
                return Step(messages=[Message(role="user", content=self.requests[self.turn])])
            out = []
            for call in message.tool_calls:
                try:
                    args = json.loads(call.function.arguments)
                    if call.function.name == "set_counter":
                        self.value = int(args["value"])
                    elif call.function.name == "add_to_counter":
                        self.value = (self.value or 0) + int(args["amount"])
                    result = str(self.value)
                except (ValueError, KeyError, TypeError) as e:
                    result = f"error: {e}"
                out.append(Message(role="tool", tool_call_id=call.id, content=result))
            return Step(messages=out)

        def verdict(self):
            right = sum(a == b for a, b in zip(self.ends, self.want))
            return Verdict(reward=right / len(self.want), success=right == len(self.want), details={"ends": self.ends})

        def reference(self):
            return [[("set_counter", {"value": self.start})], [("add_to_counter", {"amount": self.amount})]]
''')


def write(tmp_path, text: str, name: str = "env.py"):
    path = tmp_path / name
    path.write_text(text)
    return path


def variant(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new)


def assert_fails(report: ValidationReport, check: str, *phrases: str) -> None:
    text = report.text()
    assert not report.ok, text
    found = report.check(check)
    assert found is not None and not found.ok, text
    assert f"[FAIL] {check}" in text
    for phrase in phrases:
        assert phrase in found.detail, text


@pytest.mark.parametrize("source", [GOOD, MULTI], ids=["single_turn", "multi_turn"])
def test_good_module_passes_every_check(tmp_path, source):
    report = validate_module(write(tmp_path, source), seeds=3, timeout=30)
    assert report.ok, report.text()
    names = [c.name for c in report.checks]
    assert names == ["import", "conventions", "seeds", "reset", "tools", "deterministic", "seeds_vary",
                     "reference", "empty_answer", "wrong_answer", "network"]
    text = report.text()
    assert text.startswith("Validation of env.py: PASSED") and "[FAIL]" not in text
    assert "multi-turn (2 user turns)" in text if source is MULTI else "single-turn reference" in text
    assert report.seconds > 0 and not list(tmp_path.glob("*.pyc"))


BROKEN = {
    "nondeterministic_reset": (variant("rng = random.Random(seed)", "rng = random.Random()"),
                               "deterministic", ["not deterministic", "random.Random(seed)"]),
    "reference_not_full_credit": (variant('return [("add", {"a": self.a, "b": self.b})]',
                                          'return [("add", {"a": self.a, "b": self.b + 1})]').replace(
                                              "want = self.reference()[0]", 'want = ("add", {"a": self.a, "b": self.b})'),
                                  "reference", ["reference solution scored reward 0.0, success False"]),
    "empty_answer_full_credit": (variant("ok = bool(self.calls) and list(self.calls[0]) == list(want)",
                                         "ok = not self.calls or list(self.calls[0]) == list(want)"),
                                 "empty_answer", ["without any tool call scored reward 1.0"]),
    "wrong_answer_succeeds": (variant("list(self.calls[0]) == list(want)", "self.calls[0][0] == want[0]"),
                              "wrong_answer", ["still scored success", "add: 'a'"]),
    "bad_tool_schema": (variant('"b": {"type": "integer"}}, "required": ["a", "b"]',
                                '"b": {"type": "dict"}}, "required": ["a", "b", "c"]'),
                        "tools", ["type 'dict' is not a JSON Schema type", "['c'] that are not in properties"]),
    "import_error": (variant("import random\n", "import random\nimport no_such_module_xyz\n"),
                     "import", ["ModuleNotFoundError", "no_such_module_xyz", "env.py, line"]),
    "overlapping_seeds": (variant("list(range(100, 150))", "list(range(90, 150))"),
                          "seeds", ["overlap", "10 shared"]),
    "reset_raises": (variant("self.task_id, self.calls = f", "1 / 0\n        self.task_id, self.calls = f"),
                     "reset", ["ZeroDivisionError", "in reset: 1 / 0"]),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_module_fails_the_right_check(tmp_path, case):
    source, check, phrases = BROKEN[case]
    report = validate_module(write(tmp_path, source), seeds=3, timeout=30)
    assert_fails(report, check, *phrases)
    if check not in ("import", "seeds", "reset"):  # only these stop the later checks
        assert [c.name for c in report.failed()] == [check], report.text()


def test_two_env_classes_are_refused(tmp_path):
    source = GOOD + "\n\nclass OtherEnv(AddEnv):\n    pass\n"
    assert_fails(validate_module(write(tmp_path, source), timeout=30), "import", "exactly one class")


# ---- the sandbox -----------------------------------------------------------------------------------

def test_endless_loop_is_killed_by_the_wall_clock(tmp_path):
    source = variant("        rng = random.Random(seed)\n", "        while True:\n            pass\n")
    start = time.monotonic()
    report = validate_module(write(tmp_path, source), timeout=3)
    assert time.monotonic() - start < 10
    assert_fails(report, "reset", "wall-clock limit of 3 s", "while running this check")
    assert report.check("seeds").ok  # the checks before it still report


def test_unbounded_allocation_is_stopped_by_the_memory_limit(tmp_path):
    source = variant("        rng = random.Random(seed)\n",
                     "        hog = []\n        while True:\n            hog.append(bytearray(10**7))\n")
    report = validate_module(write(tmp_path, source), timeout=20, memory_mb=300)
    assert_fails(report, "reset", "memory limit of 300 MB")


@pytest.mark.parametrize("where", ["import", "reset"])
def test_network_access_is_refused_and_reported(tmp_path, where):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    try:
        if where == "import":
            source = variant("import random\n", f"import random\nimport socket\nsocket.create_connection(('127.0.0.1', {port}))\n")
        else:  # the module swallows the error: the attempt is still reported
            source = variant("        rng = random.Random(seed)\n",
                             "        import socket\n        try:\n"
                             f"            socket.socket().connect(('127.0.0.1', {port}))\n"
                             "        except OSError:\n            pass\n        rng = random.Random(seed)\n")
        report = validate_module(write(tmp_path, source), timeout=20)
        with pytest.raises(socket.timeout):
            listener.accept()  # nothing ever connected
    finally:
        listener.close()
    assert_fails(report, "network", "tried to use the network", "network disabled in the sandbox")
    if where == "import":
        assert_fails(report, "import", "PermissionError: network disabled in the sandbox")
    else:
        assert "socket.socket()" in report.check("network").detail


def test_process_exit_in_the_module_is_reported(tmp_path):
    source = variant("        rng = random.Random(seed)\n", "        import os\n        os._exit(3)\n")
    assert_fails(validate_module(write(tmp_path, source), timeout=20), "reset", "exited with code 3")


# ---- helpers ---------------------------------------------------------------------------------------

def test_tool_schema_errors():
    good = {"type": "function", "function": {"name": "math.add", "parameters": {
        "type": "object", "properties": {"xs": {"type": "array", "items": {"type": "number"}},
                                         "mode": {"type": ["string", "null"], "enum": ["a", "b"]}},
        "required": ["xs"]}}}
    assert tool_schema_errors(good) == []
    assert "must be" in tool_schema_errors({"name": "add"})[0]
    bad_name = {"type": "function", "function": {"name": "1 add", "parameters": {"type": "object", "properties": {}}}}
    assert "function.name must match" in tool_schema_errors(bad_name)[0]
    nested = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "xs": {"type": "array", "items": {"type": "float"}}}}}}
    assert "xs.items: type 'float'" in tool_schema_errors(nested)[0]
    no_params = {"type": "function", "function": {"name": "f"}}
    assert "function.parameters must be" in tool_schema_errors(no_params)[0]


def test_reference_shapes_and_wrong_answers():
    assert reference_turns([("f", {"x": 1}), ["g", {}]]) == (False, [[("f", {"x": 1}), ("g", {})]])
    assert reference_turns([[("f", {"x": 1})], []]) == (True, [[("f", {"x": 1})], []])
    with pytest.raises(ValueError, match="list of \\(name, args\\) pairs"):
        reference_turns([("f", 1)])
    turns, change = wrong_turns([[], [("f", {"x": 1.5, "y": "a"}), ("g", {})], [("h", {"flag": True})]])
    assert turns == [[], [("f", {"x": 4.0, "y": "a"}), ("g_wrong", {})], [("h", {"flag": False})]]
    assert change == "f: 'x' 1.5 -> 4.0; g -> g_wrong; h: 'flag' true -> false"
    assert wrong_turns([[("f", {"s": "abc", "xs": [1, 2], "d": {"k": -3}})]])[0] == [[("f", {"s": "abc_wrong", "xs": [1, 2], "d": {"k": -3}})]]
    with pytest.raises(ValueError, match="no tool call"):
        wrong_turns([[]])
