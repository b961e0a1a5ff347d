import json

import pytest
from conftest import assistant, call

from trace_agents.analysis.labels import Label
from trace_agents.analysis.probes import PROBES, Seen, reference_of, label_runs
from trace_agents.envs.bfcl import BfclEnv
from trace_agents.types import Message, Trajectory

NA, PRESENT, LACKING = Label.NA, Label.PRESENT, Label.LACKING


def episode(category: str, seed: int, *replies: Message, format_errors=None) -> Trajectory:
    env = BfclEnv(category)
    messages = env.reset(seed)
    for reply in replies:
        messages = messages + [reply] + env.step(reply).messages
    v = env.verdict()
    n_calls = sum(len(m.tool_calls or []) for m in replies)
    return Trajectory(id=f"{category}_{seed}_{len(replies)}", env=env.name, task_id=env.task_id, seed=seed,
                      messages=messages, tools=env.tools, reward=v.reward, success=v.success, tool_calls=n_calls,
                      info={**v.details, "format_errors": format_errors or []})


def labels(traj):
    seen = Seen.of(traj, reference_of(traj))
    return {name: probe(seen) for name, (probe, _) in PROBES.items()}


def test_correct_simple_call_is_present_where_judged():
    t = episode("simple_python", 0, assistant(call("calculate_triangle_area", {"base": 10, "height": 5})))
    assert t.success
    got = labels(t)
    assert got["tool_call_format"] == PRESENT and got["argument_schema_adherence"] == PRESENT
    assert got["argument_value_grounding"] == PRESENT
    assert got["function_selection"] == NA  # one function offered: nothing to choose
    assert got["parallel_call_completeness"] == NA and got["multi_step_task_completion"] == NA


def test_wrong_value_and_wrong_type_and_invented_param():
    wrong_value = episode("simple_python", 0, assistant(call("calculate_triangle_area", {"base": 12, "height": 5})))
    assert labels(wrong_value)["argument_value_grounding"] == LACKING
    wrong_type = episode("simple_python", 0, assistant(call("calculate_triangle_area", {"base": "10", "height": 5})))
    assert labels(wrong_type)["argument_schema_adherence"] == LACKING
    invented = episode("simple_python", 0, assistant(call("calculate_triangle_area", {"base": 10, "height": 5, "colour": "red"})))
    assert labels(invented)["argument_schema_adherence"] == LACKING


def test_format_errors_and_invented_function():
    t = episode("simple_python", 0, assistant(content="<tool_call>{bad"), format_errors=[{"step": 0, "error": "x"}])
    got = labels(t)
    assert got["tool_call_format"] == LACKING and got["argument_schema_adherence"] == NA
    t = episode("simple_python", 0, assistant(call("area_of_everything", {})))
    assert labels(t)["function_selection"] == LACKING


def test_function_selection_among_several():
    env = BfclEnv("multiple")
    env.reset(0)
    (right, args), = env.answer[0].items()
    wrong = next(f["name"] for f in env.functions if f["name"] != right)
    good = episode("multiple", 0, assistant(call(right, {k: v[0] for k, v in args.items() if v[0] != ""})))
    bad = episode("multiple", 0, assistant(call(wrong, {})))
    assert labels(good)["function_selection"] == PRESENT and labels(bad)["function_selection"] == LACKING


def test_parallel_completeness_and_redundancy():
    env = BfclEnv("parallel")
    env.reset(0)
    calls = [call(n, {k: v[0] for k, v in a.items() if v[0] != ""}, i) for i, d in enumerate(env.answer) for n, a in d.items()]
    assert len(calls) >= 2
    assert labels(episode("parallel", 0, assistant(*calls)))["parallel_call_completeness"] == PRESENT
    short = labels(episode("parallel", 0, assistant(calls[0])))
    assert short["parallel_call_completeness"] == LACKING and short["no_redundant_calls"] == NA
    assert labels(episode("parallel", 0, assistant(calls[0], calls[0])))["no_redundant_calls"] == LACKING


def test_multi_turn_stopping_early_and_error_recovery():
    env = BfclEnv("multi_turn_base")
    seed = env.seeds("train")[0]
    env.reset(seed)
    n_turns = len(env.entry["question"])
    silent = episode("multi_turn_base", seed, *[assistant(content="ok")] * n_turns)
    got = labels(silent)
    assert got["multi_step_task_completion"] == LACKING and got["error_recovery"] == NA
    repeat = episode("multi_turn_base", seed, assistant(call("nope", {})), assistant(call("nope", {})),
                     *[assistant(content="ok")] * n_turns)
    assert labels(repeat)["error_recovery"] == LACKING
    adapt = episode("multi_turn_base", seed, assistant(call("nope", {})), assistant(call("pwd", {})),
                    *[assistant(content="ok")] * n_turns)
    assert labels(adapt)["error_recovery"] == PRESENT


def test_label_run_is_deterministic_subsample_with_every_id_once():
    trajs = [episode("simple_python", 0, assistant(call("calculate_triangle_area", {"base": b, "height": 5})))
             for b in range(10)]
    trajs = [t.model_copy(update={"id": f"t{i}"}) for i, t in enumerate(trajs)]
    (a, c), (b, _) = label_runs(trajs, 2), label_runs(trajs, 2)
    assert a == b and a != c
    for caps in a.capabilities.values():
        ids = [i for bucket in caps.model_dump().values() for i in bucket]
        assert len(ids) == len(set(ids)) == 8  # 80% subsample, each id in exactly one bucket
    assert set(a.definitions) == set(PROBES)


def test_probes_read_synthetic_references_and_bfcl_error_objects():
    from trace_agents.envs.base import resolve_env
    from trace_agents.types import FunctionCall, ToolCall

    env = resolve_env("synthetic/parallel_call_completeness")()
    msgs = env.reset(5)
    (name, args), *_ = env.reference()
    reply = assistant(call(name, args))
    msgs = msgs + [reply] + env.step(reply).messages
    v = env.verdict()
    t = Trajectory(id="s", env=env.name, task_id=env.task_id, seed=5, messages=msgs, tools=env.tools,
                   reward=v.reward, success=v.success, tool_calls=1, info=v.details)
    got = labels(t)
    assert got["parallel_call_completeness"] == LACKING and got["argument_value_grounding"] == PRESENT

    c = ToolCall(id="c", function=FunctionCall(name="cd", arguments='{"folder": "x"}'))
    err = [Message(role="user", content="go"), Message(role="assistant", content="", tool_calls=[c]),
           Message(role="tool", tool_call_id="c", content='{"error": "cd: x: No such directory"}'),
           Message(role="assistant", content="", tool_calls=[c])]
    t = Trajectory(id="e", env="x", task_id="x", seed=0, messages=err, reward=0, success=False, tool_calls=2)
    assert labels(t)["error_recovery"] == LACKING
