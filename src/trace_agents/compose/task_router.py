"""Task-level routing ("Select & Adapt"): one adapter for a whole episode, chosen from the task prompt.

The frozen base model reads a short routing prompt (the skills, numbered, then the task) and scores the
next token over the label tokens "0" (none: the base alone) .. "k" (adapter k). The scorer is a linear
head over the base's last hidden state whose rows start as the LM head's rows of those label tokens,
so an unfitted router *is* the base model's own label-token scoring; `fit` then trains only that small
head (k+1 rows) on prompts with known labels (each capability environment's tasks, optionally target
tasks labelled by the analysis). The adapters whose probabilities, sorted, fill the top-p mass are
returned; a runtime that applies one adapter per request (vLLM, `TaskRoutedPolicy`) takes the first.

This is the path vLLM can serve: per-token routing needs our composed model, per-request routing only
the adapter's name in the request (see serve/vllm.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from trace_agents.types import Message, atomic_write_text

NONE_LABEL = "none"
ROUTER_CONFIG = "task_router.json"
ROUTER_WEIGHTS = "task_router.safetensors"
MAX_TASK_CHARS = 1200
"""Characters of the first user message kept in the routing prompt (the request, not the history)."""

SYSTEM = ("You route tasks to skills. Skills:\n{skills}\n"
          "Reply with the number of the skill this task needs most, or 0 if none fits.")


def routing_prompt(messages: Sequence[Message | dict], tools: Sequence[dict], skills: dict[str, str]) -> list[dict]:
    """The chat (system + user) the base model reads: the skills, numbered from 1, then the task's
    first user message (truncated to MAX_TASK_CHARS) and the offered tool names."""
    first = next((_content(m) for m in messages if _role(m) == "user"), "")
    names = [t.get("function", t).get("name", "?") for t in tools]
    listing = "\n".join(f"{i}. {name}: {text}" for i, (name, text) in enumerate(skills.items(), start=1))
    task = first[:MAX_TASK_CHARS] + (f"\nTools: {', '.join(names)}" if names else "")
    return [{"role": "system", "content": SYSTEM.format(skills=listing)}, {"role": "user", "content": task}]


def _role(m: Message | dict) -> str:
    return m.role if isinstance(m, Message) else str(m.get("role"))


def _content(m: Message | dict) -> str:
    c = m.content if isinstance(m, Message) else m.get("content")
    if isinstance(c, list):  # OpenAI content parts
        return " ".join(p.get("text", "") for p in c if isinstance(p, dict))
    return c or ""


class TaskRouter(nn.Module):
    """Label-token scorer: probs (N, k+1) over [none, *adapters] from base last hidden states (N, hidden)."""

    def __init__(self, names: list[str], definitions: dict[str, str], label_ids: list[int], init_rows: torch.Tensor,
                 top_p: float = 0.5):
        super().__init__()
        if len(names) + 1 != len(label_ids) or init_rows.shape[0] != len(label_ids):
            raise ValueError("one label token per adapter plus one for 'none' is needed")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        self.names, self.definitions, self.label_ids, self.top_p = list(names), dict(definitions), list(label_ids), top_p
        self.head = nn.Linear(init_rows.shape[1], len(label_ids))
        with torch.no_grad():
            self.head.weight.copy_(init_rows)
            self.head.bias.zero_()

    @property
    def labels(self) -> list[str]:
        return [NONE_LABEL, *self.names]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden)  # (N, k+1) logits

    def choose(self, probs: torch.Tensor) -> list[str]:
        """Labels above the top-p cut, most probable first (always at least one)."""
        probs = probs.detach()
        order = probs.argsort(descending=True).tolist()
        chosen, mass = [], 0.0
        for i in order:
            chosen.append(self.labels[i])
            mass += float(probs[i])
            if mass >= self.top_p:
                break
        return chosen


def label_token_ids(tokenizer, n: int) -> list[int]:
    """Single-token ids of "0".."n" (the answer the routing prompt asks for)."""
    if n > 9:
        raise ValueError(f"the task router numbers skills 1..9; got {n} adapters (compose at most 9)")
    ids = []
    for d in range(n + 1):
        enc = tokenizer.encode(str(d), add_special_tokens=False)
        if len(enc) != 1:
            raise ValueError(f"the tokenizer splits the label {d!r} into {len(enc)} tokens; the router needs one")
        ids.append(enc[0])
    return ids


def new_router(base_model, tokenizer, definitions: dict[str, str], top_p: float = 0.5) -> TaskRouter:
    """A router initialised to the base model's own label-token scores (no training yet)."""
    ids = label_token_ids(tokenizer, len(definitions))
    rows = base_model.get_output_embeddings().weight[ids].detach().float().cpu()
    return TaskRouter(list(definitions), definitions, ids, rows, top_p)


