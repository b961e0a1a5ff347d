"""Several environments as one (`--env A+B`), to train one adapter on several capability
environments out of one rollout budget.

Why: on bfcl/multiple one adapter trained on both target drills with 384 rollouts solved 51% of
the held-out tasks, against 38% for the two single-drill adapters composed and 46% for plain GRPO
on the target with the same rollouts (39% vs 35% with another seed; docs/results.md, "Session of
2026-12-04"): the drills' fixes overlap, so splitting the budget across adapters wastes it.

Seed s is a task of `envs[s % n]` (the seeds of a split are those of each env with its own residue),
so a GRPO group, which shares one seed, stays within one environment, and a seed's task never moves.
"""

from __future__ import annotations

from typing import Any, Callable

from trace_agents.envs.base import Env, Split
from trace_agents.types import Message


class MixtureEnv:
    def __init__(self, makers: list[Callable[[], Env]]):
        if len(makers) < 2:
            raise ValueError("a mixture needs at least two environments (`--env A+B`)")
        self.envs = [make() for make in makers]
        self.name = "+".join(e.name for e in self.envs)
        self.current = self.envs[0]

    def seeds(self, split: Split) -> list[int]:
        n = len(self.envs)
        return sorted(s for i, env in enumerate(self.envs) for s in env.seeds(split) if s % n == i)

    def reset(self, seed: int) -> list[Message]:
        self.current = self.envs[seed % len(self.envs)]
        return self.current.reset(seed)

    def step(self, message: Message):
        return self.current.step(message)

    def verdict(self):
        return self.current.verdict()

    def __getattr__(self, key: str) -> Any:
        """Everything else (task_id, tools, hint, reference, ...) is the current episode's env's."""
        if key.startswith("__") or key in ("envs", "current"):
            raise AttributeError(key)
        return getattr(self.current, key)


class Reseeded:
    """`env` with the seed-first ranges of the built-in families (train 0..99,999, test 1,000,000..), seed s
    being `env`'s (s mod n)-th seed of that split: so an env with few seeds of its own numbering (a BFCL
    category's task numbers) can join a MixtureEnv, whose residue classes would otherwise give it only 1/n of
    its tasks (with n coprime to its seed count every task stays reachable)."""

    def __init__(self, make_env: Callable[[], Env]):
        from trace_agents.synthesis.families import TEST_SEEDS, TRAIN_SEEDS

        self.env = make_env()
        self.name = self.env.name
        self._ranges = {"train": TRAIN_SEEDS, "test": TEST_SEEDS}
        self._own = {split: self.env.seeds(split) for split in ("train", "test")}
        if not self._own["train"]:
            raise ValueError(f"{self.name} has no train seeds to reseed")

    def seeds(self, split: Split) -> list[int]:
        return list(self._ranges[split]) if self._own.get(split) else []

    def reset(self, seed: int) -> list[Message]:
        split = "train" if seed in self._ranges["train"] else "test"
        own = self._own[split]
        return self.env.reset(own[seed % len(own)])

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__") or key in ("env", "_ranges", "_own"):
            raise AttributeError(key)
        return getattr(self.env, key)
