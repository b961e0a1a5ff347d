"""The composed model: a frozen base + frozen LoRA experts + trainable top-1 routers (DESIGN.md §5).

`compose(base, {"name": adapter_dir, ...})` replaces every LoRA-targeted Linear of `base` with a
`LoraExperts` and hooks a router onto every decoder block. The result wraps the transformers model
PEFT-style (`forward`, `generate`, and any other attribute fall through to it), so it is a drop-in
for `TransformersPolicy` (batched `generate`, left padding, KV cache) and for training code.

Training vs inference: the forward value is the same in both. In `train()` mode with gradients on,
the chosen expert's delta is multiplied by p_e / stopgrad(p_e) (= 1 in value; Switch-style gradient
d log p_e into the gate) — the default `gate_scale="straight-through"`. Why not Switch's literal
"scale by p": the adapters were trained to act at full strength, and p < 1 would attenuate them at
inference (or, if scaled only in training, make training and inference disagree). The literal
Switch behaviour (scale by p in training *and* inference) is `gate_scale="prob"`.

Folder layout written by `save_composed` (DESIGN.md §5 "Composed model"):
  composed.json       {"version": 1, "base_model": NAME, "router": "block"|"global",
                       "experts": ["none", name, ...], "adapters": {name: folder}, "gate_scale": ...}
  gates.safetensors   router weights, keys "<router>.proj.weight" / ".proj.bias" (router = block index or "global")
Adapter folders are referenced, not copied; a path inside the composed folder is stored relative to it.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Mapping, Sequence

import torch
from torch import nn

from trace_agents.compose.adapters import AdapterError, LoraAdapter, check_compatible, read_adapter
from trace_agents.compose.moe import Kernel, LoraExperts, Route, Router, balance_loss
from trace_agents.types import write_json

NONE = "none"
CONFIG_FILE = "composed.json"
GATES_FILE = "gates.safetensors"
VERSION = 1


@dataclass
class ComposeConfig:
    router: Literal["block", "global"] = "block"
    """"block": one router per decoder block, reading the residual stream entering that block;
    "global": one router reading the embeddings, its choice shared by every block."""
    gate_scale: Literal["straight-through", "prob"] = "straight-through"
    """How the gate probability p of the chosen expert scales its delta: "straight-through" = by
    p / stopgrad(p) in training only (value 1, gradient reaches the gate); "prob" = by p, always."""
    kernel: Kernel = "auto"
    """Top-1 delta kernel of LoraExperts: "index", "gather", or "auto" ("gather" for small calls
    on CUDA, else "index"; see LoraExperts)."""
    gather_max_tokens: int = 64
    """With kernel "auto" on CUDA: calls with at most this many tokens use "gather" (decode steps)."""
    decide: Literal["token", "causal_mean"] = "token"
    """What a token's top-1 is taken over: "token" = its own router logits; "causal_mean" = the mean
    of the router logits of every real token so far in its sequence (itself included), carried
    across generate's decode steps. Still one expert per token and one forward pass; the running
    mean turns per-token evidence into a stable per-sequence skill, so far fewer switches."""

    def __post_init__(self) -> None:
        checks = {"router": self.router in ("block", "global"), "gate_scale": self.gate_scale in ("straight-through", "prob"),
                  "kernel": self.kernel in ("auto", "index", "gather"), "gather_max_tokens": self.gather_max_tokens >= 0,
                  "decide": self.decide in ("token", "causal_mean")}
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid compose config field(s) {', '.join(bad)}: router block|global, "
                             "gate_scale straight-through|prob, kernel auto|index|gather, decide token|causal_mean")


def prefix_sums(x: torch.Tensor, real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, seq, d) values, (batch, seq) real-token mask -> the sums of the real tokens' values up to
    each position (batch, seq, d) and their counts (batch, seq, 1): a running mean is sums / counts.
    Shared by decide "causal_mean" and the gate fit, so both average over the same tokens."""
    real = real[..., None].to(x.dtype)
    return (x * real).cumsum(1), real.cumsum(1)


def decoder_layers(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """(dotted name, list) of the decoder blocks: the ModuleList with num_hidden_layers entries."""
    n = getattr(model.config, "num_hidden_layers", None)
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) == n and name.rsplit(".", 1)[-1] in ("layers", "h", "blocks"):
            return name, mod
    raise ValueError(f"cannot find the decoder blocks of {type(model).__name__} (a ModuleList of {n} layers)")


