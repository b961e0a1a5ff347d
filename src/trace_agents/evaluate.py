"""Scoring a set of trajectories: success rate with a 95% Wilson interval, mean reward, mean tool
calls (of all rollouts and of the successful ones: what the efficiency reward should cut without
losing successes), failure kinds and per-task figures (the `evaluate` output of DESIGN.md §9)."""

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
        "mean_tool_calls_success": _mean([t.tool_calls for t in trajectories if t.success]),
        "ci95": [lo, hi],
        "failures": dict(failures.most_common()),
        "format_error_rate": sum(bool(t.info.get("format_errors")) for t in trajectories) / n if n else 0.0,
        "per_task": per_task,
    }


def _mean(xs: list[float]) -> float | None:
    """None for no values: "tool calls of successful rollouts" has no value without a success."""
    return sum(xs) / len(xs) if xs else None


def paired_bootstrap(a: list[float], b: list[float], resamples: int = 10_000, seed: int = 0) -> float:
    """Two-sided p-value that systems A and B differ in mean score on the same tasks (a[i], b[i] are
    their scores on task i). Paired bootstrap (Efron & Tibshirani 1993, §16.4; Koehn 2004): resample
    tasks with replacement and count how often the resampled difference, centred on the observed one,
    is at least as far from zero as the observed difference is."""
    import numpy as np

    if len(a) != len(b):
        raise ValueError(f"paired scores need the same tasks: {len(a)} vs {len(b)}")
    if not a:
        return 1.0
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    observed = d.mean()
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(resamples, len(d)))].mean(axis=1)
    return float(((np.abs(means - observed) >= abs(observed) - 1e-12).sum() + 1) / (resamples + 1))


def per_task_success(trajectories: list[Trajectory]) -> dict[str, float]:
    """Task id -> success rate over its samples (the unit the paired bootstrap resamples)."""
    by_task: dict[str, list[bool]] = defaultdict(list)
    for t in trajectories:
        by_task[t.task_id].append(t.success)
    return {k: sum(v) / len(v) for k, v in by_task.items()}


def compare(systems: dict[str, list[Trajectory]], pairs: list[tuple[str, str]]) -> dict[str, float | None]:
    """p-values of `A_vs_B` for each (A, B) pair present, on the tasks both systems ran."""
    return compare_rates({name: per_task_success(t) for name, t in systems.items()}, pairs)


def compare_rates(rates: dict[str, dict[str, float]], pairs: list[tuple[str, str]]) -> dict[str, float | None]:
    """`compare` on each system's success per task id."""
    out: dict[str, float | None] = {}
    for a, b in pairs:
        if a not in rates or b not in rates:
            out[f"{a}_vs_{b}"] = None
            continue
        tasks = sorted(rates[a].keys() & rates[b].keys())
        out[f"{a}_vs_{b}"] = paired_bootstrap([rates[a][t] for t in tasks], [rates[b][t] for t in tasks])
    return out


def routing_summary(policy, trajectories: list[Trajectory]) -> dict[str, Any]:
    """Routing statistics of a composed-model policy: the task router's share of episodes per adapter,
    or the token gates' share of tokens per expert and switches per trajectory (one more forward)."""
    if hasattr(policy, "share"):
        return {"episodes_share": policy.share()}
    from trace_agents.compose import routing_stats

    stats = routing_stats(policy.model, policy.tokenizer, trajectories)
    return {k: stats[k] for k in ("tokens", "share", "switches_per_trajectory")}
