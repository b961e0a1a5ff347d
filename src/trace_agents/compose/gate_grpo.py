"""GRPO on the gates of a composed model against the target environment: the optional second phase
of gate training, after the supervised warm start (gates.py). Base and adapters stay frozen; the
routers are the only trainable parameters.

The loop is training/grpo.py's (groups of one seed, masking, clipping, checkpoints that resume);
only the trainee differs. Gradient reaches a router through the straight-through scale
p_e / stopgrad(p_e) of the expert each token took (compose/model.py): p_e rises where turning that
expert's delta up would make a positive-advantage completion likelier (or a negative one less
likely), and falls otherwise. Tokens routed to "none" have no delta to scale, so they carry no
gradient (as in Switch routing). The KL reference is the base alone (every token forced to "none").
"""

from __future__ import annotations

import functools
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from trace_agents.compose.model import NONE, load_composed, load_gates, save_composed
from trace_agents.compose.task_router import ROUTER_CONFIG, ROUTER_WEIGHTS
from trace_agents.envs.base import Env
from trace_agents.training.grpo import GRPOConfig, Trainee, run_grpo

# Files of a composed folder that gate GRPO leaves as they are (the gate-fitting and routing reports,
# gates.json and routing.json, describe the old gates, so they are not carried over).
KEPT = (ROUTER_CONFIG, ROUTER_WEIGHTS, "compose_summary.json")


def composed_trainee(folder: str | Path, device: str | None = None, dtype: str = "float32") -> Trainee:
    folder = Path(folder)
    model, tok = load_composed(folder, device=device, dtype=dtype)
    model.requires_grad_(False)
    model.routers.requires_grad_(True)

    def save(out: Path) -> None:
        save_composed(model, out)
        for name in KEPT:  # the folder stays a whole composed model: task router, what it was built from
            if (folder / name).exists():
                shutil.copy2(folder / name, out / name)

    @contextmanager
    def base_only():
        before = model.forced_expert
        model.force_expert(NONE)
        try:
            yield
        finally:
            model.force_expert(before)

    # no shared prefill: causal-mean routing keeps running sums per row across decode steps
    return Trainee(model, tok, f"{model.base_model_name}+composed", save=save, load=functools.partial(load_gates, model),
                   reference=base_only, artifact="composed", share_prompts=False)


def train_gates_grpo(make_env: Callable[[], Env], composed: str | Path, out: str | Path, config: GRPOConfig, *,
                     device: str | None = None, resume: bool = True, on_step: Callable[[dict], None] | None = None) -> dict:
    """GRPO on the routers of the composed model in `composed`; writes out/composed (a composed-model
    folder with the trained gates, same adapters), metrics, checkpoints (see training/grpo.run_grpo)."""
    if config.init_adapter:
        raise ValueError("init_adapter does not apply to gate training (the composed folder is the start)")
    trainee = composed_trainee(composed, device, config.dtype)
    return run_grpo(make_env, trainee, out, config, model_name=trainee.model.base_model_name, resume=resume,
                    on_step=on_step)
