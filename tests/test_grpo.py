import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from toy_envs import ShortEnv

from trace_agents.training.grpo import (GRPOConfig, Sample, _collate, build_samples, episode_turns, group_advantages,
                                        micro_batches, pack_turns, policy_update, randomize_lora_b, token_logprobs, train)
from trace_agents.types import FunctionCall, Message, ToolCall, Trajectory

TOY = str(Path(__file__).with_name("toy_envs.py"))


def test_advantages_hand_computed_and_degenerate_groups_dropped():
    adv, dropped = group_advantages([1, 0, 0, 1, 0.5, 0.5, 0.5, 0.5], group_size=4)
    # mean 0.5, unbiased std sqrt(1/3) = 0.57735 -> +-0.5 / (0.57735 + 1e-4)
    assert dropped == 1 and adv[4:] == [None] * 4
    assert adv[0] == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-4)) and adv[1] == pytest.approx(-adv[0])
    adv, _ = group_advantages([1, 0, 0, 0], group_size=4, scale="none")
    assert adv == pytest.approx([0.75, -0.25, -0.25, -0.25])


def _traj(hint: str | None) -> Trajectory:
    call = ToolCall(id="c0", function=FunctionCall(name="f", arguments="{}"))
    msgs = [Message(role="user", content="do it"), Message(role="assistant", content="", tool_calls=[call]),
            Message(role="tool", tool_call_id="c0", content="RESULT"), Message(role="assistant", content="done")]
    info = {"completion_ids": [[11, 12, 2], [13, 2]], **({"hint": hint} if hint else {})}
    return Trajectory(id="x", env="e", task_id="t", seed=0, messages=msgs, tools=[], reward=1, success=True, tool_calls=1, info=info)


def test_samples_mask_everything_but_sampled_tokens_and_never_see_the_hint(tiny):
    _, tok = tiny
    samples = build_samples(tok, [_traj("SECRET HINT"), _traj(None)], [1.0, None])  # 2nd group dropped
    assert [s.completion_ids for s in samples] == [[11, 12, 2], [13, 2]]
    second_prompt = tok.decode(samples[1].prompt_ids)
    assert "RESULT" in second_prompt and "SECRET" not in second_prompt
    assert second_prompt.endswith("<|im_start|>assistant\n")
    ids, attn, mask, adv = _collate(samples, tok.pad_token_id, "cpu")
    assert mask.shape == (2, 3) and mask.tolist() == [[1, 1, 1], [0, 1, 1]]
    assert attn.sum() == sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    assert ids[1, -2:].tolist() == [13, 2] and ids[0, -3:].tolist() == [11, 12, 2]  # completions end at the right edge


def test_logprobs_of_kept_tokens_match_a_full_forward(tiny):
    model, tok = tiny
    samples = [Sample([5, 6, 7, 8], [9, 10], 1.0), Sample([5, 6], [11, 12, 13], -1.0)]
    ids, attn, mask, _ = _collate(samples, tok.pad_token_id, "cpu")
    got = token_logprobs(model, ids, attn, mask.shape[1])
    for row, s in enumerate(samples):  # each row alone, unpadded
        seq = torch.tensor([s.prompt_ids + s.completion_ids])
        full = torch.log_softmax(model(input_ids=seq).logits[0, :-1].float(), -1)
        want = full[torch.arange(len(seq[0]) - 1), seq[0, 1:]][-len(s.completion_ids):]
        assert torch.allclose(got[row, -len(s.completion_ids):], want, atol=1e-4)


def test_micro_batches_respect_rows_and_tokens_and_keep_every_sample():
    samples = [Sample([1] * n, [2] * 3, 1.0) for n in (40, 5, 100, 7, 30, 6, 8)]
    batches = micro_batches(samples, max_rows=3, max_tokens=60)
    assert sorted(id(s) for b in batches for s in b) == sorted(id(s) for s in samples)
    for b in batches:
        width = max(len(s.prompt_ids) + len(s.completion_ids) for s in b)
        assert len(b) <= 3 and (len(b) == 1 or width * len(b) <= 60)
    assert [len(b) for b in batches] == [3, 1, 1, 1, 1]  # 8, 9, 10, then 11 would make 4 rows; 33+ go alone


