"""The four stages over one run folder, resumable: `trace-agents run --config run.yaml [--resume]`.

Each stage writes into `RUN/NN_name/` through a temporary folder renamed at the end, then records
`stage.json` with a fingerprint of its config and of the stages it reads. On resume a stage whose
folder exists with the same fingerprint is skipped; a changed config or input reruns it and, through
the fingerprints, every stage after it that reads it (all later stages do, except the GRPO baseline,
which reads only the model: a new adapter recipe with the same rollout budget keeps its baseline).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trace_agents.types import DataError, read_jsonl, write_json, write_jsonl

if TYPE_CHECKING:  # the guard imports the env base: not at run time in the config module
    from trace_agents.training.guard import Probe


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Options added after run folders exist: at their default they are left out of str(), which is what
    # a stage's fingerprint hashes, so a folder made before the option existed still resumes instead of
    # redoing the stage and every stage after it. A new option belongs here.
    _quiet_at_default: ClassVar[frozenset[str]] = frozenset()

    def __repr_args__(self):
        for name, value in super().__repr_args__():
            if name not in self._quiet_at_default or value != type(self).model_fields[name].get_default(call_default_factory=True):
                yield name, value


class WarmupCfg(_Cfg):
    steps: int = Field(30, ge=1, description="Format warm-up steps; 0 stages are skipped by omitting this block.")


class AnalysisCfg(_Cfg):
    analyst: str = Field("rules", description="rules | openai:NAME@URL")
    runs: int = Field(10, ge=1)
    delta: float = Field(0.2, ge=0, le=1)
    rho: float = Field(0.1, ge=0, le=1)
    rollout_limit: int | None = Field(None, ge=1, description="Train tasks rolled out for the analysis (all if null).")
    max_capabilities: int = Field(4, ge=1, description="Adapters to train at most (the first by `rank`).")
    rank: Literal["delta", "coverage"] = Field("delta", description="Which selected capabilities get the adapters when "
                                               "max_capabilities cuts them: highest mean Δ first, or highest mean coverage ρ "
                                               "(the share of failed trajectories that lack the capability) first.")


class SynthesisCfg(_Cfg):
    llm: str | None = None
    calibrate: bool = True
    seeds: int = Field(8, ge=1, description="Calibration seeds per round.")
    samples: int = Field(4, ge=2, description="Calibration samples per seed.")
    rounds: int = Field(3, ge=1, description="Calibration bisection rounds at most.")
    difficulty: float = Field(0.5, ge=0, le=1, description="Difficulty of built-in families when not calibrating.")
    source: Literal["catalog", "target"] = Field("catalog", description="Built-in families on the warm-up catalog, or, "
                                                 "where one exists, drills on the target's own train tasks (function_selection, argument_value_grounding).")
    partial_credit: float = Field(0.0, ge=0, lt=1, description="Drills (source: target) pay a failed reply this times how "
                                  "near it came (a parsed call, the right function, accepted values), so all-fail GRPO "
                                  "groups still teach; 0: BFCL's 0/1 reward. Success is always BFCL's verdict.")
    fresh: bool = Field(False, description="Drills (source: target) vary each train task procedurally: new values in "
                        "the request and its answer, look-alike sibling functions of the right one.")
    extra_categories: list[str] = Field(
        default_factory=list, description="Drills (source: target) also draw the train tasks of these single-turn BFCL "
        "categories (simple_python, multiple, live_simple, live_multiple), leaving out any that offers a function of the "
        "target's test split or repeats one of its requests (and any offering more than 4 functions or 2,000 characters "
        "of schema); `capability=category` borrows for that capability's drill only (function_selection=live_multiple).")
    offer_like_target: bool = Field(False, description="Every single-turn environment (drills and catalog families) offers "
                                    "as many functions as the target's train tasks do, never the answer's function alone.")

    _quiet_at_default = frozenset({"extra_categories", "offer_like_target"})

    def drills(self):
        """The options `synthesize_all` reads (synthesis/pipeline.py: Drills)."""
        from trace_agents.synthesis.pipeline import Drills

        return Drills(source=self.source, partial_credit=self.partial_credit, fresh=self.fresh,
                      extra=tuple(self.extra_categories), like_target=self.offer_like_target)

    @field_validator("extra_categories")
    @classmethod
    def _known_categories(cls, value: list[str]) -> list[str]:
        from trace_agents.synthesis.pipeline import Drills

        Drills("target", extra=tuple(value))  # raises naming the allowed categories and capabilities
        return value

    @model_validator(mode="after")
    def _drill_options_need_drills(self) -> "SynthesisCfg":
        for option, default in (("partial_credit", 0), ("fresh", False), ("extra_categories", [])):
            if getattr(self, option) != default and self.source != "target":
                raise ValueError(f"{option} applies to the drills on the target's train tasks: set source: target, "
                                 f"or {option}: {str(default).lower()}")
        return self


class TrainingCfg(_Cfg):
    preset: Literal["cpu", "paper"] = "cpu"
    steps: int = Field(20, ge=1)
    group_size: int = Field(8, ge=2)
    groups_per_step: int = Field(4, ge=1)
    reward: Literal["verifier", "trace-efficiency"] = "verifier"
    hint_fraction: float = Field(0.25, ge=0, le=1)
    lr: float | None = Field(None, gt=0, description="AdamW learning rate (null: the preset's).")
    max_new_tokens: int | None = Field(None, ge=8, description="Tokens per assistant turn at most (null: the preset's).")
    seed: int = Field(0, ge=0, description="Seed of every GRPO run's task sampling and LoRA init (adapters and the "
                      "GRPO baseline alike); on 100 bfcl/multiple test tasks it moved GRPO(384) by 11 points.")
    shared_steps: int = Field(0, ge=0, description="GRPO steps of one shared adapter on all capability environments "
                              "mixed (seed s -> env s mod n) that every capability adapter then starts from (0: each starts "
                              "from a fresh LoRA). Its rollouts count in TRACE's budget.")
    guard_seeds: int = Field(0, ge=0, description="With shared_steps: after each capability adapter's own steps, score "
                             "it and the shared adapter it started from greedily on this many held-out (test) seeds of "
                             "its own environment and keep the better (training/guard.py; 0: off). A target drill's "
                             "test seeds draw only the target's train tasks. These episodes train nothing and are not "
                             "counted as training rollouts.")
    guard_every: int = Field(0, ge=0, description="With guard_seeds: also keep each capability adapter's weights every "
                             "this many own steps and let the guard choose among them too (0: the last step only).")
    guard_target: int = Field(0, ge=0, description="With guard_seeds: the guard also scores each candidate on this many "
                              "of the target's train tasks (greedy, the evaluation's max_new_tokens) and keeps the best sum "
                              "of the two mean rewards. To keep the comparison fair the GRPO baseline then also keeps its "
                              "weights every guard_every steps and keeps the best of them on the same tasks (0: off).")
    carry_optimizer: bool = Field(False, description="With shared_steps: each capability adapter's own steps start from "
                                  "the shared run's AdamW moments instead of a fresh AdamW (training/grpo.py init_optimizer; measured "
                                  "once, no better: docs/results.md, session 20).")
    shared_target: bool = Field(False, description="With shared_steps: the target's train tasks are one more environment "
                                "of the shared adapter's mixture (1/(n+1) of its groups with n capability envs; no hint "
                                "there). Same rollouts: the share comes out of the drills'.")

    _quiet_at_default = frozenset({"guard_seeds", "guard_every", "guard_target", "carry_optimizer", "shared_target"})

    @model_validator(mode="after")
    def _own_step_options_need_a_shared_adapter(self) -> "TrainingCfg":
        for option, off, why in (("guard_seeds", "0", "compares each capability adapter with the shared adapter it started from"),
                                 ("carry_optimizer", "false", "starts each capability adapter from the shared run's optimizer"),
                                 ("shared_target", "false", "adds the target's train tasks to the shared adapter's mixture")):
            if getattr(self, option) and not self.shared_steps:
                raise ValueError(f"{option} {why}: set shared_steps > 0, or {option}: {off}")
        for option, what in (("guard_every", "keeps earlier steps for the guard to choose among"),
                             ("guard_target", "adds the target's train tasks to the guard's score")):
            if getattr(self, option) and not self.guard_seeds:
                raise ValueError(f"{option} {what}: set guard_seeds > 0, or {option}: 0")
        return self


class ComposeCfg(_Cfg):
    router: Literal["block", "global"] = "block"
    decide: Literal["token", "causal_mean"] = Field("causal_mean", description="Top-1 over each token's gate logits or their running mean.")
    gate_steps: int = Field(150, ge=0, description="Gate fit steps per round on cached router features (0: untrained gates).")
    gate_trajectories: int = Field(64, ge=1, description="Reference trajectories per capability env (gates, task router).")
    gate_labels: Literal["env", "likelihood"] = Field("env", description="Gate labels: each trajectory's env adapter, or per token "
                                                      "the expert most likely to write it (pair with decide: token).")
    task_router: bool = Field(True, description="Fit the task-level router too (evaluated as system task_router).")
    top_p: float = Field(0.5, gt=0, le=1)
    gate_grpo_steps: int = Field(0, ge=0, description="GRPO steps on the gates only, against the target's train split, "
                                 "after the fit (0: none). Their rollouts count in TRACE's budget, so the GRPO baseline gets them too.")
    gate_grpo_lr: float = Field(1e-3, gt=0, description="Learning rate of gate GRPO.")
    last_step: bool = Field(True, description="When a guard chose among the capability adapters' steps (training."
                            "guard_seeds), also compose their last steps (system composed_last_step), the counterpart "
                            "of grpo_last_step: neither then depends on the guard's probe. Not with gate_grpo_steps "
                            "(its gates would need rollouts of their own).")

    _quiet_at_default = frozenset({"last_step"})


class EvaluationCfg(_Cfg):
    split: Literal["test"] = "test"
    limit: int | None = Field(None, ge=1, description="Held-out test tasks (all if null).")
    max_new_tokens: int = Field(192, ge=8)
    single_adapters: bool = Field(True, description="Also evaluate each capability adapter alone.")
    batch_size: int = Field(16, ge=1)


class RunConfig(_Cfg):
    run_dir: Path
    model: str = "smollm2-135m"
    target: str = "bfcl/multiple"
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Weights of the frozen base in base rollouts, training, composition and evaluation "
        "(LoRA weights, gates and log-probs stay float32; the warm-up and calibration stay float32). bfloat16 is "
        "2-3x faster on CPUs with AMX and on GPUs (benchmarks/dtype_speed.py).")
    warmup: WarmupCfg | None = None
    analysis: AnalysisCfg = AnalysisCfg()
    synthesis: SynthesisCfg = SynthesisCfg()
    training: TrainingCfg = TrainingCfg()
    compose: ComposeCfg = ComposeCfg()
    evaluation: EvaluationCfg = EvaluationCfg()
    parallel: bool = Field(False, description="Train the capability adapters in a second process while the GRPO "
                           "baseline trains (half the CPU threads each; on a GPU both share it): the same stages, seeds and budgets "
                           "in less wall time (on CPU the thread split may move floating-point sums in the last digits).")
    check_budgets: bool = Field(True, description="Before the base rollouts and before training, stop with an error when "
                                "evaluation.max_new_tokens or the training budget cuts more than a quarter of the reference "
                                "replies of the target's (or a capability env's) train tasks (training/budget.py); false: "
                                "tiny smoke runs.")


# `trace-agents demo --budget NAME`: the whole pipeline on the embedded model. "cpu" is sized to finish
# within about 30 minutes on a 2-core machine (so every stage runs, but adapters get only a few GRPO
# steps: it shows the pipeline, not the paper's gains); "gpu" is the same run at a budget worth measuring.
BUDGETS: dict[str, dict[str, Any]] = {
    "cpu": {
        "model": "smollm2-135m", "target": "bfcl/multiple", "warmup": {"steps": 16},
        "analysis": {"rollout_limit": 48, "max_capabilities": 2},
        "synthesis": {"calibrate": False, "difficulty": 0.25},
        "training": {"steps": 2, "group_size": 4, "groups_per_step": 2, "hint_fraction": 0.25},
        "compose": {"gate_steps": 100, "gate_trajectories": 16},
        "evaluation": {"limit": 40, "max_new_tokens": 128, "single_adapters": False},
    },
    # The paper-table recipe as measured on this CPU (README "Measured results"; the records
    # benchmarks/results/wide_s{2,4,5,6}g.json hold this config with those training seeds): all 100 held-out
    # bfcl/multiple tasks, the 2 capabilities of highest coverage, drills on the target's train tasks plus
    # borrowed simple_python ones at difficulty 0, a shared adapter on all capability envs (64 steps), then
    # 16 own steps per capability kept only where they beat the shared adapter on 64 drill seeds (the guard).
    # 90 minutes a seed here from copied early stages (seed 6), plus 24 for the warm-up; resumable stage by stage.
    "table": {
        "model": "smollm2-135m", "target": "bfcl/multiple", "dtype": "bfloat16", "warmup": {"steps": 30},
        "analysis": {"rollout_limit": 200, "max_capabilities": 2, "rank": "coverage"},
        "synthesis": {"calibrate": False, "difficulty": 0.0, "source": "target", "fresh": True,
                      "extra_categories": ["simple_python"]},
        "training": {"steps": 16, "shared_steps": 64, "group_size": 8, "groups_per_step": 2, "hint_fraction": 0.25,
                     "lr": 5e-4, "max_new_tokens": 80, "guard_seeds": 64},
        "compose": {"gate_steps": 150, "gate_trajectories": 64},
        "evaluation": {"max_new_tokens": 192, "batch_size": 32, "single_adapters": False}, "parallel": True,
    },
    "gpu": {
        "model": "smollm2-135m", "target": "bfcl/multiple", "dtype": "bfloat16", "warmup": {"steps": 60},
        "analysis": {"max_capabilities": 4},
        "synthesis": {"calibrate": True, "seeds": 16, "samples": 8},
        "training": {"preset": "paper", "steps": 200, "group_size": 16, "groups_per_step": 8, "hint_fraction": 0.25},
        "compose": {"gate_steps": 300, "gate_trajectories": 128},
        "evaluation": {"max_new_tokens": 192},
    },
}


def budget_config(budget: str, run_dir: Path) -> RunConfig:
    if budget not in BUDGETS:
        raise DataError(f"unknown budget {budget!r}; choose one of {', '.join(BUDGETS)}")
    return RunConfig.model_validate({**BUDGETS[budget], "run_dir": run_dir})


def load_config(path: str | Path) -> RunConfig:
    """A typed config from YAML or JSON; errors name the key and the allowed values."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise DataError(f"{path}: {e.strerror}") from None
    try:
        import yaml

        raw = yaml.safe_load(text)
    except ImportError:
        raw = json.loads(text)
    try:
        return RunConfig.model_validate(raw or {})
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise DataError(f"{path}: {problems}") from None


