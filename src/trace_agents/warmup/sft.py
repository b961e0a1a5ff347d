"""Supervised format warm-up: a few full fine-tuning steps on procedurally generated
function-calling examples (warmup/data.py, never BFCL data), loss on the assistant reply only.

Why: the embedded SmolLM2-135M scores ~0% on BFCL zero-shot (malformed or truncated calls). GRPO
cannot learn from a model that never emits a call, so the frozen base of every later stage is this
warmed model. It should learn the *format*, not the benchmark: what remains (value extraction,
function choice) is what the analysis stage is meant to find.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

from trace_agents.agent.format import END_OF_TURN
from trace_agents.models import load_model
from trace_agents.warmup.data import Example, make_examples
from trace_agents.warmup.followup import followup_example

# Warm-up seeds live far from 0 so that they never coincide with a synthetic environment's seeds.
SEED_BASE = 50_000_000


@dataclass
class WarmupConfig:
    steps: int = 30
    """Optimizer steps. The format is learned within ~10; more steps mostly teach value copying."""
    batch_size: int = 4
    """Examples per step."""
    lr: float = 1e-4
    """AdamW learning rate (constant)."""
    max_len: int = 768
    """Examples longer than this many tokens are cut from the left of the prompt."""
    seed: int = 0
    """Selects the example stream and the torch seed."""
    followup_per_batch: int = 2
    """Multi-turn examples (warmup/followup.py) added to each batch: the protocol of reading a tool
    result, calling again with it, and stopping. 0 gives the single-turn-only warm-up."""


def encode_example(tokenizer, ex: Example, max_len: int) -> tuple[list[int], list[int]]:
    """(input ids, labels) with labels -100 on the prompt (earlier turns and tool results included):
    the model learns to write the reply and to end its turn, nothing else."""
    prompt = tokenizer.apply_chat_template(
        [m.to_chat() for m in ex.messages], tools=ex.tools, tokenize=False, add_generation_prompt=True
    )
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    r_ids = tokenizer(ex.reply + END_OF_TURN, add_special_tokens=False)["input_ids"]
    p_ids = p_ids[-max(1, max_len - len(r_ids)) :]
    return p_ids + r_ids, [-100] * len(p_ids) + r_ids


def collate(pairs: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(ids) for ids, _ in pairs)
    ids = torch.full((len(pairs), width), pad_id)
    labels = torch.full((len(pairs), width), -100)
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    for row, (i, l) in enumerate(pairs):
        ids[row, : len(i)], labels[row, : len(l)], mask[row, : len(i)] = torch.tensor(i), torch.tensor(l), 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def warmup(
    model_name: str,
    out: str | Path,
    config: WarmupConfig = WarmupConfig(),
    *,
    device: str | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> dict:
    """Fine-tune `model_name` and save a transformers folder at `out` (written atomically)."""
    out = Path(out)
    torch.manual_seed(config.seed)
    model, tok = load_model(model_name, device=device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    losses, started = [], time.time()
    for step in range(config.steps):
        first = SEED_BASE + config.seed * 1_000_000 + step * config.batch_size
        examples = make_examples(first, config.batch_size) + [
            followup_example(first + j) for j in range(config.followup_per_batch)]
        pairs = [encode_example(tok, ex, config.max_len) for ex in examples]
        batch = {k: v.to(model.device) for k, v in collate(pairs, tok.pad_token_id).items()}
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if on_step:
            on_step(step, losses[-1])
    report = {"model": model_name, "config": asdict(config), "losses": losses, "seconds": time.time() - started}
    _save(model, tok, out, report)
    return report


def _save(model, tok, out: Path, report: dict) -> None:
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.eval()
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "warmup.json").write_text(json.dumps(report, indent=2))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