def _sgd_step(samples: list[Sample], rows: int, tokens: int) -> torch.Tensor:
    """Minus the (clipped) gradient of one policy update on a tiny LoRA model, fixed init."""
    from peft import LoraConfig, get_peft_model

    from trace_agents.models import load_model

    torch.manual_seed(0)
    model = get_peft_model(load_model("tiny-random", device="cpu")[0], LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    randomize_lora_b(model, 0.1)
    trainable = [p for p in model.parameters() if p.requires_grad]
    before = torch.cat([p.detach().flatten() for p in trainable])
    opt = torch.optim.SGD(trainable, lr=1.0)
    policy_update(model, opt, samples, GRPOConfig(micro_batch=rows, micro_tokens=tokens), pad_id=0)
    return before - torch.cat([p.detach().flatten() for p in trainable])


def test_gradient_does_not_depend_on_micro_batching():
    samples = lambda: [Sample([5, 6, 7, 8], [9, 10], 1.0), Sample([5, 6], [11, 12, 13], -1.0), Sample([3] * 9, [4], 0.5)]
    together, alone = _sgd_step(samples(), 8, 10_000), _sgd_step(samples(), 1, 1)
    assert together.abs().sum() > 0 and torch.allclose(together, alone, atol=1e-5)


# turn 2's prompt extends turn 1's prompt + sampled ids (30, 31) by a tool result (40, 41); turn 3's
# prompt does not extend turn 2's (the template re-rendered the reply as 32, 99, not 32, 33)
TURNS = [([5, 6, 7], [30, 31]), ([5, 6, 7, 30, 31, 40, 41], [32, 33]), ([5, 6, 7, 30, 31, 40, 41, 32, 99, 42], [34])]


def test_turns_pack_only_where_the_next_prompt_extends_the_sampled_sequence():
    first, second = pack_turns(TURNS, 0.5)
    assert first.prompt_ids == [5, 6, 7] and first.completion_ids == [30, 31, 40, 41, 32, 33]
    assert first.scored == [1, 1, 0, 0, 1, 1]  # the tool result carries no loss
    assert second.prompt_ids == TURNS[2][0] and second.completion_ids == [34] and second.scored is None
    ids, attn, mask, _ = _collate([first, second], 0, "cpu")
    assert mask.tolist() == [[1, 1, 0, 0, 1, 1], [0, 0, 0, 0, 0, 1]]


def test_packed_turns_give_the_same_gradient_as_one_sample_per_turn():
    packed = pack_turns(TURNS, 1.0) + pack_turns(TURNS[:2], -1.0)
    per_turn = [Sample(p, c, 1.0) for p, c in TURNS] + [Sample(p, c, -1.0) for p, c in TURNS[:2]]
    assert len(packed) == 3 and len(per_turn) == 5
    got, want = _sgd_step(packed, 8, 10_000), _sgd_step(per_turn, 8, 10_000)
    assert want.abs().sum() > 0 and torch.allclose(got, want, atol=1e-5)


def test_a_reply_the_template_renders_as_sampled_packs_with_the_next_turn(tiny):
    _, tok = tiny
    traj = _traj(None)
    chat = [m.to_chat() for m in traj.messages]
    render = lambda n, gen: tok(tok.apply_chat_template(chat[:n], tokenize=False, add_generation_prompt=gen),
                                add_special_tokens=False)["input_ids"]
    p1, p2 = render(1, True), render(3, True)
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    sampled = p2[len(p1) : p2.index(eot, len(p1)) + 1]  # the reply's ids as the template renders them
    traj.info["completion_ids"] = [sampled, [13, 2]]
    assert [len(c) for _, c in episode_turns(tok, traj)] == [len(sampled), 2]
    (sample,) = build_samples(tok, [traj], [1.0])
    assert sample.prompt_ids == p1 and sum(sample.scored) == len(sampled) + 2
    assert len(build_samples(tok, [traj], [1.0], pack=False)) == 2


def test_training_changes_only_lora_weights_and_saves_a_peft_adapter(tmp_path):
    from peft import PeftModel

    from trace_agents.models import tiny_random

    cfg = GRPOConfig(steps=2, groups_per_step=2, group_size=4, max_new_tokens=6, max_steps=1, lr=5e-2, lora_r=4,
                     save_every=1, hint_fraction=0.5)
    records = []
    train(ShortEnv, "tiny-random", tmp_path / "run", cfg, on_step=records.append)
    assert [r["step"] for r in records] == [1, 2] and records[0]["tokens"] > 0
    base, _ = tiny_random()
    loaded = PeftModel.from_pretrained(tiny_random()[0], tmp_path / "run" / "adapter")
    lora = {n: p for n, p in loaded.named_parameters() if "lora_B" in n}
    assert lora and any(p.abs().sum() > 0 for p in lora.values())  # B starts at 0: it moved
    base_sd = base.state_dict()
    for name, p in loaded.get_base_model().named_parameters():
        if "lora_" not in name:
            assert torch.equal(p, base_sd[name.replace("base_layer.", "")]), name


def test_a_bfloat16_base_trains_float32_lora_weights(tmp_path):
    from safetensors.torch import load_file

    from trace_agents.training.grpo import make_lora_model

    cfg = GRPOConfig(steps=1, groups_per_step=2, group_size=4, max_new_tokens=6, max_steps=1, lr=5e-2, lora_r=4,
                     hint_fraction=0.5, dtype="bfloat16")
    model, _ = make_lora_model("tiny-random", cfg)
    dtypes = {n: p.dtype for n, p in model.named_parameters()}
    assert {d for n, d in dtypes.items() if "lora_" in n} == {torch.float32}  # Adam steps on bf16 weights would round away
    assert {d for n, d in dtypes.items() if "lora_" not in n} == {torch.bfloat16}
    records = []
    train(ShortEnv, "tiny-random", tmp_path / "run", cfg, on_step=records.append)
    assert records[0]["tokens"] > 0 and math.isfinite(records[0]["loss"])
    saved = load_file(str(tmp_path / "run" / "adapter" / "adapter_model.safetensors"))
    assert {t.dtype for t in saved.values()} == {torch.float32}
    assert any(t.abs().sum() > 0 for n, t in saved.items() if "lora_B" in n)


def test_init_adapter_starts_from_its_weights_and_trains_on(tmp_path):
    from peft import PeftModel
    from safetensors.torch import load_file

    from trace_agents.models import tiny_random
    from trace_agents.training.grpo import make_lora_model

    cfg = GRPOConfig(steps=1, groups_per_step=2, group_size=4, max_new_tokens=6, max_steps=1, lr=5e-2, lora_r=4)
    train(ShortEnv, "tiny-random", tmp_path / "first", cfg)
    first = tmp_path / "first" / "adapter"
    start, _ = make_lora_model("tiny-random", GRPOConfig(init_adapter=str(first), lora_r=8, seed=7))
    saved = PeftModel.from_pretrained(tiny_random()[0], first)
    ours = {n: p for n, p in start.named_parameters() if "lora_" in n}
    assert ours and all(p.requires_grad for p in ours.values())
    assert all(torch.equal(p, dict(saved.named_parameters())[n]) for n, p in ours.items())  # its rank, not lora_r=8
    train(ShortEnv, "tiny-random", tmp_path / "second", GRPOConfig(**{**cfg.__dict__, "init_adapter": str(first)}))
    before, after = load_file(first / "adapter_model.safetensors"), load_file(tmp_path / "second" / "adapter" / "adapter_model.safetensors")
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)
    with pytest.raises(ValueError, match="init_adapter"):
        GRPOConfig(init_adapter=str(tmp_path))