@torch.no_grad()
def features(base_model, tokenizer, chats: Sequence[list[dict]], batch: int = 8) -> torch.Tensor:
    """(N, hidden) final-norm hidden state at the last prompt position, adapters off."""
    from trace_agents.compose.model import ComposedModel

    forced = None
    if isinstance(base_model, ComposedModel):  # the router reads the frozen base: force the "none" slot
        forced = base_model.forced_expert
        base_model.force_expert(0)
    try:
        decoder = base_model.get_decoder()
        device = next(base_model.parameters()).device
        out = []
        for s in range(0, len(chats), batch):
            texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats[s : s + batch]]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            hidden = decoder(**enc).last_hidden_state  # (b, seq, hidden); left padding: last column is real
            out.append(hidden[:, -1].float().cpu())
        return torch.cat(out) if out else torch.zeros(0, base_model.config.hidden_size)
    finally:
        if isinstance(base_model, ComposedModel):
            base_model.force_expert(forced)


def fit(router: TaskRouter, feats: torch.Tensor, labels: Sequence[str], *, steps: int = 200, lr: float = 1e-2,
        weight_decay: float = 1e-3) -> dict[str, Any]:
    """Train the head only, full batch (features are precomputed, so a step costs microseconds)."""
    y = torch.tensor([router.labels.index(lab) for lab in labels])
    # Hidden states have norms in the tens: standardising them inside the loss would change the model,
    # so instead a small lr on the raw head, with the zero-shot rows as the starting point.
    opt = torch.optim.AdamW(router.head.parameters(), lr=lr, weight_decay=weight_decay)
    before = _accuracy(router, feats, y)
    for _ in range(steps):
        loss = F.cross_entropy(router(feats), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return {"examples": len(y), "steps": steps, "loss": float(loss.detach()) if steps else None,
            "accuracy_before": before, "accuracy": _accuracy(router, feats, y)}


@torch.no_grad()
def _accuracy(router: TaskRouter, feats: torch.Tensor, y: torch.Tensor) -> float:
    return float((router(feats).argmax(-1) == y).float().mean()) if len(y) else 0.0


class RouteFn:
    """(messages, tools) -> adapter name or None (the base); what the vLLM proxy calls per request."""

    def __init__(self, router: TaskRouter, base_model, tokenizer):
        self.router, self.base_model, self.tokenizer = router, base_model, tokenizer

    def ranked(self, messages, tools) -> list[str]:
        chat = routing_prompt(messages, tools, self.router.definitions)
        probs = self.router(features(self.base_model, self.tokenizer, [chat])).softmax(-1)[0]
        return self.router.choose(probs)

    def __call__(self, messages, tools) -> str | None:
        first = self.ranked(messages, tools)[0]
        return None if first == NONE_LABEL else first


def save_router(router: TaskRouter, folder: Path, metrics: dict | None = None) -> None:
    from safetensors.torch import save_file

    tmp = folder / f".{ROUTER_WEIGHTS}.tmp"
    save_file({k: v.contiguous() for k, v in router.head.state_dict().items()}, str(tmp))
    tmp.replace(folder / ROUTER_WEIGHTS)
    atomic_write_text(folder / ROUTER_CONFIG, json.dumps({
        "names": router.names, "definitions": router.definitions, "label_ids": router.label_ids,
        "top_p": router.top_p, "fit": metrics}, indent=2))


def load_router(folder: Path) -> TaskRouter:
    from safetensors.torch import load_file

    path = Path(folder) / ROUTER_CONFIG
    if not path.exists():
        raise ValueError(f"{folder}: no {ROUTER_CONFIG}; build the composed model with "
                         "`trace-agents compose --task-router` to fit one")
    meta = json.loads(path.read_text())
    state = load_file(str(Path(folder) / ROUTER_WEIGHTS))
    router = TaskRouter(meta["names"], meta["definitions"], meta["label_ids"], state["weight"], meta["top_p"])
    router.head.load_state_dict(state)
    return router.eval()


class TaskRoutedPolicy:
    """A policy over a composed model that applies one adapter per episode, chosen by the task router
    from the episode's first user message and tools (cached, so every step of an episode, and every
    sample of a task, runs the same adapter). Requests are grouped by adapter: one batched generate each."""

    def __init__(self, inner, router: TaskRouter):
        from trace_agents.compose.model import ComposedModel

        if not isinstance(inner.model, ComposedModel):
            raise TypeError("TaskRoutedPolicy needs a TransformersPolicy over a ComposedModel")
        self.inner, self.router = inner, router
        self.name = inner.name.replace("+composed", "+task-router")
        self.chosen: dict[str, str] = {}
        """Routing key -> label of every episode seen (for routing statistics)."""

    def act(self, requests, sampling):
        chats = [routing_prompt(r.messages, r.tools, self.router.definitions) for r in requests]
        keys = [json.dumps(c, sort_keys=True) for c in chats]
        new = {k: c for k, c in zip(keys, chats) if k not in self.chosen}  # episodes not routed yet
        if new:
            feats = features(self.inner.model, self.inner.tokenizer, list(new.values()))
            with torch.no_grad():
                probs = self.router(feats).softmax(-1)
            self.chosen.update({k: self.router.choose(p)[0] for k, p in zip(new, probs)})
        replies = [None] * len(requests)
        model = self.inner.model
        for label in dict.fromkeys(self.chosen[k] for k in keys):
            idx = [i for i, k in enumerate(keys) if self.chosen[k] == label]
            model.force_expert(0 if label == NONE_LABEL else label)
            try:
                for i, reply in zip(idx, self.inner.act([requests[i] for i in idx], sampling)):
                    replies[i] = reply
            finally:
                model.force_expert(None)
        return replies

    def share(self) -> dict[str, float]:
        """Share of routed episodes per label."""
        n = max(len(self.chosen), 1)
        return {lab: sum(v == lab for v in self.chosen.values()) / n for lab in self.router.labels}


def env_prompts(make_env, n: int, skills: dict[str, str], split: str = "train") -> list[list[dict]]:
    """Routing prompts of the first `n` seeds of an environment (a reset is cheap: no model runs)."""
    env = make_env()
    chats = []
    for seed in env.seeds(split)[:n]:
        messages = env.reset(seed)
        chats.append(routing_prompt(messages, env.tools, skills))
    return chats


def fit_task_router(model, tokenizer, definitions: dict[str, str], examples: dict[str, list[list[dict]]], *,
                    top_p: float = 0.5, steps: int = 200) -> tuple[TaskRouter, dict[str, Any]]:
    """A router for `definitions` (adapter name -> capability definition), fitted on routing prompts
    per label (adapter names, or "none" for tasks the base should keep)."""
    router = new_router(model, tokenizer, definitions, top_p)
    unknown = set(examples) - set(router.labels)
    if unknown:
        raise ValueError(f"examples for unknown labels {sorted(unknown)}; labels are {router.labels}")
    chats = [c for lab in examples for c in examples[lab]]
    labels = [lab for lab in examples for _ in examples[lab]]
    metrics = fit(router, features(model, tokenizer, chats), labels, steps=steps)
    return router.eval(), metrics
