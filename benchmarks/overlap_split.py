"""Where does plain GRPO's edge over the composed model come from? Splits the held-out test tasks of
`paper_table.py` records (bfcl/multiple) into those that offer a function some train task also offers
(GRPO trained on it) and those that do not, and prints each system's successes on both as JSON, per
record and summed over the records given.

    python benchmarks/overlap_split.py benchmarks/results/fsl_s{2,4,6}.json benchmarks/results/st_s6.json

Why: the drills also draw borrowed categories' tasks, and a borrowed task offering a function of the
target's test split is left out (target_drills._leaks), so their extra rollouts never show a function the
test tasks offer, while every GRPO rollout is on the target's train tasks.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from trace_agents.envs.bfcl import load_category, split_of

SYSTEMS = ("base", "grpo", "grpo_last_step", "composed", "composed_last_step", "task_router")


def seen_in_train(category: str) -> set[str]:
    entries, _ = load_category(category)
    return {f["name"] for i, s in split_of(category).items() if s == "train" for f in entries[i]["function"]}


def split_record(record: dict) -> dict:
    category = record["config"]["target"].split("/", 1)[1]
    entries, _ = load_category(category)
    seen = seen_in_train(category)
    verdicts = record["verdicts"]
    tasks = list(verdicts["base"])
    overlap = {i for i in tasks if {f["name"] for f in entries[i]["function"]} & seen}
    out = {"tasks": {"overlap": len(overlap), "no_overlap": len(tasks) - len(overlap)}}
    for system in (s for s in SYSTEMS if s in verdicts):
        v = verdicts[system]
        out[system] = {"overlap": sum(bool(v[i]) for i in overlap),
                       "no_overlap": sum(bool(v[i]) for i in tasks if i not in overlap)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+", type=Path)
    args = ap.parse_args()
    records = {p.stem: json.loads(p.read_text()) for p in args.records}
    rows = {name: split_record(r) for name, r in records.items()}
    total: dict[str, dict[str, int]] = {}
    for name, row in rows.items():
        # grpo_last_step where a guard chose another step, else grpo: the last step either way
        last = {"grpo_last_step": row.get("grpo_last_step", row.get("grpo"))}
        # likewise for the adapters, but records from before composed_last_step do not have it under a guard
        if "composed_last_step" in row or not records[name]["config"]["training"].get("guard_seeds"):
            last["composed_last_step"] = row.get("composed_last_step", row["composed"])
        for system, counts in (("base", row["base"]), ("composed", row["composed"]), *last.items()):
            total.setdefault(system, {"records": 0, "tasks": {"overlap": 0, "no_overlap": 0}})["records"] += 1
            for part, n in row["tasks"].items():
                total[system]["tasks"][part] += n
            for part, n in counts.items():
                total[system][part] = total[system].get(part, 0) + n
    print(json.dumps({"records": rows, "sum": total}, indent=1))


if __name__ == "__main__":
    main()
