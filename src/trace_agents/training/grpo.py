"""GRPO on a LoRA adapter over any Env: multi-turn episodes, groups of G rollouts of the same seed,
the base model frozen. Reads top to bottom: config, rollouts, rewards, advantages, samples, loss,
what trains (a Trainee: a LoRA adapter here, a composed model's gates in compose/gate_grpo.py),
checkpoints, the loop.

Why not TRL's GRPOTrainer (1.16, see DESIGN.md §10): its tool loop parses calls only for
whitelisted chat templates (ours is refused), it cannot feed further *user* turns (BFCL multi-turn,
our stateful envs), and a hint added while sampling cannot be removed before the gradient. The loop
below keeps what matters from it: group-normalised advantages, the clipped surrogate, token-level
loss aggregation (DAPO-style, TRL's default), an optional k3 KL to the adapter-disabled base.

Exactness choices: every assistant turn is scored with its prompt exactly as rendered while
sampling (minus any hint) and the sampled token ids, so log-probabilities are computed on the tokens
that were actually sampled, never on a re-tokenisation of the parsed reply. Consecutive turns of an
episode share one sample (one forward) only where that is exact: see `pack_turns`.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Literal

import torch

from trace_agents.agent.policy import Sampling, TransformersPolicy
from trace_agents.agent.rollout import rollout
from trace_agents.envs.base import Env
from trace_agents.models import release_memory
from trace_agents.types import Trajectory, atomic_write_text, write_json

DTYPES = ("float32", "bfloat16", "float16")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class GRPOConfig:
    steps: int = 20
    """Optimizer steps (each one samples fresh groups)."""
    groups_per_step: int = 4
    """Seeds per step (paper: 32-64)."""
    group_size: int = 8
    """Rollouts per seed G (paper: 16); rewards are normalised within a group."""
    lr: float = 1e-5
    """AdamW learning rate of the LoRA weights (paper: 1e-5)."""
    lora_r: int = 16
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    target_modules: tuple[str, ...] = LORA_TARGETS
    init_adapter: str | None = None
    """A PEFT adapter folder to start from (train on from an earlier run, e.g. with another reward);
    its own rank, alpha and target modules replace the lora_* fields. None: a fresh LoRA."""
    init_optimizer: str | None = None
    """With init_adapter: a checkpoint folder of the run that trained it (`checkpoints/step_N`) whose AdamW
    moments this run starts from (at this run's lr). Why: a fresh AdamW's first steps move every weight by
    about lr whatever the gradient's size, so a few noisy groups can undo what the init adapter learned.
    Measured once (docs/results.md, session 20): no better than a fresh AdamW on a target drill's held-out seeds."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts (paper: 1.0); GRPO needs sampling, so > 0."""
    max_new_tokens: int = 192
    """Tokens per assistant turn at most."""
    max_steps: int = 8
    """Assistant turns per episode at most."""
    clip_eps: float = 0.2
    """PPO clip range of the ratio."""
    kl_coef: float = 0.0
    """Weight of the k3 KL to the base (adapter disabled); the paper uses none."""
    scale_rewards: Literal["group", "none"] = "group"
    """"group": (R - mean) / (std + eps); "none": R - mean (the paper's code)."""
    inner_epochs: int = 1
    """Gradient passes over each step's samples; > 1 makes the clipping active."""
    micro_batch: int = 4
    """Samples per forward/backward at most (gradient accumulation over the step)."""
    micro_tokens: int = 2048
    """Padded tokens (rows x width) per forward/backward at most; a longer sample goes alone.
    Multi-turn samples carry the whole conversation: 4 rows of ~1,000 tokens peaked at 10 GB on
    SmolLM2-135M (and were OOM-killed), 1 row at 3.2 GB, for about the same time per token."""
    hint_fraction: float = 0.0
    """Share of each group that sees the env's hint while sampling (paper: 0.25-0.5)."""
    reward: Literal["verifier", "trace-efficiency"] = "verifier"
    efficiency: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of EfficiencyReward when reward == "trace-efficiency"."""
    epoch_steps: int = 5
    """Steps per reward epoch (the efficiency threshold tightens at each epoch's end)."""
    save_every: int = 5
    """Checkpoint every N steps (and at the end)."""
    keep_every: int = 0
    """Also keep the trained weights every N steps before the last in out/kept/step_N/ (never pruned, unlike
    checkpoints: candidates for training/guard.py; 0: none)."""
    max_grad_norm: float = 1.0
    seed: int = 0
    dtype: str = "float32"
    """Weights of the frozen base: float32 | bfloat16 | float16. The LoRA weights stay float32 and the
    log-probs are taken in float32; bfloat16 runs a GRPO step 2-3x faster on CPUs with AMX
    (benchmarks/dtype_speed.py) and on GPUs."""

    def __post_init__(self) -> None:
        checks = {
            "steps": self.steps >= 1, "groups_per_step": self.groups_per_step >= 1, "group_size": self.group_size >= 2,
            "lr": self.lr > 0, "temperature": self.temperature > 0, "clip_eps": 0 < self.clip_eps < 1, "kl_coef": self.kl_coef >= 0,
            "inner_epochs": self.inner_epochs >= 1, "micro_batch": self.micro_batch >= 1,
            "micro_tokens": self.micro_tokens >= 1,
            "hint_fraction": 0 <= self.hint_fraction <= 1, "save_every": self.save_every >= 1,
            "keep_every": self.keep_every >= 0,
            "scale_rewards": self.scale_rewards in ("group", "none"),
            "reward": self.reward in ("verifier", "trace-efficiency"), "epoch_steps": self.epoch_steps >= 1,
            "dtype": self.dtype in DTYPES,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid GRPO config field(s) {', '.join(bad)} (group_size >= 2, fractions in [0, 1], counts >= 1, lr and temperature > 0, "
                             "scale_rewards group|none, reward verifier|trace-efficiency, dtype float32|bfloat16|float16)")
        if self.init_optimizer and not (self.init_adapter and (Path(self.init_optimizer) / "state.pt").exists()):
            raise ValueError(f"init_optimizer {self.init_optimizer!r} needs init_adapter and a checkpoint folder with "
                             "state.pt (checkpoints/step_N of the run that trained init_adapter)")
        if self.init_adapter and not (Path(self.init_adapter) / "adapter_config.json").exists():
            raise ValueError(f"init_adapter {self.init_adapter!r} is not a PEFT adapter folder (no adapter_config.json); "
                             "pass the adapter/ folder of a finished `trace-agents train` run")


# Small enough for CPU: fewer LoRA ranks, a learning rate a 135M model moves with in tens of steps.
PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},
    "cpu": {"lora_r": 8, "lora_alpha": 16, "lr": 2e-4, "group_size": 8, "groups_per_step": 4, "max_new_tokens": 128},
}


# ---- rewards and advantages ----------------------------------------------------------------------
def group_rewards(trajs: list[Trajectory], group_size: int, efficiency=None) -> list[float]:
    """Verifier rewards, or the TRACE efficiency reward scored per group (it ranks within groups)."""
    if efficiency is None:
        return [t.reward for t in trajs]
    out: list[float] = []
    for g in range(0, len(trajs), group_size):
        group = trajs[g : g + group_size]
        out += efficiency.score_group(group[0].task_id, [t.success for t in group], [t.tool_calls for t in group])
    return out


def group_advantages(rewards: list[float], group_size: int, scale: str = "group", eps: float = 1e-4) -> tuple[list[float | None], int]:
    """Per-rollout advantages; None for rollouts of dropped groups (all rewards equal: no signal)."""
    advantages: list[float | None] = []
    dropped = 0
    for g in range(0, len(rewards), group_size):
        r = torch.tensor(rewards[g : g + group_size], dtype=torch.float64)
        if float(r.max() - r.min()) < 1e-9:
            advantages += [None] * len(r)
            dropped += 1
            continue
        a = r - r.mean()
        if scale == "group":
            a = a / (r.std(unbiased=True) + eps)
        advantages += a.tolist()
    return advantages, dropped


# ---- training samples --------------------------------------------------------------------------
@dataclass
class Sample:
    prompt_ids: list[int]
    completion_ids: list[int]
    """Everything scored after the prompt: the sampled ids, and for packed turns also the tokens the
    env or user added between them."""
    advantage: float
    scored: list[int] | None = None
    """Per completion token: 1 if sampled (carries loss), 0 if added between packed turns. None: all 1."""


def episode_turns(tokenizer, traj: Trajectory) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, sampled ids) of every assistant turn: the prompt rendered exactly as during
    sampling but without the hint (trajectories store unhinted messages)."""
    chat = [m.to_chat() for m in traj.messages]
    turns = [i for i, m in enumerate(traj.messages) if m.role == "assistant"]
    out = []
    for i, ids in zip(turns, traj.info.get("completion_ids", [])):
        if ids:
            prompt = tokenizer.apply_chat_template(chat[:i], tools=traj.tools or None, tokenize=False, add_generation_prompt=True)
            out.append((tokenizer(prompt, add_special_tokens=False)["input_ids"], list(ids)))
    return out


def pack_turns(turns: list[tuple[list[int], list[int]]], advantage: float) -> list[Sample]:
    """Consecutive turns as one sample wherever turn k's prompt + sampled ids is an exact token prefix
    of turn k+1's prompt: a causal forward over the longer sequence then gives every turn the very
    log-probs it had alone, and the shared conversation (the tool docs alone are ~600 tokens) is
    computed once per episode instead of once per turn. Where the template re-renders a reply
    differently from what was sampled (e.g. the parser dropped a duplicate key), a new sample starts."""
    samples: list[Sample] = []
    for prompt, sampled in turns:
        last = samples[-1] if samples else None
        seq = last.prompt_ids + last.completion_ids if last else None
        if last and prompt[: len(seq)] == seq:
            gap = prompt[len(seq) :]  # tool results, the next user turn, template tokens: no loss
            last.scored = (last.scored or [1] * len(last.completion_ids)) + [0] * len(gap) + [1] * len(sampled)
            last.completion_ids = last.completion_ids + gap + sampled
        else:
            samples.append(Sample(prompt, sampled, advantage))
    return samples


def build_samples(tokenizer, trajs: list[Trajectory], advantages: list[float | None], pack: bool = True) -> list[Sample]:
    """The training samples of every kept rollout: its turns packed (see pack_turns), or with
    pack=False one sample per assistant turn."""
    samples = []
    for traj, adv in zip(trajs, advantages):
        if adv is None:
            continue
        turns = episode_turns(tokenizer, traj)
        samples += pack_turns(turns, adv) if pack else [Sample(p, c, adv) for p, c in turns]
    return samples


def _collate(batch: list[Sample], pad_id: int, device) -> tuple[torch.Tensor, ...]:
    """Left-padded rows, so every completion ends at the right edge and the LM head only has to run
    on the last `keep` positions (the 49k-vocabulary projection over whole prompts dominated memory)."""
    width = max(len(s.prompt_ids) + len(s.completion_ids) for s in batch)
    keep = max(len(s.completion_ids) for s in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros((len(batch), keep), dtype=torch.float32)  # 1 on sampled tokens only
    for row, s in enumerate(batch):
        seq = s.prompt_ids + s.completion_ids
        ids[row, width - len(seq) :] = torch.tensor(seq)
        attn[row, width - len(seq) :] = 1
        mask[row, keep - len(s.completion_ids) :] = torch.tensor(s.scored) if s.scored else 1
    adv = torch.tensor([s.advantage for s in batch], dtype=torch.float32)
    return ids.to(device), attn.to(device), mask.to(device), adv.to(device)


def micro_batches(samples: list[Sample], max_rows: int, max_tokens: int) -> list[list[Sample]]:
    """Samples sorted by length (less padding), cut into batches of at most `max_rows` rows and
    `max_tokens` padded tokens. The loss is normalised by the step's token count, so the gradient
    does not depend on how the samples are batched."""
    batches: list[list[Sample]] = []
    for s in sorted(samples, key=lambda s: len(s.prompt_ids) + len(s.completion_ids)):
        width = len(s.prompt_ids) + len(s.completion_ids)  # the longest so far: the batch's width
        if batches and len(batches[-1]) < max_rows and width * (len(batches[-1]) + 1) <= max_tokens:
            batches[-1].append(s)
        else:
            batches.append([s])
    return batches


def token_logprobs(model, ids: torch.Tensor, attn: torch.Tensor, keep: int) -> torch.Tensor:
    """log p of the last `keep` tokens of each row given everything before, shape (batch, keep)."""
    positions = (attn.cumsum(-1) - 1).clamp(min=0)  # left padding: positions count real tokens only
    logits = model(input_ids=ids, attention_mask=attn, position_ids=positions, logits_to_keep=keep + 1).logits
    logits = logits[:, :-1].float()  # the last position predicts nothing we score
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, -keep:].unsqueeze(-1)).squeeze(-1)


def policy_update(model, optimizer, samples: list[Sample], config: GRPOConfig, pad_id: int,
                  reference: Callable[[], ContextManager] | None = None) -> dict[str, float]:
    """Clipped-surrogate GRPO update, loss averaged over every completion token of the step.
    `reference()` switches the model to the frozen reference of the KL term (default: PEFT's
    adapter-disabled base)."""
    reference = reference or model.disable_adapter
    device = next(model.parameters()).device
    batches = [_collate(b, pad_id, device) for b in micro_batches(samples, config.micro_batch, config.micro_tokens)]
    n_tokens = sum(float(b[2].sum()) for b in batches)
    old: list[torch.Tensor | None] = [None] * len(batches)
    if config.inner_epochs > 1:  # the behaviour policy's log-probs, fixed before the first update
        with torch.no_grad():
            old = [token_logprobs(model, ids, attn, mask.shape[1]) for ids, attn, mask, _ in batches]
    stats = {"loss": 0.0, "clip_fraction": 0.0, "kl": 0.0}
    for _ in range(config.inner_epochs):
        for (ids, attn, mask, adv), old_lp in zip(batches, old):
            m = mask
            new_lp = token_logprobs(model, ids, attn, mask.shape[1])
            ratio = torch.exp(new_lp - (old_lp if old_lp is not None else new_lp.detach()))
            a = adv.unsqueeze(1)
            per_token = -torch.min(ratio * a, torch.clamp(ratio, 1 - config.clip_eps, 1 + config.clip_eps) * a)
            if config.kl_coef > 0:
                with torch.no_grad(), reference():
                    ref_lp = token_logprobs(model, ids, attn, mask.shape[1])
                d = ref_lp - new_lp
                kl = torch.exp(d) - d - 1  # k3 estimator: unbiased, always >= 0
                per_token = per_token + config.kl_coef * kl
                stats["kl"] += float((kl * m).sum()) / n_tokens / config.inner_epochs
            loss = (per_token * m).sum() / n_tokens
            loss.backward()
            stats["loss"] += float(loss.detach()) / config.inner_epochs
            clipped = ((ratio - 1).abs() > config.clip_eps).float()
            stats["clip_fraction"] += float((clipped * m).sum()) / n_tokens / config.inner_epochs
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], config.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    stats["tokens"] = n_tokens
    return stats


# ---- what trains ---------------------------------------------------------------------------------
@dataclass
class Trainee:
    """What the loop trains: a model whose trainable parameters (requires_grad) are the only ones
    that change, and how its trained weights go to and come back from a folder."""
    model: Any
    tokenizer: Any
    name: str
    save: Callable[[Path], None]
    """Write the trained weights into a folder (a PEFT adapter, a composed model ...)."""
    load: Callable[[Path], None]
    """Read them back from such a folder into `model` (resume)."""
    reference: Callable[[], ContextManager]
    """Context in which `model` is the frozen reference of the KL term."""
    artifact: str = "adapter"
    """Name of that folder in checkpoints and in the run folder."""
    share_prompts: bool = True
    """Rollouts may prefill identical prompts once (see TransformersPolicy)."""


def lora_trainee(model, tokenizer, name: str) -> Trainee:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    return Trainee(model, tokenizer, f"{name}+lora", save=model.save_pretrained,
                   load=lambda d: set_peft_model_state_dict(model, load_file(d / "adapter_model.safetensors")),
                   reference=model.disable_adapter)


# ---- checkpoints ---------------------------------------------------------------------------------
def save_checkpoint(folder: Path, trainee: Trainee, optimizer, step: int, rng: random.Random, efficiency) -> None:
    """Trained weights + optimizer + RNG + step + reward state, written to a temporary folder and
    renamed: a checkpoint folder either exists complete or not at all."""
    final = folder / f"step_{step:05d}"
    tmp = folder / f".tmp_step_{step:05d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    trainee.save(tmp / trainee.artifact)
    torch.save({"optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state()}, tmp / "state.pt")
    write_json(tmp / "train_state.json", {
        "step": step, "python_rng": _rng_to_json(rng), "reward_state": efficiency.state_dict() if efficiency else None,
    })
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in sorted(folder.glob("step_*"))[:-2]:  # keep the last two
        shutil.rmtree(old, ignore_errors=True)


KEPT = "kept"  # run_grpo's folder of weights kept every config.keep_every steps


def keep_weights(folder: Path, trainee: Trainee, step: int) -> Path:
    """The trained weights alone in `folder/step_N/<artifact>`, written whole or not at all."""
    final, tmp = folder / f"step_{step:05d}", folder / f".tmp_step_{step:05d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    trainee.save(tmp / trainee.artifact)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def kept_weights(folder: Path) -> dict[int, Path]:
    """Step -> weights folder of each kept step (keep_weights) under `folder`."""
    return {int(p.name.split("_")[1]): p for p in sorted(folder.glob("step_*"))}


def latest_checkpoint(folder: Path) -> Path | None:
    done = sorted(p for p in folder.glob("step_*") if (p / "train_state.json").exists())
    return done[-1] if done else None


def load_checkpoint(path: Path, trainee: Trainee, optimizer, rng: random.Random, efficiency) -> int:
    trainee.load(path / trainee.artifact)
    state = torch.load(path / "state.pt", weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    meta = json.loads((path / "train_state.json").read_text())
    rng.setstate(_rng_from_json(meta["python_rng"]))
    if efficiency is not None and meta.get("reward_state"):
        efficiency.load_state_dict(meta["reward_state"])
    return int(meta["step"])


def _carry_optimizer(optimizer, checkpoint: Path, lr: float) -> None:
    """AdamW moments of an earlier run over the same LoRA weights; the learning rate stays this run's."""
    optimizer.load_state_dict(torch.load(checkpoint / "state.pt", weights_only=False)["optimizer"])
    for group in optimizer.param_groups:
        group["lr"] = lr


