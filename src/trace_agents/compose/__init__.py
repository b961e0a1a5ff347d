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


def load_composed_policy(folder, *, model: str | None = None, device: str | None = None, dtype: str = "float32",
                         batch_size: int = 16):
    """A rollout/serving policy over a composed-model folder. `model` (the CLI's --model) must name the
    same base the folder was built on; the folder's own record wins and a mismatch is refused."""
    import json
    from pathlib import Path

    from trace_agents.agent.policy import TransformersPolicy
    from trace_agents.models import ModelError

    meta = Path(folder) / "composed.json"
    if not meta.exists():
        raise ModelError(f"--composed {folder}: no composed.json there (write one with `trace-agents compose`)")
    base = json.loads(meta.read_text()).get("base_model")
    if model and base and model != base and Path(model).resolve() != Path(base).resolve():
        raise ModelError(f"--composed {folder} was built on {base!r}, not --model {model!r}")
    composed, tok = load_composed(folder, device=device, dtype=dtype)
    return TransformersPolicy(composed, tok, name=f"{base}+composed", batch_size=batch_size)

__all__ = [
    "NONE", "AdapterError", "ComposeConfig", "ComposedModel", "GateTrainConfig", "LoraAdapter", "LoraExperts", "Route",
    "Router", "build_composed", "compose", "load_composed", "load_composed_policy", "read_adapter", "routing_stats",
    "save_composed", "train_gates",
]
