"""LLM environment synthesis end to end against a fake OpenAI-compatible server on loopback: the server
answers from a script (module texts), each answer is validated in the sandbox, and a failed
validation is sent back in the next request. Also: the example module in the shipped prompt passes
validation itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import FakeOpenAI, JSONHandler, completion, serving
from test_validate import GOOD

from trace_agents.synthesis.llm import PROMPTS, extract_module, render_tools, synthesize_env
from trace_agents.synthesis.validate import validate_module
from trace_agents.types import DataError

CAPABILITY = {"name": "tool_calling_precision", "definition": "Calls tools with exact argument values copied "
              "from the request. Its lack shows as wrong or missing values."}
TARGET_TOOLS = [{"type": "function", "function": {"name": "calculate_triangle_area", "description": "Area. " * 200,
                 "parameters": {"type": "object", "properties": {"base": {"type": "integer"}}, "required": ["base"]}}}]
FAILED = ["### Trajectory t1 (task simple_17) - FAILED\n[user] Area of a triangle with base 10?\n"
          "-> calculate_triangle_area({\"base\": 12})"]

# The reference gives a wrong value, which the verdict (comparing with the task) does not accept.
BROKEN = GOOD.replace('return [("add", {"a": self.a, "b": self.b})]', 'return [("add", {"a": self.a, "b": self.b + 1})]'
                      ).replace("want = self.reference()[0]", 'want = ("add", {"a": self.a, "b": self.b})')


def fenced(code: str) -> str:
    return f"Here is the environment.\n\n```python\n{code}```\n"


class Handler(JSONHandler):
    def do_POST(self):
        srv: FakeOpenAI = self.server  # type: ignore[assignment]
        body = self.read_json()
        with srv.lock:
            srv.bodies.append(body)
            answer = srv.answers[min(len(srv.bodies), len(srv.answers)) - 1]  # the last answer repeats
        self.send(200, completion(answer))


def run(answers: list[str], out: Path, **kwargs):
    server = FakeOpenAI(Handler)
    server.answers = answers
    with serving(server) as srv:
        result = synthesize_env(CAPABILITY, TARGET_TOOLS, FAILED, out, model="fake", base_url=srv.url, backoff=0.01,
                                validation={"seeds": 2, "timeout": 30}, **kwargs)
    return result, srv.bodies


def test_broken_module_is_rejected_and_the_retry_fixes_it(tmp_path):
    out = tmp_path / "envs" / "precision.py"
    result, bodies = run([fenced(BROKEN), fenced(GOOD)], out, cache_dir=tmp_path / "cache")
    assert result.ok and result.attempts == 2 and result.path == out, result.reports
    assert out.read_text() == GOOD.strip() + "\n" and validate_module(out).ok
    assert len(result.reports) == 2
    assert "FAILED" in result.reports[0] and "[FAIL] reference" in result.reports[0]
    assert "PASSED" in result.reports[1]

    first, second = bodies
    prompt = first["messages"][0]["content"]
    assert len(first["messages"]) == 1 and first["model"] == "fake"
    assert CAPABILITY["name"] in prompt and CAPABILITY["definition"] in prompt
    assert "calculate_triangle_area" in prompt and "chars cut]" in prompt  # the long description was cut
    assert "### Trajectory t1" in prompt and not re.search(r"\{(capability_name|target_tools|failed_examples)\}", prompt)
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]  # the conversation grows
    assert second["messages"][1]["content"] == fenced(BROKEN)
    assert result.reports[0] in second["messages"][2]["content"]

    # A rerun replays the whole conversation from the cache (the retry text is reproducible).
    out.unlink()
    again, more = run([], out, cache_dir=tmp_path / "cache")
    assert again.ok and again.attempts == 2 and more == []


def test_always_broken_gives_up_after_max_attempts(tmp_path):
    out = tmp_path / "env.py"
    result, bodies = run([fenced(BROKEN)], out, max_attempts=3)
    assert not result.ok and result.attempts == 3 and len(bodies) == 3
    assert len(result.reports) == 3 and all("[FAIL] reference" in r for r in result.reports)
    assert not out.exists()  # out_path only ever holds a validated module
    assert result.path == tmp_path / "env.py.rejected" and result.path.read_text() == BROKEN.strip() + "\n"
    assert len(bodies[-1]["messages"]) == 5


def test_answer_without_code_block_is_a_failed_attempt(tmp_path):
    out = tmp_path / "env.py"
    result, bodies = run(["I would write an environment that checks the arguments.", fenced(GOOD)], out)
    assert result.ok and result.attempts == 2
    assert "Attempt 1: the answer could not be used: no ```python fenced code block" in result.reports[0]
    assert result.reports[0] in bodies[1]["messages"][2]["content"]


def test_unreachable_server_ends_synthesis_with_a_report(tmp_path):
    result = synthesize_env(CAPABILITY, TARGET_TOOLS, FAILED, tmp_path / "env.py", model="fake",
                            base_url="http://127.0.0.1:9/v1", max_retries=0, backoff=0.01, timeout=2)
    assert not result.ok and result.path is None and result.attempts == 1
    assert "request to fake failed" in result.reports[0]


def test_prompt_example_passes_validation(tmp_path):
    template = (PROMPTS / "synthesize.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", template, flags=re.S)
    assert len(blocks) == 1
    path = tmp_path / "example.py"
    path.write_text(blocks[0])
    report = validate_module(path, timeout=30)
    assert report.ok, report.text()
    for placeholder in ("{capability_name}", "{capability_definition}", "{target_tools}", "{failed_examples}"):
        assert placeholder in template


def test_prompts_dir_override_and_bad_capability(tmp_path):
    (tmp_path / "synthesize.md").write_text("CUSTOM {capability_name}\n{target_tools}")
    out = tmp_path / "env.py"
    result, bodies = run([fenced(GOOD)], out, prompts_dir=tmp_path)
    assert result.ok and bodies[0]["messages"][0]["content"].startswith("CUSTOM tool_calling_precision\n```json")
    with pytest.raises(DataError, match="no synthesize.md"):
        synthesize_env(CAPABILITY, [], [], out, model="m", base_url="http://x", prompts_dir=tmp_path / "none")
    with pytest.raises(DataError, match="'definition'"):
        synthesize_env({"name": "x"}, [], [], out, model="m", base_url="http://x")


def test_extract_module_and_render_tools():
    assert extract_module("<think>```python\nx = 1\n```</think>```python\nimport os\nprint(os)\n```") == "import os\nprint(os)\n"
    assert extract_module("```py\nshort\n```\n```python\nthe longer module\n```") == "the longer module\n"
    with pytest.raises(ValueError, match="not closed"):
        extract_module("```python\nclass Env:\n")
    with pytest.raises(ValueError, match="no ```python"):
        extract_module("```json\n{}\n```")
    tools = [{"type": "function", "function": {"name": f"f{i}", "parameters": {"type": "object", "properties": {}}}}
             for i in range(50)]
    text = render_tools(tools + tools[:1], max_chars=500)
    assert text.startswith("```json\n") and "more tools left out" in text and text.count('"f0"') == 1
    assert render_tools([]) == "(none given)"
