"""Resident memory of a GRPO run with and without `release_memory` (glibc malloc_trim) between steps.

    python benchmarks/memory_trim.py --model runs/big_s2/01_warmup/model --env bfcl/multiple --steps 4
    python benchmarks/memory_trim.py --env bfcl/multi_turn_base --max-steps 20 --micro-tokens 1024   # multi-turn

Runs the same short GRPO training twice, each in a fresh child process (trim off, then on): same
model, env, seed and settings, so the same samples and updates. After every step the child reads its
VmRSS (what the OS holds for it now) and VmHWM (its highest RSS so far) from /proc. Prints one JSON
object: both runs' per-step RSS, the RSS after the last step and the peak, and the ratios on/off.
Why it matters: the pipeline is one long process, and without trimming its RSS stays at the highest
transient peak of any step so far (2 GB live of 10.6 GB held, session 18), which is what got two runs
side by side OOM-killed on this 23 GB machine. Linux with glibc only (reads /proc).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def rss_mb() -> dict[str, float]:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {key: round(int(status[key].split()[0]) / 1024, 1) for key in ("VmRSS", "VmHWM")}


def child(args: argparse.Namespace) -> None:
    import trace_agents.training.grpo as grpo
    from trace_agents.envs.base import resolve_env

    if not args.trim:
        grpo.release_memory = lambda: False  # the loop calls it by this module's name
    seen: list[dict[str, float]] = []
    config = grpo.GRPOConfig(steps=args.steps, group_size=args.group_size, groups_per_step=args.groups, lr=5e-4,
                             max_new_tokens=args.max_new_tokens, max_steps=args.max_steps, seed=0, dtype=args.dtype,
                             save_every=10_000, micro_tokens=args.micro_tokens)
    with tempfile.TemporaryDirectory() as out:
        grpo.train(resolve_env(args.env), args.model, out, config,
                   on_step=lambda record: seen.append({**rss_mb(), "seconds": record["seconds"]}))
    print(json.dumps(seen))


def measure(args: argparse.Namespace, trim: bool) -> dict:
    cmd = [sys.executable, __file__, "--child", "--trim", str(int(trim)), "--model", args.model, "--env", args.env,
           "--steps", str(args.steps), "--group-size", str(args.group_size), "--groups", str(args.groups),
           "--max-new-tokens", str(args.max_new_tokens), "--max-steps", str(args.max_steps), "--dtype", args.dtype, "--micro-tokens", str(args.micro_tokens)]
    steps = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    return {"rss_mb_per_step": [s["VmRSS"] for s in steps], "rss_mb_last": steps[-1]["VmRSS"],
            "peak_mb": steps[-1]["VmHWM"], "seconds_per_step": [s["seconds"] for s in steps]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-random")
    ap.add_argument("--env", default="bfcl/multiple")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=80)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--max-steps", type=int, default=1, help="Model turns per episode (multi-turn envs: e.g. 20)")
    ap.add_argument("--micro-tokens", type=int, default=2048, help="GRPOConfig.micro_tokens: the update's peak grows with it")
    ap.add_argument("--trim-on-only", action="store_true", help="Measure one run, trim on (skip the trim-off run)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--trim", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    head = {"model": args.model, "env": args.env, "steps": args.steps, "micro_tokens": args.micro_tokens}
    if args.trim_on_only:  # e.g. to compare micro_tokens: one process, trim on as the pipeline runs it
        print(json.dumps({**head, "trim_on": measure(args, trim=True)}, indent=2))
        return
    off, on = measure(args, trim=False), measure(args, trim=True)
    print(json.dumps({**head, "trim_off": off, "trim_on": on,
                      "rss_last_on_over_off": round(on["rss_mb_last"] / off["rss_mb_last"], 3),
                      "peak_on_over_off": round(on["peak_mb"] / off["peak_mb"], 3)}, indent=2))


if __name__ == "__main__":
    main()
