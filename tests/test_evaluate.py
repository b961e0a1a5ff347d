"""Evaluation summaries against hand-computed figures."""

import pytest

from trace_agents.evaluate import paired_bootstrap, summarize, wilson_interval
from trace_agents.types import Trajectory


def traj(task: str, success: bool, calls: int, failure: str | None = None) -> Trajectory:
    return Trajectory(id=f"{task}:{calls}", env="e", task_id=task, seed=0, messages=[], reward=float(success),
                      success=success, tool_calls=calls, info={"failure": failure})


def test_summary_counts_calls_of_all_and_of_successful_rollouts():
    ts = [traj("a", True, 2), traj("a", False, 6, "wrong_value"), traj("b", True, 4), traj("b", False, 0, "no_tool_call")]
    s = summarize(ts, env="e", model="m", split="test")
    assert s["success_rate"] == 0.5 and s["tasks"] == 2
    assert s["mean_tool_calls"] == 3.0  # (2 + 6 + 4 + 0) / 4
    assert s["mean_tool_calls_success"] == 3.0  # (2 + 4) / 2
    assert s["failures"] == {"wrong_value": 1, "no_tool_call": 1}
    assert [t["success_rate"] for t in s["per_task"]] == [0.5, 0.5]
    assert summarize([traj("a", False, 3)], env="e", model="m", split="test")["mean_tool_calls_success"] is None


def test_wilson_interval_known_values():
    lo, hi = wilson_interval(34, 100)
    assert lo == pytest.approx(0.2546, abs=1e-3) and hi == pytest.approx(0.4370, abs=1e-3)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0


def test_paired_bootstrap_separates_real_and_null_differences():
    same = [1.0, 0.0] * 50
    assert paired_bootstrap(same, same) == 1.0
    better = [1.0] * 60 + [0.0] * 40
    worse = [1.0] * 30 + [0.0] * 70
    assert paired_bootstrap(better, worse) < 0.001
    with pytest.raises(ValueError, match="same tasks"):
        paired_bootstrap([1.0], [1.0, 0.0])
