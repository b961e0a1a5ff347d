"""Gate training and routing statistics of a composed model (DESIGN.md §1 stage 4).

Supervised warm start: every router learns to predict each token's label with cross-entropy, plus
Switch's load-balancing term. Base and adapters stay frozen and only the routers change. Labels:
- "env": a trajectory from capability environment c has every token labelled c (target-task
  trajectories may be labelled "none", the base). The gates learn which *task* they are on.
- "likelihood": each expert is forced in turn over the trajectory, and a reply token's position is
  labelled with the expert that makes its next token most likely (the one that would have written
  it); near-ties and the prompt go to the expert most likely for the whole reply. Different tokens
  of one reply may then go to different adapters (a function name to the selection adapter, its
  values to the grounding one); on the bfcl/multiple target drills they rarely did: the experts'
  next-token log-probabilities on reference replies differ by < 0.1 nats almost everywhere, and
  the composed model scored below env labels (35% vs 38%, docs/results.md). Costs one teacher-forced
  forward per slot ("none" included) and trajectory, no generation.

How (why not SGD through the model): a router is a linear probe of the states entering its block, and
with everything else frozen those states depend only on the routing of the blocks before it. So the
warm start caches features and fits the probes on them, DAgger-style:
  round 1 — every trajectory runs once with its label's expert forced (the states a correct routing
            produces), and each router's input features are stored for a sample of its tokens;
  round r > 1 — the trajectories run again routed by the gates fitted so far (the states inference
            will really see, mistakes upstream included); their features join the data and the
            probes are refitted.
With decide "causal_mean" the cached features are each token's running mean of features (what
the decision reads; `_prefix_means`), so the fit learns the routing inference applies.
A fit is full-batch AdamW on the cached features: one decoder forward per trajectory and round
instead of one per step, so hundreds of steps and many more trajectories cost seconds (the earlier
SGD-through-the-decoder loop needed ~15 s a step on SmolLM2 and 50 steps reached 64% held-out token
accuracy).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, replace
from typing import Literal, Sequence

import torch
import torch.nn.functional as F

from trace_agents.compose.model import NONE, ComposedModel, prefix_sums
from trace_agents.compose.moe import balance_loss
from trace_agents.types import Trajectory

ALIASES = {"base": NONE}


@dataclass
class GateTrainConfig:
    steps: int = 150
    """Full-batch optimizer steps of each round's fit."""
    lr: float = 1e-2
    """AdamW learning rate of the router weights (zero-initialised linear probes over RMS-normalised
    states: a rate this large is fine)."""
    rounds: int = 2
    """1 = teacher-forced features only; each further round adds features of the gates' own routing."""
    batch: int = 8
    """Trajectories per decoder forward while collecting features."""
    aux_coef: float = 0.01
    """Weight of the load-balancing loss (Switch Transformer: 0.01)."""
    max_tokens: int = 1024
    """Tokens kept per trajectory (its start)."""
    tokens_per_trajectory: int = 64
    """Token positions whose features are cached per trajectory and round: every assistant-reply
    token first (what generation routes), then a random sample of the rest. Bounds memory."""
    weight_decay: float = 0.0
    seed: int = 0
    labels: Literal["env", "likelihood"] = "env"
    """Token labels: the trajectory's environment, or the expert most likely to write each next token
    (module docstring)."""
    margin: float = 0.1
    """With labels "likelihood": nats by which a token's best expert must beat the reply's best
    expert to take that token (smaller gains are noise and would only add switches)."""

    def __post_init__(self) -> None:
        checks = {"steps": self.steps >= 1, "lr": self.lr > 0, "rounds": self.rounds >= 1, "batch": self.batch >= 1,
                  "aux_coef": self.aux_coef >= 0, "max_tokens": self.max_tokens >= 2,
                  "tokens_per_trajectory": self.tokens_per_trajectory >= 1,
                  "labels": self.labels in ("env", "likelihood"), "margin": self.margin >= 0}
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid gate training field(s) {', '.join(bad)} (counts >= 1, lr > 0, aux_coef >= 0, "
                             "margin >= 0, labels env|likelihood)")


