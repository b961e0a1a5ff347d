"""Is the function_selection drill harder than the target, task for task? One process samples the
target's first N train tasks and the drill reshaping *the same* tasks (no borrowed category, no fresh
values), with its look-alike distractors at the given difficulty and without them, and prints per-arm
success and the share of all-fail or all-pass groups as JSON.

    python benchmarks/drill_vs_target.py --model runs/h0_s6/01_warmup/model --tasks 48   # ~9 min here

Why: `trace-agents calibrate` over a drill's own first 32 seeds compares different tasks with the target's
first 32, and per-task success is mostly 0 or 8 of 8, so which tasks the seeds draw moves it by tens of
points (session 36: drill 14% on its seeds, 30% on the target's tasks; docs/results.md "The target in the shared
mixture").
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from trace_agents.agent.policy import make_policy
from trace_agents.agent.rollout import rollout
from trace_agents.envs.bfcl import BfclEnv
from trace_agents.synthesis.calibrate import SAMPLING
from trace_agents.synthesis.target_drills import TargetFunctionSelectionEnv


def same_tasks_drill(ids: list[str], category: str, difficulty: float, distract: bool) -> type:
    """The drill with seed i drawing task ids[i] (its own draw replaced), distractors on or off."""

    class SameTasks(TargetFunctionSelectionEnv):
        def __init__(self):
            super().__init__(difficulty=difficulty, category=category, fresh=False, extra=())

        def reset(self, seed: int):
            self._index = seed
            return super().reset(seed)

        def _task(self, rng):
            return ids[self._index]

        def _distractors(self, rng):
            return super()._distractors(rng) if distract else []

    return SameTasks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny-random")
    ap.add_argument("--category", default="multiple")
    ap.add_argument("--tasks", type=int, default=48)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--difficulty", type=float, default=0.0)
    ap.add_argument("--max-new-tokens", type=int, default=80)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()

    target = BfclEnv(args.category)
    seeds = target.seeds("train")[: args.tasks]
    ids = []
    for s in seeds:
        target.reset(s)
        ids.append(target.task_id)
    policy = make_policy(args.model, dtype=args.dtype, batch_size=32)
    sampling = dataclasses.replace(SAMPLING, max_new_tokens=args.max_new_tokens)
    arms = {"target": (lambda: BfclEnv(args.category), seeds),
            "drill": (same_tasks_drill(ids, args.category, args.difficulty, True), list(range(len(ids)))),
            "drill_no_distractors": (same_tasks_drill(ids, args.category, args.difficulty, False), list(range(len(ids))))}
    out = {"model": args.model, "tasks": ids, "samples": args.samples, "difficulty": args.difficulty}
    for name, (make_env, arm_seeds) in arms.items():
        trajs = rollout(make_env, policy, arm_seeds, samples=args.samples, max_steps=1, sampling=sampling)
        solved = [sum(t.success for t in trajs[i : i + args.samples]) for i in range(0, len(trajs), args.samples)]
        out[name] = {"success": sum(solved) / len(trajs), "all_fail": solved.count(0) / len(solved),
                     "all_pass": solved.count(args.samples) / len(solved), "per_task": solved}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
