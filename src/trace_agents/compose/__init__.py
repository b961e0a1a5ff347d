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

__all__ = [
    "NONE", "AdapterError", "ComposeConfig", "ComposedModel", "GateTrainConfig", "LoraAdapter", "LoraExperts", "Route",
    "Router", "build_composed", "compose", "load_composed", "read_adapter", "routing_stats", "save_composed", "train_gates",
]
