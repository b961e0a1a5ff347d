"""The paper's table at small scale: the whole TRACE pipeline, then every system on held-out BFCL tasks.

    python benchmarks/paper_table.py --config run.yaml        # any run config (see README)
    python benchmarks/paper_table.py --budget table --seeds 2 3 4   # the README's recipe (~2-3 h a seed here)
    python benchmarks/paper_table.py --budget cpu --run runs/small  # the demo's budget: minutes, no gains shown
    python benchmarks/paper_table.py --config run.yaml --seeds 0 1 2   # one run per training seed, pooled

Prints one JSON object: the evaluation table (success with 95% CI, reward, tool calls, rollouts spent
per system; paired-bootstrap p-values of composed vs base and vs GRPO), the gains the issue asks for
(composed - base, composed - GRPO, in points) and the wall time of the run. Stages already finished in
the run folder are reused (the run resumes), so `wall_seconds` is the time of this invocation.

With `--seeds`, each training seed is one run (the config's own seed in its run folder, another seed
in `<run_dir>_s<seed>`, reusing the stages the seed does not reach) and the JSON holds each run's
table and the pooled one: mean success per system and p-values with each task averaged over seeds.
GRPO on 100 tasks moves ~10 points between seeds at this scale, more than the +3 the issue asks.

Each finished run also writes a record, `<--records>/<run folder name>.json` (its config, table and
success per held-out task per system; a few tens of kB): run folders hold models and are not kept, so
the records are what later pooling reads, across sessions and machines:

    python benchmarks/paper_table.py --pool benchmarks/results/big_s2.json benchmarks/results/big_s3.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def gains(rate: dict[str, float]) -> dict[str, float]:
    """Points by which each composition beats the base and the GRPO baseline (the table's compared pairs)."""
    from trace_agents.pipeline import COMPARED

    return {f"{a}_minus_{b}_points": round(100 * (rate[a] - rate[b]), 1) for a, b in COMPARED if a in rate and b in rate}


def run_one(config, records: Path) -> dict:
    from trace_agents.pipeline import run_pipeline, run_record

    started = time.time()
    summary = run_pipeline(config, resume=True, log=lambda m: print(m, file=sys.stderr, flush=True))
    evaluation = Path(summary["evaluation"]).parent
    stages = {d.name: json.loads((d / "stage.json").read_text())["seconds"] for d in sorted(config.run_dir.glob("[0-9][0-9]_*"))
              if (d / "stage.json").exists()}  # what each stage took when it ran (a resumed run's own wall is less)
    wall = round(time.time() - started, 1)
    record = {**run_record(evaluation, config), "stage_seconds": stages, "wall_seconds": wall}
    records.mkdir(parents=True, exist_ok=True)
    (records / f"{config.run_dir.name}.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    table = record["table"]
    return {"run_dir": str(config.run_dir), "seed": config.training.seed, "wall_seconds": wall,
            "evaluation": str(evaluation), "capabilities": summary["capabilities"],
            "gains": gains({r["system"]: r["success_rate"] for r in table["systems"]}), "table": table}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, help="A run config (YAML or JSON).")
    ap.add_argument("--budget", default="table", help="A budget preset when no --config is given (default: the "
                    "measured recipe; cpu: the demo's minutes-long budget).")
    ap.add_argument("--run", type=Path, default=Path("runs/table"), help="Run folder for --budget.")
    ap.add_argument("--seeds", type=int, nargs="+", help="Training seeds, one run each (default: the config's).")
    ap.add_argument("--records", type=Path, default=Path("benchmarks/results"), help="Where each run's record goes.")
    ap.add_argument("--pool", type=Path, nargs="+", help="Pool these run records (no run): mean and pooled p.")
    args = ap.parse_args()

    from trace_agents.pipeline import budget_config, load_config, pool_records, pool_seeds, seed_run

    if args.pool:
        pooled = pool_records([json.loads(p.read_text()) for p in args.pool])
        print(json.dumps({**pooled, "gains": gains(pooled["mean_success_rate"])}, indent=2))
        return

    config = load_config(args.config) if args.config else budget_config(args.budget, args.run)
    seeds = args.seeds or [config.training.seed]
    # the config's own seed first (else the first given): the other seeds' run folders start from a copy of
    # its finished stages, so the warm-up, base rollouts, analysis and synthesis run once
    seeds.sort(key=lambda s: s != config.training.seed)
    first = seed_run(config, seeds[0])
    runs = [run_one(first, args.records)]
    runs += [run_one(seed_run(config, s, source=first.run_dir), args.records) for s in seeds[1:]]
    if len(runs) == 1:
        print(json.dumps(runs[0], indent=2))
        return
    pooled = pool_seeds([Path(r["evaluation"]) for r in runs])
    print(json.dumps({"seeds": runs, "pooled": {**pooled, "gains": gains(pooled["mean_success_rate"])},
                      "wall_seconds": round(sum(r["wall_seconds"] for r in runs), 1)}, indent=2))


if __name__ == "__main__":
    main()
