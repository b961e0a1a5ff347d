"""The paper's table at small scale: the whole TRACE pipeline, then every system on held-out BFCL tasks.

    python benchmarks/paper_table.py --config run.yaml        # any run config (see README)
    python benchmarks/paper_table.py --budget cpu --run runs/table

Prints one JSON object: the evaluation table (success with 95% CI, reward, tool calls, rollouts spent
per system; paired-bootstrap p-values of composed vs base and vs GRPO), the gains the issue asks for
(composed - base, composed - GRPO, in points) and the wall time of the run. Stages already finished in
the run folder are reused (the run resumes), so `wall_seconds` is the time of this invocation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, help="A run config (YAML or JSON).")
    ap.add_argument("--budget", default="cpu", help="A demo budget preset when no --config is given.")
    ap.add_argument("--run", type=Path, default=Path("runs/table"), help="Run folder for --budget.")
    args = ap.parse_args()

    from trace_agents.pipeline import budget_config, load_config, run_pipeline

    config = load_config(args.config) if args.config else budget_config(args.budget, args.run)
    started = time.time()
    summary = run_pipeline(config, resume=True, log=lambda m: print(m, file=sys.stderr, flush=True))
    table = json.loads(Path(summary["evaluation"]).read_text())
    rate = {r["system"]: r["success_rate"] for r in table["systems"]}
    gains = {f"{a}_minus_{b}_points": round(100 * (rate[a] - rate[b]), 1)
             for a in ("composed", "task_router") for b in ("base", "grpo") if a in rate and b in rate}
    print(json.dumps({"run_dir": str(config.run_dir), "wall_seconds": round(time.time() - started, 1),
                      "capabilities": summary["capabilities"], "gains": gains, "table": table}, indent=2))


if __name__ == "__main__":
    main()