# the paired-bootstrap comparisons of the evaluation table: (A, B) gives the p-value `A_vs_B`
# grpo_last_step: only when a guard chose among GRPO's steps (training.guard_target); see _systems
COMPOSED_LAST_STEP = "composed_last_step"  # the compose stage's folder (and the system) of the adapters' last steps
# composed_last_step vs grpo_last_step: both as trained, no guard choosing either (ComposeCfg.last_step); vs grpo
# too, which is GRPO's last step when only the capability adapters had a guard (no training.guard_target)
COMPARED = [(a, b) for a in ("composed", "task_router") for b in ("base", "grpo", "grpo_last_step")] + [
    (COMPOSED_LAST_STEP, b) for b in ("base", "grpo", "grpo_last_step")]


# ---- stage bookkeeping ---------------------------------------------------------------------------
def _at(dtype: str, part: Any) -> Any:
    """A stage's fingerprinted config with the run's dtype, named only when not float32 (so runs from
    before the option keep their fingerprints)."""
    return part if dtype == "float32" else [part, dtype]


def _release_memory() -> None:
    from trace_agents.models import release_memory  # imports torch: not at the top of the config module

    release_memory()


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Stages:
    """Runs stages in order; each is skipped when its folder holds the same fingerprint."""

    def __init__(self, run_dir: Path, resume: bool, log: Callable[[str], None] = print):
        self.run_dir, self.resume, self.log = run_dir, resume, log
        self.prints: dict[str, str] = {}
        self.index = 0

    def run(self, name: str, config: Any, body: Callable[[Path], Any], reads: tuple[str, ...] | None = None) -> Path:
        """`reads`: the earlier stages whose output the body uses (None: all of them)."""
        folder, tmp = self._begin(name, config, reads)
        if tmp is not None:
            started = time.time()
            body(tmp)
            self._end(folder, tmp, time.time() - started)
        return folder

    def start(self, name: str, config: Any, fn: Callable[..., Any], kwargs: dict[str, Any], background: bool,
              reads: tuple[str, ...] | None = None) -> tuple[Path, Pending]:
        """`run` with the body `fn(out=..., log=..., **kwargs)`; with `background` it runs in a spawned process
        (trace_agents.background) while the caller goes on to stages that do not read this one. The caller
        must then `wait()` (finishes the stage) or, when it fails itself, `cancel()`."""
        if not background:
            return self.run(name, config, lambda d: fn(out=d, log=self.log, **kwargs), reads), Pending()
        folder, tmp = self._begin(name, config, reads)
        if tmp is None:
            return folder, Pending()
        from trace_agents.background import Background

        child = Background(name, fn, tmp, kwargs, self.log)

        def wait() -> None:
            code = child.wait()
            if code != 0:
                raise DataError(f"[{name}] its background process failed (exit code {code}; its log is above). "
                                f"Run again to resume it from its checkpoints, or without parallel to debug it.")
            self._end(folder, tmp, child.seconds or 0.0)

        return folder, Pending(wait, child.cancel)

    def _begin(self, name: str, config: Any, reads: tuple[str, ...] | None) -> tuple[Path, Path | None]:
        """The stage folder, and its temporary folder when the stage has to run (None: up to date)."""
        self.index += 1
        folder = self.run_dir / f"{self.index:02d}_{name}"
        fp = _fingerprint(name, config, [p for n, p in self.prints.items() if reads is None or n in reads])
        self.prints[name] = fp
        meta = folder / "stage.json"
        if self.resume and meta.exists() and json.loads(meta.read_text()).get("fingerprint") == fp:
            self.log(f"[{name}] up to date, skipped")
            return folder, None
        tmp = folder.with_name(folder.name + ".tmp")
        mark = tmp / ".fingerprint"
        # An interrupted stage keeps its partial work (training checkpoints, finished evaluations)
        # when resumed with the same inputs; anything else starts clean.
        if not (self.resume and mark.exists() and mark.read_text() == fp):
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            mark.write_text(fp)
        self.log(f"[{name}] running")
        return folder, tmp

    def _end(self, folder: Path, tmp: Path, seconds: float) -> None:
        _release_memory()
        mark = tmp / ".fingerprint"
        fp = mark.read_text()
        mark.unlink()
        write_json(tmp / "stage.json", {"fingerprint": fp, "seconds": round(seconds, 1)})
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)


