"""TRACE efficiency reward (DESIGN.md §4) against hand-computed epochs."""

import json
import math

import pytest

from trace_agents.training.rewards import EfficiencyReward


def test_warmup_then_tightening_threshold_mode():
    r = EfficiencyReward()  # r_pos=1, r_neg=0, lam=0.05, warmup_epochs=1
    # epoch 0 (warm-up): correct at 5, 3, 4 calls; l = inf so every correct rollout gets r_pos.
    assert [r.score("a", True, t) for t in (5, 3, 4)] == [1.0, 1.0, 1.0]
    r.end_epoch()
    assert r.threshold("a") == math.inf  # epoch 0 < warmup_epochs: no tightening
    # epoch 1: correct at 4 and 2, a wrong answer at 1 call (wrong rollouts never set the bar).
    assert r.score("a", True, 4) == 1.0 and r.score("a", True, 2) == 1.0
    assert r.score("a", False, 1) == 0.0
    r.end_epoch()
    assert r.threshold("a") == 2  # min(inf, 2)
    # epoch 2: 5 calls → 1 − 0.05·(5 − 2) = 0.85; at or under the bar → 1.0; wrong → r_neg.
    assert r.score("a", True, 5) == pytest.approx(0.85)
    assert r.score("a", True, 2) == 1.0 and r.score("a", True, 1) == 1.0
    assert r.score("a", False, 9) == 0.0
    r.end_epoch()
    assert r.threshold("a") == 1  # min(2, 1)
    # epoch 3: only wrong answers → the threshold stays; an untouched task stays inf.
    r.score("a", False, 0)
    r.end_epoch()
    assert r.threshold("a") == 1 and r.threshold("other") == math.inf
    assert r.epoch == 4


def test_floor():
    r = EfficiencyReward(warmup_epochs=0, floor=3)
    r.score("a", True, 1)
    r.end_epoch()
    assert r.threshold("a") == 3  # max(min(inf, 1), 3)
    assert r.score("a", True, 5) == pytest.approx(1 - 0.05 * 2)  # 0.9


def test_max_drop_limits_each_tightening():
    r = EfficiencyReward(warmup_epochs=0, max_drop=3)
    expected = [10, 7, 4, 2]  # first from inf is unlimited; then max(2, 10−3), max(2, 7−3), max(2, 1)
    for best, want in zip([10, 2, 2, 2], expected):
        r.score("a", True, best + 1)
        r.score("a", True, best)
        r.end_epoch()
        assert r.threshold("a") == want


def test_global_scope_shares_one_threshold():
    g = EfficiencyReward(warmup_epochs=0, scope="global")
    t = EfficiencyReward(warmup_epochs=0, scope="task")
    for r in (g, t):
        r.score("a", True, 6)
        r.score("b", True, 3)
        r.end_epoch()
    assert g.threshold("a") == g.threshold("b") == g.threshold("never-seen") == 3
    assert g.score("a", True, 6) == pytest.approx(0.85)  # 1 − 0.05·(6 − 3)
    assert (t.threshold("a"), t.threshold("b"), t.threshold("c")) == (6, 3, math.inf)
    assert t.score("a", True, 6) == 1.0


def test_guard_against_reward_hacking():
    # worst correct = 1 − 0.1·10 = 0 is not strictly above r_neg = 0
    with pytest.raises(ValueError) as e:
        EfficiencyReward(lam=0.1, max_calls=10)
    for field in ("r_pos", "lam", "max_calls", "r_neg"):
        assert field in str(e.value)
    with pytest.raises(ValueError, match="r_neg"):
        EfficiencyReward(r_neg=0.5)  # 1 − 0.05·16 = 0.2 < 0.5
    with pytest.raises(ValueError, match="hypereyes"):
        EfficiencyReward(mode="hypereyes", lam=0.0, r_neg=0.95)  # 1 − 0.10 ≤ 0.95
    EfficiencyReward(r_neg=-1.0, lam=0.1, max_calls=10)  # 0 > −1: fine


@pytest.mark.parametrize("kwargs, field", [
    ({"mode": "fast"}, "mode"), ({"scope": "batch"}, "scope"), ({"lam": -0.1}, "lam"),
    ({"max_calls": 0}, "max_calls"), ({"warmup_epochs": -1}, "warmup_epochs"),
    ({"floor": -1}, "floor"), ({"max_drop": 0}, "max_drop"),
])
def test_validation_names_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        EfficiencyReward(**kwargs)


def test_clamping_above_max_calls():
    assert EfficiencyReward(mode="per_call").score("a", True, 100) == pytest.approx(1 - 0.05 * 16)
    r = EfficiencyReward(warmup_epochs=0)
    r.score("a", True, 100)  # recorded as 16
    r.end_epoch()
    assert r.threshold("a") == 16
    r.score("b", True, 2)
    r.end_epoch()
    assert r.score("b", True, 100) == pytest.approx(1 - 0.05 * 14)  # clamp to 16, bar 2
    with pytest.raises(ValueError, match="tool_calls"):
        r.score("a", True, -1)


