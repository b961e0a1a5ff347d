"""Generated tokens/s of the batched rollout loop vs one episode at a time, same tasks, same model,
same greedy decoding, measured side by side in one run. Prints one JSON object.

    python benchmarks/rollout_throughput.py --model smollm2-135m --env bfcl/simple_python --tasks 16

With --group-size G it also times GRPO-style sampling (G rollouts of each task, temperature 1, up to
--group-steps turns) with each episode opening prefilled once per batch vs in every row
("shared_prefill_speedup"), and counts the rollouts whose sampled ids are the same both ways.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from trace_agents.agent.policy import Sampling, TransformersPolicy
from trace_agents.agent.rollout import rollout
from trace_agents.envs.base import resolve_env
from trace_agents.models import load_model


def timed(make_env, policy, seeds, sampling, one_at_a_time: bool = False, samples: int = 1, max_steps: int = 1,
          ids: list | None = None) -> dict:
    """Seconds and tokens of the rollouts; their sampled ids are appended to `ids` if given."""
    started = time.perf_counter()
    if one_at_a_time:
        trajs = [t for s in seeds for t in rollout(make_env, policy, [s], max_steps=max_steps, sampling=sampling)]
    else:
        trajs = rollout(make_env, policy, seeds, samples=samples, max_steps=max_steps, sampling=sampling,
                        keep_tokens=ids is not None)
    secs = time.perf_counter() - started
    if ids is not None:
        ids.append([t.info["completion_ids"] for t in trajs])
    tokens = sum(t.info["new_tokens"] for t in trajs)
    turns = sum(t.info["steps"] for t in trajs)
    return {"seconds": round(secs, 2), "new_tokens": tokens, "turns": turns, "tokens_per_s": round(tokens / secs, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--env", default="bfcl/simple_python")
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--group-size", type=int, default=0, help="Also time G sampled rollouts per task, shared prefill on/off.")
    ap.add_argument("--group-steps", type=int, default=1, help="Turns per grouped episode at most.")
    args = ap.parse_args()

    model, tok = load_model(args.model, dtype=args.dtype)
    make_env = resolve_env(args.env)
    seeds = make_env().seeds("train")[: args.tasks]
    sampling = Sampling(max_new_tokens=args.max_new_tokens)
    rollout(make_env, TransformersPolicy(model, tok, batch_size=2), seeds[:2], max_steps=1, sampling=sampling)  # warm caches

    single = timed(make_env, TransformersPolicy(model, tok, batch_size=1), seeds, sampling, one_at_a_time=True)
    batched = timed(make_env, TransformersPolicy(model, tok, batch_size=args.batch_size), seeds, sampling, one_at_a_time=False)
    grouped = {}
    if args.group_size:
        sampled, groups = Sampling(max_new_tokens=args.max_new_tokens, temperature=1.0), seeds[: max(1, args.batch_size // args.group_size)]
        ids: list = []
        for share in (False, True):
            policy = TransformersPolicy(model, tok, batch_size=args.batch_size, share_prompts=share)
            grouped["shared" if share else "separate"] = timed(make_env, policy, groups, sampled, samples=args.group_size,
                                                               max_steps=args.group_steps, ids=ids)
        grouped["shared_prefill_speedup"] = round(grouped["separate"]["seconds"] / grouped["shared"]["seconds"], 2)
        grouped["same_sampled_ids"] = f"{sum(a == b for a, b in zip(*ids))}/{len(ids[0])}"
    print(json.dumps({
        "benchmark": "rollout_throughput", "model": args.model, "env": args.env, "tasks": len(seeds),
        "dtype": args.dtype, "batch_size": args.batch_size, "max_new_tokens": args.max_new_tokens,
        "threads": torch.get_num_threads(), "cpus": os.cpu_count(), "device": str(model.device),
        "one_at_a_time": single, "batched": batched,
        "speedup": round(batched["tokens_per_s"] / single["tokens_per_s"], 2),
        "target_speedup": 4.0, **({"grouped": {"group_size": args.group_size, **grouped}} if grouped else {}),
    }, indent=2))


if __name__ == "__main__":
    main()