def test_init_optimizer_carries_the_adam_moments_at_this_runs_lr(tmp_path):
    cfg = GRPOConfig(steps=2, groups_per_step=2, group_size=4, max_new_tokens=6, max_steps=1, lr=5e-2, lora_r=4)
    train(ShortEnv, "tiny-random", tmp_path / "first", cfg)
    first = tmp_path / "first" / "checkpoints" / "step_00002"
    carried = {**cfg.__dict__, "steps": 1, "lr": 1e-3, "init_adapter": str(tmp_path / "first" / "adapter")}
    train(ShortEnv, "tiny-random", tmp_path / "carried", GRPOConfig(**{**carried, "init_optimizer": str(first)}))
    train(ShortEnv, "tiny-random", tmp_path / "fresh", GRPOConfig(**carried))

    def adam(run):
        state = torch.load(tmp_path / run / "checkpoints" / "step_00001" / "state.pt", weights_only=False)["optimizer"]
        return {int(s["step"]) for s in state["state"].values()}, {g["lr"] for g in state["param_groups"]}

    assert adam("carried") == ({3}, {1e-3})  # two steps of the first run, one of its own
    assert adam("fresh") == ({1}, {1e-3})
    with pytest.raises(ValueError, match="init_optimizer"):
        GRPOConfig(init_optimizer=str(first))