def encode(tokenizer, traj: Trajectory, max_tokens: int) -> tuple[list[int], list[bool]]:
    """Token ids of a trajectory rendered with the chat template, as the policy renders it, and
    whether each token belongs to an assistant reply (found by rendering the chat up to each reply)."""
    chat, tools = [m.to_chat() for m in traj.messages], traj.tools or None

    def length(messages: list[dict], prompt: bool) -> int:
        text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=prompt)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    ids = tokenizer(tokenizer.apply_chat_template(chat, tools=tools, tokenize=False), add_special_tokens=False)["input_ids"]
    reply = [False] * len(ids)
    for i, m in enumerate(traj.messages):
        if m.role == "assistant":
            for t in range(length(chat[:i], True), min(length(chat[: i + 1], False), len(ids))):
                reply[t] = True
    return ids[:max_tokens], reply[:max_tokens]


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


def _majority(votes: torch.Tensor, n_slots: int) -> torch.Tensor:
    """Slot per token by majority over routers: votes (routers, ...) -> (...); ties: the lowest slot."""
    return F.one_hot(votes, n_slots).sum(0).argmax(-1)


def _positions(reply: list[bool], keep: int, rng: random.Random) -> list[int]:
    """Reply tokens first, then a random sample of the others, `keep` in all (sorted)."""
    answer = [t for t, r in enumerate(reply) if r]
    rest = [t for t, r in enumerate(reply) if not r]
    picked = answer[:keep] + rng.sample(rest, min(len(rest), max(0, keep - len(answer))))
    return sorted(picked)