@dataclass(frozen=True)
class Pending:
    """A started stage (Stages.start): `wait` finishes it, `cancel` stops it; both do nothing once it is done."""

    wait: Callable[[], None] = lambda: None
    cancel: Callable[[], None] = lambda: None


# ---- the pipeline --------------------------------------------------------------------------------
def run_pipeline(config: RunConfig, resume: bool = True, log: Callable[[str], None] = print) -> dict:
    from trace_agents.agent.policy import Sampling, make_policy
    from trace_agents.agent.rollout import rollout
    from trace_agents.envs.base import resolve_env

    stages = Stages(config.run_dir, resume, log)
    model = config.model
    if config.warmup is not None:
        from trace_agents.warmup.sft import WarmupConfig, warmup

        folder = stages.run("warmup", [model, config.warmup], lambda d: warmup(model, d / "model", WarmupConfig(steps=config.warmup.steps),
                                                       on_step=lambda i, loss: log(f"[warmup] step {i + 1}/{config.warmup.steps} loss {loss:.3f}")))
        model = str(folder / "model")
    make_target = resolve_env(config.target)
    single_turn = not getattr(make_target(), "multi_turn", True)
    max_steps = 1 if single_turn else 20
    train_tokens = _grpo_config(config.training, max_steps).max_new_tokens
    _check_budgets(config, model, {config.target: make_target}, log,
                   {"evaluation.max_new_tokens": config.evaluation.max_new_tokens, "training.max_new_tokens": train_tokens})

    def base_rollouts(d: Path) -> None:
        seeds = make_target().seeds("train")[: config.analysis.rollout_limit]
        trajs = rollout(make_target, make_policy(model, dtype=config.dtype), seeds, max_steps=max_steps,
                        sampling=Sampling(max_new_tokens=config.evaluation.max_new_tokens))
        write_jsonl(d / "trajectories.jsonl", trajs)

    # fingerprints name the model as configured: a warmed model's weights are in the warm-up's print,
    # and its path holds the run folder, which a copied run (seed_run) changes
    rollouts = stages.run("base_rollouts", _at(config.dtype, [config.model, config.target, config.analysis.rollout_limit]),
                          base_rollouts)

    def analysis(d: Path) -> None:
        from trace_agents.analysis.report import analyze

        a = config.analysis
        analyze(read_jsonl(rollouts / "trajectories.jsonl"), d, analyst=a.analyst, runs=a.runs, delta=a.delta, rho=a.rho)

    analysis_dir = stages.run("analysis", config.analysis, analysis)

    def synthesis(d: Path) -> None:
        from trace_agents.synthesis.pipeline import synthesize_all

        s = config.synthesis
        synthesize_all(analysis_dir / "capabilities.json", config.target, d, llm=s.llm,
                       model=model if s.calibrate else None, seeds=s.seeds, samples=s.samples, rounds=s.rounds,
                       difficulty=s.difficulty, drills=s.drills())

    synthesis_dir = stages.run("synthesis", config.synthesis, synthesis)
    envs = _valid_envs(synthesis_dir, analysis_dir, config.analysis)
    _check_budgets(config, model, {n: resolve_env(str(p)) for n, p in envs.items()}, log,
                   {"training.max_new_tokens": train_tokens})

    # with config.parallel the adapters train in a second process while this one trains the GRPO baseline
    target_probe = _target_probe(config, max_steps)
    probed = [target_probe.max_new_tokens] if target_probe else []  # quiet when off: old run folders keep their prints
    adapters_dir, adapters = stages.start("adapters", _at(config.dtype, [config.training, sorted(envs), *probed]), train_adapters,
                                          {"envs": envs, "model": model, "t": config.training, "dtype": config.dtype,
                                           "target": target_probe,
                                           "target_env": config.target if config.training.shared_target else None},
                                          background=config.parallel)
    adapters_spent = _rollouts_spent(config.training) * len(envs) + _rollouts_spent(config.training, config.training.shared_steps)
    spent = adapters_spent + _rollouts_spent(config.training, config.compose.gate_grpo_steps)

    # Same total rollouts as TRACE spent over all its adapters (and gate GRPO), all on the target's train split.
    t = config.training
    baseline = t.model_copy(update={"steps": max(1, round(spent / (t.group_size * t.groups_per_step))),
                                    "hint_fraction": 0.0, "shared_steps": 0, "guard_seeds": 0,
                                    "guard_every": 0, "carry_optimizer": False, "shared_target": False})
    # with the guard on the target's train tasks, the baseline gets the same choice among its kept steps
    keep = {"keep_every": t.guard_every} if target_probe else {}

    def grpo_baseline(d: Path) -> None:
        _train(make_target, model, d / "grpo", baseline, max_steps, lambda m: log(f"[grpo_baseline] {m}"),
               dtype=config.dtype, **keep)
        if target_probe:
            _guard(model, d / "grpo", None, {"target": target_probe}, log, config.dtype, stage="grpo_baseline")

    try:
        baseline_dir = stages.run("grpo_baseline", _at(config.dtype, [config.model, baseline, config.target,
                                                                      *([keep, target_probe] if target_probe else [])]),
                                  grpo_baseline, reads=("warmup",))
        adapters.wait()
    except BaseException:
        adapters.cancel()
        raise
    adapter_dirs = {n: adapters_dir / n / "adapter" for n in envs}
    c = config.compose
    # the adapters' last steps when a guard kept an earlier step of one (else None: nothing more to compose)
    last_steps = _last_steps(adapters_dir, envs) if c.last_step and not c.gate_grpo_steps else None
    to_compose = last_steps if last_steps and last_steps != adapter_dirs else None

    def composition(d: Path) -> None:
        from trace_agents.compose.build import build, definitions_from

        def build_into(out: Path, adapters: dict[str, Path], task_router: bool) -> None:
            build(model, adapters, {n: str(p) for n, p in envs.items()}, out, router=c.router, decide=c.decide,
                  gate_steps=c.gate_steps, gate_trajectories=c.gate_trajectories, gate_labels=c.gate_labels,
                  task_router=task_router, top_p=c.top_p, definitions=definitions_from(analysis_dir / "capabilities.json"),
                  dtype=config.dtype, log=log)

        build_into(d / "composed", adapter_dirs, c.task_router)
        if c.gate_grpo_steps:
            _train_gates(make_target, d / "composed", d / "gate_grpo", config.training, c, max_steps,
                         lambda m: log(f"[compose] gate GRPO {m}"), config.dtype)
        if to_compose:
            log("[compose] the capability adapters' last steps (a guard kept an earlier one)")
            build_into(d / COMPOSED_LAST_STEP, to_compose, task_router=False)

    compose_dir = stages.run("compose", _at(config.dtype, config.compose), composition)
    shared = adapters_dir / SHARED / "adapter" if config.training.shared_steps else None
    composed_last = _composed_last_step(compose_dir, last_steps, bool(to_compose), log)
    systems = _systems(config, model, adapter_dirs, baseline_dir / "grpo" / "adapter", compose_dir / "composed", spent,
                       adapters_spent, shared, _guarded_last_step(baseline_dir / "grpo"), composed_last)
    # which composition composed_last_step is (itself or composed's twin) changes its episodes, not its name
    evaluated = [config.evaluation, sorted(systems)] + ([{COMPOSED_LAST_STEP: composed_last.name}] if composed_last else [])
    table = stages.run("evaluation", _at(config.dtype, evaluated),
                       lambda d: evaluate_systems(systems, make_target, d, config.evaluation, max_steps, log))
    summary = {"model": model, "dtype": config.dtype, "target": config.target, "capabilities": sorted(envs),
               "rollouts_per_system": spent,
               "adapters": {n: str(p) for n, p in adapter_dirs.items()},
               "grpo_baseline": str(baseline_dir / "grpo" / "adapter"), "composed": str(compose_dir / "composed"),
               "evaluation": str(table / "table.json")}
    write_json(config.run_dir / "run.json", summary)
    return summary