def test_keep_every_keeps_the_weights_of_earlier_steps_past_checkpoint_pruning(tmp_path):
    from safetensors.torch import load_file

    from trace_agents.training.grpo import kept_weights

    cfg = GRPOConfig(steps=6, groups_per_step=1, group_size=2, max_new_tokens=4, max_steps=1, lr=5e-2, lora_r=4,
                     save_every=1, keep_every=2)
    out = tmp_path / "run"
    train(ShortEnv, "tiny-random", out, cfg)
    kept = kept_weights(out / "kept")
    assert sorted(kept) == [2, 4]  # the last step is out/adapter itself
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00005", "step_00006"]
    weights = [load_file(kept[n] / "adapter" / "adapter_model.safetensors") for n in (2, 4)]
    last = load_file(out / "adapter" / "adapter_model.safetensors")
    assert any(not torch.equal(weights[0][k], weights[1][k]) for k in last)  # two different steps, not one copy
    assert any(not torch.equal(weights[1][k], last[k]) for k in last)


def test_kill_9_then_resume_finishes_with_every_step_once(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "trace_agents.cli", "train", "--env", TOY, "--model", "tiny-random", "--out", str(out),
           "--steps", "8", "--group-size", "2", "--groups", "1", "--max-new-tokens", "4", "--save-every", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    metrics = out / "metrics.jsonl"  # kept whole, unlike checkpoints (only the last two survive)
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        assert time.time() < deadline and proc.poll() is None, "training never reached step 2"
        time.sleep(0.02)
    assert proc.poll() is None, "finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6, 7, 8]
    assert json.loads((out / "train.json").read_text())["steps"] == 8
    assert (out / "adapter" / "adapter_model.safetensors").exists() and (out / "curves.png").exists()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00007", "step_00008"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard")).Reload()
    assert {s.step for s in events.Scalars("grpo/reward")} == set(range(1, 9))


def test_bad_config_is_refused_with_field_names():
    with pytest.raises(ValueError, match="group_size"):
        GRPOConfig(group_size=1)
    with pytest.raises(ValueError, match="hint_fraction"):
        GRPOConfig(hint_fraction=2)
    with pytest.raises(ValueError, match="temperature"):
        GRPOConfig(temperature=0)  # greedy rollouts would make every group degenerate
    with pytest.raises(ValueError, match="dtype"):
        GRPOConfig(dtype="bf16")