def _rng_to_json(rng: random.Random) -> list:
    version, state, gauss = rng.getstate()
    return [version, list(state), gauss]


def _rng_from_json(data: list) -> tuple:
    return (data[0], tuple(data[1]), data[2])


# ---- the loop ------------------------------------------------------------------------------------
def make_lora_model(model_name: str, config: GRPOConfig, device: str | None = None):
    from peft import LoraConfig, PeftModel, get_peft_model

    from trace_agents.models import load_model

    base, tok = load_model(model_name, device=device, dtype=config.dtype)
    present = {n.rsplit(".", 1)[-1] for n, _ in base.named_modules()}
    targets = [t for t in config.target_modules if t in present]
    if not targets:
        raise ValueError(f"none of target_modules {config.target_modules} exist in {model_name}")
    if config.init_adapter:
        model = PeftModel.from_pretrained(base, config.init_adapter, is_trainable=True)
    else:
        lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                          target_modules=targets, task_type="CAUSAL_LM")
        torch.manual_seed(config.seed)  # LoRA A matrices are random: same seed, same start
        model = get_peft_model(base, lora)
    # Name the base as the command line does (built-in name or absolute folder), so an adapter folder
    # alone says which model it belongs to (export-vllm and composition read this).
    name = model_name if model_name in ("smollm2-135m", "tiny-random") else str(Path(model_name).resolve())
    model.peft_config["default"].base_model_name_or_path = name
    return model, tok