# ---- evaluation ----------------------------------------------------------------------------------
def _systems(config: RunConfig, model: str, adapters: dict[str, Path], grpo: Path, composed: Path,
             spent: int, adapters_spent: int, shared: Path | None = None,
             grpo_last_step: Path | None = None, composed_last_step: Path | None = None) -> dict[str, dict[str, Any]]:
    """System name -> make_policy arguments and the training rollouts it cost (the task router uses
    no gate GRPO rollouts). With a shared adapter, it is a system too (what composition adds to it).
    With `grpo_last_step` (a guard chose among GRPO's steps), GRPO's last step is a system too: on
    fsl_s6 the 32-task probe kept step 8 of 96, 31% on the test tasks against 51% for the last step
    (docs/results.md), so the table shows both rather than let the probe's noise decide the comparison. Likewise
    `composed_last_step`: the composition of the capability adapters' last steps."""
    t = config.training
    per_adapter = _rollouts_spent(t) + _rollouts_spent(t, t.shared_steps)
    systems: dict[str, dict[str, Any]] = {"base": {"rollouts": 0}, "grpo": {"adapter": str(grpo), "rollouts": spent}}
    if grpo_last_step:
        systems["grpo_last_step"] = {"adapter": str(grpo_last_step), "rollouts": spent}
    if config.evaluation.single_adapters:
        if shared:
            systems["shared_adapter"] = {"adapter": str(shared), "rollouts": _rollouts_spent(t, t.shared_steps)}
        systems.update({f"adapter:{n}": {"adapter": str(p), "rollouts": per_adapter} for n, p in adapters.items()})
    systems["composed"] = {"composed": str(composed), "router": "token", "rollouts": spent}
    if composed_last_step:
        systems[COMPOSED_LAST_STEP] = {"composed": str(composed_last_step), "router": "token", "rollouts": spent}
    if config.compose.task_router:
        systems["task_router"] = {"composed": str(composed), "router": "task", "rollouts": adapters_spent}
    return {name: {"model": model, "dtype": config.dtype, **s} for name, s in systems.items()}


