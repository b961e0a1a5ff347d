import ast
import hashlib

import pytest
from conftest import assistant, call

from trace_agents.envs.base import resolve_env
from trace_agents.envs.bfcl import CATEGORIES, BfclEnv, load_category, split_of
from trace_agents.envs.bfcl_checker import CheckerProcess
from trace_agents.types import Message

SINGLE = ("simple_python", "multiple", "parallel")


def _reference_calls(env: BfclEnv):
    return [call(name, args, i) for i, (name, args) in enumerate(env.reference())]


@pytest.mark.parametrize("category", CATEGORIES)
def test_split_is_disjoint_exact_and_stable(category):
    env = BfclEnv(category)
    train, test = set(env.seeds("train")), set(env.seeds("test"))
    n = len(load_category(category)[0])
    assert not train & test and len(train | test) == n and len(test) == round(n / 2)
    assert split_of(category) == split_of.__wrapped__(category)  # recomputed from scratch: same


def test_split_fingerprint_never_changes_silently():
    # If this fails, held-out tasks moved: every recorded number is then incomparable.
    test_ids = sorted(i for i, s in split_of("simple_python").items() if s == "test")
    assert hashlib.sha256(",".join(test_ids).encode()).hexdigest()[:12] == "72df58cf0b90"


@pytest.mark.parametrize("category", SINGLE)
def test_ast_checker_accepts_reference_and_rejects_wrong(category):
    env = BfclEnv(category)
    seed = env.seeds("test")[3]
    env.reset(seed)
    good = _reference_calls(env)
    assert env.step(assistant(*good)).done
    v = env.verdict()
    assert v.success and v.reward == 1.0 and v.details["failure"] is None

    env.reset(seed)
    env.step(assistant(call("no_such_function", {})))
    v = env.verdict()
    assert not v.success and v.reward == 0.0 and "wrong" in v.details["failure"]

    env.reset(seed)  # right function, a value that is not allowed
    name, args = good[0].function.name, good[0].function.parsed_arguments()
    key = next(iter(args))
    env.step(assistant(call(name, {**args, key: "definitely wrong value"}), *good[1:]))
    assert not env.verdict().success

    env.reset(seed)
    env.step(assistant(content="I will not call anything."))
    assert env.verdict().details["failure"] == "no_tool_call"


@pytest.mark.parametrize("category", ("multiple", "parallel"))  # simple_python_200's answer leaves a required param out
def test_every_train_reference_reply_passes_the_checker(category):
    env = BfclEnv(category)
    for seed in env.seeds("train"):
        env.reset(seed)
        env.step(assistant(*_reference_calls(env)))
        assert env.verdict().success, env.task_id


def test_a_multi_turn_env_has_no_single_reference_reply():
    env = BfclEnv("multi_turn_base")
    env.reset(env.seeds("train")[0])
    with pytest.raises(ValueError, match="multi-turn"):
        env.reference()


def test_underscored_name_maps_back_to_dotted():
    env = BfclEnv("simple_python")
    env.reset(1)  # math.factorial
    env.step(assistant(call("math_factorial", {"number": 5})))
    assert env.verdict().success


def _replay_ground_truth(env: BfclEnv) -> None:
    done = False
    while not done:
        turn_calls = env.answer[env.turn]
        if env.steps_in_turn < len(turn_calls):
            node = ast.parse(turn_calls[env.steps_in_turn]).body[0].value
            args = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
            done = env.step(assistant(call(node.func.id, args))).done
        else:
            done = env.step(assistant(content="Done.")).done


def test_multi_turn_reference_passes_every_turn():
    env = BfclEnv("multi_turn_base")
    seed = env.seeds("test")[0]
    first = env.reset(seed)
    assert first[0].role == "user" and env.tools
    _replay_ground_truth(env)
    v = env.verdict()
    assert v.success and all(t["valid"] for t in v.details["turns"])
    assert len(v.details["turns"]) == len(env.entry["question"])


def test_multi_turn_feeds_tool_results_and_next_turns():
    env = BfclEnv("multi_turn_base")
    env.reset(env.seeds("test")[0])
    step = env.step(assistant(call("pwd", {}), call("no_such_tool", {"a": 1}, 1)))
    assert not step.done and [m.role for m in step.messages] == ["tool", "tool"]
    assert "not defined" in step.messages[1].content
    step = env.step(assistant(content="ok"))
    assert step.messages[-1].role == "user"  # the next user turn


def test_multi_turn_silent_agent_fails_at_turn_zero():
    env = BfclEnv("multi_turn_base")
    env.reset(env.seeds("test")[0])
    done = False
    while not done:
        done = env.step(assistant(content="no")).done
    v = env.verdict()
    assert not v.success and v.details["failure"] == "multi_turn:empty_turn_model_response"
    assert v.details["turns_passed"] == 0


def test_non_identifier_calls_never_reach_eval():
    from trace_agents.envs.bfcl import call_string

    assert call_string("__import__('os').system", {}) is None
    assert call_string("ls", {"a; import os": 1}) is None
    assert call_string("cd", {"folder": "x'); import os; ('"}) == "cd(folder=\"x'); import os; ('\")"


def test_checker_times_out_and_recovers():
    checker = CheckerProcess(timeout=0.001)
    env = BfclEnv("multi_turn_base")
    env.reset(env.seeds("test")[0])
    job = {"kind": "multi_turn", "category": "multi_turn_base", "entry": {k: v for k, v in env.entry.items()},
           "decoded": [[["ls()"]]], "ground_truth": env.answer[:1]}
    result = checker.check(job)  # a fresh worker cannot import BFCL in 1 ms
    assert result["valid"] is False and result["error_type"] == "checker:timeout"
    checker.timeout = 30
    assert "valid" in checker.check(job) and checker._proc is not None
    checker.close()


def test_resolve_env_rejects_unknown_names():
    from trace_agents.envs.base import EnvError

    with pytest.raises(EnvError, match="choose one of"):
        resolve_env("bfcl/nope")
    with pytest.raises(EnvError, match="environment module"):
        resolve_env("nowhere")
    assert isinstance(resolve_env("bfcl/multiple")(), BfclEnv)
