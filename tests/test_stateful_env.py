import json

import pytest
from conftest import assistant, call

from trace_agents.envs.base import Env
from trace_agents.envs.bfcl import call_string, load_category
from trace_agents.synthesis.stateful import (
    STATEFUL_FAMILIES,
    ErrorRecoveryEnv,
    MultiStepEnv,
    generate_task,
)

ENVS = [MultiStepEnv, ErrorRecoveryEnv]
DIFFICULTIES = [0.0, 0.5, 1.0]


def _is_error(content: str) -> bool:
    """A tool's own error result ({"error": ...}) or a failed execution."""
    return '"error":' in content or content.startswith("Error during execution")


def _play(env, turns_to_do: int | None = None, one_call_per_step: bool = False):
    """Replay the reference as assistant messages for the first `turns_to_do` turns (all if None);
    every turn ends with a text reply. Returns the verdict."""
    ref = env.reference()
    for t, calls in enumerate(ref):
        if turns_to_do is None or t < turns_to_do:
            if one_call_per_step:
                for i, (name, args) in enumerate(calls):
                    step = env.step(assistant(call(name, args, i)))
                    assert not step.done and not _is_error(step.messages[0].content)
                    assert [m.role for m in step.messages] == ["tool"]  # the turn's step budget suffices
            else:
                step = env.step(assistant(*[call(n, a, i) for i, (n, a) in enumerate(calls)]))
                assert not step.done and not any(_is_error(m.content) for m in step.messages if m.role == "tool")
        step = env.step(assistant(content="Done."))
        assert step.done == (t == len(ref) - 1)
    return env.verdict()


def test_families_and_protocol():
    assert STATEFUL_FAMILIES == {"multi_step_task_completion": MultiStepEnv, "error_recovery": ErrorRecoveryEnv}
    for cls in ENVS:
        env = cls()
        assert isinstance(env, Env)
        assert env.name == f"synthetic/{cls.capability}"
        msgs = env.reset(7)
        assert env.task_id == f"{cls.capability}_7"
        assert [m.role for m in msgs] == ["user"] and msgs[0].content
        names = [t["function"]["name"] for t in env.tools]
        assert all(t["type"] == "function" for t in env.tools) and len(names) == len(set(names))
        assert {n for turn in env.reference() for n, _ in turn} <= set(names)
        assert env.hint()
        assert cls.__doc__ and "multi_turn_base" in cls.__doc__


@pytest.mark.parametrize("cls", ENVS)
def test_seeds_disjoint(cls):
    env = cls()
    train, test = env.seeds("train"), env.seeds("test")
    assert train == list(range(100_000)) and test == list(range(1_000_000, 1_001_000))
    assert not set(train) & set(test)
    with pytest.raises(ValueError):
        env.seeds("dev")


@pytest.mark.parametrize("cls", ENVS)
def test_same_seed_same_task_different_seeds_different_tasks(cls):
    a, b = cls(), cls()
    for seed in (0, 3, 1_000_123):
        assert a.reset(seed) == b.reset(seed)
        assert a.tools == b.tools and a.reference() == b.reference() and a.hint() == b.hint()
        assert a.task.config == b.task.config
    keys = set()
    for seed in range(50):
        t = generate_task(cls.capability, seed)
        keys.add(json.dumps([t.turns, t.config], sort_keys=True))
    assert len(keys) >= 45


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
@pytest.mark.parametrize("cls", ENVS)
def test_reference_replay_gets_full_credit(cls, difficulty):
    env = cls(difficulty=difficulty)
    for seed in range(25):
        env.reset(seed)
        v = _play(env, one_call_per_step=seed % 2 == 1)
        assert v.reward == 1.0 and v.success and v.details["failure"] is None, (seed, v.details)
        n = len(env.reference())
        assert v.details["turns"] == [{"turn": t, "valid": True} for t in range(n)]
        assert v.details["turns_passed"] == n
        decoded = v.details["decoded"]
        assert len(decoded) == n
        flat = [[s for step in turn for s in step] for turn in decoded]
        assert flat == [[call_string(nm, a) for nm, a in turn] for turn in env.reference()]
        json.dumps(v.details)  # goes into the trajectory's info


@pytest.mark.parametrize("cls", ENVS)
def test_doing_nothing_scores_zero(cls):
    env = cls()
    for seed in range(10):
        env.reset(seed)
        v = _play(env, turns_to_do=0)
        assert v.reward == 0.0 and not v.success
        assert v.details["failure"] in ("empty_turn", "state_mismatch")
        assert v.details["turns_passed"] == 0
    env.reset(0)  # an episode cut short before any turn ended
    v = env.verdict()
    assert v.reward == 0.0 and v.details["failure"] == "empty_turn"