def _prefix_means(feats: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """(batch, seq, hidden) router features -> the mean of each sequence's real-token features up
    to each position. A router is linear, so its logits at these are exactly the running mean of
    its logits that decide "causal_mean" takes the top-1 of: fitting on them trains the decision
    inference makes. (Fitting per-token features instead scored 96% on the cached tokens while the
    running means sent 100% of held-out tokens to one expert on bfcl/parallel: runs par_s2, pl_s2.)"""
    sums, counts = prefix_sums(feats, attn)
    return sums / counts.clamp(min=1)


@torch.no_grad()
def _collect(model: ComposedModel, data: list[tuple[list[int], list[bool], int, list[int] | None]], config: GateTrainConfig,
             pad_id: int, rng: random.Random, forced: bool) -> dict[str, torch.Tensor]:
    """Router key -> (tokens, hidden) cached features, and "label" -> (tokens,) their slots."""
    device = next(model.gate_parameters()).device
    out: dict[str, list[torch.Tensor]] = {k: [] for k in [*model.routers, "label"]}
    # forcing applies to a whole forward, so a batch holds one label when forced
    groups = ([[i for i, d in enumerate(data) if d[2] == slot] for slot in sorted({d[2] for d in data})]
              if forced else [list(range(len(data)))])
    batches = [g[s : s + config.batch] for g in groups for s in range(0, len(g), config.batch)]
    model.captured = {}
    try:
        for batch in batches:
            model.force_expert(data[batch[0]][2] if forced else None)
            ids, attn = _collate([data[i][0] for i in batch], pad_id, device)
            _run_decoder(model, ids, attn)
            captured = model.captured
            if model.compose_config.decide == "causal_mean":
                captured = {k: _prefix_means(f, attn) for k, f in captured.items()}
            for row, i in enumerate(batch):
                pos = torch.tensor(_positions(data[i][1], config.tokens_per_trajectory, rng), device=device)
                for key, feats in captured.items():
                    out[key].append(feats[row, pos].half())  # normalised states: |x| <= sqrt(hidden), fp16 is safe
                per_token = data[i][3]
                out["label"].append(torch.tensor([per_token[p] for p in pos.tolist()], dtype=torch.long, device=device)
                                    if per_token is not None else torch.full((len(pos),), data[i][2], dtype=torch.long, device=device))
    finally:
        model.captured = None
        model.force_expert(None)
    return {k: torch.cat(v) for k, v in out.items()}


def _fit(model: ComposedModel, cache: dict[str, torch.Tensor], config: GateTrainConfig, history: list[dict]) -> None:
    """Full-batch AdamW of every router on its cached features (one optimizer, mean loss over routers).
    All routers are scored in one batched matmul: (routers, tokens, hidden) x (routers, hidden, E)."""
    labels, routers = cache["label"], list(model.routers.values())
    feats = torch.stack([cache[k].float() for k in model.routers])  # (R, tokens, hidden)
    n_slots = len(model.expert_names)
    opt = torch.optim.AdamW(model.gate_parameters(), lr=config.lr, weight_decay=config.weight_decay)
    for _ in range(config.steps):
        with torch.enable_grad():
            weight = torch.stack([r.proj.weight.float() for r in routers])  # (R, E, hidden)
            bias = torch.stack([r.proj.bias.float() for r in routers])  # (R, E)
            logits = torch.baddbmm(bias[:, None, :], feats, weight.transpose(1, 2))  # (R, tokens, E)
            ce = F.cross_entropy(logits.reshape(-1, n_slots), labels.repeat(len(routers)))
            aux = balance_loss(logits)
            loss = ce + config.aux_coef * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        acc = float((_majority(logits.detach().argmax(-1), n_slots) == labels).float().mean())
        history.append({"step": len(history) + 1, "loss": loss.item(), "ce": ce.item(), "aux": aux.item(), "accuracy": acc})


def train_gates(model: ComposedModel, tokenizer, labelled: Sequence[tuple[Trajectory, str]],
                config: GateTrainConfig | None = None, **overrides) -> dict:
    """Supervised warm start of the routers on (trajectory, expert name) pairs; returns metrics
    ("accuracy": token accuracy of the routers' majority on the last round's cached tokens)."""
    config = replace(config or GateTrainConfig(), **overrides)
    if not labelled:
        raise ValueError("train_gates needs at least one (trajectory, expert) pair")
    if model.forced_expert is not None:
        raise ValueError("an expert is forced (force_expert); call model.force_expert(None) before training gates")
    data = [(*encode(tokenizer, t, config.max_tokens), _slot(model, name), None) for t, name in labelled]
    rng = random.Random(config.seed)
    was_training = model.training
    model.eval()
    history: list[dict] = []
    start, cache = time.perf_counter(), None
    try:
        if config.labels == "likelihood":
            data = _likelihood_labels(model, data, config, tokenizer.pad_token_id)
        for r in range(config.rounds):
            fresh = _collect(model, data, config, tokenizer.pad_token_id, rng, forced=r == 0)
            cache = fresh if cache is None else {k: torch.cat([cache[k], fresh[k]]) for k in cache}
            _fit(model, cache, config, history)
    finally:
        model.train(was_training)
    last = history[-1]
    shares = torch.bincount(cache["label"], minlength=len(model.expert_names)) / cache["label"].numel()
    return {"steps": config.steps, "rounds": config.rounds, "examples": len(data), "tokens": int(cache["label"].numel()),
            "labels": config.labels, "label_share": {n: round(float(f), 6) for n, f in zip(model.expert_names, shares)},
            "loss": last["loss"], "ce": last["ce"], "aux": last["aux"], "accuracy": last["accuracy"],
            "seconds": round(time.perf_counter() - start, 3), "history": history}


@torch.no_grad()
def _likelihood_labels(model: ComposedModel, data: list, config: GateTrainConfig, pad_id: int) -> list:
    """Relabel (ids, reply, slot, None) rows with per-token slots (labels "likelihood"): position t
    predicts token t+1, so it gets the expert under which token t+1 is most likely when t+1 is a
    reply token and that expert beats the reply's best expert by `margin` nats; every other
    position, and `slot` itself, becomes the reply's best expert (highest summed log-probability)."""
    device = next(model.gate_parameters()).device
    out = []
    try:
        for s in range(0, len(data), config.batch):
            chunk = data[s : s + config.batch]
            ids, attn = _collate([d[0] for d in chunk], pad_id, device)
            width = ids.shape[1]
            # only positions that predict a reply token need the 49k-vocabulary head: keep the window
            # from the earliest one (replies close the trajectory; right padding keeps rows aligned left)
            start = min((r.index(True) - 1 for _, r, _, _ in chunk if True in r[1:]), default=width - 1)
            start = max(start, 0)
            scores = []
            for slot in range(len(model.expert_names)):
                model.force_expert(slot)
                logits = model(input_ids=ids, attention_mask=attn, use_cache=False, logits_to_keep=width - start).logits[:, :-1]
                scores.append(logits.float().log_softmax(-1).gather(-1, ids[:, start + 1 :, None]).squeeze(-1))
            logp = torch.stack(scores, -1)  # (batch, width-1-start, E): log p_e(token t+1) at position start+t
            for row, (tokens, reply, slot, _) in enumerate(chunk):
                n = len(tokens)
                lp = torch.cat([logp.new_zeros((start, logp.shape[-1])), logp[row, : n - 1 - start]])  # zeros: no gain
                predicts = torch.tensor(reply[1:n], dtype=torch.bool, device=lp.device)
                best_reply = int(lp[predicts].sum(0).argmax()) if predicts.any() else slot
                gain = lp.max(-1).values - lp[:, best_reply]
                labels = torch.where(predicts & (gain > config.margin), lp.argmax(-1), best_reply)
                out.append((tokens, reply, best_reply, labels.tolist() + [best_reply]))
    finally:
        model.force_expert(None)
    return out


@torch.no_grad()
def routing_stats(model: ComposedModel, tokenizer, trajectories: Sequence[Trajectory],
                  labels: Sequence[str] | None = None, batch: int = 8, max_tokens: int = 1024) -> dict:
    """How the routers split the tokens of some trajectories (real tokens only, every token of the
    rendered chat). With per-block routers a token's expert is the majority over blocks (ties: the
    lowest slot); "share" and switches use that; "share_per_router" gives each router's own split.

    {"tokens", "share": {expert: fraction}, "share_per_router": {router: {expert: fraction}},
     "switches_per_trajectory": mean count of expert changes between consecutive tokens,
     "accuracy": fraction of tokens on their label's expert, "reply_accuracy": the same over
     assistant-reply tokens only (what generation routes) — both only when labels are given}
    """
    names, E = model.expert_names, len(model.expert_names)
    device = next(model.gate_parameters()).device
    total = torch.zeros(E, dtype=torch.long)
    per_router: dict[str, torch.Tensor] = {}
    switches, hits, n_tokens, reply_hits, n_reply = [], 0, 0, 0, 0
    for s in range(0, len(trajectories), batch):
        chunk = trajectories[s : s + batch]
        encoded = [encode(tokenizer, t, max_tokens) for t in chunk]
        ids, attn = _collate([e[0] for e in encoded], tokenizer.pad_token_id, device)
        _run_decoder(model, ids, attn)
        real = attn.bool()
        for key, slots in model.routing().items():
            per_router[key] = per_router.get(key, torch.zeros(E, dtype=torch.long)) + torch.bincount(slots[real].cpu(), minlength=E)
        top = _majority(torch.stack(list(model.routing().values())), E)  # (batch, seq)
        total += torch.bincount(top[real].cpu(), minlength=E)
        n_tokens += int(real.sum())
        for row in range(len(chunk)):
            seq = top[row][real[row]].cpu()
            switches.append(int((seq[1:] != seq[:-1]).sum()))
            if labels is not None:
                right = seq == _slot(model, labels[s + row])
                reply = torch.tensor(encoded[row][1], dtype=torch.bool)
                hits, reply_hits, n_reply = hits + int(right.sum()), reply_hits + int(right[reply].sum()), n_reply + int(reply.sum())
    frac = lambda counts: {n: round(float(c) / max(int(counts.sum()), 1), 6) for n, c in zip(names, counts)}  # noqa: E731
    out = {"tokens": n_tokens, "share": frac(total), "share_per_router": {k: frac(v) for k, v in per_router.items()},
           "switches_per_trajectory": sum(switches) / max(len(switches), 1)}
    if labels is not None:
        out["accuracy"] = hits / max(n_tokens, 1)
        out["reply_accuracy"] = reply_hits / max(n_reply, 1)
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
