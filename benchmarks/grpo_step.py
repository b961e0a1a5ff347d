"""Wall time per GRPO optimizer step: our loop (`trace_agents.training.grpo.train`) against TRL's
`GRPOTrainer`, same single-turn config, measured one after the other in this process. Prints one
JSON object with the ratio ours/TRL (target <= 1.0), also per generated token.

    python benchmarks/grpo_step.py                                   # tiny-random, P=2, G=4, 32 tokens
    python benchmarks/grpo_step.py --model smollm2-135m --max-new-tokens 64 --steps 2

Needs TRL, which the project does not depend on: `.venv/bin/pip install -e '.[bench]'` first.

What is held equal: model and dtype (fp32), LoRA (r, alpha, dropout 0, q/k/v/o/gate/up/down), AdamW
(lr constant, weight decay 0, grad-norm clip 1.0), P prompts x G completions per optimizer step in
micro-batches of the same size (TRL: per_device_train_batch_size = micro batch, gradient accumulation
= P*G / micro batch, one generation per step), max completion length, temperature 1.0, no top-k/top-p,
clip eps 0.2, no KL (beta 0), token-level ("dapo") loss, group-scaled advantages, no gradient
checkpointing, no bf16. Prompts: the env's first message for a fixed pool of train seeds (by default
exactly P seeds, so both loops see the same P prompts every step), rendered with our chat template
and the task's tools into text; TRL gets that text as a plain-string prompt (it tokenizes it without
re-templating; the script checks the token ids equal ours). TRL's reward function replays each
completion into a fresh env: reset(seed) -> step(parse_reply(text).message) -> verdict().reward.

`--signal tiebreak` (default) adds 1e-3 x hash(reply) to every reward, in both loops alike. Reason:
an untrained model earns reward 0 everywhere; our loop then drops every group (no signal) and skips
the backward pass, while TRL still runs forward/backward on zero advantages, so the ratio would
compare different work. With the tie-break every group has signal and both loops do the full update.
`--signal env` measures the plain env rewards (shows what the skip saves in practice).

Step time: ours = the "seconds" of each step's metrics (rollout + update); TRL = wall time between
consecutive `on_step_end` callbacks (generation + reward + micro-batches + optimizer step + its
logging). Generation seconds (ours: the rollout call; TRL: `_generate_single_turn`) are reported
per step too, so the rest of a step is the update. The first `--warmup` steps of each are dropped; the median of the next `--steps` is kept.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import os
import resource
import statistics
import sys
import tempfile
import time
import warnings
import zlib
from pathlib import Path
from typing import Any

import torch

from trace_agents.agent.format import parse_reply
from trace_agents.envs.base import resolve_env
from trace_agents.training import grpo as grpo_mod
from trace_agents.training.grpo import LORA_TARGETS, GRPOConfig

TIEBREAK = 1e-3


def reply_hash(message) -> float:
    """A number in [0, 1) from the reply's text and calls (call ids excluded: they differ by caller)."""
    calls = [(c.function.name, c.function.arguments) for c in (message.tool_calls or [])]
    key = json.dumps([message.content or "", calls], ensure_ascii=False)
    return zlib.crc32(key.encode()) / 2**32


class BenchEnv:
    """The env under test with a fixed seed pool and, optionally, the reward tie-break."""

    def __init__(self, inner, pool: list[int], tiebreak: bool):
        self.inner, self.pool, self.tiebreak = inner, pool, tiebreak
        self._last = None

    name = property(lambda self: self.inner.name)
    task_id = property(lambda self: self.inner.task_id)
    tools = property(lambda self: self.inner.tools)

    def seeds(self, split):
        return list(self.pool)

    def reset(self, seed):
        self._last = None
        return self.inner.reset(seed)

    def step(self, message):
        self._last = message
        return self.inner.step(message)

    def verdict(self):
        v = self.inner.verdict()
        if self.tiebreak and self._last is not None:
            v = v.model_copy(update={"reward": v.reward + TIEBREAK * reply_hash(self._last)})
        return v

    def hint(self):
        return self.inner.hint() if hasattr(self.inner, "hint") else None


