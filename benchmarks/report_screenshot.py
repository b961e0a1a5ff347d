"""Build the HTML run report and screenshot it in headless Chromium, to see what a reader sees.

Without --run it writes a small synthetic run folder (`fixture_run`, made-up but plausible numbers
for every stage) in a temporary folder and reports on that. Prints one JSON object:
{"html", "screenshot", "bytes" (HTML size), "seconds" (build_report), "screenshot_seconds"}.

    python benchmarks/report_screenshot.py                   # fixture -> benchmarks/out/report.png
    python benchmarks/report_screenshot.py --run runs/demo   # a real run folder

Needs Chromium (`apt-get install -y chromium`); exits with status 2 and says so when it is missing.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trace_agents.report import build_report
from trace_agents.types import FunctionCall, Message, ToolCall, Trajectory, write_json, write_jsonl

CHROMIUM = "/usr/bin/chromium"
CAPABILITIES = [  # name, definition, mean Δ, mean coverage, runs passed
    ("argument_value_grounding", "Extracts argument values exactly from the request (numbers, names, units).", 0.63, 0.56, 10),
    ("function_selection", "Picks the function whose description matches the request.", 0.41, 0.22, 9),
    ("parallel_call_completeness", "Makes every call the request asks for, not just the first.", 0.28, 0.14, 8),
    ("tool_call_format", "Emits a parseable tool call instead of prose.", 0.12, 0.31, 2),
]
SELECTED = [c[0] for c in CAPABILITIES[:3]]
TOOLS = [{"type": "function", "function": {"name": n, "description": d, "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
    for n, d in (("weather.current", "Current weather in a city."), ("weather.forecast", "Forecast for the next days."))]


def _traj(system: str, i: int, request: str, calls: list[tuple[str, dict]], success: bool) -> Trajectory:
    tool_calls = [ToolCall(id=f"call_{k}", function=FunctionCall(name=n, arguments=json.dumps(a))) for k, (n, a) in enumerate(calls)]
    reply = Message(role="assistant", content="" if calls else "I can't look that up.", tool_calls=tool_calls or None)
    info = {} if success else {"failure": "wrong_value" if calls else "no_call"}
    return Trajectory(id=f"{system}:{i}", env="bfcl/multiple", task_id=f"multiple_{i}", seed=i,
                      messages=[Message(role="user", content=request), reply], tools=TOOLS,
                      reward=1.0 if success else 0.0, success=success, tool_calls=len(calls), info=info)


def _episodes(system: str, solved: set[int]) -> list[Trajectory]:
    """Eight weather requests; the agent answers task i correctly iff i is in `solved`."""
    cities = ["Paris", "Lagos", "Kyoto", "Lima", "Oslo", "Perth", "Quito", "Cairo"]
    out = []
    for i, city in enumerate(cities):
        request = f"Is it above 20 °C in {city} right now? Answer in celsius & keep it short (< 20 words)."
        good = [("weather.current", {"city": city, "unit": "celsius"})]
        bad = [("weather.current", {"city": city.lower(), "unit": "fahrenheit"})] if i % 3 else []
        out.append(_traj(system, i, request, good if i in solved else bad, i in solved))
    return out


def _metrics(rng: random.Random, steps: int, start: float, gain: float) -> list[dict]:
    rows = []
    for step in range(1, steps + 1):
        reward = min(1.0, start + gain * step / steps + rng.uniform(-0.05, 0.05))
        rows.append({"step": step, "reward": round(reward, 4), "success": round(max(0.0, reward - 0.08), 4),
                     "tool_calls": round(1.0 + rng.uniform(0, 0.4), 3), "loss": None if step == 1 else round(rng.uniform(-0.05, 0.05), 4),
                     "groups": 2, "dropped_groups": step % 2})
    return rows


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_fixture_run(root: Path) -> Path:
    """A complete synthetic run folder `root/fixture_run` with every stage's files; returns it."""
    run, rng = root / "fixture_run", random.Random(0)
    stages = {name: run / f"{i:02d}_{name}" for i, name in enumerate(
        ["base_rollouts", "analysis", "synthesis", "adapters", "grpo_baseline", "compose", "evaluation"], start=1)}
    for seconds, folder in zip([95, 4, 310, 2400, 2350, 180, 600], stages.values()):
        write_json(folder / "stage.json", {"fingerprint": "0" * 16, "seconds": seconds})
    write_json(run / "run.json", {"model": "smollm2-135m", "target": "bfcl/multiple", "capabilities": SELECTED,
                                  "rollouts_per_system": 1920,
                                  "adapters": {c: str(stages["adapters"] / c / "adapter") for c in SELECTED},
                                  "grpo_baseline": str(stages["grpo_baseline"] / "grpo" / "adapter")})
    write_jsonl(stages["base_rollouts"] / "trajectories.jsonl", _episodes("base", {0, 4, 6}))

    caps = [{"name": n, "definition": d, "mean_delta": dl, "mean_coverage": cv, "runs_passed": rp, "selected": n in SELECTED,
             "per_run": [{"run": r, "delta": dl, "coverage": cv, "passed": r <= rp} for r in range(1, 11)]}
            for n, d, dl, cv, rp in CAPABILITIES]
    write_json(stages["analysis"] / "capabilities.json",
               {"thresholds": {"delta": 0.2, "rho": 0.1, "min_runs": 8, "runs": 10}, "capabilities": caps})

    syn, envs = stages["synthesis"], {}
    for k, name in enumerate(SELECTED):
        cal = {"difficulty": [0.5, 0.7, 0.3][k], "seeds": 8, "samples": 4, "mean_reward": [0.41, 0.33, 0.72][k],
               "success_rate": [0.38, 0.28, 0.69][k], "pass_at_k": [0.75, 0.62, 0.94][k], "degenerate_fraction": [0.12, 0.25, 0.06][k]}
        cal["in_band"] = {"mean_reward": 0.2 <= cal["mean_reward"] <= 0.6, "success_rate": 0.2 <= cal["success_rate"] <= 0.6,
                          "degenerate_fraction": cal["degenerate_fraction"] <= 0.2}
        cal["ok"] = all(cal["in_band"].values())
        write_json(syn / f"{name}.calibration.json", {"difficulty": cal["difficulty"], "result": cal,
                                                      "why_not": None if cal["ok"] else "out of band: " + ", ".join(x for x, ok in cal["in_band"].items() if not ok)})
        write_json(syn / f"{name}.validation.json", {"path": str(syn / f"{name}.py"), "ok": True, "seconds": 1.2,
                                                     "checks": [{"name": "imports", "ok": True, "detail": ""}]})
        envs[name] = {"source": "builtin", "module": str(syn / f"{name}.py"), "valid": True, "calibration": cal}
    envs["request_detail_coverage"] = {"source": None, "error": "no built-in family; pass --llm openai:NAME@URL to synthesize one"}
    write_json(syn / "synthesis.json", {"target": "bfcl/multiple", "environments": envs})

    for k, name in enumerate(SELECTED):
        _jsonl(stages["adapters"] / name / "metrics.jsonl", _metrics(rng, 20, 0.3 + 0.05 * k, 0.35))
    write_json(stages["adapters"] / SELECTED[0] / "guard.json", {  # training.guard_every: a kept step won
        "probes": {"drills": {"split": "test", "seeds": 64, "mean_reward": {"own": 0.08, "step_16": 0.5, "init": 0.3}},
                   "target": {"split": "train", "seeds": 32, "mean_reward": {"own": 0.25, "step_16": 0.44, "init": 0.38}}},
        "mean_reward": {"own": 0.33, "step_16": 0.94, "init": 0.68}, "kept": "step_16", "init": "_shared"})
    _jsonl(stages["grpo_baseline"] / "grpo" / "metrics.jsonl", _metrics(rng, 60, 0.35, 0.15))
    write_json(stages["grpo_baseline"] / "grpo" / "guard.json", {  # training.guard_target: the baseline's choice
        "probes": {"target": {"split": "train", "seeds": 32, "mean_reward": {"own": 0.41, "step_32": 0.47}}},
        "mean_reward": {"own": 0.41, "step_32": 0.47}, "kept": "step_32", "init": None})

    history = [{"step": s, "loss": round(1.1 * 0.96 ** s + 0.05, 4), "accuracy": round(1 - 0.7 * 0.95 ** s, 4)} for s in range(1, 51)]
    composed = stages["compose"] / "composed"  # where the pipeline's compose stage writes them
    write_json(composed / "gates.json", {"steps": 50, "examples": 96, "loss": history[-1]["loss"],
                                                  "accuracy": history[-1]["accuracy"], "history": history})
    write_json(composed / "routing.json", {"tokens": 48213, "switches_per_trajectory": 3.4, "accuracy": 0.81,
                                                    "share": {"base": 0.46, **dict(zip(SELECTED, [0.27, 0.18, 0.09]))}})

    ev = stages["evaluation"]
    systems = [("base", {0, 4, 6}, None, 41.0), ("grpo", {0, 2, 4, 6}, 1920, 44.5),
               *((f"adapter:{c}", {0, 1, 4, 6}, 640, 43.0) for c in SELECTED), ("composed", {0, 2, 3, 4, 5, 6}, 1920, 52.3)]
    rows = []
    for system, solved, spent, wall in systems:
        trajs = _episodes(system, solved)
        write_jsonl(ev / f"{system.replace(':', '_')}.jsonl", trajs)  # as the pipeline names them
        p = len(solved) / len(trajs)
        rows.append({"system": system, "n": len(trajs), "success_rate": p, "ci": [max(0.0, p - 0.3), min(1.0, p + 0.25)],
                     "mean_reward": p, "mean_tool_calls": sum(t.tool_calls for t in trajs) / len(trajs),
                     "rollouts_spent": spent, "wall_seconds": wall})
    write_json(ev / "table.json", {"target": "bfcl/multiple", "split": "test", "n_tasks": 8, "systems": rows,
                                   "p_values": {"composed_vs_base": 0.031, "composed_vs_grpo": None}})
    return run


