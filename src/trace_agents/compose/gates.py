"""Gate training and routing statistics of a composed model (DESIGN.md §1 stage 4).

Supervised warm start: a trajectory from capability environment c has every token labelled c
(target-task trajectories may be labelled "none", the base); every router learns to predict the label
with cross-entropy, plus Switch's load-balancing term. Base and adapters stay frozen and only the
routers are in the optimizer.

Why the model stays in eval mode here: the label, not the LM loss, teaches the gates, so the
straight-through gate factor (train mode) is not needed, and without it nothing upstream of a router
depends on a trainable tensor: autograd records only the tiny router Linears, and a step costs one
no-grad-sized forward of the decoder (the 49k-vocab LM head is skipped: only the decoder runs).
Tokens route by the routers' own top-1 choices while training, as they will at inference.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, replace
from typing import Sequence

import torch
import torch.nn.functional as F

from trace_agents.compose.model import NONE, ComposedModel
from trace_agents.types import Trajectory

ALIASES = {"base": NONE}


@dataclass
class GateTrainConfig:
    steps: int = 50
    """Optimizer steps."""
    lr: float = 1e-2
    """AdamW learning rate of the router weights (zero-initialised linear probes over RMS-normalised
    states: a rate this large is fine and lets tens of steps suffice)."""
    batch: int = 8
    """Trajectories per step."""
    aux_coef: float = 0.01
    """Weight of the load-balancing loss (Switch Transformer: 0.01)."""
    max_tokens: int = 1024
    """Tokens kept per trajectory (its start); bounds the cost of one step."""
    weight_decay: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        bad = [k for k, ok in {"steps": self.steps >= 1, "lr": self.lr > 0, "batch": self.batch >= 1,
                               "aux_coef": self.aux_coef >= 0, "max_tokens": self.max_tokens >= 2}.items() if not ok]
        if bad:
            raise ValueError(f"invalid gate training field(s) {', '.join(bad)} (counts >= 1, lr > 0, aux_coef >= 0)")


def encode(tokenizer, traj: Trajectory, max_tokens: int) -> list[int]:
    """Token ids of a trajectory rendered with the chat template, as the policy renders it."""
    text = tokenizer.apply_chat_template([m.to_chat() for m in traj.messages], tools=traj.tools or None, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"][:max_tokens]


def _slot(model: ComposedModel, name: str) -> int:
    name = ALIASES.get(name, name)
    if name not in model.expert_names:
        raise ValueError(f"label {name!r} is not an expert of this model; use one of {model.expert_names} (or 'base')")
    return model.expert_names.index(name)


def _collate(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right padding: plain forwards number positions from 0, so real tokens get their true positions."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], attn[i, : len(r)] = torch.tensor(r), 1
    return ids.to(device), attn.to(device)


def _run_decoder(model: ComposedModel, ids: torch.Tensor, attn: torch.Tensor) -> None:
    """Forward through the decoder blocks only (routers fire in their hooks; no LM head)."""
    base = model.base_model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else base
    decoder(input_ids=ids, attention_mask=attn, use_cache=False)


def _majority(model: ComposedModel) -> torch.Tensor:
    """(batch, seq) slot per token by majority over routers (ties: the lowest slot, "none" first)."""
    votes = torch.stack(list(model.routing().values()))  # (routers, batch, seq)
    return F.one_hot(votes, len(model.expert_names)).sum(0).argmax(-1)


def train_gates(model: ComposedModel, tokenizer, labelled: Sequence[tuple[Trajectory, str]],
                config: GateTrainConfig | None = None, **overrides) -> dict:
    """Supervised warm start of the routers on (trajectory, expert name) pairs; returns metrics."""
    config = replace(config or GateTrainConfig(), **overrides)
    if not labelled:
        raise ValueError("train_gates needs at least one (trajectory, expert) pair")
    if model.forced_expert is not None:
        raise ValueError("an expert is forced (force_expert); call model.force_expert(None) before training gates")
    device = next(model.gate_parameters()).device
    data = [(encode(tokenizer, t, config.max_tokens), _slot(model, name)) for t, name in labelled]
    params = list(model.gate_parameters())
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    rng = random.Random(config.seed)
    order: list[int] = []
    was_training = model.training
    model.eval()
    history, start = [], time.perf_counter()
    try:
        for step in range(config.steps):
            if len(order) < config.batch:  # epochs of reshuffled examples
                order += rng.sample(range(len(data)), len(data))
            pick, order = order[: config.batch], order[config.batch :]
            ids, attn = _collate([data[i][0] for i in pick], tokenizer.pad_token_id, device)
            labels = torch.tensor([data[i][1] for i in pick], device=device)[:, None].expand_as(ids)  # (batch, seq)
            with torch.enable_grad():
                _run_decoder(model, ids, attn)
                real = attn.bool()
                logits = model.router_logits()
                ce = torch.stack([F.cross_entropy(lg[real], labels[real]) for lg in logits.values()]).mean()
                aux = model.aux_loss()
                loss = ce + config.aux_coef * aux
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            acc = float((_majority(model)[real] == labels[real]).float().mean())
            history.append({"step": step + 1, "loss": loss.item(), "ce": ce.item(), "aux": aux.item(), "accuracy": acc})
    finally:
        model.train(was_training)
    last = history[-1]
    return {"steps": config.steps, "examples": len(data), "loss": last["loss"], "ce": last["ce"], "aux": last["aux"],
            "accuracy": last["accuracy"], "seconds": round(time.perf_counter() - start, 3), "history": history}


@torch.no_grad()
def routing_stats(model: ComposedModel, tokenizer, trajectories: Sequence[Trajectory],
                  labels: Sequence[str] | None = None, batch: int = 8, max_tokens: int = 1024) -> dict:
    """How the routers split the tokens of some trajectories (real tokens only, every token of the
    rendered chat). With per-block routers a token's expert is the majority over blocks (ties: the
    lowest slot); "share" and switches use that; "share_per_router" gives each router's own split.

    {"tokens", "share": {expert: fraction}, "share_per_router": {router: {expert: fraction}},
     "switches_per_trajectory": mean count of expert changes between consecutive tokens,
     "accuracy": fraction of tokens on their label's expert (only when labels are given)}
    """
    names, E = model.expert_names, len(model.expert_names)
    device = next(model.gate_parameters()).device
    total = torch.zeros(E, dtype=torch.long)
    per_router: dict[str, torch.Tensor] = {}
    switches, hits, n_tokens = [], 0, 0
    for s in range(0, len(trajectories), batch):
        chunk = trajectories[s : s + batch]
        ids, attn = _collate([encode(tokenizer, t, max_tokens) for t in chunk], tokenizer.pad_token_id, device)
        _run_decoder(model, ids, attn)
        real = attn.bool()
        for key, slots in model.routing().items():
            per_router[key] = per_router.get(key, torch.zeros(E, dtype=torch.long)) + torch.bincount(slots[real].cpu(), minlength=E)
        top = _majority(model)  # (batch, seq)
        total += torch.bincount(top[real].cpu(), minlength=E)
        n_tokens += int(real.sum())
        for row in range(len(chunk)):
            seq = top[row][real[row]]
            switches.append(int((seq[1:] != seq[:-1]).sum()))
            if labels is not None:
                hits += int((seq == _slot(model, labels[s + row])).sum())
    frac = lambda counts: {n: round(float(c) / max(int(counts.sum()), 1), 6) for n, c in zip(names, counts)}  # noqa: E731
    out = {"tokens": n_tokens, "share": frac(total), "share_per_router": {k: frac(v) for k, v in per_router.items()},
           "switches_per_trajectory": sum(switches) / max(len(switches), 1)}
    if labels is not None:
        out["accuracy"] = hits / max(n_tokens, 1)
    return out


def reference_trajectory(make_env, seed: int) -> Trajectory:
    """An episode that plays an environment's reference solution (`env.reference()`): one reply with
    every call for single-turn tasks; for multi-turn ones (a list of calls per user turn) one call per
    step, then a short closing reply that ends the turn. Gate warm starts label these tokens with the
    environment's capability: no model runs, and the replies are the ones the adapter was trained to give."""
    from trace_agents.types import FunctionCall, Message, ToolCall

    env = make_env()
    messages = list(env.reset(seed))
    reference = env.reference()
    multi_turn = bool(reference) and isinstance(reference[0], list)
    n_calls = 0

    def say(calls: list) -> list[Message]:
        nonlocal n_calls
        tool_calls = [ToolCall(id=f"ref_{n_calls + i}", function=FunctionCall(name=name, arguments=json.dumps(args)))
                      for i, (name, args) in enumerate(calls)]
        n_calls += len(calls)
        reply = Message(role="assistant", content="" if calls else "Done.", tool_calls=tool_calls or None)
        return [reply, *env.step(reply).messages]

    if not multi_turn:
        messages += say(reference)
    else:
        for calls in reference:
            for call in calls:
                messages += say([call])
            messages += say([])  # no call ends the turn; the env answers with the next user turn
    verdict = env.verdict()
    return Trajectory(id=f"{env.name}:{env.task_id}:reference", env=env.name, task_id=env.task_id, seed=seed,
                      messages=messages, tools=env.tools, reward=verdict.reward, success=verdict.success,
                      tool_calls=n_calls, info={"reference": True})
