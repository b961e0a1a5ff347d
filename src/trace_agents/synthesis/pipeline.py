"""`trace-agents synthesize`: one environment module per selected capability, validated, and (given a
model) calibrated. Built-in families are written as small wrapper modules pinned to the calibrated
difficulty; capabilities without one go to the LLM synthesiser when an endpoint is given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trace_agents.synthesis import builtin_families
from trace_agents.types import DataError, atomic_write_text, write_json

WRAPPER = '''"""{capability}: built-in environment {module}.{cls} at difficulty {difficulty}.

{doc}
"""

from {module} import {cls} as _Family


class Env(_Family):
    """{cls} pinned to the calibrated difficulty."""

    def __init__(self, difficulty: float = {difficulty}, **kwargs):
        super().__init__(difficulty=difficulty, **kwargs)
'''


def write_builtin(capability: str, out: Path, difficulty: float = 0.5) -> Path:
    cls = builtin_families()[capability]
    doc = (cls.__doc__ or "").strip().replace('"""', "'''")
    path = out / f"{capability}.py"
    atomic_write_text(path, WRAPPER.format(capability=capability, module=cls.__module__, cls=cls.__name__,
                                           difficulty=round(difficulty, 3), doc=doc))
    return path


def selected_capabilities(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(Path(path).read_text())
        caps = [c for c in data["capabilities"] if c.get("selected")]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise DataError(f"{path}: not a capabilities.json written by `trace-agents select` ({e})") from None
    return caps


def synthesize_all(capabilities: Path, target: str, out: Path, *, llm: str | None = None, model: str | None = None,
                   seeds: int = 8, samples: int = 4, rounds: int = 3, failed_examples: list[str] | None = None) -> dict:
    """For every selected capability: module + `<cap>.validation.json` (+ `<cap>.calibration.json`)."""
    from trace_agents.synthesis.validate import validate_module

    out.mkdir(parents=True, exist_ok=True)
    families = builtin_families()
    policy = None
    summary: dict[str, Any] = {"target": target, "environments": {}}
    for cap in selected_capabilities(capabilities):
        name = cap["name"]
        entry: dict[str, Any] = {"source": "builtin" if name in families else ("llm" if llm else None)}
        if name in families:
            difficulty = 0.5
            if model:
                from trace_agents.synthesis.calibrate import report, tune

                policy = policy or _policy(model)
                difficulty, history = tune(families[name], policy, rounds=rounds, seeds=seeds, samples=samples)
                calibration = report(history, difficulty)
                write_json(out / f"{name}.calibration.json", calibration)
                entry["calibration"] = calibration["result"]
            path = write_builtin(name, out, difficulty)
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
