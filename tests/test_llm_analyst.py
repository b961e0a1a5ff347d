"""LLMAnalyst against a fake OpenAI-compatible server (stdlib http.server on a free local port).

The trajectory id in the labelling prompt picks the server's behaviour, so one server serves every
scenario: good answers that depend on the outcome, a fenced answer, malformed-then-good, always
malformed, 500-then-good, 400, and too slow for the client's timeout.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from conftest import FakeOpenAI, JSONHandler, completion, serving

from trace_agents.analysis.labels import Label, read_runs
from trace_agents.analysis.llm import (Capability, LLMAnalyst, balanced_sample, fill, parse_labels,
                                       read_capabilities, render_trajectory)
from trace_agents.types import DataError, FunctionCall, Message, ToolCall, Trajectory

PV, TCP = "precondition_verification", "tool_calling_precision"
CAPS = [
    {"name": PV, "definition": "Checks state before acting. Its lack shows as acting on wrong assumptions.", "examples": ["ok1"]},
    {"name": TCP, "definition": "Calls tools with exact arguments. Its lack shows as wrong values.", "examples": ["ok3"]},
]


def good(failed: bool) -> dict:
    # PV is lacking exactly in failures; TCP is present in failures and not needed in passes.
    # An unknown capability must be ignored.
    return {"labels": {PV: "LACKING" if failed else "present", TCP: "PRESENT" if failed else "NA", "bogus_cap": "LACKING"}}


class Handler(JSONHandler):
    def do_POST(self):
        srv: FakeOpenAI = self.server  # type: ignore[assignment]
        body = self.read_json()
        prompt = body["messages"][0]["content"]
        if "# Failed trajectories" in prompt:
            with srv.lock:
                srv.bodies.append(body)
            return self.send(200, completion(json.dumps({"capabilities": CAPS})))
        tid = re.search(r"### Trajectory (\S+)", prompt)[1]
        failed = f"### Trajectory {tid} (task t-{tid}) - FAILED" in prompt
        reask = len(body["messages"]) > 1
        with srv.lock:
            srv.bodies.append(body)
            key = (tid, body["seed"])
            srv.hits[key] = hits = srv.hits.get(key, 0) + 1
        answer = json.dumps(good(failed))
        if tid == "fenced":
            return self.send(200, completion(f"Here you go:\n```json\n{answer}\n```\nDone."))
        if tid == "flaky" and not reask:
            return self.send(200, completion("It clearly lacks precondition verification."))
        if tid == "broken":  # a capability is never labelled
            return self.send(200, completion(json.dumps({"labels": {PV: "LACKING"}})))
        if tid == "badvalue":
            return self.send(200, completion(json.dumps({"labels": {PV: "MAYBE", TCP: "NA"}})))
        if tid == "err500" and hits == 1:
            return self.send(500, {"error": {"message": "overloaded"}})
        if tid == "e400":
            return self.send(400, {"error": {"message": "context too long"}})
        if tid == "slow":
            time.sleep(0.6)
        return self.send(200, completion(answer))


@pytest.fixture
def server():
    with serving(FakeOpenAI(Handler)) as srv:
        yield srv


def traj(tid: str, success: bool, messages: list[Message] | None = None, **info) -> Trajectory:
    messages = messages or [Message(role="user", content=f"Please do task {tid}."),
                            Message(role="assistant", content="Done.")]
    return Trajectory(id=tid, env="fake", task_id=f"t-{tid}", seed=0, messages=messages, reward=float(success),
                      success=success, tool_calls=0, info=info)


SET = [traj("ok1", False), traj("ok2", True), traj("ok3", False, failure="wrong_value"), traj("fenced", True),
       traj("flaky", False), traj("broken", False), traj("badvalue", True), traj("err500", False)]


def test_analyze_buckets_missing_seeds_and_cache(server, tmp_path):
    analyst = LLMAnalyst("fake", server.url, runs=3, concurrency=4, backoff=0.01, timeout=5)
    paths = analyst.analyze(SET, tmp_path)
    analyst.close()
    assert [p.name for p in paths] == ["run_01.json", "run_02.json", "run_03.json"]
    assert [c.name for c in read_capabilities(tmp_path / "capabilities_proposed.json")] == [PV, TCP]

    runs = read_runs(tmp_path / "labels")  # the .missing.json sidecars are not taken for runs
    assert [r.run for r in runs] == [1, 2, 3]
    for r in runs:
        assert set(r.capabilities) == {PV, TCP}  # bogus_cap ignored
        pv, tcp = r.capabilities[PV], r.capabilities[TCP]
        assert pv.lacking_failed == ["ok1", "ok3", "flaky", "err500"]
        assert pv.present_passed == ["ok2", "fenced"]
        assert tcp.present_failed == ["ok1", "ok3", "flaky", "err500"] and tcp.na_passed == ["ok2", "fenced"]
        assert not (pv.present_failed or pv.na_failed or pv.lacking_passed or pv.na_passed)
        assert r.definitions[PV] == CAPS[0]["definition"]
        missing = json.loads((tmp_path / "labels" / f"run_{r.run:02d}.missing.json").read_text())
        assert missing == ["broken", "badvalue"]  # recorded, never counted in a bucket

    labelling = [b for b in server.bodies if "# Failed trajectories" not in b["messages"][0]["content"]]
    assert {b["seed"] for b in labelling} == {1, 2, 3} and all(b["temperature"] == 1.0 for b in labelling)
    for seed in (1, 2, 3):
        assert server.hits[("flaky", seed)] == 2  # malformed once, re-asked once
        assert server.hits[("broken", seed)] == 3  # 1 + max_parse_retries, then missing
        assert server.hits[("err500", seed)] == 2  # 500, then success
    reask = next(b for b in labelling if len(b["messages"]) == 3 and "flaky" in b["messages"][0]["content"])
    assert "could not be used" in reask["messages"][2]["content"]

    before = len(server.bodies)
    snapshot = {p.name: p.read_text() for p in (tmp_path / "labels").iterdir()}
    again = LLMAnalyst("fake", server.url, runs=3, concurrency=4, backoff=0.01, timeout=5)
    again.analyze(SET, tmp_path)
    again.close()
    assert len(server.bodies) == before  # every answer came from out/.cache
    assert {p.name: p.read_text() for p in (tmp_path / "labels").iterdir()} == snapshot
    assert list((tmp_path / ".cache").glob("??/*.json"))


def test_label_run_stats_http_failures_and_timeout(server):
    analyst = LLMAnalyst("fake", server.url, timeout=0.2, max_retries=1, backoff=0.01, max_parse_retries=1)
    caps = [Capability(**c) for c in CAPS]
    labels, stats = analyst.label_run(7, [traj("ok1", False), traj("slow", True), traj("e400", False),
                                          traj("flaky", True)], caps)
    analyst.close()
    assert labels.run == 7
    assert stats["missing"] == 2 and stats["missing_ids"] == ["slow", "e400"]
    assert "ReadTimeout" in stats["errors"]["slow"] and "HTTP 400" in stats["errors"]["e400"]
    assert server.hits[("slow", 7)] == 2  # timed out, retried once, then missing
    assert server.hits[("e400", 7)] == 1  # other 4xx are not retried
    assert stats["retries"] == 1 and stats["http_retries"] == 1
    assert labels.capabilities[PV].lacking_failed == ["ok1"] and labels.capabilities[PV].present_passed == ["flaky"]


def test_discover_samples_both_outcomes_and_rejects_no_failures(server):
    analyst = LLMAnalyst("fake", server.url, backoff=0.01)
    caps = analyst.discover(SET, sample=4)
    assert [c.name for c in caps] == [PV, TCP]
    prompt = server.bodies[-1]["messages"][0]["content"]
    assert prompt.count("- FAILED") == 2 and prompt.count("- PASSED") == 2
    assert "at most 10 capabilities" in prompt and "{failed}" not in prompt
    with pytest.raises(DataError, match="no failed trajectories"):
        analyst.discover([traj("p", True)])
    analyst.close()


def test_balanced_sample_is_deterministic_and_fills_shortfall():
    many = [traj(f"f{i}", False) for i in range(30)] + [traj(f"p{i}", True) for i in range(3)]
    failed, passed = balanced_sample(many, 10, seed=5)
    assert (len(failed), len(passed)) == (7, 3)
    again = balanced_sample(list(reversed(many)), 10, seed=5)
    assert [t.id for t in again[0]] == [t.id for t in failed]
    assert balanced_sample(many, 100)[0].__len__() == 30


def test_prompts_dir_override(server, tmp_path):
    (tmp_path / "discover.md").write_text("CUSTOM discovery\n# Failed trajectories\n{failed}\n{passed}")
    (tmp_path / "label.md").write_text("CUSTOM labels for {names}\n{trajectory}")
    analyst = LLMAnalyst("fake", server.url, prompts_dir=tmp_path, backoff=0.01)
    analyst.discover(SET, sample=2)
    labels, stats = analyst.label_run(1, [traj("ok1", False)], [Capability(**c) for c in CAPS])
    analyst.close()
    prompts = [b["messages"][0]["content"] for b in server.bodies]
    assert prompts[0].startswith("CUSTOM discovery") and prompts[1].startswith(f"CUSTOM labels for {PV}, {TCP}")
    assert stats["missing"] == 0 and labels.capabilities[PV].lacking_failed == ["ok1"]
    (tmp_path / "label.md").unlink()
    with pytest.raises(DataError, match="no label.md"):
        LLMAnalyst("fake", server.url, prompts_dir=tmp_path)


def test_truncation_keeps_first_user_message_and_the_end():
    call = ToolCall(id="c1", function=FunctionCall(name="lookup", arguments='{"q": "x"}'))
    messages = [Message(role="system", content="You are an agent."), Message(role="user", content="THE TASK " * 10)]
    for i in range(40):
        messages.append(Message(role="assistant", content=f"step {i} " + "a" * 2000, tool_calls=[call]))
        messages.append(Message(role="tool", tool_call_id="c1", content=f"result {i}"))
    messages.append(Message(role="assistant", content="FINAL ANSWER"))
    t = traj("long", False, messages, failure="state_mismatch")
    text = render_trajectory(t, max_message_chars=1500, max_trajectory_chars=12000)
    assert len(text) <= 12000
    assert "FAILED" in text and "Failure: state_mismatch" in text
    assert "THE TASK" in text and text.rstrip().endswith("[assistant] FINAL ANSWER")
    assert "[tool lookup] result 39" in text and "step 0 " not in text
    assert re.search(r"\[\.\.\. \d+ chars cut\]", text)
    dropped = re.findall(r"\[\.\.\. (\d+) messages dropped", text)
    kept = text.count("\n[") - len(dropped)  # one line per rendered message
    assert sum(map(int, dropped)) + kept == len(messages)
    assert text.index("THE TASK") < text.rindex("messages dropped") < text.index("FINAL ANSWER")
    short = render_trajectory(traj("s", True))
    assert "dropped" not in short and "cut]" not in short and "PASSED" in short


def test_parsing_is_strict():
    names = [PV, TCP]
    assert parse_labels('```json\n{"labels": {"%s": "NA", "%s": "LACKING"}}\n```' % (PV, TCP), names) == {
        PV: Label.NA, TCP: Label.LACKING}
    assert parse_labels('<think>{maybe}</think> {"labels": {"%s": "NA", "%s": "PRESENT"}}' % (PV, TCP), names)[TCP] == Label.PRESENT
    for bad, match in [('{"labels": {"%s": "NA"}}' % PV, "no label for"), ("no json here", "no valid JSON"),
                       ('{"labels": {"%s": "NA", "%s": "YES"}}' % (PV, TCP), "NA, PRESENT or LACKING"),
                       ('[1, 2]', "not a JSON object")]:
        with pytest.raises(ValueError, match=match):
            parse_labels(bad, names)
    with pytest.raises(ValueError):
        Capability(name="Bad-Name", definition="x")
    assert fill('{"a": {x}} {y}', x="1") == '{"a": 1} {y}'


def test_from_spec():
    a = LLMAnalyst.from_spec("openai:org/model@http://127.0.0.1:9/v1", runs=2)
    assert (a.model, a.url, a.runs) == ("org/model", "http://127.0.0.1:9/v1/chat/completions", 2)
    a.close()
    with pytest.raises(ValueError, match="openai:NAME@BASE_URL"):
        LLMAnalyst.from_spec("org/model")
