"""Rules analysis + selection over 10,000 BFCL trajectories (target < 10 s on the 2-core machine).
The trajectories are built from real BFCL train tasks with reference calls, randomly perturbed
(wrong value, dropped argument, wrong function, missing parallel call, no call), and scored by
BFCL's own checker. Prints one JSON object.

    python benchmarks/analysis_speed.py --n 10000 --runs 10
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time

from trace_agents.analysis.labels import write_run
from trace_agents.analysis.probes import label_runs
from trace_agents.analysis.select import select_folder
from trace_agents.envs.bfcl import BfclEnv
from trace_agents.types import FunctionCall, Message, ToolCall, Trajectory


def perturbed_episode(env: BfclEnv, seed: int, rng: random.Random) -> Trajectory:
    messages = env.reset(seed)
    calls = [(n, {k: v[0] for k, v in a.items() if v[0] != ""}) for d in env.answer for n, a in d.items()]
    kind = rng.choice(["ok", "ok", "value", "drop", "function", "short", "none"])
    if kind == "value" and calls[0][1]:
        k = rng.choice(sorted(calls[0][1]))
        calls[0][1][k] = "wrong"
    elif kind == "drop" and calls[0][1]:
        calls[0][1].pop(rng.choice(sorted(calls[0][1])))
    elif kind == "function":
        calls[0] = ("made_up_function", calls[0][1])
    elif kind == "short":
        calls = calls[:1]
    elif kind == "none":
        calls = []
    tool_calls = [ToolCall(id=f"c{i}", function=FunctionCall(name=n, arguments=json.dumps(a))) for i, (n, a) in enumerate(calls)]
    reply = Message(role="assistant", content="" if calls else "I cannot.", tool_calls=tool_calls or None)
    env.step(reply)
    v = env.verdict()
    return Trajectory(id="", env=env.name, task_id=env.task_id, seed=seed, messages=messages + [reply], tools=env.tools,
                      reward=v.reward, success=v.success, tool_calls=len(calls), info=v.details)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    rng = random.Random(0)
    base = []
    for category in ("simple_python", "multiple", "parallel"):
        env = BfclEnv(category)
        base += [perturbed_episode(env, s, rng) for s in env.seeds("train")]
    trajs = [base[i % len(base)].model_copy(update={"id": f"t{i}"}) for i in range(args.n)]

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for labels in label_runs(trajs, args.runs):
            write_run(f"{tmp}/labels", labels)
        labelled = time.perf_counter()
        selection = select_folder(f"{tmp}/labels", f"{tmp}/capabilities.json")
    done = time.perf_counter()
    print(json.dumps({
        "benchmark": "analysis_speed", "trajectories": len(trajs), "distinct_episodes": len(base),
        "runs": args.runs, "label_seconds": round(labelled - started, 2), "select_seconds": round(done - labelled, 2),
        "total_seconds": round(done - started, 2), "target_seconds": 10,
        "selected": [c["name"] for c in selection["capabilities"] if c["selected"]],
    }, indent=2))


if __name__ == "__main__":
    main()
