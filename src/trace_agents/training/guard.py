"""Keep the best of a trained adapter, its kept earlier steps and the adapter it started from (`training.guard_seeds`).

Why: nothing in GRPO stops an adapter from training into a worse policy. On seed 3 of the 1,536-rollout
table (docs/results.md) the function_selection adapter's 16 own steps after the shared adapter took it from 32% to
15% of the held-out test tasks (train reward 0 in 12 of the 16 steps) and the composed model fell to 23%.
A few greedy episodes on held-out seeds of the adapter's own environment tell the two apart. A target
drill's test seeds draw only the target's train tasks, and the target probe (`training.guard_target`)
reads the target's train split, so the target's test split is never looked at.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from trace_agents.envs.base import Env
from trace_agents.types import write_json

GUARD_FILE = "guard.json"
OWN = "adapter_own"  # the trained adapter, when the guard kept another candidate
_LABELS = {"own": "last step", "init": "shared"}  # and step_N for a kept step


@dataclass(frozen=True)
class Probe:
    """Greedy episodes a guard scores every candidate on: the first `n` seeds of `split` of an env.
    `env` is an env spec (`resolve_env`; picklable, for a background stage) or a factory."""

    env: str | Callable[[], Env]
    split: str
    n: int
    max_steps: int
    max_new_tokens: int

    def factory(self) -> Callable[[], Env]:
        from trace_agents.envs.base import resolve_env

        return resolve_env(self.env) if isinstance(self.env, str) else self.env

    def seeds(self) -> list[int]:
        env = self.factory()()
        seeds = env.seeds(self.split)[: self.n]
        if not seeds:
            raise ValueError(f"{env.name} has no {self.split} seeds to guard an adapter with; switch off the option that "
                             f"asked for them (training.guard_seeds: 0 for an env's test seeds, guard_target: 0 for the target's train tasks)")
        return seeds


def in_words(report: dict) -> tuple[str, str, str]:
    """A guard.json for people: what it scored on, each candidate's scores and the kept one, e.g.
    ("64 test seeds of drills + 32 train seeds of target", "last step 0.410+0.250, shared 0.300+0.312", "last step")."""
    probes = report.get("probes") or {"drills": {"split": report.get("split", "test"), "seeds": report["seeds"],
                                                 "mean_reward": report["mean_reward"]}}  # a guard.json of before probes
    on = " + ".join(f"{p['seeds']} {p['split']} seeds of {name}" for name, p in probes.items())
    scores = ", ".join(f"{_LABELS.get(k, k)} " + "+".join(f"{p['mean_reward'][k]:.3f}" for p in probes.values())
                       for k in report["mean_reward"])
    return on, scores, _LABELS.get(report["kept"], report["kept"])


def mean_reward(make_env: Callable[[], Env], model: str, adapter: Path, seeds: list[int], *, max_steps: int,
                max_new_tokens: int, dtype: str = "float32") -> float:
    """Mean reward of greedy episodes of `model` + `adapter` on `seeds`."""
    from trace_agents.agent.policy import Sampling, make_policy
    from trace_agents.agent.rollout import rollout

    policy = make_policy(model, adapter=str(adapter), dtype=dtype)
    trajs = rollout(make_env, policy, seeds, max_steps=max_steps, sampling=Sampling(max_new_tokens=max_new_tokens))
    return sum(t.reward for t in trajs) / len(trajs)


def keep_better(model: str, out: Path, init: Path | None, probes: dict[str, Probe], dtype: str = "float32") -> dict:
    """Score `out/adapter`, the weights its run kept on the way (`out/kept/step_N`, GRPOConfig.keep_every)
    and `init` (if any) on every probe; the best sum of mean rewards becomes `out/adapter` (the trained
    one is kept as `out/adapter_own`). A tie goes to the most trained: own, then the latest kept step,
    then init. Writes and returns `out/guard.json`.

    Why the kept steps: 16 more own steps of a function_selection expert added 3 and 6 points on the dev
    split on two seeds and collapsed it from 50% to 15% on a third (docs/results.md, session 25); the drill score
    moved the same way all three times. Within the same budget (32 shared + 32 own steps, guard at 16 and 32;
    docs/results.md, session 26) it did worse than 64 + 16 on two seeds, and on one its drill score rose while the
    composed model's invalid-JSON replies on the target went from 4 to 21: the drill seeds cannot see that,
    hence a probe on the target's train tasks at the evaluation's token budget (`training.guard_target`). On
    its first seed (docs/results.md, session 27) that probe agreed with the drills: it changed no decision.

    Safe to rerun after a crash: training resumed on a finished folder restores `out/adapter` from its
    last checkpoint, and the guard decides again on the same greedy episodes."""
    from trace_agents.training.grpo import KEPT, kept_weights

    seeds = {name: p.seeds() for name, p in probes.items()}
    adapter = out / "adapter"
    steps = sorted(kept_weights(out / KEPT).items(), reverse=True)
    candidates = {"own": adapter, **{f"step_{n}": folder / "adapter" for n, folder in steps}}
    if init is not None:
        candidates["init"] = init
    by_probe = {name: {which: mean_reward(p.factory(), model, path, seeds[name], max_steps=p.max_steps,
                                          max_new_tokens=p.max_new_tokens, dtype=dtype) for which, path in candidates.items()}
                for name, p in probes.items()}
    score = {which: sum(means[which] for means in by_probe.values()) for which in candidates}
    kept = max(candidates, key=score.__getitem__)  # the first best in order of preference
    if kept != "own":
        own = out / OWN
        shutil.rmtree(own, ignore_errors=True)
        adapter.rename(own)
        shutil.copytree(candidates[kept], adapter)
    report = {"probes": {name: {"split": p.split, "seeds": len(seeds[name]), "mean_reward": by_probe[name]}
                         for name, p in probes.items()},
              "mean_reward": score, "kept": kept,
              # the init adapter by its run folder's name (`_shared`): a stage folder is renamed when it finishes
              "init": init.parent.name if init is not None else None}
    write_json(out / GUARD_FILE, report)
    return report