def _guarded_last_step(trained: Path) -> Path | None:
    """When a guard chose among the trained adapter's steps (guard.keep_better): its last step, wherever the
    guard left it (`adapter_own` if it kept another candidate). None when no guard ran."""
    from trace_agents.training.guard import GUARD_FILE, OWN

    guard = trained / GUARD_FILE
    if not guard.exists():
        return None
    return trained / (OWN if json.loads(guard.read_text())["kept"] != "own" else "adapter")


def _last_steps(adapters_dir: Path, envs: dict[str, Path]) -> dict[str, Path] | None:
    """Each capability adapter's last step when a guard chose among its steps; None when no guard ran."""
    last = {n: _guarded_last_step(adapters_dir / n) for n in envs}
    if all(p is None for p in last.values()):
        return None
    return {n: p or adapters_dir / n / "adapter" for n, p in last.items()}


def _composed_last_step(compose_dir: Path, last_steps: dict[str, Path] | None, own_folder: bool,
                        log: Callable[[str], None]) -> Path | None:
    """The composition of the adapters' last steps: `composed` itself when every guard kept the last step
    (evaluation then copies its episodes), None without a guard or in a compose stage made before the option."""
    if not last_steps:
        return None
    if not own_folder:
        return compose_dir / "composed"
    if not (compose_dir / COMPOSED_LAST_STEP).is_dir():
        log(f"[compose] no {COMPOSED_LAST_STEP} in {compose_dir} (made before compose.last_step): delete that "
            "folder and resume to evaluate it (the evaluation then reruns too)")
        return None
    return compose_dir / COMPOSED_LAST_STEP


