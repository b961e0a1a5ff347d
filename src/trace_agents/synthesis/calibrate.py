"""Calibration: is an environment's difficulty right for the base policy? GRPO learns only from groups
whose rewards differ, so tasks the base always solves or always fails teach nothing.

Roll the base policy on S train seeds x K samples; report mean reward, success rate, pass@k and the
share of degenerate groups (all rewards equal). Paper bands: mean reward 0.2-0.6, success 20-60%,
at most 20% degenerate groups. Built-in families take `difficulty` in [0, 1]; `tune` bisects it,
assuming success falls as difficulty rises, until the success band is met or the rounds run out.

`hint_effect` checks the other lever GRPO training pulls on an environment: the hint shown to a share of
each group while sampling (`hint_fraction`): `helps` says whether the base succeeds more often with it,
and each arm's degenerate share whether it spreads rewards within groups (what GRPO learns from). On the
bfcl/multiple target drills the warmed SmolLM2-135M succeeded less with it (function_selection 23% -> 11%)
yet training without it did no better over three seeds; the argument drill's groups got less degenerate
(69% -> 56%) at equal success (docs/results.md "No hint at all").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import comb
from typing import Any, Callable

from trace_agents.agent.policy import Policy, Sampling
from trace_agents.agent.rollout import rollout

# Temperature 1 as in training; Sampling's fixed seed makes measure and hint_effect's arms sample alike.
SAMPLING = Sampling(temperature=1.0, max_new_tokens=192)
BANDS = {"mean_reward": (0.2, 0.6), "success_rate": (0.2, 0.6), "degenerate_fraction": (0.0, 0.2)}


@dataclass
class Calibration:
    difficulty: float | None
    seeds: int
    samples: int
    mean_reward: float
    success_rate: float
    pass_at_k: float
    degenerate_fraction: float
    in_band: dict[str, bool]
    hinted: bool = False
    """Every sample saw the env's hint while sampling."""

    @property
    def ok(self) -> bool:
        return all(self.in_band.values())


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def measure(make_env: Callable, policy: Policy, *, seeds: int = 8, samples: int = 4, max_steps: int = 8,
            sampling: Sampling | None = None, difficulty: float | None = None, hinted: bool = False) -> Calibration:
    env = make_env()
    chosen = env.seeds("train")[:seeds]
    trajs = rollout(make_env, policy, chosen, samples=samples, max_steps=max_steps,
                    sampling=sampling or SAMPLING, hint_samples=samples if hinted else 0)
    groups = [trajs[i : i + samples] for i in range(0, len(trajs), samples)]
    rewards = [t.reward for t in trajs]
    stats = {
        "mean_reward": sum(rewards) / len(rewards),
        "success_rate": sum(t.success for t in trajs) / len(trajs),
        "degenerate_fraction": sum(len({t.reward for t in g}) == 1 for g in groups) / len(groups),
    }
    pak = sum(pass_at_k(len(g), sum(t.success for t in g), len(g)) for g in groups) / len(groups)
    in_band = {k: lo <= stats[k] <= hi for k, (lo, hi) in BANDS.items()}
    return Calibration(difficulty, len(chosen), samples, pass_at_k=pak, in_band=in_band, hinted=hinted, **stats)


def hint_effect(make_env: Callable, policy: Policy, *, seeds: int = 8, samples: int = 4, max_steps: int = 8,
                sampling: Sampling | None = None, difficulty: float | None = None,
                without: Calibration | None = None) -> dict[str, Any]:
    """The base policy on the same seeds without and with the env's hint (same sampling seed, so the two
    arms differ only by the hint): does showing it while training sample make successes likelier?
    `without`: the unhinted arm when already measured with the same arguments (a calibration's own)."""
    if not hasattr(make_env(), "hint"):
        raise ValueError("this environment has no hint() to check: give one, or train with hint_fraction 0")
    arm = dict(seeds=seeds, samples=samples, max_steps=max_steps, sampling=sampling, difficulty=difficulty)
    without = without or measure(make_env, policy, **arm)
    hinted = measure(make_env, policy, hinted=True, **arm)
    change = hinted.success_rate - without.success_rate
    return {"without": asdict(without), "with": asdict(hinted), "success_change": change, "helps": change > 0}


def tune(env_class: Callable[..., Any], policy: Policy, *, rounds: int = 4, **kwargs) -> tuple[float, list[Calibration]]:
    """Bisect `difficulty` towards the success band; returns the best difficulty and every round."""
    lo, hi, history = 0.0, 1.0, []
    d = 0.5
    for _ in range(rounds):
        cal = measure(lambda: env_class(difficulty=d), policy, difficulty=d, **kwargs)
        history.append(cal)
        low, high = BANDS["success_rate"]
        if cal.success_rate > high:
            lo = d  # too easy: harder
        elif cal.success_rate < low:
            hi = d  # too hard: easier
        else:
            break
        d = (lo + hi) / 2
    best = min(history, key=lambda c: _distance(c.success_rate))
    return best.difficulty if best.difficulty is not None else 0.5, history


def _distance(success: float) -> float:
    lo, hi = BANDS["success_rate"]
    return 0.0 if lo <= success <= hi else min(abs(success - lo), abs(success - hi))


def chosen_round(history: list[Calibration], chosen: float | None) -> Calibration:
    """The round measured at the chosen difficulty (the last one when none was chosen)."""
    return next((c for c in history if c.difficulty == chosen), history[-1])


def report(history: list[Calibration], chosen: float | None) -> dict:
    best = chosen_round(history, chosen)
    return {
        "bands": {k: list(v) for k, v in BANDS.items()},
        "difficulty": chosen,
        "result": {**asdict(best), "ok": best.ok},
        "rounds": [{**asdict(c), "ok": c.ok} for c in history],
        "why_not": None if best.ok else _why_not(best),
    }


def _why_not(c: Calibration) -> str:
    misses = [k for k, ok in c.in_band.items() if not ok]
    hint = ""
    if not c.in_band["success_rate"]:
        hint = " (the base policy solves almost everything even at the hardest setting)" if c.success_rate > 0.6 else \
               " (the base policy fails almost everything even at the easiest setting)"
    return f"out of band: {', '.join(misses)}{hint}"
