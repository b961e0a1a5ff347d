"""The collapse guard: a capability adapter worse than an earlier step of its own or the shared adapter it started from is replaced."""

import json

import pytest

from toy_envs import ShortEnv


def _drills(n):
    from trace_agents.training.guard import Probe

    return {"drills": Probe(ShortEnv, "test", n, 1, 8)}


def _adapter(folder, score, target=None):
    """An adapter folder whose drill score is `score` and target score `target` (default: the same)."""
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"score": score, **({"target": target} if target is not None else {})}))
    return folder


@pytest.fixture
def scored(monkeypatch):
    """mean_reward reads a score planted in each adapter folder, and records the seeds it was given."""
    import trace_agents.training.guard as guard

    seen = []

    def fake(make_env, model, adapter, seeds, **kw):
        seen.append(list(seeds))
        planted = json.loads((adapter / "adapter_config.json").read_text())
        return planted["score"] if kw["max_new_tokens"] == 8 else planted.get("target", planted["score"])

    monkeypatch.setattr(guard, "mean_reward", fake)
    return seen


def test_the_shared_adapter_replaces_an_adapter_its_own_steps_made_worse(tmp_path, scored):
    from trace_agents.training.guard import keep_better

    init, out = _adapter(tmp_path / "_shared" / "adapter", 0.5), tmp_path / "cap"
    _adapter(out / "adapter", 0.2)
    g = keep_better("tiny-random", out, init, _drills(4))
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
    assert keep_better("tiny-random", out, init, _drills(4))["kept"] == "own"
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["score"] == own
    assert not (out / "adapter_own").exists()


def _kept(out, step, score, target=None):
    return _adapter(out / "kept" / f"step_{step:05d}" / "adapter", score, target)


def test_a_kept_earlier_step_that_scores_best_becomes_the_adapter(tmp_path, scored):
    from trace_agents.training.guard import keep_better

    init, out = _adapter(tmp_path / "_shared" / "adapter", 0.3), tmp_path / "cap"
    _adapter(out / "adapter", 0.1)  # step 32 collapsed
    _kept(out, 8, 0.4)
    _kept(out, 16, 0.5)
    g = keep_better("tiny-random", out, init, _drills(4))
    assert g["kept"] == "step_16" and g["mean_reward"] == {"own": 0.1, "step_16": 0.5, "step_8": 0.4, "init": 0.3}
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["score"] == 0.5
    assert json.loads((out / "adapter_own" / "adapter_config.json").read_text())["score"] == 0.1
    assert (out / "kept" / "step_00016" / "adapter").is_dir()  # copied, not moved: a rerun decides again


def test_a_tie_goes_to_the_most_trained_candidate(tmp_path, scored):
    from trace_agents.training.guard import keep_better

    init, out = _adapter(tmp_path / "_shared" / "adapter", 0.5), tmp_path / "cap"
    _adapter(out / "adapter", 0.2)
    _kept(out, 8, 0.5)
    _kept(out, 16, 0.5)
    assert keep_better("tiny-random", out, init, _drills(4))["kept"] == "step_16"


def test_the_target_probe_adds_its_score_on_train_tasks_and_can_overrule_the_drills(tmp_path, scored):
    from trace_agents.training.guard import Probe, in_words, keep_better

    init, out = _adapter(tmp_path / "_shared" / "adapter", 0.5, 0.3), tmp_path / "cap"
    _adapter(out / "adapter", 0.6, 0.1)  # best on the drills, but its replies on the target broke
    _kept(out, 8, 0.4, 0.5)
    probes = {**_drills(4), "target": Probe(ShortEnv, "train", 3, 1, 192)}
    g = keep_better("tiny-random", out, init, probes)
    assert g["kept"] == "step_8" and g["mean_reward"] == pytest.approx({"own": 0.7, "step_8": 0.9, "init": 0.8})
    assert g["probes"]["target"] == {"split": "train", "seeds": 3, "mean_reward": {"own": 0.1, "step_8": 0.5, "init": 0.3}}
    assert scored == [ShortEnv().seeds("test")[:4]] * 3 + [ShortEnv().seeds("train")[:3]] * 3  # never the target's test split
    assert in_words(g) == ("4 test seeds of drills + 3 train seeds of target",
                           "last step 0.600+0.100, step_8 0.400+0.500, shared 0.500+0.300", "step_8")


def test_without_a_start_adapter_the_guard_chooses_among_the_trained_steps(tmp_path, scored):
    from trace_agents.training.guard import keep_better

    out = tmp_path / "grpo"  # the GRPO baseline starts from the bare model: nothing to fall back to
    _adapter(out / "adapter", 0.2)
    _kept(out, 8, 0.3)
    g = keep_better("tiny-random", out, None, _drills(4))
    assert g["kept"] == "step_8" and list(g["mean_reward"]) == ["own", "step_8"] and g["init"] is None


def test_a_probe_with_no_seeds_names_the_option_to_switch_off():
    from trace_agents.training.guard import Probe

    class NoTrain(ShortEnv):
        def seeds(self, split):
            return [] if split == "train" else super().seeds(split)

    assert Probe(NoTrain, "test", 4, 1, 8).seeds() == ShortEnv().seeds("test")[:4]
    with pytest.raises(ValueError, match="toy/short has no train seeds .* guard_target: 0"):
        Probe(NoTrain, "train", 4, 1, 8).seeds()


def test_a_guard_file_from_before_probes_still_reads():
    from trace_agents.training.guard import in_words

    old = {"seeds": 64, "split": "test", "mean_reward": {"own": 0.41, "init": 0.3}, "kept": "own", "init": "_shared"}
    assert in_words(old) == ("64 test seeds of drills", "last step 0.410, shared 0.300", "last step")


def test_the_own_step_options_need_a_shared_adapter():
    from pydantic import ValidationError

    from trace_agents.pipeline import TrainingCfg

    with pytest.raises(ValidationError, match="set shared_steps > 0, or guard_seeds: 0"):
        TrainingCfg(guard_seeds=8)
    with pytest.raises(ValidationError, match="set shared_steps > 0, or carry_optimizer: false"):
        TrainingCfg(carry_optimizer=True)
    with pytest.raises(ValidationError, match="set guard_seeds > 0, or guard_every: 0"):
        TrainingCfg(shared_steps=4, guard_every=8)
    with pytest.raises(ValidationError, match="set guard_seeds > 0, or guard_target: 0"):
        TrainingCfg(shared_steps=4, guard_target=8)
    assert "guard_seeds" not in str(TrainingCfg(shared_steps=4))  # old run folders keep their fingerprints
    assert "guard_every" not in str(TrainingCfg(shared_steps=4, guard_seeds=8))
    assert "guard_target" not in str(TrainingCfg(shared_steps=4, guard_seeds=8))
    assert "carry_optimizer" not in str(TrainingCfg(shared_steps=4))