def evaluate_systems(systems: dict[str, dict[str, Any]], make_target, out: Path, cfg: EvaluationCfg, max_steps: int,
                     log: Callable[[str], None] = print) -> dict:
    """Every system on the same held-out tasks with the same greedy decoding: `<system>.jsonl` each
    (kept on resume), then table.json with success + 95% CI, reward, tool calls, rollouts spent, wall
    time, and paired-bootstrap p-values of composed vs base and vs GRPO."""
    from trace_agents.agent.policy import Sampling, make_policy
    from trace_agents.agent.rollout import rollout
    from trace_agents.evaluate import compare, routing_summary, summarize

    seeds = make_target().seeds(cfg.split)[: cfg.limit]
    results, rows, done = {}, [], {}
    for name, s in systems.items():
        path, meta = out / f"{_file(name)}.jsonl", out / f"{_file(name)}.json"
        policy_args = json.dumps({k: v for k, v in s.items() if k != "rollouts"}, sort_keys=True)
        if policy_args in done and not (path.exists() and meta.exists()):
            # the same policy under another name (grpo_last_step when the guard kept the last step):
            # greedy decoding gives the same episodes, so copy them rather than spend the time again
            twin = done[policy_args]
            shutil.copyfile(out / f"{_file(twin)}.jsonl", path)
            write_json(meta, {**json.loads((out / f"{_file(twin)}.json").read_text()), **s, "same_as": twin})
        if not (path.exists() and meta.exists()):
            log(f"[evaluation] {name} on {len(seeds)} tasks")
            started = time.time()
            policy = make_policy(s["model"], adapter=s.get("adapter"), composed=s.get("composed"),
                                 router=s.get("router", "token"), batch_size=cfg.batch_size, dtype=s.get("dtype", "float32"))
            trajs = rollout(make_target, policy, seeds, max_steps=max_steps, sampling=Sampling(max_new_tokens=cfg.max_new_tokens))
            seconds = round(time.time() - started, 1)
            routing = routing_summary(policy, trajs) if s.get("composed") else None
            write_jsonl(path, trajs)
            write_json(meta, {"seconds": seconds, **s, "routing": routing})
            del policy
            _release_memory()
        results[name], info = read_jsonl(path), json.loads(meta.read_text())
        done.setdefault(policy_args, name)
        stat = summarize(results[name], env=make_target().name, model=name, split=cfg.split)
        rows.append({"system": name, "n": stat["n"], "success_rate": stat["success_rate"], "ci": stat["ci95"],
                     "mean_reward": stat["mean_reward"], "mean_tool_calls": stat["mean_tool_calls"],
                     "rollouts_spent": s["rollouts"], "wall_seconds": info["seconds"], "routing": info.get("routing")})
    table = {"target": make_target().name, "split": cfg.split, "n_tasks": len(seeds), "systems": rows,
             "p_values": compare(results, COMPARED)}
    write_json(out / "table.json", table)
    return table


def _file(system: str) -> str:
    return system.replace(":", "_")


