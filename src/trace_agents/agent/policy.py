"""Policies turn a batch of conversations into assistant replies.

`TransformersPolicy` runs a local model: one batched `generate` per call (left padding, KV cache,
stop at end of turn; an episode opening shared by several rows of a batch — a GRPO group's, on
every turn — is prefilled once). `OpenAIPolicy` (openai_policy.py) calls any OpenAI-compatible server.
Both return parsed `Reply`s: malformed model text becomes `error`, never an exception.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from trace_agents.agent.format import END_OF_TURN, parse_reply
from trace_agents.types import Message


@dataclass
class Request:
    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)
    call_id_prefix: str = "call"


@dataclass
class Reply:
    message: Message
    text: str
    error: str | None = None
    new_tokens: int = 0
    prompt_tokens: int = 0
    truncated: bool = False
    completion_ids: list[int] | None = None
    """Token ids the model sampled (local policies), end-of-turn included: training scores exactly
    these tokens instead of a re-tokenisation of the text."""


@dataclass
class Sampling:
    """Decoding settings shared by every policy."""

    max_new_tokens: int = 256
    """Tokens generated per assistant turn at most (a reply cut here is marked truncated)."""
    temperature: float = 0.0
    """0 means greedy decoding."""
    top_p: float = 1.0
    seed: int = 0
    """Seeds sampling so that a rerun gives the same rollouts."""


class Policy(Protocol):
    name: str

    def act(self, requests: list[Request], sampling: Sampling) -> list[Reply]: ...


class TransformersPolicy:
    """A local causal LM with our chat template. `batch_size` caps sequences per generate call.
    `share_prompts`: prefill each distinct episode opening of a batch once and copy its KV cache to
    the rows that share it (see `_encode_shared`; a model that keeps state across decode steps, like
    the composed model's running routing means, must turn it off)."""

    def __init__(self, model, tokenizer, name: str = "local", batch_size: int = 16, share_prompts: bool = True):
        self.model, self.tokenizer, self.name, self.batch_size = model, tokenizer, name, batch_size
        self.share_prompts = share_prompts
        self.eot_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)

    def render(self, request: Request) -> str:
        msgs = [m.to_chat() for m in request.messages]
        return self.tokenizer.apply_chat_template(
            msgs, tools=request.tools or None, tokenize=False, add_generation_prompt=True
        )

    def act(self, requests: list[Request], sampling: Sampling) -> list[Reply]:
        # Sorting by prompt length keeps padding (wasted compute) small within each batch.
        texts = [self.render(r) for r in requests]
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        replies: list[Reply | None] = [None] * len(requests)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            for i, reply in zip(idx, self._generate([texts[i] for i in idx], [requests[i] for i in idx], sampling)):
                replies[i] = reply
        return replies  # type: ignore[return-value]

    @torch.no_grad()
    def _generate(self, texts: list[str], requests: list[Request], sampling: Sampling) -> list[Reply]:
        device = next(self.model.parameters()).device
        enc = self._encode_shared(texts, requests, device) if self.share_prompts and len(texts) > 1 else None
        if enc is None:
            enc = dict(self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device))
        torch.manual_seed(sampling.seed)
        greedy = sampling.temperature <= 0
        out = self.model.generate(
            **enc,
            max_new_tokens=sampling.max_new_tokens,
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None,
            eos_token_id=self.eot_id,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        new = out[:, enc["input_ids"].shape[1] :]
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        replies = []
        for row, req, plen in zip(new.tolist(), requests, prompt_lens):
            ended = self.eot_id in row
            sampled = row[: row.index(self.eot_id) + 1] if ended else row
            row = sampled[:-1] if ended else sampled
            text = self.tokenizer.decode(row, skip_special_tokens=True)
            parsed = parse_reply(text, req.call_id_prefix)
            error = parsed.error
            if not ended:
                error = "; ".join(filter(None, [error, f"truncated at {sampling.max_new_tokens} new tokens"]))
            replies.append(
                Reply(parsed.message, text, error or None, len(sampled), int(plen), truncated=not ended, completion_ids=sampled)
            )
        return replies

    def opening(self, request: Request) -> str:
        """The episode's opening as rendered text: system, tool docs and the first user turn. Every
        later prompt of the episode starts with it."""
        msgs = [m.to_chat() for m in request.messages]
        first_user = next((i for i, m in enumerate(msgs) if m["role"] == "user"), len(msgs) - 1)
        return self.tokenizer.apply_chat_template(msgs[: first_user + 1], tools=request.tools or None, tokenize=False)

    def _encode_shared(self, texts: list[str], requests: list[Request], device) -> dict | None:
        """generate() inputs with rows laid out [pad | opening | pad | rest of the prompt]: each
        distinct opening is prefilled once and its KV cache copied to its rows, then only the rest
        (the generation prompt on a first turn; replies and tool results since, later) is prefilled
        per row, all but the last token, which generate runs before decoding. The G rollouts of a
        GRPO group share their opening (the tool docs alone: ~600 tokens) on every turn; prefilling
        it per row cost G times the compute. Positions count real tokens only, so the padding in
        the middle changes no logit. None (plain encoding) when no two rows share an opening, or
        when the template does not render an opening as a token prefix of its prompt."""
        tok = self.tokenizer
        openings = [self.opening(r) for r in requests]
        index = {o: i for i, o in enumerate(dict.fromkeys(openings))}
        if len(index) == len(texts):
            return None
        heads = [tok(o, add_special_tokens=False)["input_ids"] for o in index]
        group = [index[o] for o in openings]
        full = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
        if any(len(f) <= len(heads[g]) or f[: len(heads[g])] != heads[g] for f, g in zip(full, group)):
            return None
        width_head = max(map(len, heads))
        width_rest = max(len(f) - len(heads[g]) for f, g in zip(full, group))
        ids = torch.full((len(full), width_head + width_rest), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, (f, g) in enumerate(zip(full, group)):
            for end, part in ((width_head, heads[g]), (ids.shape[1], f[len(heads[g]) :])):  # each part right-aligned
                ids[row, end - len(part) : end] = torch.tensor(part)
                mask[row, end - len(part) : end] = 1
        ids, mask = ids.to(device), mask.to(device)
        holder = torch.tensor([group.index(g) for g in range(len(heads))], device=device)  # a row of each opening
        cache = self._prefill(ids[holder, :width_head], mask[holder, :width_head], torch.tensor(group, device=device))
        if width_rest > 1:
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            self.model(input_ids=ids[:, width_head:-1], attention_mask=mask[:, :-1],
                       position_ids=positions[:, width_head:-1], use_cache=True, **{cache_keyword(): cache})
        return {"input_ids": ids, "attention_mask": mask, cache_keyword(): cache}

    def _prefill(self, ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor):
        """KV cache of the left-padded sequences `ids`, each computed once and copied to `rows`."""
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding: real tokens count from 0
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache = getattr(out, cache_keyword())
        cache.reorder_cache(rows)  # index_select on the batch: repeated rows copy a prompt's cache
        return cache


@functools.cache
def cache_keyword() -> str:
    """transformers 5.x renamed `past_key_values` to `cache` (the old name still works, with a warning).
    Asked on first use, not at import: importing a model class costs start-up time."""
    import inspect

    from transformers import LlamaForCausalLM

    return "cache" if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters else "past_key_values"


def make_policy(model: str, *, adapter: str | None = None, composed: str | None = None, router: str = "token",
                device: str | None = None, dtype: str = "float32", batch_size: int = 16) -> Policy:
    """A policy for the MODEL argument of the command line (DESIGN.md §9), optionally with one LoRA
    adapter folder (PEFT) or a composed-model folder on top (`router`: token | task, see compose/)."""
    from trace_agents.models import ModelError, load_model

    if adapter and composed:
        raise ModelError("give --adapter or --composed, not both")
    if composed:
        from trace_agents.compose import load_composed_policy

        return load_composed_policy(composed, model=model, device=device, dtype=dtype, batch_size=batch_size,
                                    router=router)
    if model.startswith("openai:"):
        if adapter:
            raise ModelError("--adapter needs a local model; a server loads adapters itself (see export-vllm)")
        from trace_agents.agent.openai_policy import OpenAIPolicy

        try:
            return OpenAIPolicy.from_spec(model)
        except ValueError as e:
            raise ModelError(str(e)) from None

    m, tok = load_model(model, device=device, dtype=dtype)
    if adapter:
        m = _with_adapter(m, adapter)
    return TransformersPolicy(m, tok, name=f"{model}+{adapter}" if adapter else model, batch_size=batch_size)


def _with_adapter(model, adapter: str):
    from pathlib import Path

    from peft import PeftModel

    from trace_agents.models import ModelError

    if not (Path(adapter) / "adapter_config.json").exists():
        raise ModelError(f"--adapter {adapter}: no adapter_config.json there (give a PEFT LoRA folder, e.g. RUN/adapter)")
    return PeftModel.from_pretrained(model, adapter).eval()