class Captured(logging.Handler):
    """Collects WARNING+ records of the libraries involved (they still print as usual)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(f"{record.name}: {record.getMessage()}"[:400])


def median_after_warmup(values: list[float], warmup: int) -> float | None:
    kept = values[warmup:]
    return round(statistics.median(kept), 3) if kept else None


# ---- ours ----------------------------------------------------------------------------------------
def run_ours(args, make_env, config: GRPOConfig) -> dict[str, Any]:
    generated: list[int] = []
    rollout_seconds: list[float] = []
    real_rollout = grpo_mod.rollout

    def counting_rollout(*a, **kw):  # generated tokens per step, including groups the update drops
        t0 = time.perf_counter()
        trajs = real_rollout(*a, **kw)
        rollout_seconds.append(round(time.perf_counter() - t0, 2))
        generated.append(sum(t.info["new_tokens"] for t in trajs))
        return trajs

    records: list[dict] = []
    grpo_mod.rollout = counting_rollout
    try:
        with tempfile.TemporaryDirectory(prefix="grpo_step_ours_") as out:
            def on_step(record: dict) -> None:
                records.append(record)
                print(f"ours step {record['step']}: {record['seconds']} s, rollout {rollout_seconds[-1]} s, "
                      f"{generated[-1]} tokens", file=sys.stderr, flush=True)

            grpo_mod.train(make_env, args.model, out, config, resume=False, on_step=on_step)
    finally:
        grpo_mod.rollout = real_rollout
    seconds = [r["seconds"] for r in records]
    kept = slice(args.warmup, None)
    return {
        "median_step_seconds": median_after_warmup(seconds, args.warmup),
        "step_seconds": seconds,
        "generation_seconds_per_step": rollout_seconds,
        "generated_tokens_per_step": generated,
        "update_tokens_per_step": [int(r["tokens"]) for r in records],
        "median_generated_tokens": statistics.median(generated[kept]) if generated[kept] else None,
        "dropped_groups_per_step": [r["dropped_groups"] for r in records],
        "reward_per_step": [round(r["reward"], 4) for r in records],
    }


# ---- TRL -----------------------------------------------------------------------------------------
def run_trl(args, make_env, pool: list[int], tok, prompts: list[str]) -> dict[str, Any]:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig as TrlConfig
    from trl import GRPOTrainer

    from trace_agents.models import load_model

    base, _ = load_model(args.model)
    present = {n.rsplit(".", 1)[-1] for n, _ in base.named_modules()}
    lora = LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=0.0,
                      target_modules=[t for t in LORA_TARGETS if t in present], task_type="CAUSAL_LM")
    dataset = Dataset.from_list([{"prompt": p, "seed": s} for p, s in zip(prompts, pool)])

    generated: list[int] = []
    rewards_seen: list[list[float]] = []

    def env_reward(prompts, completions, completion_ids, seed, **kwargs):
        out = []
        for text, s in zip(completions, seed):
            env = make_env()
            env.reset(int(s))
            env.step(parse_reply(text).message)
            out.append(float(env.verdict().reward))
        generated.append(sum(len(ids) for ids in completion_ids))
        rewards_seen.append(out)
        return out

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.last = None
            self.intervals: list[float] = []

        def on_train_begin(self, *a, **kw):
            self.last = time.perf_counter()

        def on_step_end(self, *a, **kw):
            now = time.perf_counter()
            self.intervals.append(now - self.last)
            self.last = now

    total = args.warmup + args.steps
    with tempfile.TemporaryDirectory(prefix="grpo_step_trl_") as out:
        cfg = TrlConfig(
            output_dir=out, max_steps=total, learning_rate=args.lr, lr_scheduler_type="constant",
            weight_decay=0.0, max_grad_norm=1.0, optim="adamw_torch",
            per_device_train_batch_size=args.micro_batch,
            gradient_accumulation_steps=args.prompts * args.group_size // args.micro_batch,
            num_generations=args.group_size, max_completion_length=args.max_new_tokens,
            temperature=1.0, top_p=1.0, top_k=0, beta=0.0, epsilon=0.2, scale_rewards="group",
            logging_steps=1, report_to=[], save_strategy="no", bf16=False, fp16=False,
            gradient_checkpointing=False, use_cpu=not torch.cuda.is_available(), seed=args.seed,
            disable_tqdm=True, dataloader_num_workers=0, remove_unused_columns=False, log_completions=False,
        )
        timer = StepTimer()
        trainer = GRPOTrainer(model=base, reward_funcs=[env_reward], args=cfg, train_dataset=dataset,
                              processing_class=tok, peft_config=lora, callbacks=[timer])
        settings = {"loss_type": cfg.loss_type, "steps_per_generation": cfg.steps_per_generation,
                    "generation_batch_size": cfg.generation_batch_size,
                    "per_device_train_batch_size": cfg.per_device_train_batch_size,
                    "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
                    "eos_token_ids": list(trainer.eos_token_ids)}
        real_generate = trainer._generate_single_turn
        gen_seconds: list[float] = []

        def timed_generate(*a, **kw):
            t0 = time.perf_counter()
            result = real_generate(*a, **kw)
            gen_seconds.append(round(time.perf_counter() - t0, 2))
            return result

        trainer._generate_single_turn = timed_generate
        trainer.train()
        logs = [h for h in trainer.state.log_history if "loss" in h and "step" in h]
    kept = slice(args.warmup, None)
    return {
        "median_step_seconds": median_after_warmup(timer.intervals, args.warmup),
        "step_seconds": [round(x, 2) for x in timer.intervals],
        "generation_seconds_per_step": gen_seconds,
        "generated_tokens_per_step": generated,
        "median_generated_tokens": statistics.median(generated[kept]) if generated[kept] else None,
        "completions_mean_length_per_step": [h.get("completions/mean_length") for h in logs],
        "frac_reward_zero_std_per_step": [h.get("frac_reward_zero_std") for h in logs],
        "reward_per_step": [round(sum(r) / len(r), 4) for r in rewards_seen],
        "settings": settings,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-random", help="tiny-random (quick) or smollm2-135m or a folder")
    ap.add_argument("--env", default="synthetic/function_selection")
    ap.add_argument("--prompts", type=int, default=2, help="P: prompts (groups) per optimizer step")
    ap.add_argument("--group-size", type=int, default=4, help="G: completions per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3, help="measured steps (after --warmup)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--micro-batch", type=int, default=4, help="samples per forward/backward in both loops")
    ap.add_argument("--lora-r", type=int, default=8)
    ap.add_argument("--lora-alpha", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--seed-pool", type=int, default=0, help="train seeds to draw from (0: exactly P, same prompts each step)")
    ap.add_argument("--signal", choices=("tiebreak", "env"), default="tiebreak")
    ap.add_argument("--first", choices=("ours", "trl"), default="ours", help="which loop runs first")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if importlib.util.find_spec("trl") is None:
        sys.exit("TRL is not installed: run `.venv/bin/pip install -e '.[bench]'` first")
    n = args.prompts * args.group_size
    if args.group_size < 2 or args.prompts < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("--group-size must be >= 2, --prompts and --steps >= 1, --warmup >= 0")
    if n % args.micro_batch:
        ap.error(f"--micro-batch {args.micro_batch} must divide P*G = {n} (TRL's accumulation needs whole micro-batches)")

    torch.set_num_threads(args.threads)
    captured = Captured()
    for name in ("trl", "transformers", "peft", "accelerate", "datasets"):
        logging.getLogger(name).addHandler(captured)
    warnings.simplefilter("default")

    from trace_agents.models import load_tokenizer_from, smollm2_folder, tokenizer_folder

    inner_factory = resolve_env(args.env)
    pool = inner_factory().seeds("train")[: args.seed_pool or args.prompts]
    if len(pool) < args.prompts:
        ap.error(f"the env has only {len(pool)} train seeds, fewer than --prompts {args.prompts}")
    make_env = lambda: BenchEnv(inner_factory(), pool, tiebreak=args.signal == "tiebreak")  # noqa: E731

    folder = tokenizer_folder() if args.model == "tiny-random" else smollm2_folder() if args.model == "smollm2-135m" else Path(args.model)
    tok = load_tokenizer_from(folder)
    prompts, prompt_tokens, same_ids = [], [], True
    for s in pool:
        env = make_env()
        msgs = [m.to_chat() for m in env.reset(s)]
        text = tok.apply_chat_template(msgs, tools=env.tools or None, tokenize=False, add_generation_prompt=True)
        ours_ids = tok(text, add_special_tokens=False)["input_ids"]
        trl_ids = tok(text=[text])["input_ids"][0]  # how TRL tokenizes a plain-string prompt
        same_ids &= ours_ids == trl_ids
        prompts.append(text)
        prompt_tokens.append(len(ours_ids))

    config = GRPOConfig(
        steps=args.warmup + args.steps, groups_per_step=args.prompts, group_size=args.group_size, lr=args.lr,
        lora_r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=0.0, temperature=1.0,
        max_new_tokens=args.max_new_tokens, max_steps=1, kl_coef=0.0, scale_rewards="group", inner_epochs=1,
        micro_batch=args.micro_batch, save_every=10**9, seed=args.seed,
    )
    results: dict[str, Any] = {}
    load_before: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for which in ((["ours", "trl"]) if args.first == "ours" else ["trl", "ours"]):
            load_before[which] = [round(x, 2) for x in os.getloadavg()]
            started = time.perf_counter()
            with contextlib.redirect_stdout(sys.stderr):  # Trainer prints its logs: keep stdout one JSON object
                if which == "ours":
                    results[which] = run_ours(args, make_env, config)
                else:
                    results[which] = run_trl(args, make_env, pool, tok, prompts)
            results[which]["wall_seconds_total"] = round(time.perf_counter() - started, 1)
            # Peak resident memory of the process so far (the loop run first is measured alone).
            results[which]["peak_rss_gb_so_far"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
            # A partial result survives if the run is stopped before the other loop ends.
            print(f"partial {which}: " + json.dumps(results[which]), file=sys.stderr, flush=True)
    for text in sorted({f"{w.category.__name__}: {w.message}" for w in caught}):
        print(f"warning: {text}", file=sys.stderr)

    ours, trl = results["ours"], results["trl"]
    ratio = ours["median_step_seconds"] / trl["median_step_seconds"] if trl["median_step_seconds"] else None
    per_tok = None
    if ours["median_generated_tokens"] and trl["median_generated_tokens"] and ratio is not None:
        per_tok = ratio * trl["median_generated_tokens"] / ours["median_generated_tokens"]
    noteworthy = sorted({f"{w.category.__name__}: {str(w.message)[:300]}" for w in caught} | set(captured.messages))
    print(json.dumps({
        "benchmark": "grpo_step", "model": args.model, "env": args.env, "P": args.prompts, "G": args.group_size,
        "max_new_tokens": args.max_new_tokens, "micro_batch": args.micro_batch, "warmup_steps": args.warmup,
        "measured_steps": args.steps, "signal": args.signal, "seed_pool": pool, "prompt_tokens": prompt_tokens,
        "prompt_token_ids_identical": same_ids,
        "lora": {"r": args.lora_r, "alpha": args.lora_alpha, "dropout": 0.0, "targets": list(LORA_TARGETS)},
        "lr": args.lr, "temperature": 1.0,
        "ours_median_step_seconds": ours["median_step_seconds"],
        "trl_median_step_seconds": trl["median_step_seconds"],
        "ratio_ours_over_trl": round(ratio, 3) if ratio is not None else None,
        "ratio_per_generated_token": round(per_tok, 3) if per_tok is not None else None,
        "target_ratio": 1.0,
        "ours_median_generation_seconds": median_after_warmup(ours["generation_seconds_per_step"], args.warmup),
        "trl_median_generation_seconds": median_after_warmup(trl["generation_seconds_per_step"], args.warmup),
        "ours_tokens_per_step": ours["median_generated_tokens"], "trl_tokens_per_step": trl["median_generated_tokens"],
        "ours": ours, "trl": trl, "order": list(results), "loadavg_before": load_before,
        "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()],
        "warnings": noteworthy,
    }, indent=2))


if __name__ == "__main__":
    main()
