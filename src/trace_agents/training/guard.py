"""Keep the best of a capability adapter, its kept earlier steps and the adapter it started from (`training.guard_seeds`).

Why: nothing in GRPO stops an adapter from training into a worse policy. On seed 3 of the 1,536-rollout
table (README) the function_selection adapter's 16 own steps after the shared adapter took it from 32% to
15% of the held-out test tasks (train reward 0 in 12 of the 16 steps) and the composed model fell to 23%.
A few greedy episodes on held-out seeds of the adapter's own environment tell the two apart. A target
drill's test seeds draw only the target's train tasks, so the target's test split is never looked at.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from trace_agents.envs.base import Env
from trace_agents.types import write_json

GUARD_FILE = "guard.json"
_LABELS = {"own": "last step", "init": "shared"}  # and step_N for a kept step


def in_words(report: dict) -> tuple[str, str]:
    """A guard.json's scores and kept candidate for people: ("last step 0.410, step_16 0.330, shared 0.300", "step_16")."""
    scores = ", ".join(f"{_LABELS.get(k, k)} {v:.3f}" for k, v in report["mean_reward"].items())
    return scores, _LABELS.get(report["kept"], report["kept"])


def mean_reward(make_env: Callable[[], Env], model: str, adapter: Path, seeds: list[int], *, max_steps: int,
                max_new_tokens: int, dtype: str = "float32") -> float:
    """Mean reward of greedy episodes of `model` + `adapter` on `seeds`."""
    from trace_agents.agent.policy import Sampling, make_policy
    from trace_agents.agent.rollout import rollout

    policy = make_policy(model, adapter=str(adapter), dtype=dtype)
    trajs = rollout(make_env, policy, seeds, max_steps=max_steps, sampling=Sampling(max_new_tokens=max_new_tokens))
    return sum(t.reward for t in trajs) / len(trajs)


def keep_better(make_env: Callable[[], Env], model: str, out: Path, init: Path, n_seeds: int, *, max_steps: int,
                max_new_tokens: int, dtype: str = "float32") -> dict:
    """Score `out/adapter`, the weights its run kept on the way (`out/kept/step_N`, GRPOConfig.keep_every)
    and `init` on the first `n_seeds` test seeds of `make_env()`; the best becomes `out/adapter` (the
    trained one is kept as `out/adapter_own`). A tie goes to the most trained: own, then the latest kept
    step, then init. Writes and returns `out/guard.json`.

    Why the kept steps: 16 more own steps of a function_selection expert added 3 and 6 points on the dev
    split on two seeds and collapsed it from 50% to 15% on a third (README, session 25); the drill score
    moved the same way all three times. Within the same budget (32 shared + 32 own steps, guard at 16 and 32;
    README, session 26) it did worse than 64 + 16 on two seeds, and on one its drill score rose while the
    composed model's invalid-JSON replies on the target went from 4 to 21: the drill seeds cannot see that.

    Safe to rerun after a crash: training resumed on a finished folder restores `out/adapter` from its
    last checkpoint, and the guard decides again on the same greedy episodes."""
    from trace_agents.training.grpo import KEPT, kept_weights

    seeds = make_env().seeds("test")[:n_seeds]
    if not seeds:
        raise ValueError(f"{make_env().name} has no test seeds to guard an adapter with; set training.guard_seeds: 0")
    adapter = out / "adapter"
    steps = sorted(kept_weights(out / KEPT).items(), reverse=True)
    candidates = {"own": adapter, **{f"step_{n}": folder / "adapter" for n, folder in steps}, "init": init}
    score = {which: mean_reward(make_env, model, path, seeds, max_steps=max_steps, max_new_tokens=max_new_tokens,
                                dtype=dtype) for which, path in candidates.items()}
    kept = max(candidates, key=score.__getitem__)  # the first best in order of preference
    if kept != "own":
        own = out / "adapter_own"
        shutil.rmtree(own, ignore_errors=True)
        adapter.rename(own)
        shutil.copytree(candidates[kept], adapter)
    # the init adapter by its run folder's name (`_shared`): a stage folder is renamed when it finishes
    report = {"seeds": len(seeds), "split": "test", "mean_reward": score, "kept": kept, "init": init.parent.name}
    write_json(out / GUARD_FILE, report)
    return report
