"""Which call paths does a policy *sample*? The histogram the efficiency reward depends on.

    python benchmarks/call_paths.py --env runs/envs/known/lookup_then_act.py --model runs/warmed \
        --seeds 8 --samples 4 --temperature 0.7 --hint both

GRPO with the TRACE efficiency reward can only prefer a cheaper path that some rollouts of a group
take. This samples `--samples` rollouts of each of `--seeds` train seeds (the way a GRPO step does)
and prints, as JSON, how many rollouts ended with each (success, tool calls) pair — without the
env's hint, with the hint shown to every rollout, or both. Env keyword arguments: --env-arg K=V.
"""

from __future__ import annotations

import argparse
import collections
import json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", required=True)
    ap.add_argument("--env-arg", action="append", default=[], metavar="K=V", help="e.g. rejected_actions=free known_ids=1")
    ap.add_argument("--model", default="runs/warmed")
    ap.add_argument("--adapter")
    ap.add_argument("--seeds", type=int, default=8, help="Train seeds (the first N of the train split).")
    ap.add_argument("--samples", type=int, default=4, help="Rollouts per seed.")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--max-steps", type=int, default=8)
    ap.add_argument("--hint", choices=("off", "on", "both"), default="off")
    args = ap.parse_args()

    from trace_agents.agent.policy import Sampling, make_policy
    from trace_agents.agent.rollout import rollout
    from trace_agents.cli import keyword_args
    from trace_agents.envs.base import resolve_env

    env_kwargs = keyword_args(args.env_arg, "--env-arg")  # the parser of `train --efficiency`
    make_env = resolve_env(args.env, **env_kwargs)
    policy = make_policy(args.model, adapter=args.adapter)
    seeds = make_env().seeds("train")[: args.seeds]
    sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    out = {"env": args.env, "env_args": env_kwargs, "model": args.model, "adapter": args.adapter,
           "seeds": len(seeds), "samples": args.samples, "temperature": args.temperature}
    for hinted in {"off": [False], "on": [True], "both": [False, True]}[args.hint]:
        trajs = rollout(make_env, policy, seeds, samples=args.samples, max_steps=args.max_steps, sampling=sampling,
                        hint_samples=args.samples if hinted else 0)
        counts = collections.Counter((t.success, t.tool_calls) for t in trajs)
        out["hint" if hinted else "no_hint"] = [{"success": s, "tool_calls": c, "rollouts": n}
                                                for (s, c), n in sorted(counts.items())]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
