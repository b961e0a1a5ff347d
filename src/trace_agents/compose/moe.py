"""The layers of the token-level top-1 mixture of LoRA experts (DESIGN.md §1 stage 4).

For every LoRA-targeted linear layer:   y = W·x + s_e · B_e · A_e · x,   e = the slot chosen for this token.
Slot 0 is "none" (base only: A_0 = B_0 = 0, s_0 = 0); slots 1..E-1 are the adapters, in order.

- `Router` turns a hidden state into slot logits (one per block, or one global).
- `Route` is the small per-block context: the slot of every token of the *current* forward call.
  A forward pre-hook on the decoder block fills it, so under `generate` with a KV cache each call
  routes exactly its new tokens, and the decision is made once per block, before attention.
- `LoraExperts` replaces one `nn.Linear` and adds the chosen expert's delta, computing only the
  tokens routed to each expert (top-1: one delta per token, never a weighted sum over experts).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

Kernel = Literal["auto", "index", "gather"]


class Router(nn.Module):
    """Top-1 gate: a Linear over the RMS-normalised hidden state.

    hidden (batch, seq, hidden_size) -> logits (batch, seq, n_slots), in float32.

    The input is the residual stream entering the block (the embeddings for the global router).
    Its scale grows with depth and differs between models, so it is RMS-normalised here, without a
    learned scale (the Linear supplies one). Reading the stream rather than the block's own input
    norm needs nothing but the decoder layer list, so any decoder architecture works unchanged.
    Zero-initialised: all logits tie, argmax takes slot 0, so an untrained composed model *is* the
    base model until its gates are trained.
    """

    def __init__(self, hidden_size: int, n_slots: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.proj = nn.Linear(hidden_size, n_slots)  # weight (n_slots, hidden_size), bias (n_slots,)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def features(self, hidden: torch.Tensor) -> torch.Tensor:
        """The RMS-normalised float32 states the Linear reads, (..., hidden_size)."""
        return F.rms_norm(hidden.float(), (hidden.shape[-1],), eps=self.eps)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.score(self.features(hidden))  # (batch, seq, n_slots)

    def score(self, features: torch.Tensor) -> torch.Tensor:
        """Logits of already normalised features (`features(hidden)`)."""
        return F.linear(features.float(), self.proj.weight.float(), self.proj.bias.float())


def balance_loss(logits: torch.Tensor) -> torch.Tensor:
    """Switch Transformer load-balancing loss of (..., tokens, E) router logits: E · Σ_e f_e · P_e,
    with f_e the share of tokens whose top-1 is e and P_e their mean probability of e (1 when
    balanced, up to E when collapsed on one slot), averaged over leading (router) dims. Only P
    carries gradient, as in Switch."""
    n_slots = logits.shape[-1]
    probs = logits.softmax(-1)
    f = F.one_hot(logits.argmax(-1), n_slots).to(probs.dtype).mean(-2)
    return (n_slots * (f * probs.mean(-2)).sum(-1)).mean()


class Route:
    """What one router decided for the tokens of the current forward call (a plain object, not a
    module: it holds no weights). Shared by the `LoraExperts` of one block, or of all blocks."""

    def __init__(self, n_slots: int):
        self.n_slots = n_slots
        self.forced: int | None = None
        """Slot every token takes (router bypassed), or None when the router decides."""
        self.ids: torch.Tensor | None = None
        """(batch, seq) long: the slot of every token (None when forced)."""
        self.gate: torch.Tensor | None = None
        """(batch, seq) float multiplier of each token's delta, or None for 1 (inference)."""
        self.logits: torch.Tensor | None = None
        """(batch, seq, n_slots) float32 router logits (None when forced)."""
        self.mask: torch.Tensor | None = None
        """(batch, seq) bool: real tokens (False on padding), or None when all are real."""
        self.shape: tuple[int, int] = (0, 0)
        self._device: torch.device | None = None
        self._groups: list[tuple[int, torch.Tensor]] | None = None

    def set(self, ids: torch.Tensor, gate: torch.Tensor | None, logits: torch.Tensor, mask: torch.Tensor | None) -> None:
        self.forced, self.ids, self.gate, self.logits, self.mask = None, ids, gate, logits, mask
        self.shape, self._groups = tuple(ids.shape), None

    def force(self, slot: int, shape: tuple[int, int], mask: torch.Tensor | None, device: torch.device) -> None:
        self.forced, self.ids, self.gate, self.logits, self.mask = slot, None, None, None, mask
        self.shape, self._groups, self._device = shape, None, device

    def slots(self) -> torch.Tensor:
        """(batch, seq) long slot per token, forced or routed."""
        if self.ids is not None:
            return self.ids
        return torch.full(self.shape, int(self.forced or 0), dtype=torch.long, device=self._device)

    def groups(self) -> list[tuple[int, torch.Tensor]]:
        """[(slot, flat token indices)] for every adapter slot that got tokens; computed once per
        block and forward, then shared by the block's 4-7 projections."""
        if self._groups is None:
            flat = self.ids.reshape(-1)
            counts = torch.bincount(flat, minlength=self.n_slots).tolist()  # one host sync per block
            chunks = torch.split(torch.argsort(flat, stable=True), counts)
            self._groups = [(e, chunks[e]) for e in range(1, self.n_slots) if counts[e]]
        return self._groups