# ---- several training seeds ----------------------------------------------------------------------
def seed_run(config: RunConfig, seed: int, source: Path | None = None) -> RunConfig:
    """The run with training seed `seed`. The config's own seed keeps its run folder; another seed goes
    beside it (`<run_dir>_s<seed>`), which starts as a copy of the finished stages of `source` (default:
    the config's run folder): the fingerprints then keep the ones the seed does not reach (warm-up, base
    rollouts, analysis, synthesis) and rerun the rest."""
    if seed == config.training.seed:
        return config
    run_dir = config.run_dir.with_name(f"{config.run_dir.name}_s{seed}")
    source = source or config.run_dir
    if not run_dir.exists() and source.is_dir():
        for stage in sorted(source.glob("[0-9][0-9]_*")):
            if stage.suffix != ".tmp" and (stage / "stage.json").exists():  # finished stages only
                shutil.copytree(stage, run_dir / stage.name)
    return config.model_copy(update={"run_dir": run_dir, "training": config.training.model_copy(update={"seed": seed})})


def run_record(evaluation: Path, config: RunConfig | None = None) -> dict:
    """What a finished run measured, small enough to keep in git (run folders hold models and do not
    survive a machine): its table and each system's success per held-out task, plus the run config."""
    from trace_agents.evaluate import per_task_success

    table = json.loads((evaluation / "table.json").read_text())
    verdicts = {r["system"]: per_task_success(read_jsonl(evaluation / f"{_file(r['system'])}.jsonl"))
                for r in table["systems"]}
    return {"config": config.model_dump(mode="json") if config else None, "table": table, "verdicts": verdicts}


def pool_records(records: list[dict]) -> dict:
    """Success per system in each run and its mean over the runs (the systems all runs evaluated), with
    paired-bootstrap p-values over tasks, each task's success averaged over the runs: the runs share their
    held-out tasks, so tasks, not (seed, task) pairs, are the resampled unit."""
    from trace_agents.evaluate import compare_rates

    rates = [{r["system"]: r["success_rate"] for r in rec["table"]["systems"]} for rec in records]
    names = [n for n in rates[0] if all(n in r for r in rates)]
    per_task = {n: _mean_per_task([rec["verdicts"][n] for rec in records]) for n in names}
    return {"runs": len(records), "success_rate": {n: [r[n] for r in rates] for n in names},
            "mean_success_rate": {n: round(sum(r[n] for r in rates) / len(rates), 4) for n in names},
            "p_values": compare_rates(per_task, COMPARED)}


def _mean_per_task(verdicts: list[dict[str, float]]) -> dict[str, float]:
    tasks = set.intersection(*(set(v) for v in verdicts))
    return {t: sum(v[t] for v in verdicts) / len(verdicts) for t in tasks}


def pool_seeds(evaluations: list[Path]) -> dict:
    """`pool_records` over the evaluation folders of several runs."""
    return pool_records([run_record(d) for d in evaluations])


def _valid_envs(synthesis_dir: Path, analysis_dir: Path, a: AnalysisCfg) -> dict[str, Path]:
    """The first `a.max_capabilities` valid environments, ranked by their capability's mean Δ or coverage.

    Why coverage: under a cap on adapters, Δ can rank first a capability whose absence explains few
    failures. On bfcl/multiple (session 12, docs/results.md) Δ put request_detail_coverage (Δ 0.49, ρ 0.27)
    before function_selection (Δ 0.42, ρ 0.38), whose absence shows as the base's most common failure
    (a wrong function name, 30 of 72), and the two adapters left it nearly unfixed (30 -> 25)."""
    summary = json.loads((synthesis_dir / "synthesis.json").read_text())["environments"]
    stats = {c["name"]: c for c in json.loads((analysis_dir / "capabilities.json").read_text())["capabilities"]}
    key = "mean_delta" if a.rank == "delta" else "mean_coverage"
    valid = [n for n, e in summary.items() if e.get("valid")]
    valid.sort(key=lambda n: -stats.get(n, {}).get(key, 0.0))  # stable: the analysis order breaks ties
    # synthesize_all wrote the modules into the stage's temporary folder; they now live in the final one
    return {n: synthesis_dir / Path(summary[n]["module"]).name for n in valid[: a.max_capabilities]}


def _check_budgets(config: RunConfig, model: str, makers: dict[str, Callable], log: Callable[[str], None],
                   budgets: dict[str, int]) -> None:
    """Each env's reference replies against each reply budget (training/budget.py): a note in the log when
    a few are cut, BudgetError when too many are. Skipped for endpoint models (no local tokenizer)."""
    if not config.check_budgets or model.startswith("openai:"):
        return
    from trace_agents.models import load_tokenizer
    from trace_agents.training.budget import check_budget, reference_lengths

    tokenizer = load_tokenizer(model)
    for name, make in makers.items():
        lengths = reference_lengths(make, tokenizer)
        for setting, tokens in budgets.items():
            if note := check_budget(name, lengths, tokens, setting):
                log(f"[budget] {note}")


def _rollouts_spent(t: TrainingCfg, steps: int | None = None) -> int:
    return (t.steps if steps is None else steps) * t.group_size * t.groups_per_step


def _grpo_config(t: TrainingCfg, max_steps: int, **changes):
    from trace_agents.training.grpo import PRESETS, GRPOConfig

    optional = {k: v for k, v in (("lr", t.lr), ("max_new_tokens", t.max_new_tokens)) if v is not None}
    return GRPOConfig(**{**PRESETS[t.preset], "steps": t.steps, "group_size": t.group_size,
                         "groups_per_step": t.groups_per_step, "reward": t.reward,
                         "hint_fraction": t.hint_fraction, "max_steps": max_steps, "seed": t.seed, **optional, **changes})


