"""The collapse guard: a capability adapter worse than the shared adapter it started from is replaced."""

import json

import pytest

from toy_envs import ShortEnv


def _adapter(folder, score):
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"score": score}))
    return folder


@pytest.fixture
def scored(monkeypatch):
    """mean_reward reads a score planted in each adapter folder, and records the seeds it was given."""
    import trace_agents.training.guard as guard

    seen = []

    def fake(make_env, model, adapter, seeds, **kw):
        seen.append(list(seeds))
        return json.loads((adapter / "adapter_config.json").read_text())["score"]

    monkeypatch.setattr(guard, "mean_reward", fake)
    return seen


def test_the_shared_adapter_replaces_an_adapter_its_own_steps_made_worse(tmp_path, scored):
    from trace_agents.training.guard import keep_better

    init, out = _adapter(tmp_path / "_shared" / "adapter", 0.5), tmp_path / "cap"
    _adapter(out / "adapter", 0.2)
    g = keep_better(ShortEnv, "tiny-random", out, init, 4, max_steps=1, max_new_tokens=8)
    assert g["kept"] == "init" and g["mean_reward"] == {"own": 0.2, "init": 0.5}
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["score"] == 0.5
    assert json.loads((out / "adapter_own" / "adapter_config.json").read_text())["score"] == 0.2
    assert json.loads((out / "guard.json").read_text()) == g and g["init"] == "_shared"
    assert scored == [ShortEnv().seeds("test")[:4]] * 2  # held-out seeds, never the train ones


@pytest.mark.parametrize("own", [0.7, 0.5])
def test_an_adapter_as_good_as_the_shared_one_keeps_its_own_steps(tmp_path, scored, own):
    from trace_agents.training.guard import keep_better

    init, out = _adapter(tmp_path / "_shared" / "adapter", 0.5), tmp_path / "cap"
    _adapter(out / "adapter", own)
    assert keep_better(ShortEnv, "tiny-random", out, init, 4, max_steps=1, max_new_tokens=8)["kept"] == "own"
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["score"] == own
    assert not (out / "adapter_own").exists()


def test_the_own_step_options_need_a_shared_adapter():
    from pydantic import ValidationError

    from trace_agents.pipeline import TrainingCfg

    with pytest.raises(ValidationError, match="set shared_steps > 0, or guard_seeds: 0"):
        TrainingCfg(guard_seeds=8)
    with pytest.raises(ValidationError, match="set shared_steps > 0, or carry_optimizer: false"):
        TrainingCfg(carry_optimizer=True)
    assert "guard_seeds" not in str(TrainingCfg(shared_steps=4))  # old run folders keep their fingerprints
    assert "carry_optimizer" not in str(TrainingCfg(shared_steps=4))