def screenshot(html: Path, png: Path, height: int) -> None:
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:  # a fresh profile: no state leaks between runs
        subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={profile}", f"--screenshot={png.resolve()}", f"--window-size=1400,{height}",
                        html.resolve().as_uri()], check=True, capture_output=True, timeout=180)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, help="A real run folder (default: a synthetic fixture_run in a temp folder).")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/report.png"), help="Screenshot PNG.")
    # 6000 px: the fixture's page is ~5500 px tall and a shorter window cuts off the example trajectories.
    ap.add_argument("--height", type=int, default=6000, help="Browser window height in pixels (the screenshot's height).")
    args = ap.parse_args()
    if args.run is not None and not args.run.is_dir():
        ap.error(f"--run {args.run}: not a folder")
    if not Path(CHROMIUM).exists():  # checked first: no point building a report we cannot look at
        print(f"error: {CHROMIUM} not found; install it with `apt-get install -y chromium` (sudo if not root)", file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory() as tmp:
        run = args.run or write_fixture_run(Path(tmp))
        html = args.out.with_suffix(".html")
        start = time.perf_counter()
        build_report(run, html)
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        screenshot(html, args.out, args.height)
    print(json.dumps({"html": str(html), "screenshot": str(args.out), "bytes": html.stat().st_size,
                      "seconds": round(seconds, 3), "screenshot_seconds": round(time.perf_counter() - start, 2)}))


if __name__ == "__main__":
    main()
