"""The GRPO policy update on multi-turn episodes: one sample per assistant turn (each turn re-reads the
whole conversation) against turns packed into one sample per episode (training/grpo.pack_turns),
on the same sampled episodes, side by side in one process. Prints one JSON object: tokens forwarded,
seconds per update (median of --repeats), the ratio packed / per-turn (lower is better), and the
largest difference between the two updates' LoRA steps (packing must not change the gradient).

    python benchmarks/multiturn_update.py                                   # tiny-random, BFCL multi-turn
    python benchmarks/multiturn_update.py --model smollm2-135m --env bfcl/multi_turn_base --episodes 8

Each update is one SGD step of lr 1 from the same LoRA start, so the step equals minus the clipped
gradient; advantages alternate +1 / -1 over the episodes (their values do not affect the timing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from trace_agents.agent.policy import Sampling, TransformersPolicy
from trace_agents.agent.rollout import rollout
from trace_agents.envs.base import resolve_env
from trace_agents.training.grpo import GRPOConfig, build_samples, make_lora_model, policy_update, randomize_lora_b

def update_seconds(model, samples, config: GRPOConfig, pad_id: int, repeats: int) -> tuple[float, torch.Tensor]:
    """Median seconds of `repeats` updates from the same weights, and the step of one of them."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in trainable]
    times = []
    for _ in range(repeats):
        for p, s in zip(trainable, start):
            p.data.copy_(s)
        opt = torch.optim.SGD(trainable, lr=1.0)
        t0 = time.perf_counter()
        policy_update(model, opt, samples, config, pad_id)
        times.append(time.perf_counter() - t0)
    step = torch.cat([(s - p.detach()).flatten() for p, s in zip(trainable, start)])
    for p, s in zip(trainable, start):
        p.data.copy_(s)
    return statistics.median(times), step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny-random")
    ap.add_argument("--env", default="bfcl/multi_turn_base", help="A multi-turn env: built-in name or module path.")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--max-steps", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default=None)
    args = ap.parse_args()

    config = GRPOConfig(lora_r=8, lora_alpha=16)
    model, tok = make_lora_model(args.model, config, device=args.device)
    randomize_lora_b(model, 0.01)
    make_env = resolve_env(args.env)
    seeds = make_env().seeds("train")[: args.episodes]
    model.eval()
    trajs = rollout(make_env, TransformersPolicy(model, tok, batch_size=args.episodes), seeds, max_steps=args.max_steps,
                    keep_tokens=True, sampling=Sampling(temperature=1.0, max_new_tokens=args.max_new_tokens))
    advantages = [1.0 if i % 2 == 0 else -1.0 for i in range(len(trajs))]
    model.train()
    result = {"model": args.model, "env": args.env, "episodes": len(trajs),
              "turns": sum(len(t.info["completion_ids"]) for t in trajs)}
    steps = {}
    for name, pack in (("per_turn", False), ("packed", True)):
        samples = build_samples(tok, trajs, advantages, pack=pack)
        seconds, steps[name] = update_seconds(model, samples, config, tok.pad_token_id, args.repeats)
        result[name] = {"samples": len(samples), "seconds": round(seconds, 3),
                        "tokens_forwarded": sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples)}
    result["ratio_packed_per_turn"] = round(result["packed"]["seconds"] / result["per_turn"]["seconds"], 3)
    result["max_abs_step_difference"] = float((steps["packed"] - steps["per_turn"]).abs().max())
    result["max_abs_step"] = float(steps["per_turn"].abs().max())
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
