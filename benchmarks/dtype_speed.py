"""The frozen base in float32 against bfloat16, side by side in one process, on the three costs of a
run: sampling a GRPO step's groups, the policy update, and greedy evaluation. Prints one JSON object
with seconds per dtype and the ratios bfloat16 / float32 (lower is faster), and what bfloat16 changes:
greedy replies equal to float32's, successes, the largest difference of one update's LoRA step.

    python benchmarks/dtype_speed.py                                       # tiny-random, a smoke run
    python benchmarks/dtype_speed.py --model runs/warmed --eval-tasks 40   # the embedded model, warmed

Why it pays on a CPU: oneDNN runs bfloat16 matmuls on AMX / AVX512-BF16 units where the CPU has them
(this machine's Xeon has both; `grep -o 'amx_bf16\\|avx512_bf16' /proc/cpuinfo`); without them the
ratio can exceed 1. The LoRA weights stay float32 (PEFT casts adapters up) and GRPO takes its
log-probs in float32, so only the frozen base's arithmetic is rounded.

Held equal: the LoRA start (same seed; B drawn from N(0, 0.01) so the update has a gradient), the
prompts (the env's first train seeds, each sampled --group-size times with the same sampling seed),
the update's samples (built once from the first rollouts, then updated by each dtype with one SGD
step of lr 1 from the same weights, so the step is minus the clipped gradient), the greedy test tasks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from multiturn_update import update_seconds

from trace_agents.agent.policy import Sampling, TransformersPolicy
from trace_agents.agent.rollout import rollout
from trace_agents.envs.base import resolve_env
from trace_agents.training.grpo import GRPOConfig, build_samples, make_lora_model, randomize_lora_b


def lora_model(name: str, dtype: str, device: str | None):
    model, tok = make_lora_model(name, GRPOConfig(lora_r=8, lora_alpha=16, dtype=dtype), device=device)
    randomize_lora_b(model, 0.01, torch.Generator().manual_seed(0))  # the same start in both dtypes
    return model.eval(), tok


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, round(time.perf_counter() - t0, 3)


def sample_groups(model, tok, make_env, seeds: list[int], args):
    """One GRPO step's rollouts: each seed sampled --group-size times in one batch (shared prompt prefill)."""
    policy = TransformersPolicy(model, tok, batch_size=args.prompts * args.group_size)
    sampling = Sampling(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    return rollout(make_env, policy, seeds, samples=args.group_size, max_steps=1, sampling=sampling, keep_tokens=True)


def reply(t) -> str:
    return t.messages[-1].model_dump_json()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny-random")
    ap.add_argument("--env", default="bfcl/multiple")
    ap.add_argument("--prompts", type=int, default=2, help="GRPO groups (seeds) per step.")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=80, help="Sampled tokens per GRPO reply at most.")
    ap.add_argument("--eval-tasks", type=int, default=16)
    ap.add_argument("--eval-tokens", type=int, default=192)
    ap.add_argument("--repeats", type=int, default=2, help="Rounds of all three measurements per dtype (medians kept).")
    ap.add_argument("--device", default=None)
    args = ap.parse_args()
    make_env = resolve_env(args.env)
    train_seeds = make_env().seeds("train")[: args.prompts]
    test_seeds = make_env().seeds("test")[: args.eval_tasks]
    result: dict = {"model": args.model, "env": args.env, "threads": torch.get_num_threads(), "repeats": args.repeats}
    dtypes = ("float32", "bfloat16")
    models = {d: lora_model(args.model, d, args.device) for d in dtypes}
    samples, steps, greedy, times = None, {}, {}, {d: {"sample": [], "update": [], "eval": []} for d in dtypes}
    for r in range(args.repeats):  # alternate the order, so a change of load falls on both dtypes alike
        for dtype in dtypes if r % 2 == 0 else dtypes[::-1]:
            model, tok = models[dtype]
            trajs, seconds = timed(lambda: sample_groups(model, tok, make_env, train_seeds, args))
            times[dtype]["sample"].append(seconds)
            if samples is None:  # the update's samples: the first rollouts', for both dtypes
                samples = build_samples(tok, trajs, [1.0 if i % 2 == 0 else -1.0 for i in range(len(trajs))])
            model.train()
            seconds, steps[dtype] = update_seconds(model, samples, GRPOConfig(), tok.pad_token_id, 1)
            times[dtype]["update"].append(seconds)
            model.eval()
            greedy[dtype], seconds = timed(lambda: rollout(make_env, TransformersPolicy(model, tok, batch_size=32), test_seeds,
                                                           max_steps=1, sampling=Sampling(max_new_tokens=args.eval_tokens)))
            times[dtype]["eval"].append(seconds)
            result.setdefault(dtype, {})["sampled_tokens"] = sum(len(c) for t in trajs for c in t.info["completion_ids"])
    for dtype in dtypes:
        result[dtype].update({f"{k}_seconds": round(statistics.median(v), 3) for k, v in times[dtype].items()})
        result[dtype]["eval_success"] = sum(t.success for t in greedy[dtype])
    for key in ("sample_seconds", "update_seconds", "eval_seconds"):
        result[f"ratio_{key}"] = round(result["bfloat16"][key] / result["float32"][key], 3)
    result["sample_seconds_per_token_ratio"] = round(
        (result["bfloat16"]["sample_seconds"] / max(1, result["bfloat16"]["sampled_tokens"]))
        / (result["float32"]["sample_seconds"] / max(1, result["float32"]["sampled_tokens"])), 3)
    result["greedy_replies_equal"] = sum(reply(a) == reply(b) for a, b in zip(greedy["float32"], greedy["bfloat16"]))
    result["max_abs_step_difference"] = float((steps["bfloat16"] - steps["float32"]).abs().max())
    result["max_abs_step"] = float(steps["float32"].abs().max())
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
