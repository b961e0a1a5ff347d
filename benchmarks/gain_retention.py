"""Does composition keep what each adapter learned? The issue-6 matrix on held-out seeds.

    python benchmarks/gain_retention.py --composed runs/composed --limit 100 --out runs/retention

Rows: each capability environment the composed model was built with (compose_summary.json). Columns:
the base, every single adapter, the composed model (token routing) and the task router, each as
success on the environment's *test* seeds (never used by training or gate fitting), greedy decoding.
`retention[env]` = (composed - base) / (own adapter - base): the share of that adapter's own gain the
composed model keeps (target >= 0.9; undefined when the adapter gained nothing). Finished cells are
reused from --out, so an interrupted run continues. `--reuse-from DIR` also takes the base and
single-adapter cells from an earlier --out DIR: for the same adapters with other gates (e.g. after
`trace-agents train --composed`), only the composed model and the task router are evaluated.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--composed", type=Path, required=True, help="A folder written by `trace-agents compose`.")
    ap.add_argument("--limit", type=int, default=100, help="Test seeds per environment.")
    ap.add_argument("--reuse-from", type=Path, default=None,
                    help="An earlier --out of the same base and adapters, --limit and --max-new-tokens: its base and adapter cells are copied.")
    ap.add_argument("--env-limit", action="append", default=[], metavar="NAME=N",
                    help="A different number of test seeds for one environment (repeatable).")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, default=Path("runs/retention"))
    args = ap.parse_args()

    from trace_agents.envs.base import resolve_env
    from trace_agents.pipeline import EvaluationCfg, evaluate_systems

    summary = json.loads((args.composed / "compose_summary.json").read_text())
    model, adapters, envs = summary["model"], summary["adapters"], summary["envs"]
    systems = {"base": {"model": model, "rollouts": 0},
               **{f"adapter:{n}": {"model": model, "adapter": p, "rollouts": None} for n, p in adapters.items()},
               "composed": {"model": model, "composed": str(args.composed), "router": "token", "rollouts": None}}
    if (args.composed / "task_router.json").exists():
        systems["task_router"] = {"model": model, "composed": str(args.composed), "router": "task", "rollouts": None}
    limits = {k: int(v) for k, v in (item.split("=", 1) for item in args.env_limit)}
    started, matrix, retention = time.time(), {}, {}
    for name, module in envs.items():
        out = args.out / name
        out.mkdir(parents=True, exist_ok=True)
        if args.reuse_from:  # cells of systems the gates do not touch (file names as pipeline._file writes them)
            for cell in [*(args.reuse_from / name).glob("base.json*"), *(args.reuse_from / name).glob("adapter_*.json*")]:
                if not (out / cell.name).exists():
                    shutil.copy2(cell, out / cell.name)
        cfg = EvaluationCfg(limit=limits.get(name, args.limit), max_new_tokens=args.max_new_tokens, batch_size=32)
        table = evaluate_systems(systems, resolve_env(module), out, cfg, max_steps=8,
                                 log=lambda m: print(m, flush=True, file=sys.stderr))
        row = {r["system"]: {"success": r["success_rate"], "ci": r["ci"]} for r in table["systems"]}
        matrix[name] = {"tasks": table["n_tasks"], **row}
        own = row[f"adapter:{name}"]["success"] - row["base"]["success"]
        kept = row["composed"]["success"] - row["base"]["success"]
        retention[name] = round(kept / own, 3) if own > 0 else None
    print(json.dumps({"composed": str(args.composed), "limit": args.limit, "matrix": matrix, "retention": retention,
                      "wall_seconds": round(time.time() - started, 1)}, indent=2))


if __name__ == "__main__":
    main()
