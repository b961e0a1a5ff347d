"""`--env A+B`: one environment over several, seed s a task of the (s mod n)-th."""

import pytest

from trace_agents.envs.base import EnvError, resolve_env
from trace_agents.synthesis.target_drills import TargetArgumentGroundingEnv, TargetFunctionSelectionEnv
from trace_agents.types import Message

SPEC = "target/function_selection+target/argument_value_grounding"


def test_seed_residue_picks_the_environment_and_its_task():
    mix = resolve_env(SPEC, difficulty=0.0)()
    fs, avg = TargetFunctionSelectionEnv(difficulty=0.0), TargetArgumentGroundingEnv(difficulty=0.0)
    assert mix.name == "target/function_selection+target/argument_value_grounding"
    for seed, env in [(10, fs), (7, avg), (1_000_002, fs)]:
        assert mix.reset(seed) == env.reset(seed)
        assert (mix.task_id, mix.tools) == (env.task_id, env.tools) and mix.hint() == env.hint()
        name, args = env.reference()[0]
        reply = Message(role="assistant", content="", tool_calls=None)
        assert mix.step(reply).done == env.step(reply).done
        assert mix.verdict() == env.verdict()
        assert mix.reference() == [(name, args)]


def test_split_seeds_are_each_envs_own_residue():
    mix = resolve_env(SPEC)()
    train, test = mix.seeds("train"), mix.seeds("test")
    assert not set(train) & set(test)
    assert {s % 2 for s in train[:10]} == {0, 1}
    assert set(train) <= set(TargetFunctionSelectionEnv().seeds("train")) | set(TargetArgumentGroundingEnv().seeds("train"))


def test_a_bad_part_is_named():
    with pytest.raises(EnvError, match="nope"):
        resolve_env("target/function_selection+nope")


def test_a_reseeded_target_in_a_mixture_reaches_every_train_task_and_no_test_task():
    from trace_agents.envs.bfcl import BfclEnv
    from trace_agents.envs.mixture import MixtureEnv, Reseeded

    target = BfclEnv("multiple")
    mix = MixtureEnv([TargetFunctionSelectionEnv, TargetArgumentGroundingEnv, lambda: Reseeded(lambda: BfclEnv("multiple"))])
    reached = set()
    for seed in [s for s in mix.seeds("train") if s % 3 == 2][:400]:
        mix.reset(seed)
        reached.add(mix.task_id)
    assert reached == {f"multiple_{s}" for s in target.seeds("train")}  # 3 and 100 coprime: all 100, not a third
    assert mix.reset(5) == target.reset(target.seeds("train")[5]) and not hasattr(mix, "hint")
    mix.reset(1_000_001)  # residue 2: the target's test split
    assert mix.task_id in {f"multiple_{s}" for s in target.seeds("test")}
    with pytest.raises(ValueError, match="no train seeds"):
        Reseeded(lambda: type("Empty", (), {"name": "empty", "seeds": lambda self, split: []})())
