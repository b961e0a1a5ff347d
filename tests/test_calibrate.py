import json
import random
import subprocess
import sys

import pytest

from trace_agents.agent.policy import Reply
from trace_agents.envs.base import Step
from trace_agents.synthesis.calibrate import hint_effect, measure, pass_at_k, tune
from trace_agents.types import Message, Verdict


def test_pass_at_k_hand_computed():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 1, 4) == pytest.approx(1 - 1 / 5)  # 1 - C(4,4)/C(5,4)
    assert pass_at_k(4, 0, 2) == 0 and pass_at_k(4, 4, 1) == 1


class CoinEnv:
    """Success iff the policy's number r < (1 - difficulty)^3: harder settings succeed less."""

    name = "toy/coin"
    tools: list = []

    def __init__(self, difficulty: float = 0.5):
        self.difficulty = difficulty

    def seeds(self, split):
        return list(range(50))

    def reset(self, seed):
        self.task_id, self.r = f"coin_{seed}", 1.0
        return [Message(role="user", content="go")]

    def step(self, message):
        self.r = float(message.content)
        return Step(done=True)

    def verdict(self):
        ok = self.r < (1 - self.difficulty) ** 3
        return Verdict(reward=float(ok), success=ok)


class RandomNumbers:
    name = "numbers"

    def __init__(self):
        self.rng = random.Random(0)

    def act(self, requests, sampling):
        return [Reply(Message(role="assistant", content=str(self.rng.random())), "") for _ in requests]


def test_measure_and_tune_move_difficulty_into_the_band():
    cal = measure(lambda: CoinEnv(0.0), RandomNumbers(), seeds=10, samples=4)
    assert cal.success_rate == 1 and cal.degenerate_fraction == 1 and not cal.ok
    chosen, history = tune(CoinEnv, RandomNumbers(), rounds=4, seeds=25, samples=4)
    # d=0.5: P(success) = 0.125 -> too hard -> d=0.25: P = 0.42 -> in band, stop
    assert [h.difficulty for h in history] == [0.5, 0.25] and chosen == 0.25
    assert 0.2 <= history[-1].success_rate <= 0.6


class HintedCoinEnv(CoinEnv):
    def hint(self):
        return "say a small number"


class ReadsTheHint:
    """Answers 0 (success) when the prompt carries the hint, else 1 (failure); `obey=False` the reverse."""

    name = "reads-hint"

    def __init__(self, obey: bool = True):
        self.obey = obey

    def act(self, requests, sampling):
        hinted = ["Hint: say a small number" in r.messages[0].content for r in requests]
        return [Reply(Message(role="assistant", content="0" if h == self.obey else "1"), "") for h in hinted]


def test_hint_effect_compares_the_same_seeds_with_and_without_the_hint():
    helped = hint_effect(lambda: HintedCoinEnv(0.0), ReadsTheHint(), seeds=5, samples=2)
    assert helped["without"]["success_rate"] == 0 and helped["with"]["success_rate"] == 1
    assert helped["with"]["hinted"] and not helped["without"]["hinted"] and helped["helps"]
    hurt = hint_effect(lambda: HintedCoinEnv(0.0), ReadsTheHint(obey=False), seeds=5, samples=2)
    assert hurt["success_change"] == -1 and not hurt["helps"]
    with pytest.raises(ValueError, match="no hint"):
        hint_effect(lambda: CoinEnv(0.0), ReadsTheHint(), seeds=5, samples=2)


def test_synthesize_writes_valid_builtin_modules(tmp_path):
    caps = {"thresholds": {}, "capabilities": [
        {"name": "function_selection", "selected": True}, {"name": "parallel_call_completeness", "selected": True},
        {"name": "made_up_skill", "selected": True}, {"name": "tool_call_format", "selected": False}]}
    (tmp_path / "capabilities.json").write_text(json.dumps(caps))
    p = subprocess.run([sys.executable, "-m", "trace_agents.cli", "synthesize", "--capabilities", str(tmp_path / "capabilities.json"),
                        "--target", "bfcl/multiple", "--out", str(tmp_path / "envs")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    summary = json.loads((tmp_path / "envs" / "synthesis.json").read_text())["environments"]
    assert summary["function_selection"]["valid"] and summary["parallel_call_completeness"]["valid"]
    assert "--llm" in summary["made_up_skill"]["error"] and "tool_call_format" not in summary
    report = json.loads((tmp_path / "envs" / "function_selection.validation.json").read_text())
    assert report["ok"] and all(c["ok"] for c in report["checks"])


def test_synthesize_reuses_a_calibration_with_the_same_key(tmp_path, monkeypatch):
    import trace_agents.synthesis.calibrate as calibrate
    import trace_agents.synthesis.pipeline as pipeline

    tuned = []

    def fake_tune(make_env, policy, *, rounds, seeds, samples):  # the rollouts are what reuse saves
        tuned.append((make_env.func.__name__, seeds))  # the family class, its pinned arguments bound
        cal = calibrate.Calibration(0.25, seeds, samples, mean_reward=0.4, success_rate=0.4, pass_at_k=0.5,
                                    degenerate_fraction=0.0, in_band={k: True for k in calibrate.BANDS})
        return 0.25, [cal]

    monkeypatch.setattr(calibrate, "tune", fake_tune)
    monkeypatch.setattr(pipeline, "_policy", lambda model: object())
    caps, out = tmp_path / "capabilities.json", tmp_path / "envs"
    caps.write_text(json.dumps({"capabilities": [{"name": "no_redundant_calls", "selected": True}]}))

    def synthesize(seeds: int, model: str = "tiny") -> dict:
        summary = pipeline.synthesize_all(caps, "bfcl/simple", out, model=model, seeds=seeds, samples=2, rounds=2)
        return summary["environments"]["no_redundant_calls"]

    first = synthesize(3)
    assert tuned == [("NoRedundantCallsEnv", 3)] and first["calibration_reused"] is False and first["valid"]
    saved = json.loads((out / "no_redundant_calls.calibration.json").read_text())
    assert saved["key"] == {"model": "tiny", "family": "trace_agents.synthesis.families.NoRedundantCallsEnv",
                            "seeds": 3, "samples": 2, "rounds": 2}

    again = synthesize(3)  # same key: read back, no rollouts
    assert len(tuned) == 1 and again["calibration_reused"] is True and again["calibration"] == first["calibration"]
    assert "difficulty: float = 0.25" in (out / "no_redundant_calls.py").read_text()

    assert not synthesize(5)["calibration_reused"] and tuned[-1] == ("NoRedundantCallsEnv", 5)  # other seeds
    assert not synthesize(5, model="other")["calibration_reused"] and len(tuned) == 3  # other model
    (out / "no_redundant_calls.calibration.json").write_text("{truncated")  # a crash mid-write: recalibrate
    assert not synthesize(5, model="other")["calibration_reused"] and len(tuned) == 4