class LoraExperts(nn.Module):
    """One base `nn.Linear` plus E stacked LoRA experts, applied top-1 per token.

    A: (E, R, in) holds s_e·A_e (the LoRA scale folded in once, saving an op per expert and call;
    exact when s_e is a power of two, as with alpha = r or 2r, else within float rounding) and
    B: (E, out, R). R = the largest rank of any expert here; smaller ranks are zero-padded (exact)
    and sliced off again on the per-expert path. Slot 0 ("none") and experts that do not target
    this layer have rank 0 and zero weights. Frozen: `requires_grad=False`.

    Two ways to apply the deltas, same result up to float summation order:
    - "index": per expert, gather its tokens, two small matmuls, scatter-add (index_add_) back.
      Only top-1 work, a few ops per expert, one host sync per block (shared by its projections).
      Fastest on CPU for prefill and decode alike (SmolLM2, 4 rank-16 experts, benchmarks/
      moe_forward.py on a loaded 2-core machine: batch 8 × 256 tokens took 1.10× the base with
      "index" vs 5.7× with "gather"; a batch-8 decode step 1.3-1.4× vs 1.4-1.95×).
    - "gather": gather each token's own A/B, then two batched matvecs (bmm): fixed op count and no
      host sync, but (tokens, R, in) of gathered weights.
    "auto" = "gather" on CUDA for calls of at most `gather_max_tokens` tokens (decode steps, where
    a per-block host sync would stall kernel launch; chosen by reasoning, not measured here),
    "index" otherwise.
    """

    def __init__(self, base: nn.Linear, A: torch.Tensor, B: torch.Tensor, scales: list[float], ranks: list[int],
                 route: Route, kernel: Kernel = "auto", gather_max_tokens: int = 64):
        super().__init__()
        self.base = base
        scale = torch.tensor(scales, dtype=A.dtype, device=A.device).view(-1, 1, 1)
        self.A = nn.Parameter(A * scale, requires_grad=False)  # (E, R, in): s_e·A_e
        self.B = nn.Parameter(B, requires_grad=False)  # (E, out, R)
        self.scales, self.ranks = list(scales), list(ranks)
        self.route, self.kernel, self.gather_max_tokens = route, kernel, gather_max_tokens

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    def delta(self, x: torch.Tensor, slot: int) -> torch.Tensor:
        """B_e · (s_e·A_e) · x for one expert: PEFT's lora.Linear ops with the scale folded in."""
        r = self.ranks[slot]
        return F.linear(F.linear(x, self.A[slot, :r]), self.B[slot, :, :r])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (batch, seq, in)
        y = self.base(x)  # (batch, seq, out)
        route = self.route
        if route.forced is not None:
            return y + self.delta(x, route.forced) if self.ranks[route.forced] else y
        if route.ids is None:  # called outside a routed block: base only
            return y
        xf, n = x.reshape(-1, x.shape[-1]), x.shape[:-1].numel()
        gate = route.gate.reshape(-1) if route.gate is not None else None  # (tokens,)
        if self.kernel == "gather" or (self.kernel == "auto" and x.is_cuda and n <= self.gather_max_tokens):
            ids = route.ids.reshape(-1)  # (tokens,)
            h = torch.bmm(self.A[ids], xf.unsqueeze(-1))  # (tokens, R, 1)
            d = torch.bmm(self.B[ids], h).squeeze(-1)  # (tokens, out); slot 0 has zero weights
            if gate is not None:
                d = d * gate.to(d.dtype).unsqueeze(-1)
            return y + d.view_as(y)
        yf = y.view(-1, y.shape[-1])  # (tokens, out), a view: index_add_ writes into y
        for e, idx in route.groups():
            if not self.ranks[e]:
                continue
            d = self.delta(xf.index_select(0, idx), e)  # (tokens of e, out)
            if gate is not None:
                d = d * gate.index_select(0, idx).unsqueeze(-1).to(d.dtype)
            yf.index_add_(0, idx, d)  # in place is safe for autograd: Linear does not save its output
        return y
