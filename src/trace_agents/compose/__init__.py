"""Stage 4: base + LoRA adapters as a token-level top-1 mixture of experts, with trainable gates.

    model = compose(base, {"precondition": "runs/a/adapter", ...}, base_model_name="smollm2-135m")
    train_gates(model, tok, [(trajectory, "precondition"), ...], steps=50)
    save_composed(model, "out/composed");  model, tok = load_composed("out/composed")
"""

from trace_agents.compose.adapters import AdapterError, LoraAdapter, read_adapter
from trace_agents.compose.gates import GateTrainConfig, routing_stats, train_gates
from trace_agents.compose.model import (
    NONE,
    ComposeConfig,
    ComposedModel,
    build_composed,
    compose,
    load_composed,
    save_composed,
)
from trace_agents.compose.moe import LoraExperts, Route, Router
from trace_agents.compose.task_router import RouteFn, TaskRoutedPolicy, TaskRouter, fit_task_router, load_router, save_router


def _base_model(folder) -> str | None:
    """The base model a composed folder was built on (its composed.json record)."""
    import json
    from pathlib import Path

    from trace_agents.models import ModelError

    meta = Path(folder) / "composed.json"
    if not meta.exists():
        raise ModelError(f"--composed {folder}: no composed.json there (write one with `trace-agents compose`)")
    return json.loads(meta.read_text()).get("base_model")


def check_base(folder, model: str | None) -> str | None:
    """The base model a composed folder was built on; refuses a different --model."""
    from pathlib import Path

    from trace_agents.models import ModelError

    base = _base_model(folder)
    if model and base and model != base and Path(model).resolve() != Path(base).resolve():
        raise ModelError(f"--composed {folder} was built on {base!r}, not --model {model!r}")
    return base


def load_composed_policy(folder, *, model: str | None = None, device: str | None = None, dtype: str = "float32",
                         batch_size: int = 16, router: str = "token"):
    """A rollout/serving policy over a composed-model folder. `model` (the CLI's --model) must name the
    same base the folder was built on; the folder's own record wins and a mismatch is refused.
    `router`: "token" (the trained gates route every token) or "task" (the task router picks one
    adapter per episode)."""
    from pathlib import Path

    from trace_agents.agent.policy import TransformersPolicy
    from trace_agents.models import ModelError

    base = check_base(folder, model)
    if router not in ("token", "task"):
        raise ModelError(f"--router {router!r}: choose token or task")
    composed, tok = load_composed(folder, device=device, dtype=dtype)
    # no shared prefill: the causal-mean routing keeps running sums per row across decode steps
    policy = TransformersPolicy(composed, tok, name=f"{base}+composed", batch_size=batch_size, share_prompts=False)
    if router == "task":
        try:
            policy = TaskRoutedPolicy(policy, load_router(Path(folder)))
        except ValueError as e:
            raise ModelError(str(e)) from None
    return policy


def load_task_router(folder, device: str | None = None) -> RouteFn:
    """(messages, tools) -> adapter name or None, for the vLLM routing proxy: the base model named in
    the composed folder's record plus its fitted task router (no adapters are loaded)."""
    from pathlib import Path

    from trace_agents.models import load_model

    base = _base_model(folder)
    if not base:
        from trace_agents.models import ModelError

        raise ModelError(f"{folder}/composed.json names no base_model")
    router = load_router(Path(folder))
    model, tok = load_model(base, device=device)
    return RouteFn(router, model.eval(), tok)

__all__ = [
    "NONE", "AdapterError", "ComposeConfig", "ComposedModel", "GateTrainConfig", "LoraAdapter", "LoraExperts", "Route",
    "RouteFn", "Router", "TaskRoutedPolicy", "TaskRouter", "build_composed", "fit_task_router", "compose", "load_composed", "load_composed_policy", "load_router", "load_task_router", "read_adapter", "routing_stats",
    "save_composed", "save_router", "train_gates",
]
