import json
import shutil
import time
from pathlib import Path

import pytest

from trace_agents.pipeline import load_config, run_pipeline
from trace_agents.types import DataError


def _config(tmp_path, warmup_steps=None, dtype=None, parallel=False, **training):
    cfg = {"run_dir": str(tmp_path / "run"), "model": "tiny-random", "target": "bfcl/multiple", "check_budgets": False,
           "analysis": {"runs": 2, "rollout_limit": 4}, "synthesis": {"calibrate": False},
           "training": {"steps": 1, "group_size": 2, "groups_per_step": 1, **training},
           "compose": {"gate_steps": 2, "gate_trajectories": 2, "gate_grpo_steps": 1},
           "evaluation": {"max_new_tokens": 8, "limit": 2, "single_adapters": True}}
    if warmup_steps:
        cfg["warmup"] = {"steps": warmup_steps}
    if dtype:
        cfg["dtype"] = dtype
    if parallel:
        cfg["parallel"] = True
    path = tmp_path / "run.json"
    path.write_text(json.dumps(cfg))
    return load_config(path)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One uninterrupted tiny run: (its folder's parent, logs, summary, file structure)."""
    tmp_path = tmp_path_factory.mktemp("first")
    logs = []
    summary = run_pipeline(_config(tmp_path), log=logs.append)
    return tmp_path, logs, summary, _files(tmp_path / "run")


def test_stages_run_then_resume_skips_and_a_change_reruns_downstream(first_run):
    tmp_path, logs, summary, _ = first_run
    logs = list(logs)
    # every rollout of a random model fails, so lacking the format concentrates in failures
    # 2 rollouts per adapter step and per gate-GRPO step; the task router spends no gate rollouts
    assert summary["capabilities"] and summary["rollouts_per_system"] == 2 * len(summary["capabilities"]) + 2
    compose = tmp_path / "run" / "06_compose"
    assert (compose / "gate_grpo" / "metrics.jsonl").read_text().count("\n") == 1
    fitted, trained = compose / "composed" / "gates.safetensors", compose / "gate_grpo" / "composed" / "gates.safetensors"
    # the trained gates replaced the fitted ones (a random model's groups all fail, so compare the
    # file the copy carries over, not only the weights)
    assert fitted.read_bytes() == trained.read_bytes() and fitted.stat().st_mtime == trained.stat().st_mtime
    assert [m for m in logs if m.endswith("skipped")] == [] and len([m for m in logs if m.endswith("running")]) == 7
    stamps = {p.name: p.stat().st_mtime for p in (tmp_path / "run").iterdir()}
    logs.clear()
    run_pipeline(_config(tmp_path), log=logs.append)
    assert len(logs) == 7 and all(m.endswith("skipped") for m in logs)
    table = json.loads((tmp_path / "run" / "07_evaluation" / "table.json").read_text())
    names = [r["system"] for r in table["systems"]]
    assert names[:2] == ["base", "grpo"] and names[-2:] == ["composed", "task_router"]
    assert {n.split(":")[1] for n in names[2:-2]} == set(summary["capabilities"])
    routing = {r["system"]: r["routing"] for r in table["systems"]}
    assert "switches_per_trajectory" in routing["composed"] and "episodes_share" in routing["task_router"]
    assert routing["base"] is None
    assert all(r["n"] == 2 for r in table["systems"]) and set(table["p_values"]) >= {"composed_vs_base", "composed_vs_grpo"}
    spent = {r["system"]: r["rollouts_spent"] for r in table["systems"]}
    assert spent["grpo"] == spent["composed"] == spent["task_router"] + 2
    logs.clear()
    run_pipeline(_config(tmp_path, dtype="float32"), log=logs.append)  # the default, named: runs keep their prints
    assert len(logs) == 7 and all(m.endswith("skipped") for m in logs)
    logs.clear()
    run_pipeline(_config(tmp_path, steps=2), log=logs.append)
    assert [m.split("]")[0][1:] for m in logs if m.endswith("running")] == ["adapters", "grpo_baseline", "compose", "evaluation"]
    assert (tmp_path / "run" / "01_base_rollouts").stat().st_mtime == stamps["01_base_rollouts"]


def test_adapters_in_a_background_process_make_the_same_run(first_run, tmp_path):
    logs = []
    run_pipeline(_config(tmp_path, parallel=True), log=logs.append)
    assert any(m.startswith("[adapters] in a background process") for m in logs)
    # the child's log lines reach the run's log (through a queue), the baseline's come from this process
    assert any(m.startswith("[adapters] ") and " step 1/1 " in m for m in logs)
    assert any(m.startswith("[grpo_baseline] step") for m in logs)
    assert [m.split("]")[0][1:] for m in logs if m.endswith("running")] == [
        "base_rollouts", "analysis", "synthesis", "adapters", "grpo_baseline", "compose", "evaluation"]
    assert _files(tmp_path / "run") == first_run[3]  # the artifacts of an uninterrupted sequential run
    for parallel in (True, False):  # a finished background stage is skipped; its fingerprint is the sequential one
        logs.clear()
        run_pipeline(_config(tmp_path, parallel=parallel), log=logs.append)
        assert len(logs) == 7 and all(m.endswith("skipped") for m in logs)


def test_a_failed_background_stage_is_reported_and_left_to_resume(tmp_path):
    from trace_agents.pipeline import Stages

    logs = []
    stages = Stages(tmp_path, resume=True, log=logs.append)
    folder, pending = stages.start("adapters", {"x": 1}, _fails_in_a_child, {}, background=True)
    with pytest.raises(DataError, match=r"background process failed \(exit code 3"):
        pending.wait()
    assert "about to fail" in logs
    assert not folder.exists() and (tmp_path / "01_adapters.tmp" / ".fingerprint").exists()


def test_a_cancelled_background_stage_stops_its_process(tmp_path):
    from trace_agents.pipeline import Stages

    import os
    import re

    logs = []
    folder, pending = Stages(tmp_path, resume=True, log=logs.append).start(
        "adapters", {}, _sleeps_in_a_child, {}, background=True)
    pid = int(re.search(r"pid (\d+)", " ".join(logs)).group(1))
    os.kill(pid, 0)  # running
    pending.cancel()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not folder.exists()


def _fails_in_a_child(out, log):
    log("about to fail")
    raise SystemExit(3)


def _sleeps_in_a_child(out, log):
    time.sleep(600)


def test_a_bfloat16_run_reruns_every_model_stage_and_evaluates_in_bfloat16(first_run, tmp_path):
    import shutil

    shutil.copytree(first_run[0] / "run", tmp_path / "run")
    logs = []
    run_pipeline(_config(tmp_path, dtype="bfloat16", steps=2), log=logs.append)
    assert [m.split("]")[0][1:] for m in logs if m.endswith("running")] == [
        "base_rollouts", "analysis", "synthesis", "adapters", "grpo_baseline", "compose", "evaluation"]
    evaluation = tmp_path / "run" / "07_evaluation"
    assert {json.loads((evaluation / f"{n}.json").read_text())["dtype"] for n in ("base", "grpo", "composed")} == {"bfloat16"}


def test_bad_config_names_the_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("run_dir: x\ntraining:\n  reward: magic\n  stepz: 3\n")
    with pytest.raises(DataError) as e:
        load_config(path)
    assert "training.reward" in str(e.value) and "verifier" in str(e.value) and "training.stepz" in str(e.value)


def _files(run):
    """Relative paths of a run's artifacts; TensorBoard event files are named by time and pid."""
    return sorted({str(p.relative_to(run).parent / ("tfevents" if "tfevents" in p.name else p.name))
                   for p in run.rglob("*") if p.is_file() and "checkpoints" not in p.parts})


def test_killed_mid_stage_resumes_without_redoing_finished_work(tmp_path, first_run):
    import signal
    import subprocess
    import sys
    import time

    config = _config(tmp_path)
    run = config.run_dir
    proc = subprocess.Popen([sys.executable, "-m", "trace_agents.cli", "run", "--config", str(tmp_path / "run.json")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = run / "07_evaluation.tmp" / "base.jsonl"
    deadline = time.time() + 300
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert marker.exists() and not (run / "07_evaluation").exists(), "the run was not killed inside the evaluation stage"
    stamps = {p.name: (p / "stage.json").stat().st_mtime for p in run.iterdir() if (p / "stage.json").exists()}
    assert len(stamps) == 6

    logs = []
    run_pipeline(config, resume=True, log=logs.append)
    assert [m for m in logs if m.endswith("running")] == ["[evaluation] running"]
    assert not any(m.startswith("[evaluation] base on") for m in logs)  # the finished system is kept
    assert all((run / name / "stage.json").stat().st_mtime == t for name, t in stamps.items())
    assert _files(run) == first_run[3]  # the same artifacts as an uninterrupted run


def test_demo_budgets_are_valid_configs(tmp_path):
    from trace_agents.pipeline import BUDGETS, budget_config

    for name in BUDGETS:
        cfg = budget_config(name, tmp_path / name)
        assert cfg.run_dir == tmp_path / name and cfg.warmup is not None
    with pytest.raises(DataError, match="choose one of"):
        budget_config("tpu", tmp_path)


def _contained(part: dict, whole: dict, where: str = "") -> list[str]:
    """Where `part` (a nested config) differs from `whole`; keys only in `whole` are ignored."""
    diffs = []
    for key, value in part.items():
        here = f"{where}.{key}".lstrip(".")
        if isinstance(value, dict) and isinstance(whole.get(key), dict):
            diffs += _contained(value, whole[key], here)
        elif whole.get(key, "<missing>") != value:
            diffs.append(f"{here}: record {value!r}, preset {whole.get(key, '<missing>')!r}")
    return diffs


def test_table_budget_is_the_recipe_of_the_committed_records(tmp_path):
    """`paper_table.py --budget table --seeds 2 3 4` must rerun what the README reports."""
    from trace_agents.pipeline import budget_config

    record = json.loads((Path(__file__).parents[1] / "benchmarks/results/wide_s4g.json").read_text())["config"]
    preset = budget_config("table", Path(record["run_dir"])).model_dump(mode="json")
    preset["training"]["seed"] = record["training"]["seed"]
    assert _contained(record, preset) == []


def test_training_lr_and_tokens_reach_grpo_only_when_set(tmp_path, monkeypatch):
    import trace_agents.training.grpo as grpo
    from trace_agents.pipeline import TrainingCfg, _train

    seen = []
    monkeypatch.setattr(grpo, "train", lambda make_env, model, out, config, **kw: seen.append(config))
    _train(None, "tiny-random", tmp_path, TrainingCfg(lr=5e-4, max_new_tokens=80, seed=3), 3, print)
    _train(None, "tiny-random", tmp_path, TrainingCfg(), 3, print, dtype="bfloat16")
    assert (seen[0].lr, seen[0].max_new_tokens, seen[0].max_steps, seen[0].seed, seen[0].dtype) == (5e-4, 80, 3, 3, "float32")
    assert seen[1].dtype == "bfloat16"
    assert (seen[1].lr, seen[1].max_new_tokens, seen[1].seed) == (grpo.PRESETS["cpu"]["lr"], grpo.PRESETS["cpu"]["max_new_tokens"], 0)


def test_shared_steps_train_one_adapter_on_all_envs_that_every_capability_adapter_starts_from(tmp_path, monkeypatch):
    import trace_agents.training.grpo as grpo
    from trace_agents.pipeline import TrainingCfg, _rollouts_spent, train_adapters

    seen, moments, keeps = [], [], []

    def fake_train(make_env, model, out, config, **kw):
        env = make_env()
        seen.append((sorted(e.name for e in getattr(env, "envs", [env])), out.name, config.steps, config.init_adapter))
        moments.append(config.init_optimizer)
        keeps.append(config.keep_every)
        (out / "adapter").mkdir(parents=True)
        (out / "adapter" / "adapter_config.json").write_text("{}")
        (out / "checkpoints" / f"step_{config.steps:05d}").mkdir(parents=True)
        (out / "checkpoints" / f"step_{config.steps:05d}" / "train_state.json").write_text("{}")
        (out / "checkpoints" / f"step_{config.steps:05d}" / "state.pt").write_text("")

    monkeypatch.setattr(grpo, "train", fake_train)
    envs = {"a": "bfcl/multiple", "b": "bfcl/simple_python"}
    t = TrainingCfg(steps=2, shared_steps=5, group_size=2, groups_per_step=1)
    train_adapters(envs, "tiny-random", tmp_path, t)
    shared = str(tmp_path / "_shared" / "adapter")
    assert seen == [(["bfcl/multiple", "bfcl/simple_python"], "_shared", 5, None),
                    (["bfcl/multiple"], "a", 2, shared), (["bfcl/simple_python"], "b", 2, shared)]
    seen.clear()
    train_adapters(envs, "tiny-random", tmp_path / "fresh", t.model_copy(update={"shared_steps": 0}))
    assert [s[1:] for s in seen] == [("a", 2, None), ("b", 2, None)]
    assert moments == [None] * 5
    moments.clear()
    train_adapters(envs, "tiny-random", tmp_path / "carry", t.model_copy(update={"carry_optimizer": True}))
    assert moments == [None] + [str(tmp_path / "carry" / "_shared" / "checkpoints" / "step_00005")] * 2
    assert _rollouts_spent(t, t.shared_steps) == 10
    # guard_every: the capability adapters (not the shared one) keep their earlier steps for the guard
    import trace_agents.training.guard as guard

    monkeypatch.setattr(guard, "mean_reward", lambda *a, **kw: 0.0)
    keeps.clear()
    logs = []
    train_adapters(envs, "tiny-random", tmp_path / "kept", t.model_copy(update={"guard_seeds": 2, "guard_every": 1}), logs.append)
    assert keeps == [0, 1, 1]
    assert sum(m.endswith("guard on 2 test seeds of drills: last step 0.000, shared 0.000 -> kept last step") for m in logs) == 2
    # shared_target: the target's train tasks join the shared mixture only
    seen.clear()
    train_adapters(envs, "tiny-random", tmp_path / "target", t.model_copy(update={"shared_target": True}), target_env="bfcl/parallel")
    assert [s[:2] for s in seen] == [(["bfcl/multiple", "bfcl/parallel", "bfcl/simple_python"], "_shared"),
                                     (["bfcl/multiple"], "a"), (["bfcl/simple_python"], "b")]


def test_shared_target_needs_a_shared_adapter():
    from trace_agents.pipeline import TrainingCfg

    with pytest.raises(ValueError, match="shared_target adds the target's train tasks.*set shared_steps > 0"):
        TrainingCfg(shared_target=True)
    assert TrainingCfg(shared_steps=2, shared_target=True).shared_target


def test_a_shared_adapter_is_evaluated_as_a_system_with_its_own_rollouts(tmp_path):
    from trace_agents.pipeline import RunConfig, _systems

    config = RunConfig.model_validate({"run_dir": tmp_path, "training": {"steps": 2, "shared_steps": 5, "group_size": 2,
                                                                         "groups_per_step": 1}})
    args = (config, "m", {"a": tmp_path / "a", "b": tmp_path / "b"}, tmp_path / "g", tmp_path / "c", 18, 18)
    systems = _systems(*args, shared=tmp_path / "s")
    assert list(systems) == ["base", "grpo", "shared_adapter", "adapter:a", "adapter:b", "composed", "task_router"]
    assert systems["shared_adapter"]["rollouts"] == 10 and systems["adapter:a"]["rollouts"] == 14
    assert "shared_adapter" not in _systems(*args)


def test_a_guarded_grpo_baseline_is_also_evaluated_at_its_last_step_without_running_a_twin_twice(tmp_path, monkeypatch):
    """The guard's 32-task probe once kept GRPO's step 8 of 96 (31% on the test tasks, its last step 51%):
    the table must show the last step beside the kept one, and an identical policy is not rerun."""
    import trace_agents.agent.policy as policy_mod
    import trace_agents.agent.rollout as rollout_mod
    from trace_agents.envs.base import resolve_env
    from trace_agents.pipeline import EvaluationCfg, RunConfig, _guarded_last_step, _systems, evaluate_systems
    from trace_agents.types import Trajectory

    grpo = tmp_path / "grpo"
    grpo.mkdir()
    assert _guarded_last_step(grpo) is None  # no guard ran: no extra system
    (grpo / "guard.json").write_text(json.dumps({"kept": "step_8"}))
    assert _guarded_last_step(grpo) == grpo / "adapter_own"
    (grpo / "guard.json").write_text(json.dumps({"kept": "own"}))
    assert _guarded_last_step(grpo) == grpo / "adapter"

    config = RunConfig.model_validate({"run_dir": tmp_path, "training": {"steps": 2, "group_size": 2, "groups_per_step": 1}})
    args = (config, "m", {"a": tmp_path / "a"}, grpo / "adapter", tmp_path / "c", 18, 18)
    systems = _systems(*args, grpo_last_step=_guarded_last_step(grpo))
    assert list(systems) == ["base", "grpo", "grpo_last_step", "adapter:a", "composed", "task_router"]
    assert systems["grpo_last_step"] == systems["grpo"]  # the guard kept the last step: the same policy

    made = []
    monkeypatch.setattr(policy_mod, "make_policy", lambda model, **kw: made.append(kw.get("adapter")) or object())
    monkeypatch.setattr(rollout_mod, "rollout", lambda make_env, policy, seeds, **kw: [
        Trajectory(id=f"x{s}", env="bfcl/multiple", task_id=f"t{s}", seed=s, messages=[], reward=1.0, success=True,
                   tool_calls=1) for s in seeds])
    systems = {n: systems[n] for n in ("base", "grpo", "grpo_last_step")}
    table = evaluate_systems(systems, resolve_env("bfcl/multiple"), tmp_path / "eval", EvaluationCfg(limit=3), max_steps=1, log=lambda m: None)
    assert made == [None, str(grpo / "adapter")]  # base and grpo; grpo_last_step copied grpo's episodes
    rows = {r["system"]: r for r in table["systems"]}
    assert rows["grpo_last_step"]["n"] == 3 and rows["grpo_last_step"]["success_rate"] == rows["grpo"]["success_rate"]
    assert json.loads((tmp_path / "eval" / "grpo_last_step.json").read_text())["same_as"] == "grpo"


def test_the_capability_adapters_last_steps_are_composed_only_when_a_guard_kept_an_earlier_one(tmp_path):
    """composed_last_step is grpo_last_step's counterpart: the adapters as trained, whatever the guard kept."""
    from trace_agents.pipeline import COMPOSED_LAST_STEP, RunConfig, _composed_last_step, _last_steps, _systems

    adapters, compose = tmp_path / "adapters", tmp_path / "compose"
    envs = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    kept = {n: adapters / n / "adapter" for n in envs}
    for n in envs:
        (adapters / n).mkdir(parents=True)
    assert _last_steps(adapters, envs) is None  # no guard ran
    (adapters / "a" / "guard.json").write_text(json.dumps({"kept": "own"}))
    (adapters / "b" / "guard.json").write_text(json.dumps({"kept": "own"}))
    assert _last_steps(adapters, envs) == kept
    assert _composed_last_step(compose, kept, False, print) == compose / "composed"  # the same model: a twin
    (adapters / "b" / "guard.json").write_text(json.dumps({"kept": "step_8"}))
    last = _last_steps(adapters, envs)
    assert last == {"a": adapters / "a" / "adapter", "b": adapters / "b" / "adapter_own"}
    logs = []
    assert _composed_last_step(compose, last, True, logs.append) is None and "delete that folder" in logs[0]
    (compose / COMPOSED_LAST_STEP).mkdir(parents=True)
    assert _composed_last_step(compose, last, True, logs.append) == compose / COMPOSED_LAST_STEP

    config = RunConfig.model_validate({"run_dir": tmp_path, "training": {"steps": 2, "group_size": 2, "groups_per_step": 1}})
    systems = _systems(config, "m", kept, tmp_path / "g", compose / "composed", 18, 18, composed_last_step=compose / COMPOSED_LAST_STEP)
    assert [n for n in systems if ":" not in n] == ["base", "grpo", "composed", "composed_last_step", "task_router"]
    assert systems["composed_last_step"]["composed"] == str(compose / COMPOSED_LAST_STEP) and systems["composed_last_step"]["rollouts"] == 18


def test_max_capabilities_keeps_the_first_valid_envs_by_delta_or_by_coverage(tmp_path):
    from trace_agents.pipeline import AnalysisCfg, _valid_envs

    caps = {"a": (0.6, 0.35), "b": (0.5, 0.27), "c": (0.4, 0.38), "d": (0.3, 0.5)}
    (tmp_path / "capabilities.json").write_text(json.dumps({"capabilities": [
        {"name": n, "mean_delta": d, "mean_coverage": r} for n, (d, r) in caps.items()]}))
    (tmp_path / "synthesis.json").write_text(json.dumps({"environments": {
        n: {"module": f"/elsewhere.tmp/{n}.py", "valid": n != "d"} for n in caps}}))
    by_delta = _valid_envs(tmp_path, tmp_path, AnalysisCfg(max_capabilities=2))
    assert by_delta == {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    assert list(_valid_envs(tmp_path, tmp_path, AnalysisCfg(max_capabilities=2, rank="coverage"))) == ["c", "a"]
    with pytest.raises(ValueError):
        AnalysisCfg(rank="luck")


def test_another_training_seed_reuses_the_stages_it_does_not_reach_and_a_recipe_with_its_budget_keeps_the_baseline(first_run):
    from trace_agents.pipeline import seed_run

    tmp_path = first_run[0]
    config = _config(tmp_path)
    assert seed_run(config, 0) is config
    seeded = seed_run(config, 1)
    assert seeded.run_dir == tmp_path / "run_s1" and seeded.training.seed == 1 and config.training.seed == 0
    logs = []
    run_pipeline(seeded, log=logs.append)
    assert [m.split("]")[0][1:] for m in logs if m.endswith("skipped")] == ["base_rollouts", "analysis", "synthesis"]
    assert [m.split("]")[0][1:] for m in logs if m.endswith("running")] == ["adapters", "grpo_baseline", "compose", "evaluation"]
    # a third seed may start from the second's stages (paper_table.py --seeds when the config's own seed is not run)
    third = seed_run(config, 2, source=seeded.run_dir)
    assert third.run_dir == tmp_path / "run_s2"
    assert (third.run_dir / "04_adapters" / "stage.json").read_text() == (seeded.run_dir / "04_adapters" / "stage.json").read_text()

    # the gate-GRPO step's rollouts go to a shared adapter instead: the same budget, so the same GRPO baseline
    # (the guard's greedy episodes are not training rollouts: they leave the baseline alone too)
    recipe = seeded.model_copy(update={"training": seeded.training.model_copy(update={"shared_steps": 1, "guard_seeds": 2}),
                                       "compose": seeded.compose.model_copy(update={"gate_grpo_steps": 0})})
    logs.clear()
    summary = run_pipeline(recipe, log=logs.append)
    assert [m.split("]")[0][1:] for m in logs if m.endswith("running")] == ["adapters", "compose", "evaluation"]
    assert (seeded.run_dir / "04_adapters" / "_shared" / "adapter").is_dir()
    for name in summary["capabilities"]:
        guard = json.loads((seeded.run_dir / "04_adapters" / name / "guard.json").read_text())
        assert guard["probes"]["drills"]["seeds"] == 2 and guard["kept"] in ("own", "init")
        assert (seeded.run_dir / "04_adapters" / name / "adapter" / "adapter_config.json").exists()
    assert sum("guard on 2 test seeds of drills:" in m for m in logs) == len(summary["capabilities"])
    assert summary["rollouts_per_system"] == 2 * len(summary["capabilities"]) + 2

    # guard_target: the guard adds the target's train tasks, and the baseline gets the same choice among its steps
    probed = recipe.model_copy(update={"training": recipe.training.model_copy(update={"guard_target": 2, "guard_every": 1})})
    logs.clear()
    run_pipeline(probed, log=logs.append)
    assert [m.split("]")[0][1:] for m in logs if m.endswith("running")] == ["adapters", "grpo_baseline", "compose", "evaluation"]
    baseline_steps = summary["rollouts_per_system"] // 2
    grpo = json.loads((seeded.run_dir / "05_grpo_baseline" / "grpo" / "guard.json").read_text())
    assert list(grpo["probes"]) == ["target"] and grpo["probes"]["target"]["split"] == "train" and grpo["init"] is None
    assert list(grpo["mean_reward"]) == ["own", *(f"step_{n}" for n in range(baseline_steps - 1, 0, -1))]
    for name in summary["capabilities"]:
        guard = json.loads((seeded.run_dir / "04_adapters" / name / "guard.json").read_text())
        assert list(guard["probes"]) == ["drills", "target"] and guard["probes"]["target"]["seeds"] == 2
    assert sum("guard on 2 test seeds of drills + 2 train seeds of target:" in m for m in logs) == len(summary["capabilities"])
    assert sum(m.startswith("[grpo_baseline] grpo guard on 2 train seeds of target:") for m in logs) == 1
    # every guard kept the last step here: composed_last_step is composed's twin, evaluated from its episodes
    assert all(json.loads((seeded.run_dir / "04_adapters" / n / "guard.json").read_text())["kept"] == "own"
               for n in summary["capabilities"])
    assert not (seeded.run_dir / "06_compose" / "composed_last_step").exists()
    last = json.loads((seeded.run_dir / "07_evaluation" / "composed_last_step.json").read_text())
    assert last["same_as"] == "composed"
    # as if one guard had kept an earlier step: the last steps are composed, and evaluated beside the rest
    one = seeded.run_dir / "04_adapters" / summary["capabilities"][0]
    shutil.copytree(one / "adapter", one / "adapter_own")
    (one / "guard.json").write_text(json.dumps({"kept": "step_1"}))
    shutil.rmtree(seeded.run_dir / "06_compose")
    logs.clear()
    run_pipeline(probed, log=logs.append)
    assert [m.split("]")[0][1:] for m in logs if m.endswith("running")] == ["compose", "evaluation"]
    assert (seeded.run_dir / "06_compose" / "composed_last_step" / "composed.json").exists()
    table = json.loads((seeded.run_dir / "07_evaluation" / "table.json").read_text())
    assert "same_as" not in json.loads((seeded.run_dir / "07_evaluation" / "composed_last_step.json").read_text())
    assert table["p_values"]["composed_last_step_vs_grpo_last_step"] is not None


def test_seeds_pool_into_mean_success_and_p_values_over_their_shared_tasks(tmp_path):
    from trace_agents.pipeline import pool_seeds
    from trace_agents.types import Trajectory, write_jsonl

    def evaluation(name, successes):  # system -> success on tasks t0, t1, ...
        d = tmp_path / name
        d.mkdir()
        for system, wins in successes.items():
            write_jsonl(d / f"{system.replace(':', '_')}.jsonl",
                        [Trajectory(id=f"{system}{i}", env="e", task_id=f"t{i}", seed=i, messages=[],
                                    reward=float(w), success=w, tool_calls=1) for i, w in enumerate(wins)])
        rows = [{"system": s, "success_rate": sum(w) / len(w)} for s, w in successes.items()]
        (d / "table.json").write_text(json.dumps({"systems": rows}))
        return d

    lost = [False] * 20
    first = evaluation("s0", {"base": lost, "grpo": lost, "composed": [True] * 10 + [False] * 10})
    second = evaluation("s1", {"base": lost, "grpo": lost, "composed": [True] * 20, "adapter:x": lost})
    pooled = pool_seeds([first, second])
    assert pooled["runs"] == 2 and list(pooled["success_rate"]) == ["base", "grpo", "composed"]
    assert pooled["success_rate"]["composed"] == [0.5, 1.0] and pooled["mean_success_rate"]["composed"] == 0.75
    p = pooled["p_values"]
    assert p["composed_vs_base"] < 0.01 and p["task_router_vs_base"] is None


def test_a_run_record_in_json_pools_like_its_evaluation_folder(tmp_path):
    """Records are what survives a machine: written as JSON and read back, they must pool exactly as
    the run folders did, and hold each task's verdict (not only the rate)."""
    from trace_agents.pipeline import pool_records, pool_seeds, run_record
    from trace_agents.types import Trajectory, write_jsonl

    folders = []
    for run, wins in enumerate([[1, 0, 1, 1], [0, 0, 1, 1]]):
        d = tmp_path / f"s{run}"
        d.mkdir()
        for system, w in {"base": [0, 0, 0, 1], "composed": wins}.items():
            write_jsonl(d / f"{system}.jsonl", [Trajectory(id=f"{system}{i}", env="e", task_id=f"t{i}", seed=i, messages=[],
                                                           reward=float(x), success=bool(x), tool_calls=1) for i, x in enumerate(w)])
        (d / "table.json").write_text(json.dumps({"systems": [{"system": "base", "success_rate": 0.25},
                                                              {"system": "composed", "success_rate": sum(wins) / 4}]}))
        folders.append(d)
    records = [json.loads(json.dumps(run_record(d))) for d in folders]
    assert records[1]["verdicts"]["composed"] == {"t0": 0.0, "t1": 0.0, "t2": 1.0, "t3": 1.0}
    assert pool_records(records) == pool_seeds(folders)
    assert pool_records(records)["mean_success_rate"] == {"base": 0.25, "composed": 0.625}


def test_another_training_seed_keeps_the_warm_up_and_the_base_rollouts_of_the_warmed_model(tmp_path, monkeypatch):
    """With a warm-up the run's model is a path inside its run folder; a seed's copied run must keep
    the warm-up and the base rollouts it fed, not redo them because the copy's path differs."""
    import trace_agents.pipeline as pipeline

    class Enough(Exception):
        pass

    def stop(*args):  # after synthesis: the stages a training seed does not reach are all done
        raise Enough

    monkeypatch.setattr(pipeline, "_valid_envs", stop)
    config = _config(tmp_path, warmup_steps=1)
    with pytest.raises(Enough):
        run_pipeline(config, log=lambda m: None)
    logs = []
    with pytest.raises(Enough):
        run_pipeline(pipeline.seed_run(config, 1), log=logs.append)
    assert [m.split("]")[0][1:] for m in logs] == ["warmup", "base_rollouts", "analysis", "synthesis"]
    assert all(m.endswith("skipped") for m in logs) and (tmp_path / "run_s1" / "01_warmup" / "model").is_dir()


def test_synthesis_partial_credit_reaches_the_drills(tmp_path, monkeypatch):
    import trace_agents.pipeline as pipeline
    import trace_agents.synthesis.pipeline as synthesis

    seen = {}

    class Enough(Exception):
        pass

    def capture(*args, **kwargs):
        seen.update(kwargs)
        raise Enough

    monkeypatch.setattr(synthesis, "synthesize_all", capture)
    config = _config(tmp_path)
    config = config.model_copy(update={"synthesis": config.synthesis.model_copy(update={"source": "target", "partial_credit": 0.5})})
    with pytest.raises(Enough):
        run_pipeline(config, log=lambda m: None)
    assert seen["drills"].partial_credit == 0.5 and seen["drills"].source == "target"


def test_stage_fingerprints_stay_put_when_an_option_is_added_at_its_default():
    # Run folders outlive the code: an option added at its default must not rerun every stage of an
    # existing run (session 19 lost a resumed run's adapters stage this way). A new option goes in its
    # config's `_quiet_at_default`; then these pinned prints of the default configs do not move.
    from trace_agents.pipeline import (AnalysisCfg, ComposeCfg, EvaluationCfg, SynthesisCfg, TrainingCfg, WarmupCfg,
                                       _fingerprint)

    pinned = {WarmupCfg: "549b84272e1ca1ce", AnalysisCfg: "57fccdecfd070e89", SynthesisCfg: "29c9c26c9653bf8b",
              TrainingCfg: "510a4abbdff6d26a", ComposeCfg: "69c12f5e33d4b715", EvaluationCfg: "3f35223a2532ab6c"}
    assert {c: _fingerprint(c()) for c in pinned} == pinned
    wide = SynthesisCfg(source="target", extra_categories=["simple_python"])
    assert _fingerprint(wide) != _fingerprint(SynthesisCfg(source="target"))  # set, it is an input like any other


def test_a_reply_budget_that_cuts_most_answers_stops_the_run_before_any_rollout(tmp_path):
    from trace_agents.training.budget import BudgetError

    config = _config(tmp_path).model_copy(update={"check_budgets": True})
    with pytest.raises(BudgetError, match="evaluation.max_new_tokens 8 cuts .* bfcl/multiple"):
        run_pipeline(config, log=print)
    assert not any(config.run_dir.glob("02_*"))


def test_a_step_line_tells_the_time_left_at_the_mean_pace_so_far():
    from trace_agents.pipeline import _step_line, duration

    line = _step_line(10)
    step = {"reward": 0.5, "success": 0.5}
    assert line({**step, "step": 1, "seconds": 10.0}).endswith("(10s, 1m left)")  # 9 steps x 10 s
    assert line({**step, "step": 2, "seconds": 30.0}).endswith("(30s, 2m left)")  # 8 steps x mean 20 s = 160 s
    assert line({**step, "step": 10, "seconds": 20.0}).endswith("(20s, 0s left)")
    assert [duration(s) for s in (0, 59.6, 61, 3599, 3600, 3900, 36_000)] == ["0s", "1m", "1m", "59m", "1h00m",
                                                                               "1h05m", "10h00m"]
