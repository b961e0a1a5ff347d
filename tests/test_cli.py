import json
import subprocess
import sys

from trace_agents.types import read_jsonl


def run(*args):
    return subprocess.run([sys.executable, "-m", "trace_agents.cli", *args], capture_output=True, text=True, timeout=600)


def test_rollout_and_evaluate_smoke(tmp_path):
    out = tmp_path / "r.jsonl"
    p = run("rollout", "--env", "bfcl/parallel", "--model", "tiny-random", "--split", "train", "--limit", "2",
            "--samples", "2", "--max-new-tokens", "4", "--out", str(out))
    assert p.returncode == 0, p.stderr
    trajs = read_jsonl(out)
    assert len(trajs) == 4 and {t.seed for t in trajs[:2]} == {trajs[0].seed}
    assert not (tmp_path / "r.jsonl.partial").exists()

    summary = tmp_path / "e.json"
    p = run("evaluate", "--env", "bfcl/simple_python", "--model", "tiny-random", "--limit", "3",
            "--max-new-tokens", "4", "--out", str(summary))
    assert p.returncode == 0, p.stderr
    s = json.loads(summary.read_text())
    assert s["n"] == 3 and s["split"] == "test" and 0 <= s["ci95"][0] <= s["success_rate"] <= s["ci95"][1]
    assert {"mean_reward", "mean_tool_calls", "per_task", "env", "model"} <= s.keys()


def test_bad_arguments_exit_2_with_a_fix(tmp_path):
    p = run("evaluate", "--env", "bfcl/nope", "--model", "tiny-random", "--out", str(tmp_path / "x.json"))
    assert p.returncode == 2 and "choose one of" in p.stderr
    p = run("evaluate", "--env", "bfcl/multiple", "--model", "no/such/folder", "--out", str(tmp_path / "x.json"))
    assert p.returncode == 2 and "openai:NAME@URL" in p.stderr
    p = run("evaluate", "--env", "bfcl/multiple", "--model", "tiny-random", "--split", "dev", "--out", str(tmp_path / "x.json"))
    assert p.returncode == 2 and "--split" in p.stderr
    p = run("rollout", "--env", "bfcl/multiple")
    assert p.returncode == 2
