"""`trace-agents synthesize`: one environment module per selected capability, validated, and (given a
model) calibrated. Built-in families are written as small wrapper modules pinned to the calibrated
difficulty; capabilities without one go to the LLM synthesiser when an endpoint is given.

Calibration (minutes of rollouts per family) is reused: `<cap>.calibration.json` records its key (model,
seeds, samples, rounds, family class), and a rerun with the same key reads it instead of rolling again,
so an interrupted or extended run only calibrates what is missing or changed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any, Callable

from trace_agents.envs.bfcl import BORROWABLE, SINGLE_TURN
from trace_agents.synthesis import builtin_families, target_families
from trace_agents.types import DataError, atomic_write_text, write_json

WRAPPER = '''"""{capability}: built-in environment {module}.{cls} at difficulty {difficulty}.

{doc}
"""

from {module} import {cls} as _Family


class Env(_Family):
    """{cls} pinned to the calibrated difficulty."""

    def __init__(self, difficulty: float = {difficulty}, **kwargs):
        super().__init__(difficulty=difficulty, **{{**{pinned!r}, **kwargs}})
'''
SOURCES = ("catalog", "target")


@dataclass(frozen=True)
class Drills:
    """Where the built-in environments draw their tasks and how they pay (the config's synthesis options).

    source "catalog": the families on the warm-up catalog; "target": where a capability has drills on
    the target's own train tasks (target_drills.py: function_selection, argument_value_grounding,
    parallel_call_completeness),
    those replace the catalog family. Drill-only options: `partial_credit` (failed replies earn that
    times their closeness), `fresh` (procedural variants of the train tasks: new values, sibling
    functions; variants.py), `extra` (more single-turn BFCL categories whose clean train tasks the
    drills draw too; `capability=category` gives a category to that capability's drill only).
    `like_target`: every single-turn family, catalog or drill, offers as many
    functions as the target's tasks do (a single-turn bfcl/ target only)."""

    source: str = "catalog"
    partial_credit: float = 0.0
    fresh: bool = False
    extra: tuple[str, ...] = ()
    like_target: bool = False

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise DataError(f"unknown environment source {self.source!r}; choose one of {', '.join(SOURCES)}")
        if not 0 <= self.partial_credit < 1:
            raise DataError(f"partial_credit must be in [0, 1) so a right answer pays most, got {self.partial_credit}")
        entries = list(zip(self.extra, self._entries()))
        if unknown := [c for c, (_, category) in entries if category not in BORROWABLE]:
            raise DataError(f"extra categories {unknown} are not single-turn BFCL categories; choose from {', '.join(BORROWABLE)}")
        drilled = target_families()
        if unknown := [c for c, (capability, _) in entries if capability is not None and capability not in drilled]:
            raise DataError(f"extra categories {unknown} name no capability with drills; write {' or '.join(f'{n}=CATEGORY' for n in drilled)}")
        if self.source != "target" and (self.partial_credit or self.fresh or self.extra):
            option = "partial_credit" if self.partial_credit else "fresh" if self.fresh else "extra"
            raise DataError(f"{option} applies to the drills on the target's train tasks; set source 'target' too")

    def _entries(self) -> list[tuple[str | None, str]]:
        """(capability, category) per `extra` entry; capability None for a plain entry (every drill)."""
        return [(cap if eq else None, cat) for cap, eq, cat in (c.rpartition("=") for c in self.extra)]

    def extra_of(self, capability: str) -> tuple[str, ...]:
        """The categories `capability`'s drill borrows: the plain entries, then its own `capability=` ones."""
        return tuple(dict.fromkeys(cat for cap, cat in self._entries() if cap in (None, capability)))


def families_for(target: str, drills: Drills = Drills()) -> dict[str, tuple[type, dict[str, Any]]]:
    """Capability -> (built-in env class, constructor arguments its module pins), per `drills`."""
    from trace_agents.synthesis.families import FAMILIES

    d = drills
    category = target.split("/", 1)[1] if target.startswith("bfcl/") else ""
    if (d.source == "target" or d.like_target) and category not in SINGLE_TURN:
        need, fix = ("source 'target'", "use source 'catalog'") if d.source == "target" else ("like_target", "leave it off")
        raise DataError(f"{need} needs a single-turn bfcl/ target ({', '.join(SINGLE_TURN)}), not {target!r}; {fix}")
    like = {"category": category, "like_target": True} if d.like_target else {}
    # the multi-turn families (stateful, lookup) keep their own offers: padding is a single-turn matter
    families = {name: (cls, dict(like) if name in FAMILIES else {}) for name, cls in builtin_families().items()}
    if d.source == "target":
        pinned = {"category": category, **({"partial_credit": d.partial_credit} if d.partial_credit else {}),
                  **({"fresh": True} if d.fresh else {}), **like}
        for name, cls in target_families().items():
            extra = d.extra_of(name)
            families[name] = (cls, {**pinned, **({"extra": extra} if extra else {})})
    return families


def write_builtin(capability: str, out: Path, difficulty: float = 0.5,
                  family: tuple[type, dict[str, Any]] | None = None) -> Path:
    cls, pinned = family or (builtin_families()[capability], {})
    doc = (cls.__doc__ or "").strip().replace('"""', "'''")
    path = out / f"{capability}.py"
    atomic_write_text(path, WRAPPER.format(capability=capability, module=cls.__module__, cls=cls.__name__,
                                           difficulty=round(difficulty, 3), doc=doc, pinned=pinned))
    return path


def selected_capabilities(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(Path(path).read_text())
        caps = [c for c in data["capabilities"] if c.get("selected")]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise DataError(f"{path}: not a capabilities.json written by `trace-agents select` ({e})") from None
    return caps


def synthesize_all(capabilities: Path, target: str, out: Path, *, llm: str | None = None, model: str | None = None,
                   seeds: int = 8, samples: int = 4, rounds: int = 3, failed_examples: list[str] | None = None,
                   difficulty: float = 0.5, drills: Drills = Drills()) -> dict:
    """For every selected capability: module + `<cap>.validation.json` (+ `<cap>.calibration.json`).
    Without a model to calibrate with, built-in families are pinned at `difficulty`; `drills` picks
    catalog or target-drill families and their options (`families_for`)."""
    from trace_agents.synthesis.validate import validate_module

    out.mkdir(parents=True, exist_ok=True)
    families = families_for(target, drills)
    load_policy = cache(lambda: _policy(model))  # loaded once, and only if some family needs rollouts
    summary: dict[str, Any] = {"target": target, "environments": {}}
    for cap in selected_capabilities(capabilities):
        name = cap["name"]
        drilled = drills.source == "target" and name in target_families()
        entry: dict[str, Any] = {"source": ("target" if drilled else "builtin") if name in families else ("llm" if llm else None)}
        if name in families:
            if model:
                key = calibration_key(*families[name], model, seeds=seeds, samples=samples, rounds=rounds)
                calibration, entry["calibration_reused"] = _calibrate(out / f"{name}.calibration.json", key,
                                                                      families[name], load_policy)
                pinned = calibration["difficulty"]
                entry["calibration"] = calibration["result"]
            path = write_builtin(name, out, pinned if model else difficulty, families[name])
        elif llm:
            path = _synthesize_llm(cap, target, out, llm, failed_examples or [])
        else:
            entry["error"] = "no built-in family; pass --llm openai:NAME@URL to synthesize one"
            summary["environments"][name] = entry
            continue
        if path is not None:
            validation = validate_module(path)
            write_json(out / f"{name}.validation.json", validation.model_dump())
            entry.update(module=str(path), valid=validation.ok)
        summary["environments"][name] = entry
    write_json(out / "synthesis.json", summary)
    return summary


def calibration_key(cls: type, pinned: dict[str, Any], model: str, *, seeds: int, samples: int,
                    rounds: int) -> dict[str, Any]:
    """What a calibration depends on: a saved one is reused only when all of it is equal."""
    return {"model": model, "family": f"{cls.__module__}.{cls.__qualname__}", "seeds": seeds,
            "samples": samples, "rounds": rounds, **({"pinned": pinned} if pinned else {})}


def _calibrate(path: Path, key: dict[str, Any], family: tuple[type, dict[str, Any]],
               load_policy: Callable[[], Any]) -> tuple[dict, bool]:
    """(calibration report, reused?): the one saved at `path` if its key matches, else a fresh `tune`,
    saved with its key."""
    saved = _saved_calibration(path)
    if saved is not None and saved.get("key") == key:
        return saved, True
    from trace_agents.synthesis.calibrate import report, tune

    cls, pinned = family
    difficulty, history = tune(partial(cls, **pinned), load_policy(), rounds=key["rounds"], seeds=key["seeds"],
                               samples=key["samples"])
    calibration = {"key": key, **report(history, difficulty)}
    write_json(path, calibration)
    return calibration, False


def _saved_calibration(path: Path) -> dict | None:
    """A calibration report written earlier, or None (missing, unreadable or not a report: recalibrate)."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    usable = isinstance(saved, dict) and isinstance(saved.get("difficulty"), (int, float)) and "result" in saved
    return saved if usable else None


def _policy(model: str):
    from trace_agents.agent.policy import make_policy

    return make_policy(model)


def _synthesize_llm(cap: dict, target: str, out: Path, llm: str, failed_examples: list[str]) -> Path | None:
    from trace_agents.agent.openai_policy import OpenAIPolicy
    from trace_agents.envs.base import resolve_env
    from trace_agents.synthesis.llm import synthesize_env

    spec = OpenAIPolicy.from_spec(llm)  # validates the NAME@URL form
    env = resolve_env(target)()
    env.reset(env.seeds("train")[0])
    result = synthesize_env(cap, env.tools, failed_examples, out / f"{cap['name']}.py", model=spec.model,
                            base_url=spec.url.rsplit("/chat/completions", 1)[0], cache_dir=out / ".cache")
    return result.path if result.ok else None
