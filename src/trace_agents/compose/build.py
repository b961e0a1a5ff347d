"""`trace-agents compose`: base + capability adapters -> a composed-model folder, gates trained.

The gate warm start and the task router learn from each capability environment's own tasks: the
reference solution of its first train seeds, labelled with that environment's adapter (no model has
to generate anything). Routing statistics are measured on test seeds of the same environments, which
training never saw, and written next to the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from trace_agents.types import write_json


def build(model: str, adapters: dict[str, Path], envs: dict[str, str], out: Path, *,
          router: Literal["block", "global"] = "block", decide: Literal["token", "causal_mean"] = "causal_mean", gate_steps: int = 150, gate_trajectories: int = 64,
          gate_labels: Literal["env", "likelihood"] = "env",
          task_router: bool = True, top_p: float = 0.5, definitions: dict[str, str] | None = None,
          device: str | None = None, dtype: str = "float32", log=print) -> dict[str, Any]:
    """Write OUT/composed.json, gates.safetensors, gates.json, routing.json (+ the task router)."""
    from trace_agents.compose.gates import GateTrainConfig, reference_trajectory, routing_stats, train_gates
    from trace_agents.compose.model import build_composed, save_composed
    from trace_agents.compose.task_router import env_prompts, fit_task_router, save_router
    from trace_agents.envs.base import resolve_env

    missing = sorted(set(adapters) - set(envs))
    if missing:
        raise ValueError(f"no environment for adapter(s) {missing}: give --env NAME=MODULE for each adapter")
    from trace_agents.compose.model import ComposeConfig

    composed, tok = build_composed(model, adapters, device=device, dtype=dtype,
                                   config=ComposeConfig(router=router, decide=decide))
    makers = {name: resolve_env(envs[name]) for name in adapters}
    summary: dict[str, Any] = {"model": model, "adapters": {n: str(p) for n, p in adapters.items()},
                               "envs": {n: envs[n] for n in adapters}}
    held_out, labels = [], []
    if gate_steps:
        train = [(reference_trajectory(make, seed), name) for name, make in makers.items()
                 for seed in make().seeds("train")[:gate_trajectories]]
        log(f"training gates on {len(train)} reference trajectories")
        metrics = train_gates(composed, tok, train, GateTrainConfig(steps=gate_steps, labels=gate_labels))
        write_json(out / "gates.json", metrics)
        summary["gates"] = {k: v for k, v in metrics.items() if k != "history"}
        for name, make in makers.items():
            held_out += [reference_trajectory(make, seed) for seed in make().seeds("test")[:8]]
            labels += [name] * 8
        routing = routing_stats(composed, tok, held_out, labels)
        write_json(out / "routing.json", routing)
        summary["routing"] = {"share": routing["share"], "accuracy": routing["accuracy"], "reply_accuracy": routing["reply_accuracy"],
                              "switches_per_trajectory": routing["switches_per_trajectory"]}
    save_composed(composed, out)
    if task_router:
        skills = {n: (definitions or {}).get(n, n.replace("_", " ")) for n in adapters}
        examples = {n: env_prompts(make, gate_trajectories, skills) for n, make in makers.items()}
        router_model, metrics = fit_task_router(composed, tok, skills, examples, top_p=top_p)
        save_router(router_model, out, metrics)
        summary["task_router"] = metrics
    write_json(out / "compose_summary.json", summary)
    return summary


def envs_from_synthesis(folder: Path) -> dict[str, str]:
    """Capability -> module path of every valid environment in a `trace-agents synthesize` folder."""
    path = Path(folder) / "synthesis.json"
    try:
        entries = json.loads(path.read_text())["environments"]
    except (OSError, json.JSONDecodeError, KeyError) as e:
        raise ValueError(f"{path}: not a synthesis.json written by `trace-agents synthesize` ({e})") from None
    return {n: str(Path(folder) / Path(e["module"]).name) for n, e in entries.items() if e.get("valid")}


def definitions_from(capabilities: Path | None) -> dict[str, str]:
    if capabilities is None:
        return {}
    data = json.loads(Path(capabilities).read_text())
    return {c["name"]: c.get("definition", "") for c in data.get("capabilities", [])}