class ComposedModel(nn.Module):
    """Base transformers model with LoRA experts and routers; see the module docstring."""

    def __init__(self, base_model: nn.Module, adapters: dict[str, LoraAdapter], config: ComposeConfig,
                 base_model_name: str | None = None):
        super().__init__()
        if NONE in adapters:
            raise AdapterError(f"adapter name {NONE!r} is reserved for the base-only slot: rename that adapter")
        check_compatible(base_model, adapters)
        self.base_model = base_model
        self.compose_config = config
        self.base_model_name = base_model_name
        self.adapter_dirs = {name: a.folder for name, a in adapters.items()}
        self.expert_names = [NONE, *adapters]
        n_slots = len(self.expert_names)
        layers_name, layers = decoder_layers(base_model)
        hidden = base_model.config.hidden_size
        device = next(base_model.parameters()).device
        keys = [str(i) for i in range(len(layers))] if config.router == "block" else ["global"]
        self.routers = nn.ModuleDict({k: Router(hidden, n_slots) for k in keys}).to(device)  # float32 gates
        self.routes = {k: Route(n_slots) for k in keys}
        self._forced: int | None = None
        self._mask: torch.Tensor | None = None  # (batch, total_len) bool from the last call's attention_mask
        self._running: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # causal_mean: key -> (logit sums, counts)
        self.captured: dict[str, torch.Tensor] | None = None
        """When a dict: every forward stores each router's input features there, (batch, seq, hidden)."""

        base_model.requires_grad_(False)
        self._inject(adapters, layers_name, len(layers))
        decoder = base_model.get_submodule(layers_name.rsplit(".", 1)[0]) if "." in layers_name else base_model
        self._hooks = [decoder.register_forward_pre_hook(self._capture_mask, with_kwargs=True)]
        hooked = layers if config.router == "block" else layers[:1]
        for key, layer in zip(keys, hooked):
            # partial of a bound method (not a closure), so copy.deepcopy(model) hooks the copy's routers
            self._hooks.append(layer.register_forward_pre_hook(functools.partial(self._route, key), with_kwargs=True))

    # ---- construction ----------------------------------------------------------------------------
    def _inject(self, adapters: dict[str, LoraAdapter], layers_name: str, n_layers: int) -> None:
        """Replace each targeted Linear (the union over adapters) by a LoraExperts of its block."""
        targets = sorted({m for a in adapters.values() for m in a.modules})
        for name in targets:
            rest = name[len(layers_name) + 1 :] if name.startswith(layers_name + ".") else ""
            block = rest.split(".", 1)[0]
            if not block.isdigit() or int(block) >= n_layers:
                owner = next(a.folder for a in adapters.values() if name in a.modules)
                raise AdapterError(f"adapter {owner}: targets {name!r}, outside the decoder blocks; only "
                                   "projections inside blocks can be routed per token")
            base: nn.Linear = self.base_model.get_submodule(name)
            found = [adapters[n].modules.get(name) for n in self.expert_names[1:]]
            R = max(w.A.shape[0] for w in found if w is not None)
            E, kw = len(self.expert_names), {"dtype": base.weight.dtype, "device": base.weight.device}
            A, B = torch.zeros(E, R, base.in_features, **kw), torch.zeros(E, base.out_features, R, **kw)
            scales, ranks = [0.0] * E, [0] * E
            for slot, w in enumerate(found, start=1):
                if w is not None:
                    r = w.A.shape[0]
                    A[slot, :r], B[slot, :, :r] = w.A, w.B
                    scales[slot], ranks[slot] = w.scale, r
            route = self.routes[block if self.compose_config.router == "block" else "global"]
            parent, child = name.rsplit(".", 1)
            setattr(self.base_model.get_submodule(parent), child, LoraExperts(
                base, A, B, scales, ranks, route, self.compose_config.kernel, self.compose_config.gather_max_tokens))

    # ---- routing (runs inside every forward, also under generate) --------------------------------
    def _capture_mask(self, module, args, kwargs):
        mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        self._mask = mask.bool() if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        if cache is None or cache.get_seq_length() == 0:  # a new sequence: forget the running means
            self._running = {}

    def _causal_mean(self, key: str, logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Mean of the logits of the real tokens up to each position, continuing the sums of the
        previous calls of this sequence (decode steps). Padding adds nothing."""
        real = (mask if mask is not None else torch.ones(logits.shape[:2], dtype=torch.bool, device=logits.device))
        sums, counts = prefix_sums(logits, real)
        if key in self._running:
            past_sums, past_counts = self._running[key]
            sums, counts = sums + past_sums[:, None], counts + past_counts[:, None]
        self._running[key] = (sums[:, -1].detach(), counts[:, -1].detach())
        return sums / counts.clamp(min=1)

    def _route(self, key: str, module, args, kwargs) -> None:
        """Forward pre-hook of a decoder block: decide the slot of each of this call's tokens."""
        hidden = args[0] if args else kwargs["hidden_states"]  # (batch, seq, hidden): this call's tokens only
        batch, seq = hidden.shape[:2]
        mask = self._mask[:, -seq:] if self._mask is not None and self._mask.shape[0] == batch else None
        route = self.routes[key]
        if self.captured is not None:  # gate fitting reads what each router sees (forced or not)
            self.captured[key] = self.routers[key].features(hidden).detach()
        if self._forced is not None:
            route.force(self._forced, (batch, seq), mask, hidden.device)
            return
        logits = self.routers[key](hidden)  # (batch, seq, E)
        if self.compose_config.decide == "causal_mean":
            logits = self._causal_mean(key, logits, mask)
        ids = logits.argmax(-1)  # (batch, seq): top-1
        gate = None
        if (self.training and torch.is_grad_enabled()) or self.compose_config.gate_scale == "prob":
            p = logits.softmax(-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)  # (batch, seq)
            gate = p if self.compose_config.gate_scale == "prob" else p / p.detach()
        route.set(ids, gate, logits, mask)

    def force_expert(self, expert: int | str | None) -> None:
        """Route every token to one slot (name or index; "none"/0 = the base alone), bypassing the
        routers; None restores routing. Used by tests and by task-level routing."""
        if isinstance(expert, str):
            if expert not in self.expert_names:
                raise ValueError(f"unknown expert {expert!r}; choose one of {self.expert_names}")
            expert = self.expert_names.index(expert)
        if expert is not None and not 0 <= expert < len(self.expert_names):
            raise ValueError(f"expert slot {expert} out of range 0..{len(self.expert_names) - 1}")
        self._forced = expert

    @property
    def forced_expert(self) -> int | None:
        """The slot every token is forced to, or None when the routers decide."""
        return self._forced

    def set_kernel(self, kernel: Kernel, gather_max_tokens: int | None = None) -> None:
        self.compose_config.kernel = kernel
        if gather_max_tokens is not None:
            self.compose_config.gather_max_tokens = gather_max_tokens
        for m in self.base_model.modules():
            if isinstance(m, LoraExperts):
                m.kernel, m.gather_max_tokens = kernel, self.compose_config.gather_max_tokens

    def routing(self) -> dict[str, torch.Tensor]:
        """Router key -> (batch, seq) slot of every token of the last forward call."""
        return {k: r.slots() for k, r in self.routes.items()}

    def router_logits(self) -> dict[str, torch.Tensor]:
        """Router key -> (batch, seq, E) logits of the last forward call (empty when forced)."""
        return {k: r.logits for k, r in self.routes.items() if r.logits is not None}

    def token_mask(self) -> torch.Tensor | None:
        """(batch, seq) bool of real tokens of the last forward call (None: all real)."""
        return next(iter(self.routes.values())).mask

    def aux_loss(self) -> torch.Tensor:
        """Switch load-balancing loss of the last forward, mean over routers: E · Σ_e f_e · P_e with
        f_e the share of real tokens routed to slot e and P_e their mean probability of e
        (1 when balanced, up to E when collapsed on one slot)."""
        losses = []
        for route in self.routes.values():
            if route.logits is None:
                continue
            logits = route.logits[route.mask] if route.mask is not None else route.logits.reshape(-1, route.n_slots)
            if logits.shape[0]:
                losses.append(balance_loss(logits))
        if not losses:
            return torch.zeros((), device=next(self.routers.parameters()).device)
        return torch.stack(losses).mean()

    def gate_parameters(self):
        return self.routers.parameters()

    # ---- drop-in for the transformers model ------------------------------------------------------
    def forward(self, *args, **kwargs):
        return self.base_model(*args, **kwargs)

    def generate(self, *args, **kwargs):
        return self.base_model.generate(*args, **kwargs)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "base_model":
                raise
            return getattr(self.base_model, name)


def _named(adapters: Mapping[str, str | Path] | Sequence[str | Path]) -> dict[str, Path]:
    """Names for adapter folders given as a list: the folder name, or its parent's when the folder
    is called "adapter" (what `trace-agents train` writes: OUT/adapter)."""
    if isinstance(adapters, Mapping):
        return {str(k): Path(v) for k, v in adapters.items()}
    named: dict[str, Path] = {}
    for p in map(Path, adapters):
        name = p.resolve().parent.name if p.name == "adapter" else p.name
        if name in named:
            raise AdapterError(f"adapter {p}: name {name!r} is already used by {named[name]}; pass a dict of names")
        named[name] = p
    return named


def compose(base_model: nn.Module, adapters: Mapping[str, str | Path] | Sequence[str | Path], *,
            router: Literal["block", "global"] = "block", base_model_name: str | None = None,
            config: ComposeConfig | None = None) -> ComposedModel:
    """Wrap `base_model` (modified in place) with the adapters as top-1 experts; only routers train."""
    config = config or ComposeConfig(router=router)
    named = _named(adapters)
    if not named:
        raise AdapterError("compose needs at least one adapter folder")
    loaded = {name: read_adapter(folder) for name, folder in named.items()}
    return ComposedModel(base_model, loaded, config, base_model_name)


def build_composed(base_model_name: str, adapters, *, router: Literal["block", "global"] = "block",
                   device: str | None = None, dtype: str = "float32", config: ComposeConfig | None = None):
    """(composed model, tokenizer) from a MODEL name of the command line and adapter folders."""
    from trace_agents.models import load_model

    base, tok = load_model(base_model_name, device=device, dtype=dtype)
    return compose(base, adapters, router=router, base_model_name=base_model_name, config=config), tok


def save_composed(model: ComposedModel, folder: str | Path) -> Path:
    """Write composed.json + gates.safetensors into `folder` (each file atomically)."""
    from safetensors.torch import save_file

    if not model.base_model_name:
        raise ValueError("the composed model does not know its base model's name: "
                         "pass base_model_name= to compose() (a MODEL name or folder load_model accepts)")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{GATES_FILE}.tmp"
    save_file({k: v.detach().contiguous().cpu() for k, v in model.routers.state_dict().items()}, str(tmp))
    os.replace(tmp, folder / GATES_FILE)

    def where(p: Path) -> str:
        p = p.resolve()
        return str(p.relative_to(folder.resolve())) if p.is_relative_to(folder.resolve()) else str(p)

    cfg = asdict(model.compose_config)
    write_json(folder / CONFIG_FILE, {
        "version": VERSION, "base_model": model.base_model_name, "router": cfg.pop("router"),
        "experts": model.expert_names, "adapters": {n: where(p) for n, p in model.adapter_dirs.items()}, **cfg,
    })
    return folder


def load_composed(folder: str | Path, device: str | None = None, dtype: str = "float32"):
    """(composed model, tokenizer) rebuilt from a folder written by `save_composed`."""
    folder = Path(folder)
    path = folder / CONFIG_FILE
    if not path.exists():
        raise ValueError(f"{folder} is not a composed model: no {CONFIG_FILE} (write one with `trace-agents compose`)")
    meta = json.loads(path.read_text())
    if meta.get("version") != VERSION:
        raise ValueError(f"{path}: field 'version' is {meta.get('version')!r}; this code reads version {VERSION}")
    adapters = {n: (p if Path(p).is_absolute() else folder / p) for n, p in meta["adapters"].items()}
    if meta.get("experts") and meta["experts"] != [NONE, *adapters]:
        raise ValueError(f"{path}: field 'experts' {meta['experts']} does not match 'adapters' {list(adapters)}")
    config = ComposeConfig(**{k: meta[k] for k in ("router", "gate_scale", "kernel", "gather_max_tokens", "decide") if k in meta})
    model, tok = build_composed(meta["base_model"], adapters, device=device, dtype=dtype, config=config)
    load_gates(model, folder)
    model.eval()
    return model, tok


def load_gates(model: ComposedModel, folder: str | Path) -> None:
    """Router weights from a composed folder (or a gate-GRPO checkpoint) into `model`."""
    from safetensors.torch import load_file

    path = Path(folder) / GATES_FILE
    try:
        model.routers.load_state_dict(load_file(str(path)))
    except RuntimeError as e:
        raise ValueError(f"{path} does not fit this model's routers: {e}") from None