def test_per_call_mode_ignores_threshold():
    r = EfficiencyReward(mode="per_call", warmup_epochs=0)
    assert r.score("a", True, 3) == pytest.approx(0.85)
    assert r.score("a", True, 0) == 1.0 and r.score("a", False, 3) == 0.0
    r.end_epoch()
    assert r.threshold("a") == 0  # still tracked (and saved) …
    assert r.score("a", True, 3) == pytest.approx(0.85)  # … but not in the reward


def test_hypereyes_group_reference_ranks_and_penalties():
    r = EfficiencyReward(mode="hypereyes")
    # No threshold yet → reference l = group's fewest correct calls = 2; wrong window [2, 3].
    correct = [True, True, True, True, False, False, False]
    calls = [2, 2, 3, 5, 1, 3, 4]
    width = [1, 3, 1, 1, 1, 1, 1]
    # within: (2,1) rank 0 → +0.20, (2,3) rank 1 → +0.05; over: (3,1) → −0.02, (5,1) → −0.10;
    # wrong: 1 < 2 → −0.1, 3 in [2, 3] → 0, 4 > 3 → −0.1
    want = [1.20, 1.05, 0.98, 0.90, -0.1, 0.0, -0.1]
    assert r.score_group("a", correct, calls, parallel_width=width) == pytest.approx(want)


def test_hypereyes_with_threshold_reference():
    r = EfficiencyReward(mode="hypereyes", warmup_epochs=0)
    r.score_group("a", [True, True, False], [3, 7, 1])
    r.end_epoch()
    assert r.threshold("a") == 3
    # within (≤3): 1, 2, 3 → three ranks: 0.20, 0.125, 0.05; over: 4 → −0.02, 6 → −0.10;
    # wrong: 0 < 3 → −0.1, 4 in [3, 4.5] → 0, 5 > 4.5 → −0.1
    got = r.score_group("a", [True] * 5 + [False] * 3, [1, 2, 3, 4, 6, 0, 4, 5])
    assert got == pytest.approx([1.20, 1.125, 1.05, 0.98, 0.90, -0.1, 0.0, -0.1])


def test_hypereyes_zero_calls_and_no_reference():
    r = EfficiencyReward(mode="hypereyes", warmup_epochs=0)
    # A 0-call correct answer gets no bonus and is not the reference (l = 4, not 0).
    assert r.score_group("a", [True, True], [0, 4]) == pytest.approx([1.0, 1.2])
    r.end_epoch()
    assert r.threshold("a") == 4
    # All wrong and no reference at all → r_neg, no window penalty.
    assert r.score_group("b", [False, False], [0, 9]) == [0.0, 0.0]
    assert r.score("c", True, 3) == pytest.approx(1.2)  # a group of one is its own best


def test_state_dict_round_trip():
    def drive(r, epochs):
        out = []
        for e in range(epochs):
            out += r.score_group("a", [True, True, False], [6 - e, 8, 1], parallel_width=[1, 2, 1])
            out.append(r.score("b", e % 2 == 0, 5 - e))
            r.end_epoch()
        return out

    for mode in ("threshold", "per_call", "hypereyes"):
        r = EfficiencyReward(mode=mode, warmup_epochs=1, max_drop=1, floor=1, max_calls=10)
        drive(r, 3)
        r.score("a", True, 2)  # a record of the unfinished epoch must survive too
        state = json.loads(json.dumps(r.state_dict()))
        clone = EfficiencyReward()
        clone.load_state_dict(state)
        assert clone.state_dict() == r.state_dict() and clone.epoch == 3
        assert drive(clone, 3) == drive(r, 3)
        assert clone.threshold("a") == r.threshold("a") and clone.state_dict() == r.state_dict()
    # inf may arrive encoded as null or "inf"
    state["thresholds"] = {"a": None, "b": "inf", "c": 2}
    clone.load_state_dict(state)
    assert (clone.threshold("a"), clone.threshold("b"), clone.threshold("c")) == (math.inf, math.inf, 2)


def test_trl_call_signature_groups_by_task():
    r = EfficiencyReward(mode="hypereyes")
    ref = EfficiencyReward(mode="hypereyes")
    assert r.__name__ == "trace_efficiency"
    kw = dict(task_id=["a", "b", "a", "b"], correct=[True, True, True, False],
              tool_calls=[2, 1, 4, 1], trainer_state=object())  # extra TRL kwargs are ignored
    got = r(prompts=["p"] * 4, completions=["c"] * 4, **kw)
    want_a = ref.score_group("a", [True, True], [2, 4])
    want_b = ref.score_group("b", [True, False], [1, 1])
    assert got == [want_a[0], want_b[0], want_a[1], want_b[1]]
    assert EfficiencyReward()(completions=["x"], task_id=[7], correct=[1], tool_calls=[3]) == [1.0]
    with pytest.raises(ValueError, match="lengths"):
        r.score_group("a", [True], [1, 2])
