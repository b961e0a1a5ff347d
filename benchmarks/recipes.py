"""Every measured recipe against plain GRPO, pooled from the committed run records.

    python benchmarks/recipes.py              # the markdown table in the README's "Measured results"
    python benchmarks/recipes.py --json       # the same figures as JSON
    python benchmarks/recipes.py --run tl2x_s6 # one record's whole evaluation table (the README's "Latest run")

One row per recipe: its records (one training seed each, `benchmarks/results/<run>.json`), mean success of
the base, of the recipe's composed model and of plain GRPO with the same rollouts, and the pooled paired-bootstrap
p-value (tasks resampled, each task's success averaged over the seeds: `pipeline.pool_records`, the same as
`paper_table.py --pool`). GRPO is always its last step (`grpo_last_step` where a guard could pick an earlier
one, else `grpo`, which then is the last step). The composed side is the one each recipe was reported with:
`composed_last_step` for `own` and `own4` (decided in session 37 before either `own` seed's number), the guard-kept
`composed` elsewhere. Nothing here is typed in by hand but the list of recipes below.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RESULTS = Path(__file__).parent / "results"

# (recipe, what it changes, its records, the composed system it is reported with); docs/results.md has their sessions
RECIPES = [  # all on bfcl/multiple; bfcl/parallel's runs (pl_s2, plt_s2, plt2_s2) are in the README prose
    ("table", "`--budget table`: drills (fresh variants) on the target's and simple_python's train tasks, one shared "
     "adapter (64 steps), 16 own steps per capability, a guard on 64 drill seeds",
     ["wide_s2g", "wide_s3", "wide_s4g", "wide_s5g", "wide_s6g", "tl_s6"], "composed"),
    ("table ×2", "`table` at twice its budget: 128 shared + 32 own steps per capability, 3,072 rollouts per "
     "system (plain GRPO too)", ["tl2x_s6"], "composed"),
    ("wide", "`table` without the guard", ["wide_s2", "wide_s4"], "composed"),
    ("big", "`wide` without simple_python's tasks", ["big_s2", "big_s3"], "composed"),
    ("big + guard", "`table` without simple_python's tasks", ["big_s3g"], "composed"),
    ("like", "`table` + drills offering as many functions as the target", [f"like_s{s}" for s in range(2, 7)],
     "composed"),
    ("m32", "`table` with 32 shared + 32 own steps, checkpoints every 16 for the guard", ["m32_s2", "m32_s4", "m32_s6"],
     "composed"),
    ("tp", "`table` + checkpoints every 8 own steps, a guard that also scores 32 target train tasks",
     ["tp_s2", "tp_s4"], "composed"),
    ("live", "`tp` + BFCL's live tasks in every drill", ["live_s2"], "composed"),
    ("fsl", "`tp` + live tasks in the function_selection drill", ["fsl_s2", "fsl_s4", "fsl_s6"], "composed"),
    ("fslh", "`fsl` + a hint naming every value to fill", ["fslh_s2", "fslh_s4"], "composed"),
    ("h0", "`fslh` with no hint at all", ["h0_s2", "h0_s4", "h0_s6"], "composed"),
    ("st", "`fslh` + the target's train tasks in the shared mixture", ["st_s6"], "composed"),
    ("own", "`fslh` on the target's own train tasks only (no borrowed ones); last steps composed",
     ["own_s2", "own_s4", "own_s6"], "composed_last_step"),
    ("own4", "`own` with all four capabilities, 8 own steps each", ["own4_s6"], "composed_last_step"),
]


def load(run: str, results: Path = RESULTS) -> dict:
    path = results / f"{run}.json"
    if not path.exists():
        raise SystemExit(f"no run record {path}: run `paper_table.py --config runs/{run}.yaml` or drop it from RECIPES")
    return json.loads(path.read_text())


# Runs whose guarded GRPO baseline (06) was copied from one run before `grpo_last_step` was evaluated: that run's
# later record (same baseline, copied again) evaluated its last step too; `grpo_verdicts` checks they are one baseline.
LAST_STEP_FROM = {"tp_s2": "h0_s2", "live_s2": "h0_s2", "fsl_s2": "h0_s2", "fslh_s2": "h0_s2",
                  "tp_s4": "h0_s4", "fsl_s4": "h0_s4", "fslh_s4": "h0_s4"}


def grpo_verdicts(run: str, record: dict, results: Path = RESULTS) -> dict[str, float]:
    """GRPO's last step's success per task in this run."""
    verdicts = record["verdicts"]
    if "grpo_last_step" in verdicts:
        return verdicts["grpo_last_step"]
    if not record["config"]["training"].get("guard_target", 0):  # no guard: `grpo` is the last step
        return verdicts["grpo"]
    if run not in LAST_STEP_FROM:
        raise SystemExit(f"{run}: a guard chose GRPO's step and the record lacks grpo_last_step")
    other = load(LAST_STEP_FROM[run], results)["verdicts"]
    if other["grpo"] != verdicts["grpo"]:
        raise SystemExit(f"{run} and {LAST_STEP_FROM[run]} do not share their GRPO baseline (verdicts differ)")
    return other["grpo_last_step"]


def as_compared(run: str, record: dict, composed: str, results: Path = RESULTS) -> dict:
    """The record with only base, the recipe's composed system (as `composed`) and GRPO's last step (as `grpo`)."""
    spent = {r["system"]: r.get("rollouts_spent") for r in record["table"]["systems"]}
    if spent[composed] != spent["grpo"]:
        raise SystemExit(f"{run}: {composed} spent {spent[composed]} rollouts, GRPO {spent['grpo']}: not the same budget")
    verdicts = {"base": record["verdicts"]["base"], "composed": record["verdicts"][composed],
                "grpo": grpo_verdicts(run, record, results)}
    rates = {k: sum(v.values()) / len(v) for k, v in verdicts.items()}
    return {"table": {"systems": [{"system": k, "success_rate": r} for k, r in rates.items()]}, "verdicts": verdicts}


def recipe_row(name: str, what: str, runs: list[str], composed: str, results: Path = RESULTS) -> dict:
    from trace_agents.pipeline import pool_records

    records = [load(r, results) for r in runs]
    pooled = pool_records([as_compared(run, rec, composed, results) for run, rec in zip(runs, records)])
    mean = pooled["mean_success_rate"]
    return {"recipe": name, "what": what, "runs": runs, "seeds": [rec["config"]["training"]["seed"] for rec in records],
            "composed_system": composed, "base": mean["base"], "composed": mean["composed"], "grpo_last_step": mean["grpo"],
            "composed_minus_grpo_points": round(100 * (mean["composed"] - mean["grpo"]), 1),
            "p_vs_grpo": round(pooled["p_values"]["composed_vs_grpo"], 4)}


def _p(p: float) -> str:
    return f"{p:.2f}" if p >= 0.01 else f"{p:.1g}"


def markdown(rows: list[dict]) -> str:
    lines = ["| recipe | what it changes | seeds | base | composed | GRPO's last step | composed − GRPO | p |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        seeds = ", ".join(map(str, r["seeds"]))
        lines.append(f"| `{r['recipe']}` | {r['what']} | {seeds} | {100 * r['base']:.1f}% | {100 * r['composed']:.1f}% | "
                     f"{100 * r['grpo_last_step']:.1f}% | {r['composed_minus_grpo_points']:+.1f} | {_p(r['p_vs_grpo'])} |")
    return "\n".join(lines)


def run_table(run: str, results: Path = RESULTS) -> str:
    """One record's evaluation table as markdown: every system with its 95% interval, mean reward and tool calls,
    rollouts and wall time, then the p-values."""
    record = load(run, results)
    table = record["table"]
    lines = [f"{table['target']}, {table['n_tasks']} {table['split']} tasks, training seed {record['config']['training']['seed']}",
             "", "| system | success [95% CI] | mean reward | tool calls | rollouts | evaluation wall (s) |", "|---|---|---|---|---|---|"]
    for r in table["systems"]:
        low, high = r["ci"]
        lines.append(f"| {r['system']} | {100 * r['success_rate']:.0f}% [{100 * low:.0f}, {100 * high:.0f}] | {r['mean_reward']:.2f} | "
                     f"{r['mean_tool_calls']:.2f} | {r['rollouts_spent']:,} | {r['wall_seconds']:,.0f} |")
    pairs = ", ".join(f"{k.replace('_vs_', ' vs ')} {v:.2g}" for k, v in table["p_values"].items() if v is not None)
    return "\n".join(lines + ["", f"Paired bootstrap p: {pairs}."])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="Print JSON instead of the markdown table.")
    ap.add_argument("--run", help="Print this record's whole evaluation table instead (e.g. own_s6).")
    args = ap.parse_args()
    if args.run:
        print(run_table(args.run))
        return
    rows = [recipe_row(*recipe) for recipe in RECIPES]
    print(json.dumps(rows, indent=1) if args.json else markdown(rows))


if __name__ == "__main__":
    sys.exit(main())
