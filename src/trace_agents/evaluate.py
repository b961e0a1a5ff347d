"""Scoring a set of trajectories: success rate with a 95% Wilson interval, mean reward, mean tool
calls, failure kinds and per-task figures (the `evaluate` output of DESIGN.md §9)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

from trace_agents.types import Trajectory


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion (sane at 0% and 100%, unlike Wald)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def summarize(trajectories: list[Trajectory], *, env: str, model: str, split: str) -> dict[str, Any]:
    n = len(trajectories)
    successes = sum(t.success for t in trajectories)
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        by_task[t.task_id].append(t)
    per_task = [
        {
            "task_id": task_id,
            "seed": ts[0].seed,
            "samples": len(ts),
            "success_rate": sum(t.success for t in ts) / len(ts),
            "mean_reward": sum(t.reward for t in ts) / len(ts),
            "mean_tool_calls": sum(t.tool_calls for t in ts) / len(ts),
            "failures": sorted({str(t.info.get("failure")) for t in ts if not t.success}),
        }
        for task_id, ts in by_task.items()
    ]
    lo, hi = wilson_interval(successes, n)
    failures = Counter(str(t.info.get("failure")) for t in trajectories if not t.success)
    return {
        "env": env,
        "model": model,
        "split": split,
        "n": n,
        "tasks": len(by_task),
        "success_rate": successes / n if n else 0.0,
        "mean_reward": sum(t.reward for t in trajectories) / n if n else 0.0,
        "mean_tool_calls": sum(t.tool_calls for t in trajectories) / n if n else 0.0,
        "ci95": [lo, hi],
        "failures": dict(failures.most_common()),
        "format_error_rate": sum(bool(t.info.get("format_errors")) for t in trajectories) / n if n else 0.0,
        "per_task": per_task,
    }