def randomize_lora_b(model: torch.nn.Module, std: float, generator: torch.Generator | None = None) -> None:
    """Draw every LoRA B from N(0, std). PEFT starts B at zero, which makes a fresh adapter a no-op whose A
    gets no gradient; tests and benchmarks that need adapters which move the logits start from this."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, std, generator=generator)


def train(
    make_env: Callable[[], Env],
    model_name: str,
    out: str | Path,
    config: GRPOConfig = GRPOConfig(),
    *,
    device: str | None = None,
    resume: bool = True,
    on_step: Callable[[dict], None] | None = None,
) -> dict:
    """Train one adapter; writes out/adapter (PEFT), out/metrics.jsonl, out/checkpoints, out/train.json."""
    model, tok = make_lora_model(model_name, config, device)
    return run_grpo(make_env, lora_trainee(model, tok, model_name), out, config, model_name=model_name,
                    resume=resume, on_step=on_step)


def run_grpo(make_env: Callable[[], Env], trainee: Trainee, out: str | Path, config: GRPOConfig, *, model_name: str,
             resume: bool = True, on_step: Callable[[dict], None] | None = None) -> dict:
    """The GRPO loop over any trainee; writes out/<artifact>, out/metrics.jsonl, out/checkpoints,
    out/train.json."""
    from trace_agents.training.rewards import EfficiencyReward

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model, tok = trainee.model, trainee.tokenizer
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr, weight_decay=0.0)
    efficiency = EfficiencyReward(**config.efficiency) if config.reward == "trace-efficiency" else None
    rng = random.Random(config.seed)
    step = 0
    ckpt = latest_checkpoint(out / "checkpoints") if resume else None
    if ckpt:
        step = load_checkpoint(ckpt, trainee, optimizer, rng, efficiency)
    elif config.init_optimizer:
        _carry_optimizer(optimizer, Path(config.init_optimizer), config.lr)
    metrics_path = out / "metrics.jsonl"
    _truncate_metrics(metrics_path, step)
    write_json(out / "config.json", {"model": model_name, "env": make_env().name, **asdict(config)})

    board = _tensorboard(out / "tensorboard")
    policy = TransformersPolicy(model, tok, name=trainee.name, batch_size=config.group_size * config.groups_per_step,
                                share_prompts=trainee.share_prompts)
    train_seeds = make_env().seeds("train")
    hint_samples = round(config.hint_fraction * config.group_size)
    started = time.time()
    while step < config.steps:
        t0 = time.time()
        seeds = rng.sample(train_seeds, config.groups_per_step)
        model.eval()
        sampling = Sampling(max_new_tokens=config.max_new_tokens, temperature=config.temperature, seed=config.seed * 100_003 + step)
        trajs = rollout(make_env, policy, seeds, samples=config.group_size, max_steps=config.max_steps,
                        sampling=sampling, keep_tokens=True, hint_samples=hint_samples)
        rewards = group_rewards(trajs, config.group_size, efficiency)
        advantages, dropped = group_advantages(rewards, config.group_size, config.scale_rewards)
        samples = build_samples(tok, trajs, advantages)
        model.train()
        stats = policy_update(model, optimizer, samples, config, tok.pad_token_id, trainee.reference) if samples else {"loss": 0.0, "clip_fraction": 0.0, "kl": 0.0, "tokens": 0}
        step += 1
        if efficiency is not None and step % config.epoch_steps == 0:
            efficiency.end_epoch()
        record = _step_metrics(step, trajs, rewards, dropped, config, stats, time.time() - t0, efficiency)
        with metrics_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        for key, value in record.items():
            if isinstance(value, (int, float)) and key != "step":
                board.add_scalar(f"grpo/{key}", value, step)
        release_memory()  # the step's freed sampling and backward buffers (GBs), before the next step or stage
        if on_step:
            on_step(record)
        kept = config.keep_every and step % config.keep_every == 0 and step < config.steps
        if kept:  # before the checkpoint: a crash between the two redoes this step and keeps it again
            keep_weights(out / KEPT, trainee, step)
        if kept or step % config.save_every == 0 or step == config.steps:
            save_checkpoint(out / "checkpoints", trainee, optimizer, step, rng, efficiency)
    board.close()
    final = latest_checkpoint(out / "checkpoints")
    if final is not None:  # the weights of the last checkpoint are the result
        shutil.rmtree(out / trainee.artifact, ignore_errors=True)
        shutil.copytree(final / trainee.artifact, out / trainee.artifact)
    summary = {"steps": step, "seconds_this_run": round(time.time() - started, 1),
               trainee.artifact: str(out / trainee.artifact)}
    write_json(out / "train.json", summary)
    return summary


def _tensorboard(folder: Path):
    """A TensorBoard writer for the per-step metrics (`tensorboard --logdir OUT/tensorboard`); the
    JSONL stays the source of truth (resume truncates it; TensorBoard shows a rerun step twice)."""
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(folder))


def _step_metrics(step, trajs, rewards, dropped, config, stats, seconds, efficiency) -> dict:
    ok = [t for t in trajs if t.success]
    record = {
        "step": step,
        "reward": sum(rewards) / len(rewards),
        "success": len(ok) / len(trajs),
        "tool_calls": sum(t.tool_calls for t in trajs) / len(trajs),
        "tool_calls_success": sum(t.tool_calls for t in ok) / len(ok) if ok else None,
        "dropped_groups": dropped,
        "groups": config.groups_per_step,
        **{k: round(v, 6) for k, v in stats.items()},
        "seconds": round(seconds, 2),
    }
    if efficiency is not None:
        finite = [efficiency.threshold(t.task_id) for t in trajs]
        finite = [x for x in finite if math.isfinite(x)]
        record["mean_threshold"] = sum(finite) / len(finite) if finite else None
    return record


def _truncate_metrics(path: Path, step: int) -> None:
    """After a resume, drop metric lines of steps the checkpoint does not contain (they will rerun)."""
    if not path.exists():
        return
    keep = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
    atomic_write_text(path, "".join(line + "\n" for line in keep))
