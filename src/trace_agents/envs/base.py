"""The Env protocol (Gymnasium-style, seed first) and how CLI names resolve to environments.

One Env instance is one episode at a time: `reset(seed)` builds the task for that seed and returns
the opening messages; `step(assistant_message)` returns what the environment says back (tool results,
the next user turn) and whether the episode is over; `verdict()` scores the finished episode by
algorithm. `seeds(split)` lists the seeds of a split, so train and test tasks never mix.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Protocol, runtime_checkable

from trace_agents.types import Message, Verdict

Split = Literal["train", "test"]
SPLITS: tuple[str, ...] = ("train", "test")


@dataclass
class Step:
    messages: list[Message] = field(default_factory=list)
    done: bool = False


@runtime_checkable
class Env(Protocol):
    name: str
    """Stable name written into trajectories, e.g. "bfcl/simple_python"."""
    task_id: str
    """Id of the current task (set by reset)."""
    tools: list[dict[str, Any]]
    """OpenAI-format tool schemas offered in the current task."""

    def seeds(self, split: Split) -> list[int]: ...

    def reset(self, seed: int) -> list[Message]: ...

    def step(self, message: Message) -> Step: ...

    def verdict(self) -> Verdict: ...


class EnvError(ValueError):
    """An environment name or module that cannot be used; the message says how to fix it."""


def hash_split(ids: list[str], test_fraction: float = 0.5, salt: str = "trace-agents/v1") -> dict[str, Split]:
    """Deterministic split by task id: ids ranked by sha256(salt + id); the first
    round(test_fraction * n) of that ranking are test. Exact sizes, stable across machines and runs,
    independent of file order."""
    ranked = sorted(ids, key=lambda i: hashlib.sha256((salt + i).encode()).hexdigest())
    n_test = round(test_fraction * len(ids))
    return {i: ("test" if k < n_test else "train") for k, i in enumerate(ranked)}


def resolve_env(spec: str, **kwargs: Any) -> Callable[[], Env]:
    """A zero-argument factory of fresh Env instances for a CLI `--env` value: a built-in target
    name (`bfcl/<category>`) or the path of a module holding one Env class; `A+B` is a mixture of
    several (envs/mixture.py: seed s is a task of the (s mod n)-th)."""
    if "+" in spec and not Path(spec).exists():
        from trace_agents.envs.mixture import MixtureEnv

        makers = [resolve_env(part, **kwargs) for part in spec.split("+")]
        return lambda: MixtureEnv(makers)
    if spec.startswith("bfcl/"):
        from trace_agents.envs.bfcl import CATEGORIES, BfclEnv

        category = spec.split("/", 1)[1]
        if category not in CATEGORIES:
            raise EnvError(f"unknown BFCL category {category!r}: choose one of {', '.join(CATEGORIES)}")
        return lambda: BfclEnv(category, **kwargs)
    if spec.startswith(("synthetic/", "target/")):
        from trace_agents.synthesis import builtin_families, target_families

        kind, capability = spec.split("/", 1)
        families = builtin_families() if kind == "synthetic" else target_families()
        if capability not in families:
            raise EnvError(f"unknown {kind} environment {capability!r}: choose one of {', '.join(sorted(families))}")
        return lambda: families[capability](**kwargs)
    path = Path(spec)
    if path.suffix == ".py" and path.exists():
        cls = _env_class_from_module(path)
        return lambda: cls(**kwargs)
    raise EnvError(
        f"unknown environment {spec!r}: give bfcl/simple_python, bfcl/multiple, bfcl/parallel, "
        "bfcl/multi_turn_base, synthetic/<capability>, target/<capability>, the path of an environment module (.py), "
        "or several of these joined by + (a mixture)"
    )


def _env_class_from_module(path: Path) -> type:
    mod_spec = importlib.util.spec_from_file_location(f"trace_env_{path.stem}", path)
    module = importlib.util.module_from_spec(mod_spec)  # type: ignore[arg-type]
    sys.modules[module.__name__] = module  # dataclasses and pickling look the module up by name
    mod_spec.loader.exec_module(module)  # type: ignore[union-attr]
    classes = [
        c for _, c in inspect.getmembers(module, inspect.isclass)
        if c.__module__ == module.__name__ and all(hasattr(c, a) for a in ("reset", "step", "verdict", "seeds"))
    ]
    if len(classes) != 1:
        raise EnvError(f"{path}: expected exactly one class with reset/step/verdict/seeds, found {len(classes)}")
    return classes[0]