def _step_line(steps: int) -> Callable[[dict], str]:
    """A training step's log line, with the time left at the mean pace of the steps this process has run (a
    resumed run does not count the steps its checkpoint skipped)."""
    seconds: list[float] = []

    def line(m: dict) -> str:
        seconds.append(m["seconds"])
        left = (steps - m["step"]) * sum(seconds) / len(seconds)
        return (f"step {m['step']}/{steps} reward {m['reward']:.3f} success {m['success']:.2f} "
                f"({m['seconds']:.0f}s, {duration(left)} left)")

    return line


def duration(seconds: float) -> str:
    """`1h05m`, `7m`, `40s`: a wall time in a log line."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m"


SHARED = "_shared"  # the shared adapter's folder in the adapters stage (training.shared_steps)
ENV_TURNS = 8  # assistant turns per episode at most in a capability env, in training and in the guard


def _target_probe(config: RunConfig, max_steps: int) -> Probe | None:
    """The guard's probe on the target's train tasks (training.guard_target), scored as the evaluation scores
    the test tasks; None when off."""
    from trace_agents.training.guard import Probe

    n = config.training.guard_target
    return Probe(config.target, "train", n, max_steps, config.evaluation.max_new_tokens) if n else None


def train_adapters(envs: dict[str, Path], model: str, out: Path, t: TrainingCfg, log: Callable[[str], None] = print,
                   dtype: str = "float32", target: Probe | None = None, target_env: str | None = None) -> None:
    """One adapter per capability env in `out/<name>/adapter`. With `t.shared_steps`, one adapter is
    first trained on all the envs mixed (`out/_shared`) and each capability adapter starts from it.

    Why: on bfcl/multiple the target drills' fixes overlap (docs/results.md, "Session of 2026-12-04"): two
    adapters trained apart and composed solved 38% of held-out tasks, one adapter on both drills with
    the same rollouts 51%. Starting every expert from the shared adapter keeps what they have in
    common out of the split budget; the per-capability steps then specialise it. With `t.guard_seeds`, a
    capability adapter whose own steps made it worse on held-out seeds of its env (and, with `target`, a
    guard.Probe, on the target's train tasks) is replaced by the shared one or a kept earlier step. With
    `target_env` (training.shared_target), the shared adapter's mixture holds the target's train tasks too."""
    from trace_agents.envs.base import resolve_env
    from trace_agents.envs.mixture import MixtureEnv, Reseeded
    from trace_agents.training.grpo import latest_checkpoint

    # the env factories themselves, not an `A+B` string: a run folder's path may hold a "+"
    makers = {name: resolve_env(str(module)) for name, module in envs.items()}
    init = None
    if t.shared_steps:
        parts = list(makers.values())
        if target_env:  # reseeded: its own seeds are BFCL task numbers, too few for a mixture's residue classes
            parts.append(lambda: Reseeded(resolve_env(target_env)))
        mixed = parts[0] if len(parts) == 1 else (lambda: MixtureEnv(parts))
        _train(mixed, model, out / SHARED, t.model_copy(update={"steps": t.shared_steps}), ENV_TURNS,
               lambda m: log(f"[adapters] shared {m}"), dtype=dtype)
        init = str(out / SHARED / "adapter")
    moments = latest_checkpoint(out / SHARED / "checkpoints") if t.carry_optimizer else None
    if t.carry_optimizer and moments is None:
        raise DataError(f"{out / SHARED} has no finished checkpoint to carry the optimizer from; delete it and resume")
    for name, make_env in makers.items():
        _train(make_env, model, out / name, t, ENV_TURNS, lambda m: log(f"[adapters] {name} {m}"), init_adapter=init, dtype=dtype,
               init_optimizer=moments and str(moments), keep_every=t.guard_every)
        if init and t.guard_seeds:
            from trace_agents.training.guard import Probe

            drills = Probe(make_env, "test", t.guard_seeds, ENV_TURNS, _grpo_config(t, ENV_TURNS).max_new_tokens)
            _guard(model, out / name, Path(init), {"drills": drills, **({"target": target} if target else {})}, log, dtype)


def _guard(model: str, out: Path, init: Path | None, probes: dict[str, Probe], log: Callable[[str], None], dtype: str,
           stage: str = "adapters") -> None:
    from trace_agents.training.guard import in_words, keep_better

    on, scores, kept = in_words(keep_better(model, out, init, probes, dtype))
    log(f"[{stage}] {out.name} guard on {on}: {scores} -> kept {kept}")


def _train(make_env, model: str, out: Path, t: TrainingCfg, max_steps: int, log: Callable[[str], None],
           init_adapter: str | None = None, dtype: str = "float32", init_optimizer: str | None = None, keep_every: int = 0) -> None:
    from trace_agents.training.grpo import train

    config = _grpo_config(t, max_steps, init_adapter=init_adapter, init_optimizer=init_optimizer, dtype=dtype,
                          keep_every=keep_every)
    line = _step_line(config.steps)
    train(make_env, model, out, config, on_step=lambda m: log(line(m)))


def _train_gates(make_target, composed: Path, out: Path, t: TrainingCfg, c: ComposeCfg, max_steps: int,
                 log: Callable[[str], None], dtype: str = "float32") -> None:
    """GRPO on the fitted gates against the target (its train split; no hint), then the trained gates
    replace the fitted ones in `composed`."""
    from trace_agents.compose.gate_grpo import train_gates_grpo
    from trace_agents.compose.model import GATES_FILE

    config = _grpo_config(t, max_steps, steps=c.gate_grpo_steps, lr=c.gate_grpo_lr, hint_fraction=0.0, dtype=dtype)
    line = _step_line(config.steps)
    train_gates_grpo(make_target, composed, out, config, on_step=lambda m: log(line(m)))
    shutil.copy2(out / "composed" / GATES_FILE, composed / GATES_FILE)