@pytest.mark.parametrize("cls", ENVS)
def test_first_turn_only_gets_partial_credit(cls):
    env = cls()
    for seed in range(10):
        env.reset(seed)
        v = _play(env, turns_to_do=1)
        assert 0.0 < v.reward < 1.0 and not v.success
        assert v.details["turns"][0]["valid"] and not v.details["turns"][1]["valid"]
        assert v.details["failure"] == "empty_turn"


def test_wrong_state_is_a_state_mismatch():
    env = MultiStepEnv()
    env.reset(1)
    name, args = env.reference()[0][-1]
    bad = {k: (v + "_x" if isinstance(v, str) else v) for k, v in args.items()}
    env.step(assistant(*[call(n, a, i) for i, (n, a) in enumerate(env.reference()[0][:-1])], call(name, bad, 99)))
    env.step(assistant(content="Done."))
    v = env.verdict()
    assert not v.details["turns"][0]["valid"] and v.details["failure"] == "state_mismatch"


def test_unknown_function_bad_arguments_and_step_limit():
    env = MultiStepEnv(max_steps_per_turn=2)
    env.reset(0)
    step = env.step(assistant(call("no_such_tool", {})))
    assert step.messages[0].role == "tool" and step.messages[0].tool_call_id == "call_0"
    assert step.messages[0].content == "Error during execution: name 'no_such_tool' is not defined"
    step = env.step(assistant(call("cd", {"bogus": 1})))
    assert step.messages[0].content.startswith("Error during execution:")
    # the second step used up the turn's budget: the next user turn follows the tool results
    assert [m.role for m in step.messages] == ["tool", "user"]
    assert env.decoded[0] == [["no_such_tool()"], ["cd(bogus=1)"]]


def test_error_recovery_naive_first_attempt_fails():
    env = ErrorRecoveryEnv()
    kinds = set()
    for seed in range(40):
        env.reset(seed)
        naive = env.naive_attempt()
        assert naive
        for i, (name, args) in enumerate(naive):
            step = env.step(assistant(call(name, args, i)))
            content = step.messages[0].content
            assert _is_error(content) == (i == len(naive) - 1), (seed, naive, content)
        kinds.add(naive[-1][0])
        # the failed attempt changes nothing: back at the top folder, the reference still passes
        back = [call("cd", {"folder": "/"}, 50)] if "GorillaFileSystem" in env.task.classes else []
        env.step(assistant(*back, *[call(n, a, i) for i, (n, a) in enumerate(env.reference()[0])]))
        for _ in env.reference():
            env.step(assistant(content="Done."))
        v = env.verdict()
        assert v.details["turns"][0]["valid"] and v.reward > 0
    assert len(kinds) >= 4  # several kinds of failure, not one trick


def test_multi_step_has_no_naive_attempt():
    env = MultiStepEnv()
    env.reset(0)
    assert env.naive_attempt() == []


@pytest.mark.parametrize("cls", ENVS)
def test_difficulty_scales_required_actions(cls):
    def mean_calls(d):
        tasks = [generate_task(cls.capability, s, d) for s in range(40)]
        return sum(len(c) for t in tasks for c in t.reference) / len(tasks), sum(len(t.turns) for t in tasks) / len(tasks)

    (easy_calls, easy_turns), (hard_calls, hard_turns) = mean_calls(0.0), mean_calls(1.0)
    assert hard_calls > easy_calls and hard_turns > easy_turns
    with pytest.raises(ValueError):
        cls(difficulty=1.5)


def test_no_bfcl_task_leaks_in():
    entries, _ = load_category("multi_turn_base")
    configs = [json.dumps(e["initial_config"], sort_keys=True) for e in entries.values()]
    class_configs = {json.dumps(c, sort_keys=True) for e in entries.values() for c in e["initial_config"].values()}
    questions = {m["content"].strip().lower() for e in entries.values() for turn in e["question"] for m in turn}
    for cls in ENVS:
        for d in DIFFICULTIES:
            for seed in list(range(60)) + list(range(1_000_000, 1_000_030)):
                task = generate_task(cls.capability, seed, d)
                assert json.dumps(task.config, sort_keys=True) not in configs
                assert not {json.dumps(c, sort_keys=True) for c in task.config.values()} & class_configs
                assert not {t.strip().lower() for t in task.turns} & questions
