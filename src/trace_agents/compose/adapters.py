"""Read PEFT LoRA folders (DESIGN.md §5 "Adapter") straight into tensors, no PeftModel needed.

A folder holds `adapter_config.json` (r, lora_alpha, target_modules, ...) and
`adapter_model.safetensors` with keys like `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`.
Every check that can fail names the adapter folder, the key or the config field at fault.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.[^.]+)?\.weight$")
# Config fields whose non-default value changes the maths beyond y = Wx + s·B·A·x: refused, not ignored.
_UNSUPPORTED = {"use_dora": False, "lora_bias": False, "bias": "none", "modules_to_save": None,
                "trainable_token_indices": None, "target_parameters": None, "layer_replication": None}


class AdapterError(ValueError):
    """An adapter folder that cannot be composed; the message names the folder and what is wrong."""


@dataclass
class LoraWeights:
    A: torch.Tensor
    """(r, in_features)"""
    B: torch.Tensor
    """(out_features, r)"""
    scale: float
    """lora_alpha / r (or / sqrt(r) with use_rslora), as PEFT multiplies it."""


@dataclass
class LoraAdapter:
    folder: Path
    base_model: str | None
    """`base_model_name_or_path` of the config (None when PEFT did not know it)."""
    modules: dict[str, LoraWeights] = field(default_factory=dict)
    """Dotted module name in the base model (e.g. `model.layers.0.self_attn.q_proj`) -> weights."""


def _pattern_value(name: str, patterns: dict, default):
    """PEFT's rank_pattern / alpha_pattern lookup: a key matches a module name suffix (regex)."""
    for key, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?({key})$", name):
            return value
    return default


def read_adapter(folder: str | Path) -> LoraAdapter:
    """The LoRA weights of one PEFT folder, keyed by the base model's module names."""
    from safetensors.torch import load_file

    folder = Path(folder)
    cfg_path = folder / CONFIG_FILE
    if not cfg_path.exists():
        raise AdapterError(f"adapter {folder}: no {CONFIG_FILE} (expected a PEFT LoRA folder from `trace-agents train`)")
    if not (folder / WEIGHTS_FILE).exists():
        raise AdapterError(f"adapter {folder}: no {WEIGHTS_FILE} (save it with save_pretrained(safe_serialization=True))")
    try:
        cfg = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise AdapterError(f"adapter {folder}: {CONFIG_FILE} is not valid JSON ({e})") from None
    if cfg.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"adapter {folder}: peft_type is {cfg.get('peft_type')!r}; only LORA adapters can be composed")
    for key, default in _UNSUPPORTED.items():
        if cfg.get(key, default) not in (default, [], {}, False):
            raise AdapterError(f"adapter {folder}: field {key!r}={cfg[key]!r} is not supported by the composed model (use {default!r})")

    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in load_file(folder / WEIGHTS_FILE).items():
        m = _KEY.match(key)
        if not m:
            raise AdapterError(f"adapter {folder}: unexpected tensor {key!r} (only lora_A / lora_B weights are supported)")
        pairs.setdefault(m["module"], {})[m["ab"]] = tensor
    adapter = LoraAdapter(folder, cfg.get("base_model_name_or_path"))
    for name, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise AdapterError(f"adapter {folder}: module {name!r} has lora_{'A' if 'A' in ab else 'B'} but not its pair")
        A, B = ab["A"], ab["B"]
        if A.dim() != 2 or B.dim() != 2 or A.shape[0] != B.shape[1]:
            raise AdapterError(f"adapter {folder}: module {name!r} has lora_A {tuple(A.shape)} and lora_B {tuple(B.shape)}, "
                               "which do not chain (expected (r, in) and (out, r))")
        r = A.shape[0]
        alpha = _pattern_value(name, cfg.get("alpha_pattern"), cfg.get("lora_alpha", 8))
        scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
        adapter.modules[name] = LoraWeights(A, B, float(scale))
    if not adapter.modules:
        raise AdapterError(f"adapter {folder}: {WEIGHTS_FILE} holds no LoRA weights")
    return adapter


def check_compatible(base: nn.Module, adapters: dict[str, LoraAdapter]) -> None:
    """Every adapter must target Linear layers that exist in `base` with matching shapes, and all
    adapters must name the same base model (when their configs name one)."""
    modules = dict(base.named_modules())
    named = {n: a.base_model for n, a in adapters.items() if a.base_model}
    if len(set(named.values())) > 1:
        first = next(iter(named))
        for n, b in named.items():
            if b != named[first]:
                raise AdapterError(
                    f"adapter {adapters[n].folder}: trained on base {b!r} but adapter {adapters[first].folder} "
                    f"on {named[first]!r}; all experts must share one base model")
    for name, adapter in adapters.items():
        for mod_name, w in adapter.modules.items():
            mod = modules.get(mod_name)
            if mod is None:
                raise AdapterError(f"adapter {adapter.folder}: targets {mod_name!r}, which the base model does not have "
                                   "(was it trained on another base model?)")
            if not isinstance(mod, nn.Linear):
                raise AdapterError(f"adapter {adapter.folder}: targets {mod_name!r}, a {type(mod).__name__}; "
                                   "only nn.Linear layers can be experts")
            if w.A.shape[1] != mod.in_features or w.B.shape[0] != mod.out_features:
                raise AdapterError(
                    f"adapter {adapter.folder}: module {mod_name!r} has lora_A {tuple(w.A.shape)} / lora_B {tuple(w.B.shape)} "
                    f"but the base layer is {mod.in_features} -> {mod.out_features} (was it trained on another base model?)")
