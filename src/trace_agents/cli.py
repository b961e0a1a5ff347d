"""`trace-agents`: one command, a subcommand per job (DESIGN.md §9).

Exit status: 0 on success, 2 for bad arguments or input (the message names the field and the fix),
1 for a failure while running.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, help="TRACE: train tool-using agents on what they lack.")
console = Console(stderr=True)


class UsageError(Exception):
    """Bad arguments or input: exit status 2."""


class _LoggedProgress(Progress):
    """A rich progress bar that, when stderr is not a terminal (CI, nohup, logs), prints a plain line
    at every 10% instead, so long background jobs show where they are."""

    def update(self, task_id, **kwargs) -> None:
        super().update(task_id, **kwargs)
        if self.console.is_terminal:
            return
        task = self._tasks[task_id]
        if task.total:
            tenth = int(10 * task.completed / task.total)
            if tenth > getattr(task, "_logged", -1):
                task._logged = tenth  # type: ignore[attr-defined]
                self.console.print(f"{task.description}: {task.completed:.0f}/{task.total:.0f} ({time.strftime('%H:%M:%S')})", soft_wrap=True)

    def advance(self, task_id, advance: float = 1) -> None:
        self.update(task_id, advance=advance)


def _progress() -> Progress:
    return _LoggedProgress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(), console=console, transient=False,
    )


# ---- shared options ---------------------------------------------------------------------------
EnvOpt = typer.Option(..., "--env", help="bfcl/simple_python | bfcl/multiple | bfcl/parallel | bfcl/multi_turn_base | path/to/env.py | synthetic/CAP | target/CAP; A+B: a mixture (seed s -> the (s mod n)-th)")
ModelOpt = typer.Option(..., "--model", help="smollm2-135m | tiny-random | a local model folder | openai:NAME@BASE_URL")
SplitOpt = typer.Option("test", "--split", help="train | test")
LimitOpt = typer.Option(None, "--limit", help="Use the first N seeds of the split (all if omitted).")
MaxStepsOpt = typer.Option(None, "--max-steps", help="Assistant turns per episode at most (default: 1 for single-turn BFCL, 20 otherwise).")
MaxNewOpt = typer.Option(256, "--max-new-tokens", help="Tokens per assistant turn at most.")
TempOpt = typer.Option(0.0, "--temperature", help="0 = greedy.")
BatchOpt = typer.Option(16, "--batch-size", help="Sequences per generate call (local models).")
DeviceOpt = typer.Option(None, "--device", help="cpu, cuda, cuda:1 ... (default: cuda if available).")
DtypeOpt = typer.Option("float32", "--dtype", help="float32 | bfloat16 | float16 (local models).")
SeedOpt = typer.Option(0, "--seed", help="Sampling seed.")
AdapterOpt = typer.Option(None, "--adapter", help="A LoRA adapter folder (PEFT) on top of --model.")
ComposedOpt = typer.Option(None, "--composed", help="A composed-model folder (token-routed adapters) on top of --model.")
RouterOpt = typer.Option("token", "--router", help="With --composed: token (trained gates, per token) | task (one adapter per episode).")


@dataclass
class RolloutSpec:
    """What `rollout` and `evaluate` run: an environment split, a policy and its decoding."""

    env: str
    model: str
    split: str = "test"
    limit: Optional[int] = None
    samples: int = 1
    max_steps: Optional[int] = None
    max_new_tokens: int = 256
    temperature: float = 0.0
    batch_size: int = 16
    device: Optional[str] = None
    dtype: str = "float32"
    seed: int = 0
    adapter: Optional[str] = None
    composed: Optional[str] = None
    router: str = "token"


def _check_dtype(dtype: str) -> None:
    if dtype not in ("float32", "bfloat16", "float16"):
        raise UsageError(f"--dtype must be float32, bfloat16 or float16, not {dtype!r}")


def _run_rollouts(spec: RolloutSpec, partial: Path | None = None):
    from trace_agents.agent.policy import Sampling, make_policy
    from trace_agents.agent.rollout import rollout
    from trace_agents.envs.base import resolve_env

    if spec.split not in ("train", "test"):
        raise UsageError(f"--split must be train or test, not {spec.split!r}")
    _check_dtype(spec.dtype)
    if spec.router not in ("token", "task"):
        raise UsageError(f"--router must be token or task, not {spec.router!r}")
    make_env = resolve_env(spec.env)
    probe = make_env()
    seeds = probe.seeds(spec.split)
    if spec.limit is not None:
        if spec.limit < 1:
            raise UsageError("--limit must be at least 1")
        seeds = seeds[: spec.limit]
    max_steps = spec.max_steps if spec.max_steps is not None else (20 if getattr(probe, "multi_turn", True) else 1)
    with console.status(f"loading {spec.model}"):
        policy = make_policy(spec.model, adapter=spec.adapter, composed=spec.composed, router=spec.router,
                             device=spec.device, dtype=spec.dtype, batch_size=spec.batch_size)
    sampling = Sampling(max_new_tokens=spec.max_new_tokens, temperature=spec.temperature, seed=spec.seed)
    sink = partial.open("w") if partial else None
    started = time.time()
    with _progress() as bar:
        task = bar.add_task(f"{spec.env} {spec.split}", total=len(seeds) * spec.samples)

        def done(traj):
            bar.advance(task)
            if sink:  # finished episodes reach disk at once: a crash loses only the live ones
                sink.write(traj.model_dump_json(exclude_none=True) + "\n")
                sink.flush()

        trajs = rollout(make_env, policy, seeds, samples=spec.samples, max_steps=max_steps, sampling=sampling,
                        on_episode_done=done)
    if sink:
        sink.close()
    return trajs, time.time() - started, policy


@app.command("rollout")
def rollout_cmd(
    env: str = EnvOpt, model: str = ModelOpt, split: str = SplitOpt, limit: Optional[int] = LimitOpt,
    samples: int = typer.Option(1, "--samples", help="Rollouts per task; they share the task's seed."),
    out: Path = typer.Option(..., "--out", help="Trajectories JSONL to write."),
    max_steps: Optional[int] = MaxStepsOpt, max_new_tokens: int = MaxNewOpt, temperature: float = TempOpt,
    batch_size: int = BatchOpt, device: Optional[str] = DeviceOpt, dtype: str = DtypeOpt, seed: int = SeedOpt,
    adapter: Optional[str] = AdapterOpt, composed: Optional[str] = ComposedOpt, router: str = RouterOpt,
):
    """Run the agent on an environment and write its trajectories (JSONL)."""
    from trace_agents.types import write_jsonl

    partial = out.with_name(out.name + ".partial")
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = RolloutSpec(env, model, split, limit, samples, max_steps, max_new_tokens, temperature, batch_size, device,
                       dtype, seed, adapter, composed, router)
    trajs, secs, _ = _run_rollouts(spec, partial)
    write_jsonl(out, trajs)
    partial.unlink(missing_ok=True)
    ok = sum(t.success for t in trajs)
    console.print(f"{len(trajs)} trajectories, {ok} successful, in {secs:.0f}s -> {out}")


@app.command("evaluate")
def evaluate_cmd(
    env: str = EnvOpt, model: str = ModelOpt, split: str = SplitOpt, limit: Optional[int] = LimitOpt,
    out: Path = typer.Option(..., "--out", help="Summary JSON to write."),
    samples: int = typer.Option(1, "--samples", help="Rollouts per task."),
    trajectories: Optional[Path] = typer.Option(None, "--trajectories", help="Also write the trajectories here (JSONL)."),
    max_steps: Optional[int] = MaxStepsOpt, max_new_tokens: int = MaxNewOpt, temperature: float = TempOpt,
    batch_size: int = BatchOpt, device: Optional[str] = DeviceOpt, dtype: str = DtypeOpt, seed: int = SeedOpt,
    adapter: Optional[str] = AdapterOpt, composed: Optional[str] = ComposedOpt, router: str = RouterOpt,
):
    """Score a model on held-out tasks: success rate with 95% interval, mean reward, mean tool calls."""
    spec = RolloutSpec(env, model, split, limit, samples, max_steps, max_new_tokens, temperature, batch_size, device,
                       dtype, seed, adapter, composed, router)
    _print_summaries([evaluate_to(out, spec, trajectories)])


def evaluate_to(out: Path, spec: RolloutSpec, trajectories: Path | None = None) -> dict:
    from trace_agents.evaluate import routing_summary, summarize
    from trace_agents.types import write_json, write_jsonl

    trajs, secs, policy = _run_rollouts(spec)
    summary = summarize(trajs, env=spec.env, model=spec.model, split=spec.split)
    summary.update(adapter=spec.adapter, composed=spec.composed)
    if spec.composed:
        summary["router"] = spec.router
        summary["routing"] = routing_summary(policy, trajs)
    summary["seconds"] = round(secs, 1)
    write_json(out, summary)
    if trajectories:
        write_jsonl(trajectories, trajs)
    return summary


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _print_summaries(summaries: list[dict]) -> None:
    table = Table(title="evaluation")
    for col in ("env", "model", "split", "n", "success", "95% CI", "reward", "tool calls", "calls if solved", "top failure"):
        table.add_column(col)
    for s in summaries:
        top = next(iter(s["failures"]), "-")
        table.add_row(
            s["env"], s["model"], s["split"], str(s["n"]), f"{100 * s['success_rate']:.1f}%",
            f"[{100 * s['ci95'][0]:.1f}, {100 * s['ci95'][1]:.1f}]", f"{s['mean_reward']:.3f}",
            f"{s['mean_tool_calls']:.2f}", _num(s.get("mean_tool_calls_success")), top,
        )
    Console().print(table)


@app.command("warmup")
def warmup_cmd(
    model: str = typer.Option("smollm2-135m", "--model", help="Local model to warm up (not an endpoint)."),
    out: Path = typer.Option(..., "--out", help="Folder for the warmed model."),
    steps: int = typer.Option(30, "--steps", help="Optimizer steps."),
    batch_size: int = typer.Option(4, "--batch-size", help="Examples per step."),
    lr: float = typer.Option(1e-4, "--lr", help="Learning rate."),
    seed: int = typer.Option(0, "--seed", help="Example stream and torch seed."),
    followup: int = typer.Option(2, "--followup", help="Multi-turn examples (call, read the result, call again, stop) added to each batch."),
    device: Optional[str] = DeviceOpt,
):
    """Short supervised warm-up on tool-call format from synthetic tasks (never the target's)."""
    if model.startswith("openai:"):
        raise UsageError("--model must be a local model for warmup, not an endpoint")
    if steps < 1 or batch_size < 1 or followup < 0:
        raise UsageError("--steps and --batch-size must be at least 1, --followup at least 0")
    run_warmup(model, out, steps, batch_size, lr, seed, device, followup)


def run_warmup(model, out, steps, batch_size, lr, seed, device, followup: int = 2) -> dict:
    from trace_agents.warmup.sft import WarmupConfig, warmup

    config = WarmupConfig(steps=steps, batch_size=batch_size, lr=lr, seed=seed, followup_per_batch=followup)
    with _progress() as bar:
        task = bar.add_task("warm-up", total=steps)

        def on_step(step, loss):
            bar.update(task, advance=1, description=f"warm-up loss {loss:.3f}")

        report = warmup(model, out, config, device=device, on_step=on_step)
    console.print(f"warmed model saved to {out} ({report['seconds']:.0f}s, final loss {report['losses'][-1]:.3f})")
    return report


DeltaOpt = typer.Option(0.2, "--delta", help="Minimum contrastive gap Δ = ER⁻ − ER⁺ in a run.")
RhoOpt = typer.Option(0.1, "--rho", help="Minimum coverage of failures in a run.")
MinRunsOpt = typer.Option(None, "--min-runs", help="Keep a capability passing in at least K runs (default ceil(0.8 N)).")


@app.command("analyze")
def analyze_cmd(
    trajectories: Path = typer.Option(..., "--trajectories", help="Trajectories JSONL of the base agent on the target's train split."),
    out: Path = typer.Option(..., "--out", help="Folder: labels/run_XX.json, capabilities.json, summary.md, summary.png."),
    analyst: str = typer.Option("rules", "--analyst", help="rules (programmatic probes, offline) | openai:NAME@BASE_URL"),
    runs: int = typer.Option(10, "--runs", help="Independent labelling runs N."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Folder with your own discover.md / label.md (LLM analyst)."),
    delta: float = DeltaOpt, rho: float = RhoOpt, min_runs: Optional[int] = MinRunsOpt,
):
    """Find the capabilities whose lack concentrates in failed trajectories (stage 1)."""
    from trace_agents.analysis.report import analyze
    from trace_agents.analysis.select import format_table
    from trace_agents.types import read_jsonl

    if analyst != "rules" and not analyst.startswith("openai:"):
        raise UsageError(f"--analyst must be rules or openai:NAME@BASE_URL, not {analyst!r}")
    if runs < 1:
        raise UsageError("--runs must be at least 1")
    trajs = read_jsonl(trajectories)
    if not trajs:
        raise UsageError(f"{trajectories}: no trajectories")
    try:
        selection = analyze(trajs, out, analyst=analyst, runs=runs, delta=delta, rho=rho, min_runs=min_runs, prompts_dir=prompts)
    except ValueError as e:  # threshold checks name the flag
        raise UsageError(str(e)) from None
    Console().print(format_table(selection))
    console.print(f"wrote {out / 'capabilities.json'}, {out / 'summary.md'}")


@app.command("select")
def select_cmd(
    labels: Path = typer.Option(..., "--labels", help="Folder of run_XX.json label files."),
    out: Path = typer.Option(..., "--out", help="capabilities.json to write."),
    delta: float = DeltaOpt, rho: float = RhoOpt, min_runs: Optional[int] = MinRunsOpt,
):
    """Select capabilities from labelling runs: Cov ≥ ρ and Δ ≥ δ in at least K of N runs."""
    from trace_agents.analysis.select import format_table, select_folder

    try:
        selection = select_folder(labels, out, delta=delta, rho=rho, min_runs=min_runs)
    except ValueError as e:  # bad thresholds or label files: both are input errors (exit 2)
        raise UsageError(str(e)) from None
    Console().print(format_table(selection))


@app.command("synthesize")
def synthesize_cmd(
    capabilities: Path = typer.Option(..., "--capabilities", help="capabilities.json from analyze/select."),
    target: str = typer.Option(..., "--target", help="The target environment (its tools inform LLM synthesis)."),
    out: Path = typer.Option(..., "--out", help="Folder: <capability>.py, .validation.json, .calibration.json."),
    llm: Optional[str] = typer.Option(None, "--llm", help="openai:NAME@BASE_URL for capabilities without a built-in family."),
    model: Optional[str] = typer.Option(None, "--model", help="Base policy to calibrate difficulty with (skipped if omitted)."),
    seeds: int = typer.Option(8, "--seeds", help="Calibration seeds per round."),
    samples: int = typer.Option(4, "--samples", help="Calibration samples per seed."),
    rounds: int = typer.Option(3, "--rounds", help="Calibration bisection rounds at most."),
    source: str = typer.Option("catalog", "--source", help="catalog: built-in families on the warm-up catalog | target: "
                               "drills on the target's own train tasks where a capability has them (function_selection, argument_value_grounding)."),
    partial_credit: float = typer.Option(0.0, "--partial-credit", help="With --source target: a failed reply earns this (in [0, 1)) "
                                         "times how near it came (parsed call, right function, accepted values); 0: BFCL's 0/1."),
    fresh: bool = typer.Option(False, "--fresh", help="With --source target: vary each train task procedurally "
                               "(new values in the request and answer, sibling functions of the right one)."),
    extra_category: list[str] = typer.Option([], "--extra-category", help="With --source target: the drills also draw "
                                             "this single-turn BFCL category's clean train tasks (repeatable; simple_python, multiple, live_simple, live_multiple; "
                                             "CAPABILITY=CATEGORY for that capability's drill only, e.g. function_selection=live_multiple)."),
    offer_like_target: bool = typer.Option(False, "--offer-like-target", help="Every single-turn environment offers as "
                                           "many functions as the target's train tasks do (never the answer's function alone)."),
):
    """One validated (and calibrated) environment per selected capability (stage 2); a rerun with the
    same model, seeds, samples and rounds reuses the saved calibrations."""
    from trace_agents.synthesis.pipeline import Drills, synthesize_all

    if llm is not None and not llm.startswith("openai:"):
        raise UsageError("--llm must look like openai:NAME@BASE_URL")
    if rounds < 1:
        raise UsageError("--rounds must be at least 1")
    summary = synthesize_all(capabilities, target, out, llm=llm, model=model, seeds=seeds, samples=samples, rounds=rounds,
                             drills=Drills(source, partial_credit, fresh, tuple(extra_category), offer_like_target))
    table = Table(title="environments")
    for col in ("capability", "source", "valid", "difficulty", "success", "mean reward", "degenerate", "in band"):
        table.add_column(col)
    for name, e in summary["environments"].items():
        c = e.get("calibration") or {}
        table.add_row(name, str(e.get("source")), str(e.get("valid", e.get("error"))), str(c.get("difficulty", "-")),
                      f"{c['success_rate']:.2f}" if c else "-", f"{c['mean_reward']:.2f}" if c else "-",
                      f"{c['degenerate_fraction']:.2f}" if c else "-", str(c.get("ok", "-")))
    Console().print(table)


@app.command("calibrate")
def calibrate_cmd(
    env: str = EnvOpt, model: str = ModelOpt,
    out: Path = typer.Option(..., "--out", help="Calibration JSON to write."),
    seeds: int = typer.Option(8, "--seeds", help="Train seeds per round."),
    samples: int = typer.Option(4, "--samples", help="Samples per seed (temperature 1)."),
    tune_difficulty: bool = typer.Option(True, "--tune/--no-tune", help="Bisect the env's difficulty towards the band."),
    rounds: int = typer.Option(3, "--rounds", help="Tuning rounds at most."),
    max_steps: int = typer.Option(8, "--max-steps", help="Assistant turns per episode at most."),
    hint: bool = typer.Option(False, "--hint", help="Also roll the same seeds with the env's hint shown to every "
                              "sample: does it raise success? (training shows it to hint_fraction of each group)"),
    max_new_tokens: int = typer.Option(192, "--max-new-tokens", help="Tokens per assistant turn at most: "
                                       "the training's max_new_tokens measures what training samples."),
    batch_size: int = BatchOpt, dtype: str = DtypeOpt,
):
    """Measure mean reward, success, pass@k and degenerate groups of the base policy on an environment."""
    import dataclasses
    import inspect as _inspect

    from trace_agents.agent.policy import make_policy
    from trace_agents.envs.base import resolve_env
    from trace_agents.synthesis.calibrate import SAMPLING, chosen_round, hint_effect, measure, report, tune
    from trace_agents.types import write_json

    if seeds < 1 or samples < 2 or max_new_tokens < 1:
        raise UsageError("--seeds and --max-new-tokens must be >= 1 and --samples >= 2 (groups need two samples)")
    _check_dtype(dtype)
    make_env = resolve_env(env)
    cls = type(make_env())
    if hint and not hasattr(cls, "hint"):
        raise UsageError(f"{env} has no hint() to check: leave out --hint")
    policy = make_policy(model, dtype=dtype, batch_size=batch_size)
    sampling = dataclasses.replace(SAMPLING, max_new_tokens=max_new_tokens)
    arm = dict(seeds=seeds, samples=samples, max_steps=max_steps, sampling=sampling)
    with console.status(f"calibrating {env}"):
        if tune_difficulty and "difficulty" in _inspect.signature(cls.__init__).parameters:
            chosen, history = tune(cls, policy, rounds=rounds, **arm)
        else:
            history, chosen = [measure(make_env, policy, **arm)], None
    result = report(history, chosen)
    if hint:
        at = (lambda: cls(difficulty=chosen)) if chosen is not None else make_env
        with console.status("the same seeds with the hint"):
            result["hint"] = hint_effect(at, policy, difficulty=chosen, **arm,
                                         without=chosen_round(history, chosen))  # its unhinted arm is that round
    write_json(out, {"env": env, "model": model, "sampling": dataclasses.asdict(sampling), **result})
    r = result["result"]
    console.print(f"difficulty {chosen}: success {r['success_rate']:.2f}, mean reward {r['mean_reward']:.2f}, "
                  f"pass@k {r['pass_at_k']:.2f}, degenerate {r['degenerate_fraction']:.2f}, in band: {r['ok']}")
    if hint:
        h = result["hint"]
        # No advice to drop it: without the hint the table recipe's composed model did no better over three seeds
        # (docs/results.md "No hint at all"); a hint can still make groups less degenerate at equal success.
        console.print(f"hint: success {h['without']['success_rate']:.2f} without, {h['with']['success_rate']:.2f} with; "
                      f"degenerate groups {h['without']['degenerate_fraction']:.2f} without, "
                      f"{h['with']['degenerate_fraction']:.2f} with")


@app.command("train")
def train_cmd(
    env: str = EnvOpt, model: str = ModelOpt,
    out: Path = typer.Option(..., "--out", help="Run folder: adapter/, checkpoints/, metrics.jsonl, curves.png."),
    reward: str = typer.Option("verifier", "--reward", help="verifier | trace-efficiency"),
    efficiency: list[str] = typer.Option([], "--efficiency", help="KEY=VALUE of EfficiencyReward (repeat), e.g. scope=global lam=0.1 mode=per_call."),
    epoch_steps: Optional[int] = typer.Option(None, "--epoch-steps", help="Steps per efficiency-reward epoch (threshold tightens after each)."),
    preset: str = typer.Option("cpu", "--preset", help="cpu (small LoRA, higher lr) | paper (r=16, lr 1e-5)"),
    steps: Optional[int] = typer.Option(None, "--steps", help="Optimizer steps."),
    group_size: Optional[int] = typer.Option(None, "--group-size", help="Rollouts per seed G."),
    groups: Optional[int] = typer.Option(None, "--groups", help="Seeds per step."),
    lr: Optional[float] = typer.Option(None, "--lr", help="Learning rate."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Assistant turns per episode at most."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="Tokens per assistant turn at most."),
    hint_fraction: Optional[float] = typer.Option(None, "--hint-fraction", help="Share of each group sampled with the env's hint."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="Sampling temperature of the rollouts, > 0 (default 1.0)."),
    scale_rewards: Optional[str] = typer.Option(None, "--scale-rewards", help="group: (R - mean) / std (default) | none: R - mean, the paper's code (keeps the size of a reward discount)."),
    init_adapter: Optional[Path] = typer.Option(None, "--init-adapter", help="Start from this PEFT adapter folder instead of a fresh LoRA."),
    composed: Optional[Path] = typer.Option(None, "--composed", help="Train the gates of this composed-model folder instead of an adapter (base and adapters frozen); writes OUT/composed."),
    save_every: Optional[int] = typer.Option(None, "--save-every", help="Checkpoint every N steps."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of task sampling and LoRA init."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Continue from the latest checkpoint in --out."),
    device: Optional[str] = DeviceOpt, dtype: str = DtypeOpt,
):
    """Train one LoRA adapter with GRPO on an environment (base model frozen), or with --composed the
    gates of a composed model against it."""
    from trace_agents.envs.base import resolve_env
    from trace_agents.training.grpo import PRESETS, GRPOConfig, train

    if preset not in PRESETS:
        raise UsageError(f"--preset must be one of {', '.join(PRESETS)}, not {preset!r}")
    overrides = {k: v for k, v in dict(
        steps=steps, group_size=group_size, groups_per_step=groups, lr=lr, max_steps=max_steps,
        max_new_tokens=max_new_tokens, hint_fraction=hint_fraction, save_every=save_every, seed=seed,
        epoch_steps=epoch_steps, temperature=temperature, scale_rewards=scale_rewards, dtype=dtype,
        init_adapter=str(init_adapter) if init_adapter else None,
    ).items() if v is not None}
    try:
        config = GRPOConfig(**{**PRESETS[preset], **overrides, "reward": reward, "efficiency": keyword_args(efficiency, "--efficiency")})
        if config.reward == "trace-efficiency":
            from trace_agents.training.rewards import EfficiencyReward

            EfficiencyReward(**config.efficiency)  # a bad key or value fails here, not after the first rollouts
        elif config.efficiency:
            raise ValueError("--efficiency needs --reward trace-efficiency")
        if composed and init_adapter:
            raise ValueError("--init-adapter starts an adapter; with --composed the composed folder is the start, drop one")
    except (TypeError, ValueError) as e:
        raise UsageError(f"{e} (flags: --steps, --group-size, --groups, --lr, --hint-fraction, --temperature, --scale-rewards, --save-every, --reward, --efficiency, --dtype)") from None
    if composed:
        from trace_agents.compose import check_base

        check_base(composed, model)
    make_env = resolve_env(env)
    with _progress() as bar:
        task = bar.add_task("GRPO", total=config.steps)

        def on_step(m):
            bar.update(task, completed=m["step"], description=f"GRPO reward {m['reward']:.3f} success {m['success']:.2f}")

        if composed:
            from trace_agents.compose.gate_grpo import train_gates_grpo

            summary = train_gates_grpo(make_env, composed, out, config, device=device, resume=resume, on_step=on_step)
        else:
            summary = train(make_env, model, out, config, device=device, resume=resume, on_step=on_step)
    from trace_agents.training.curves import plot_curves

    plot_curves(out / "metrics.jsonl", out / "curves.png")
    what = "composed model" if composed else "adapter"
    console.print(f"{what} saved to {summary['composed' if composed else 'adapter']} after {summary['steps']} steps; "
                  f"curves in {out / 'curves.png'}")


@app.command("compose")
def compose_cmd(
    model: str = ModelOpt,
    adapter: list[str] = typer.Option(..., "--adapter", help="NAME=DIR of a PEFT adapter (repeat; at most 9)."),
    envs: Optional[Path] = typer.Option(None, "--envs", help="A `synthesize` output folder: each adapter NAME's environment module."),
    env: list[str] = typer.Option([], "--env", help="NAME=MODULE of an adapter's environment (repeat; overrides --envs)."),
    out: Path = typer.Option(..., "--out", help="Composed-model folder to write."),
    router: str = typer.Option("block", "--router", help="Token gates: block (one per decoder block) | global."),
    decide: str = typer.Option("causal_mean", "--decide", help="Top-1 over each token's own gate logits (token) or their running mean over the sequence (causal_mean)."),
    gate_steps: int = typer.Option(150, "--gate-steps", help="Gate fit steps per round on cached features (0: untrained gates)."),
    gate_trajectories: int = typer.Option(64, "--gate-trajectories", help="Reference trajectories per environment for the gates and the task router."),
    gate_labels: str = typer.Option("env", "--gate-labels", help="Gate labels: env (every token of a trajectory -> its env's adapter) | likelihood (each token -> the expert most likely to write it; use with --decide token)."),
    task_router: bool = typer.Option(True, "--task-router/--no-task-router", help="Also fit the task-level router (`--router task` in evaluate, the vLLM proxy)."),
    top_p: float = typer.Option(0.5, "--top-p", help="Task router: adapters kept until their probabilities reach this mass."),
    capabilities: Optional[Path] = typer.Option(None, "--capabilities", help="capabilities.json: definitions for the task router's prompt."),
    device: Optional[str] = DeviceOpt, dtype: str = DtypeOpt,
):
    """Base + adapters as a token-routed mixture of LoRA experts with trained gates (stage 4)."""
    from trace_agents.compose.build import build, definitions_from, envs_from_synthesis

    if router not in ("block", "global"):
        raise UsageError(f"--router must be block or global, not {router!r} (per-episode routing is `evaluate --router task`)")
    if gate_labels not in ("env", "likelihood"):
        raise UsageError(f"--gate-labels must be env or likelihood, not {gate_labels!r}")
    adapters = {k: Path(v) for k, v in _pairs(adapter, "--adapter").items()}
    try:
        modules = {**(envs_from_synthesis(envs) if envs else {}), **_pairs(env, "--env")}
        summary = build(model, adapters, modules, out, router=router, decide=decide, gate_steps=gate_steps,
                        gate_trajectories=gate_trajectories, gate_labels=gate_labels, task_router=task_router, top_p=top_p,
                        definitions=definitions_from(capabilities), device=device, dtype=dtype,
                        log=lambda m: console.print(m, markup=False))
    except ValueError as e:
        raise UsageError(str(e)) from None
    parts = [f"{label} {source[key]:.3f}" for label, source, key in [
        ("gate accuracy", summary.get("gates") or {}, "accuracy"),
        ("held-out routing accuracy", summary.get("routing") or {}, "accuracy"),
        ("on reply tokens", summary.get("routing") or {}, "reply_accuracy"),
        ("task router accuracy", summary.get("task_router") or {}, "accuracy")] if key in source]  # only what was fitted
    console.print(f"composed model -> {out}" + (f"; {', '.join(parts)}" if parts else ""))


def keyword_args(items: list[str], flag: str) -> dict[str, Any]:
    """KEY=VALUE pairs of a repeated option (e.g. --efficiency); values are read as JSON (numbers,
    null) or else kept as text."""
    out: dict[str, Any] = {}
    for key, text in _pairs(items, flag).items():
        try:
            out[key] = json.loads(text)
        except json.JSONDecodeError:
            out[key] = text
    return out


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise UsageError(f"{flag} {item!r}: write NAME=VALUE")
        out[name] = value
    return out


@app.command("run")
def run_cmd(
    config: Path = typer.Option(..., "--config", help="Run config (YAML or JSON); see README."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Skip stages whose inputs and config did not change."),
):
    """The whole pipeline over one run folder: base rollouts, analysis, synthesis, one adapter per
    capability, the same-budget GRPO baseline, composition, and the evaluation table."""
    from trace_agents.pipeline import load_config, run_pipeline

    run_config = load_config(config)
    summary = run_pipeline(run_config, resume=resume, log=lambda m: console.print(m, soft_wrap=True, markup=False))
    console.print(f"capabilities: {', '.join(summary['capabilities']) or 'none selected'}; "
                  f"run summary in {run_config.run_dir / 'run.json'}")
    print_table(json.loads(Path(summary["evaluation"]).read_text()))


def print_table(table: dict) -> None:
    """The evaluation table of a run (pipeline.evaluate_systems' table.json) on stdout."""
    out = Table(title=f"{table['target']} {table['split']}, {table['n_tasks']} tasks")
    for col in ("system", "success", "95% CI", "reward", "tool calls", "rollouts", "eval s"):
        out.add_column(col)
    for r in table["systems"]:
        out.add_row(r["system"], f"{100 * r['success_rate']:.1f}%", f"[{100 * r['ci'][0]:.1f}, {100 * r['ci'][1]:.1f}]",
                    f"{r['mean_reward']:.3f}", f"{r['mean_tool_calls']:.2f}", str(r["rollouts_spent"]),
                    f"{r['wall_seconds']:.0f}")
    Console().print(out)
    pv = ", ".join(f"{k.replace('_', ' ')} p={v:.3g}" for k, v in table["p_values"].items() if v is not None)
    Console().print(f"paired bootstrap: {pv}")


@app.command("serve")
def serve_cmd(
    model: str = ModelOpt,
    composed: Optional[Path] = typer.Option(None, "--composed", help="Composed-model folder (token-routed adapters)."),
    host: str = typer.Option("127.0.0.1", "--host"), port: int = typer.Option(8000, "--port"),
    served_name: Optional[str] = typer.Option(None, "--served-model-name", help="Model name clients send (default: MODEL)."),
    max_batch: int = typer.Option(16, "--max-batch", help="Concurrent requests generated together at most."),
    device: Optional[str] = DeviceOpt, dtype: str = DtypeOpt,
):
    """An OpenAI-compatible server (/v1/chat/completions with tools, streaming, /v1/models, /health)."""
    from trace_agents.serve.app import ServeError, serve_app

    try:
        serve_app(model, composed, host, port, served_model_name=served_name, device=device, dtype=dtype, max_batch=max_batch)
    except ServeError as e:
        raise UsageError(str(e)) from None


@app.command("export-vllm")
def export_vllm_cmd(
    run_dir: Path = typer.Argument(..., help="A folder holding adapter folders (searched recursively)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write vllm_serve.sh (default RUN_DIR/vllm)."),
    base_model: Optional[str] = typer.Option(None, "--base-model", help="Base model path or name (default: from the adapters)."),
    port: int = typer.Option(8000, "--port"),
):
    """Write the exact `vllm serve` command (multi-LoRA) for a run's adapters."""
    from trace_agents.serve.vllm import ExportError, export_vllm

    try:
        result = export_vllm(run_dir, out, base_model=base_model, port=port)
    except ExportError as e:
        raise UsageError(str(e)) from None
    Console().print(" ".join(result["argv"]) if "argv" in result else result)


@app.command("proxy")
def proxy_cmd(
    upstream: str = typer.Option(..., "--upstream", help="The multi-LoRA server's base URL, e.g. http://127.0.0.1:8000/v1 (vllm_serve.sh)."),
    composed: Path = typer.Option(..., "--composed", help="Composed-model folder holding the fitted task router."),
    base_name: str = typer.Option(..., "--base-name", help="The upstream's name of the base model (vllm.json: served_model_name)."),
    host: str = typer.Option("127.0.0.1", "--host"), port: int = typer.Option(8001, "--port"),
    served_name: str = typer.Option("trace-routed", "--served-model-name", help="Model name clients send to be routed."),
    device: Optional[str] = DeviceOpt,
):
    """Route each chat request to one adapter on a vLLM (multi-LoRA) server with the task-level router."""
    from trace_agents.serve.vllm import ExportError, load_router, serve_proxy

    try:
        route = load_router(composed, device=device)
    except ExportError as e:
        raise UsageError(str(e)) from None
    serve_proxy(upstream, route, route.router.names, base_name, host=host, port=port, served_name=served_name)


@app.command("demo")
def demo_cmd(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Run folder (resumed if it exists)."),
    budget: str = typer.Option("cpu", "--budget", help="cpu (~30 min on 2 cores: every stage, tiny training) | table (the paper table on a CPU, hours) | gpu (a budget worth measuring)."),
):
    """The whole TRACE pipeline on the embedded defaults: warm up SmolLM2-135M on synthetic tool-call
    tasks, roll it out on BFCL `multiple` (train split), analyse with the rules analyst, build the
    built-in environments, train one adapter per capability and the same-budget GRPO baseline, compose
    them, evaluate every system on held-out BFCL tasks, and write the HTML report."""
    from trace_agents.pipeline import budget_config, run_pipeline
    from trace_agents.report import build_report

    config = budget_config(budget, out)
    console.print(f"[bold]trace-agents demo[/bold] (budget {budget}) -> {out}")
    started = time.time()
    summary = run_pipeline(config, resume=True, log=lambda m: console.print(f"{time.strftime('%H:%M:%S')} {m}", soft_wrap=True, markup=False))
    print_table(json.loads(Path(summary["evaluation"]).read_text()))
    console.print(f"capabilities: {', '.join(summary['capabilities']) or 'none selected'}; "
                  f"{time.time() - started:.0f}s; report: {build_report(out)}")


@app.command("report")
def report_cmd(
    run_dir: Path = typer.Argument(..., help="A pipeline run folder (it may be partial)."),
    out: Optional[Path] = typer.Option(None, "--out", help="HTML file to write (default RUN_DIR/report.html)."),
):
    """One self-contained HTML page (plots inlined) summarising a run folder, stage by stage."""
    from trace_agents.report import build_report

    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run folder")
    Console().print(str(build_report(run_dir, out)), soft_wrap=True)


def main() -> None:
    from trace_agents.envs.base import EnvError
    from trace_agents.models import ModelError
    from trace_agents.types import DataError

    try:
        app(standalone_mode=False)
    except (UsageError, EnvError, ModelError, DataError) as e:
        console.print(f"[red]error:[/red] {e}", soft_wrap=True)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        console.print("aborted")
        sys.exit(130)
    except Exception as e:
        if hasattr(e, "show") and hasattr(e, "exit_code"):  # click usage errors carry exit code 2
            e.show()
            sys.exit(e.exit_code)
        console.print_exception(max_frames=5)
        sys.exit(1)


if __name__ == "__main__":
    main()
