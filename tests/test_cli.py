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
    train = ("train", "--env", "synthetic/lookup_then_act", "--model", "tiny-random", "--out", str(tmp_path / "t"))
    p = run(*train, "--reward", "trace-efficiency", "--efficiency", "scope=galactic")
    assert p.returncode == 2 and "scope" in p.stderr
    p = run(*train, "--efficiency", "lam=0.1")
    assert p.returncode == 2 and "--reward trace-efficiency" in p.stderr
    p = run(*train, "--composed", str(tmp_path))
    assert p.returncode == 2 and "composed.json" in p.stderr
    p = run(*train, "--init-adapter", str(tmp_path))
    assert p.returncode == 2 and "adapter_config.json" in p.stderr
    assert not (tmp_path / "t").exists()  # refused before any work
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps({"capabilities": [{"name": "function_selection", "selected": True}]}))
    synth = ("synthesize", "--capabilities", str(caps), "--target", "bfcl/multiple", "--out", str(tmp_path / "envs"))
    p = run(*synth, "--partial-credit", "0.5")
    assert p.returncode == 2 and "source 'target'" in p.stderr
    p = run(*synth, "--partial-credit", "1", "--source", "target")
    assert p.returncode == 2 and "[0, 1)" in p.stderr
    p = run(*synth, "--fresh")
    assert p.returncode == 2 and "fresh applies" in p.stderr


def test_calibrate_with_the_hint_and_without(tmp_path):
    out = tmp_path / "cal.json"
    cal = ("calibrate", "--model", "tiny-random", "--no-tune", "--seeds", "2", "--samples", "2", "--max-steps", "1",
           "--out", str(out))
    p = run(*cal, "--env", "bfcl/simple_python", "--hint")
    assert p.returncode == 2 and "leave out --hint" in p.stderr and not out.exists()
    p = run(*cal, "--env", "synthetic/function_selection", "--hint", "--dtype", "bfloat16", "--max-new-tokens", "24")
    assert p.returncode == 0, p.stderr
    written = json.loads(out.read_text())
    assert written["sampling"]["max_new_tokens"] == 24
    h = written["hint"]
    assert not h["without"]["hinted"] and h["with"]["hinted"] and h["with"]["seeds"] == 2
    assert h["success_change"] == h["with"]["success_rate"] - h["without"]["success_rate"]


def test_analyze_rules_and_select(tmp_path):
    from conftest import assistant, call
    from test_probes import episode

    from trace_agents.types import write_jsonl

    trajs = []
    for b in range(12):  # 4 right, 8 with a wrong value -> argument_value_grounding concentrates in failures
        t = episode("simple_python", 0, assistant(call("calculate_triangle_area", {"base": 10 if b < 4 else b, "height": 5})))
        trajs.append(t.model_copy(update={"id": f"t{b}"}))
    write_jsonl(tmp_path / "t.jsonl", trajs)
    p = run("analyze", "--trajectories", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "a"), "--runs", "3")
    assert p.returncode == 0, p.stderr
    sel = json.loads((tmp_path / "a" / "capabilities.json").read_text())
    kept = [c["name"] for c in sel["capabilities"] if c["selected"]]
    assert kept == ["argument_value_grounding"] and sel["thresholds"]["runs"] == 3
    assert (tmp_path / "a" / "summary.png").stat().st_size > 1000
    assert "argument_value_grounding" in (tmp_path / "a" / "summary.md").read_text()
    assert len(list((tmp_path / "a" / "labels").glob("run_*.json"))) == 3

    p = run("select", "--labels", str(tmp_path / "a" / "labels"), "--out", str(tmp_path / "s.json"), "--delta", "0.9")
    assert p.returncode == 0 and json.loads((tmp_path / "s.json").read_text())["thresholds"]["delta"] == 0.9
    p = run("select", "--labels", str(tmp_path / "a" / "labels"), "--out", str(tmp_path / "s.json"), "--min-runs", "9")
    assert p.returncode == 2 and "--min-runs" in p.stderr
    p = run("analyze", "--trajectories", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "b"))
    assert p.returncode == 2 and "file not found" in p.stderr
