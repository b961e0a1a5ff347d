"""The composed model (stage 4): exactness against PEFT and the base, top-1 routing, generate with a
KV cache, gate training that touches only the routers, save/load, and adapter validation."""

import copy
import functools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from trace_agents.compose import (
    AdapterError,
    ComposeConfig,
    LoraExperts,
    compose,
    load_composed,
    routing_stats,
    save_composed,
    train_gates,
)
from trace_agents.models import tiny_random
from trace_agents.types import Message, Trajectory

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# (name, rank, targets): different ranks exercise zero-padding, "attn" the union of target sets.
ADAPTERS = [("alpha", 4, TARGETS), ("beta", 4, TARGETS), ("gamma", 8, TARGETS), ("attn", 2, ["q_proj", "v_proj"])]
PROMPTS = ["List the files in my home folder.", "Hi", "Book a flight from Oslo to Rome on the 16th of May, please."]


@functools.lru_cache(maxsize=1)
def _pristine():
    return tiny_random(0)[0].eval()


def base_model():
    """A fresh copy of load_model("tiny-random")'s weights (copying is faster than rebuilding)."""
    return copy.deepcopy(_pristine())


def save_lora(folder, rank, targets, seed, hidden=None):
    from peft import LoraConfig, get_peft_model

    from trace_agents.training.grpo import randomize_lora_b

    model = base_model()
    if hidden is not None:  # a different base: same layer names, other shapes
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=model.config.vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
        model = LlamaForCausalLM(cfg)
    torch.manual_seed(seed)
    peft = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets))
    randomize_lora_b(peft, 0.2)
    peft.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return {name: save_lora(root / name, r, t, seed=i) for i, (name, r, t) in enumerate(ADAPTERS)}


@pytest.fixture(scope="module")
def tok():
    return tiny_random(0)[1]


@pytest.fixture(scope="module")
def batch(tok):
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True) for p in PROMPTS]
    return tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)  # left padding


def composed(adapters, seed=None, **config):
    model = compose(base_model(), adapters, base_model_name="tiny-random", config=ComposeConfig(**config))
    if seed is not None:  # decisive random gates, so tokens spread over all slots
        torch.manual_seed(seed)
        for router in model.routers.values():
            nn.init.normal_(router.proj.weight, std=1.0)
    return model.eval()


def logits(model, batch):
    with torch.no_grad():
        return model(**batch).logits


@pytest.mark.parametrize("expert", [name for name, *_ in ADAPTERS])
def test_forced_expert_reproduces_its_adapter(adapters, batch, expert):
    from peft import PeftModel

    reference = logits(PeftModel.from_pretrained(base_model(), str(adapters[expert])).eval(), batch)
    model = composed(adapters, seed=0)
    model.force_expert(expert)
    got = logits(model, batch)
    assert torch.allclose(got, reference, atol=1e-5, rtol=0)
    assert not torch.allclose(got, logits(base_model(), batch), atol=1e-3)  # the adapter matters


def test_none_slot_and_untrained_gates_are_the_base_exactly(adapters, batch):
    reference = logits(base_model(), batch)
    model = composed(adapters)  # zero-initialised routers: ties -> slot 0
    assert torch.equal(logits(model, batch), reference)
    assert all(bool((ids == 0).all()) for ids in model.routing().values())
    model = composed(adapters, seed=0)
    model.force_expert("none")
    assert torch.equal(logits(model, batch), reference)


@pytest.mark.parametrize("router,kernel", [("block", "index"), ("block", "gather"), ("global", "auto")])
def test_routing_applies_exactly_one_expert_per_token(adapters, batch, router, kernel):
    model = composed(adapters, seed=1, router=router, kernel=kernel)
    target = model.base_model.model.layers[1].mlp.down_proj
    assert isinstance(target, LoraExperts)
    seen = {}
    handle = target.register_forward_hook(lambda m, args, out: seen.update(x=args[0], y=out))
    logits(model, batch)
    handle.remove()
    routing = model.routing()
    assert set(routing) == ({"0", "1"} if router == "block" else {"global"})
    ids = routing["1" if router == "block" else "global"]
    assert ids.shape == batch["input_ids"].shape and ids.dtype == torch.long
    assert len(torch.unique(ids)) >= 3  # random gates use several experts
    x, y = seen["x"], seen["y"]
    with torch.no_grad():  # base + the delta of the one chosen slot, token by token
        expected = torch.stack([
            torch.stack([target.base(x[b, t]) + (target.delta(x[b, t], int(e)) if e else 0) for t, e in enumerate(row)])
            for b, row in enumerate(ids)])
    assert torch.allclose(y, expected, atol=1e-5, rtol=0)


def test_kernels_agree(adapters, batch):
    out = {}
    for kernel in ("index", "gather"):
        out[kernel] = logits(composed(adapters, seed=2, kernel=kernel), batch)
    assert torch.allclose(out["index"], out["gather"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("forced", ["gamma", None])
def test_generate_with_kv_cache_batched_left_padding(adapters, batch, tok, forced):
    check_cached_generation(composed(adapters, seed=3), batch, tok, forced)


def test_causal_mean_routing_is_the_same_with_and_without_the_kv_cache(adapters, batch, tok):
    """The running mean carries across decode steps exactly as a full forward computes it, and a
    new generate starts afresh (the second call below would differ if the sums leaked)."""
    model = composed(adapters, seed=3, decide="causal_mean")
    check_cached_generation(model, batch, tok, None)
    check_cached_generation(model, batch, tok, None)
    per_token = composed(adapters, seed=3)
    with torch.no_grad():
        model(**batch), per_token(**batch)
    switches = lambda m: int((m.routing()["1"][:, 1:] != m.routing()["1"][:, :-1]).sum())  # noqa: E731
    assert switches(model) < switches(per_token)  # the mean settles; per-token choices flip


def check_cached_generation(model, batch, tok, forced):
    model.force_expert(forced)
    gen = dict(max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
    with torch.no_grad():
        out = model.generate(**batch, **gen)
        assert torch.equal(out, model.generate(**batch, use_cache=False, **gen))
        start = batch["input_ids"].shape[1]
        attn = torch.cat([batch["attention_mask"], torch.ones_like(out[:, start:])], dim=1)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)  # what generate uses under left padding
        for t in range(start, out.shape[1]):  # every generated token = argmax of a full no-cache forward
            full = model(input_ids=out[:, :t], attention_mask=attn[:, :t], position_ids=pos[:, :t], use_cache=False)
            assert torch.equal(full.logits[:, -1].argmax(-1), out[:, t])


def test_policy_drop_in(adapters, tok):
    from trace_agents.agent.policy import Request, Sampling, TransformersPolicy

    policy = TransformersPolicy(composed(adapters, seed=4), tok, batch_size=2)
    replies = policy.act([Request([Message(role="user", content=p)]) for p in PROMPTS], Sampling(max_new_tokens=4))
    assert [r.new_tokens for r in replies] == [4, 4, 4]


def test_train_mode_gives_gates_gradient_without_changing_outputs(adapters, batch):
    model = composed(adapters, seed=5)
    reference = logits(model, batch)
    model.train()
    out = model(**batch).logits
    assert torch.allclose(out, reference, atol=1e-6)  # straight-through: same value as inference
    (out.float().pow(2).mean() + 0.01 * model.aux_loss()).backward()
    for router in model.routers.values():
        assert router.proj.weight.grad is not None and router.proj.weight.grad.abs().sum() > 0
    assert all(p.grad is None for n, p in model.named_parameters() if not n.startswith("routers."))


def synthetic(n_per_class, names, seed=0):
    """Trajectories whose words come from disjoint vocabularies, one per expert: separable labels."""
    import random

    vocab = {"none": "red green blue yellow purple orange black white",
             "alpha": "one two three four five six seven eight nine",
             "beta": "cat dog horse sheep goat mouse bird fish",
             "gamma": "Paris Rome Oslo Berlin Madrid Vienna Prague Lisbon",
             "attn": "run jump swim climb throw catch kick push"}
    rng = random.Random(seed)
    out = []
    for i in range(n_per_class):
        for name in names:
            words = vocab[name].split()
            say = lambda k: " ".join(rng.choice(words) for _ in range(k))  # noqa: E731
            traj = Trajectory(id=f"{name}-{i}", env=name, task_id=str(i), seed=i, reward=0.0, success=False, tool_calls=0,
                              messages=[Message(role="user", content=say(30)), Message(role="assistant", content=say(30))])
            out.append((traj, name))
    return out


def test_gate_training_changes_only_router_weights(adapters, tok):
    model = composed(adapters, seed=6)
    assert all(not p.requires_grad for n, p in model.named_parameters() if not n.startswith("routers."))
    assert all(p.requires_grad for p in model.routers.parameters())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    metrics = train_gates(model, tok, synthetic(2, ["none", "alpha", "beta"]), steps=3, rounds=2, lr=1e-2, batch=4)
    assert metrics["steps"] == 3 and len(metrics["history"]) == 6  # steps per round, 2 rounds
    after = model.state_dict()
    assert before.keys() == after.keys()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("routers.") for k in changed)
    assert not model.training


def test_gate_training_learns_separable_labels(adapters, tok):
    names = ["none", *[n for n, *_ in ADAPTERS]]
    model = composed(adapters)
    train, held_out = synthetic(6, names, seed=0), synthetic(2, names, seed=1)
    trajs, labels = [t for t, _ in held_out], [n for _, n in held_out]
    before = routing_stats(model, tok, trajs, labels)
    metrics = train_gates(model, tok, train, steps=100, lr=3e-2, batch=10)
    after = routing_stats(model, tok, trajs, labels)
    chance = 1 / len(names)
    assert before["accuracy"] <= chance + 0.05  # untrained: everything on "none"
    assert after["accuracy"] > 0.55 and metrics["accuracy"] > 0.55, (before, after)
    assert after["reply_accuracy"] > 0.55 and metrics["tokens"] > 0
    assert set(after["share"]) == set(names) and abs(sum(after["share"].values()) - 1) < 1e-4
    assert set(after["share_per_router"]) == {"0", "1"}
    assert after["switches_per_trajectory"] > 0  # template tokens vs content tokens


def _next_token_logp(model, ids, slot):
    """log p(token t+1) at each position t of one unpadded sequence with every token on `slot`."""
    model.force_expert(slot)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    model.force_expert(None)
    return logits.log_softmax(-1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)


def test_likelihood_labels_pick_the_expert_that_writes_each_reply_token(adapters, tok):
    from trace_agents.compose.gates import GateTrainConfig, _likelihood_labels, encode

    model = composed(adapters, seed=3)
    names = ["alpha", "beta", "gamma", "none"]
    rows = [(*encode(tok, t, 256), model.expert_names.index(n), None) for t, n in synthetic(1, names, seed=4)]
    # batched with padding (rows differ in length) vs one unpadded sequence at a time
    labelled = _likelihood_labels(model, rows, GateTrainConfig(batch=3, margin=0.05), tok.pad_token_id)
    moved = 0
    for (ids, reply, _, _), (_, _, best, labels) in zip(rows, labelled):
        logp = torch.stack([_next_token_logp(model, ids, e) for e in range(len(model.expert_names))], -1)
        predicts = torch.tensor(reply[1:])
        assert best == int(logp[predicts].sum(0).argmax()) and len(labels) == len(ids)
        for t, label in enumerate(labels[:-1]):
            gain = logp[t].max() - logp[t, best]
            if predicts[t] and gain > 0.05 + 1e-4:
                assert label == int(logp[t].argmax()), (t, logp[t])
                moved += label != best
            elif not predicts[t] or gain < 0.05 - 1e-4:
                assert label == best
        assert labels[-1] == best
    assert moved > 0  # random adapters disagree somewhere: some reply tokens leave the reply's expert
    never = _likelihood_labels(model, rows, GateTrainConfig(batch=3, margin=1e9), tok.pad_token_id)
    assert all(set(labels) == {best} for _, _, best, labels in never)
    assert model.forced_expert is None


def test_gate_training_on_likelihood_labels_reports_their_split(adapters, tok):
    model = composed(adapters, seed=5)
    metrics = train_gates(model, tok, synthetic(1, ["alpha", "beta"]), steps=3, rounds=2, batch=4, labels="likelihood")
    assert metrics["labels"] == "likelihood" and abs(sum(metrics["label_share"].values()) - 1) < 1e-4
    assert sum(v > 0 for v in metrics["label_share"].values()) >= 2
    with pytest.raises(ValueError, match="labels env\\|likelihood"):
        train_gates(model, tok, synthetic(1, ["alpha"]), labels="expert")


def test_encode_marks_exactly_the_assistant_reply(tok):
    from trace_agents.compose.gates import encode

    (traj, _), = synthetic(1, ["alpha"])
    ids, reply = encode(tok, traj, max_tokens=10_000)
    answer = tok.decode([t for t, r in zip(ids, reply) if r])
    assert traj.messages[1].content in answer and traj.messages[0].content not in answer
    assert len(answer) < len(traj.messages[1].content) + 40  # the reply and its end-of-turn marker, no prompt
    assert encode(tok, traj, max_tokens=7)[0] == ids[:7] and len(encode(tok, traj, max_tokens=7)[1]) == 7


def test_first_round_caches_features_of_each_label_expert_forced(adapters, tok):
    """Round 1 features are the states a correct routing produces: every trajectory runs with its
    own label's expert forced, even when a batch mixes labels."""
    import random

    from trace_agents.compose.gates import GateTrainConfig, _collect, _collate, _run_decoder, encode

    model = composed(adapters)
    pairs = synthetic(1, ["alpha", "beta"])
    data = [(*encode(tok, t, 64), model.expert_names.index(n), None) for t, n in pairs]  # None: env labels
    config = GateTrainConfig(batch=8, tokens_per_trajectory=10_000, max_tokens=64)
    cache = _collect(model, data, config, tok.pad_token_id, random.Random(0), forced=True)
    for i, (ids, _, slot, _) in enumerate(data):
        model.force_expert(slot)
        model.captured = {}
        with torch.no_grad():
            _run_decoder(model, *_collate([ids], tok.pad_token_id, "cpu"))
        want = model.captured["1"][0].half()  # block 1 reads block 0's output: differs by expert
        model.captured, _ = None, model.force_expert(None)
        rows = cache["label"] == slot
        assert torch.equal(cache["1"][rows], want)
    assert model.forced_expert is None and model.captured is None


@pytest.mark.parametrize("decide", ["token", "causal_mean"])
def test_routed_round_caches_the_features_whose_top1_is_the_routing(adapters, tok, decide):
    """A routed round caches, per token, features on which each router's top-1 is the slot the
    model routed that token to: with "causal_mean" the running means of the features, not the
    token's own (fitting those trained another decision than the one inference makes)."""
    import random

    from trace_agents.compose.gates import GateTrainConfig, _collect, _collate, _run_decoder, encode

    model = composed(adapters, seed=7, decide=decide)
    pairs = synthetic(1, ["alpha", "beta"])
    data = [(*encode(tok, t, 256), model.expert_names.index(n), None) for t, n in pairs]
    assert len({len(ids) for ids, *_ in data}) == 2  # two lengths: the batch below is padded
    cache = _collect(model, data, GateTrainConfig(batch=8, tokens_per_trajectory=10_000, max_tokens=256),
                     tok.pad_token_id, random.Random(0), forced=False)
    ids, attn = _collate([ids for ids, *_ in data], tok.pad_token_id, "cpu")
    with torch.no_grad():
        _run_decoder(model, ids, attn)
    real = attn.bool()
    for key, router in model.routers.items():
        routed = model.routing()[key][real]  # every token of both trajectories, in cache order
        agree = (router.score(cache[key]).argmax(-1) == routed).float().mean()
        assert agree > 0.97, (key, float(agree))  # fp16 caching may flip a near-tie
        assert len(set(routed.tolist())) > 1  # random gates: a real choice, not one constant slot


def test_save_load_round_trip(adapters, batch, tmp_path):
    model = composed(adapters, seed=7)
    reference = logits(model, batch)
    save_composed(model, tmp_path / "composed")
    meta = json.loads((tmp_path / "composed" / "composed.json").read_text())
    assert meta["version"] == 1 and meta["base_model"] == "tiny-random" and meta["router"] == "block"
    assert meta["experts"] == ["none", *adapters] and set(meta["adapters"]) == set(adapters)
    assert (tmp_path / "composed" / "gates.safetensors").exists()
    loaded, _ = load_composed(tmp_path / "composed", device="cpu")
    assert torch.equal(logits(loaded, batch), reference)
    assert torch.equal(loaded.routing()["1"], model.routing()["1"])

    # the folder is usable as --composed: rollouts through the batched policy
    from trace_agents.agent.policy import Sampling, make_policy
    from trace_agents.agent.rollout import rollout
    from trace_agents.envs.base import resolve_env
    from trace_agents.models import ModelError

    policy = make_policy("tiny-random", composed=str(tmp_path / "composed"), batch_size=2)
    env = resolve_env("bfcl/simple_python")
    trajs = rollout(env, policy, env().seeds("train")[:2], max_steps=1, sampling=Sampling(max_new_tokens=4))
    assert len(trajs) == 2 and all(t.info["new_tokens"] > 0 for t in trajs)
    with pytest.raises(ModelError, match="built on"):
        make_policy("smollm2-135m", composed=str(tmp_path / "composed"))


def test_mismatched_adapter_shapes_name_the_folder(adapters, tmp_path):
    wrong = save_lora(tmp_path / "wide", 4, TARGETS, seed=9, hidden=32)
    with pytest.raises(AdapterError, match="wide"):
        compose(base_model(), {"alpha": adapters["alpha"], "wide": wrong})


def test_adapters_of_different_bases_are_refused(adapters, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(adapters["beta"], other)
    cfg = json.loads((other / "adapter_config.json").read_text())
    (other / "adapter_config.json").write_text(json.dumps({**cfg, "base_model_name_or_path": "some/other-model"}))
    first = tmp_path / "first"
    shutil.copytree(adapters["alpha"], first)
    (first / "adapter_config.json").write_text(json.dumps({**cfg, "base_model_name_or_path": "tiny-random"}))
    with pytest.raises(AdapterError, match="other"):
        compose(base_model(), {"first": first, "other": other})
    with pytest.raises(AdapterError, match="reserved"):
        compose(base_model(), {"none": adapters["alpha"]})


def test_gate_grpo_trains_only_the_routers_and_resumes(adapters, tmp_path):
    from safetensors.torch import load_file
    from toy_envs import ShortEnv

    from trace_agents.compose.gate_grpo import train_gates_grpo
    from trace_agents.training.grpo import GRPOConfig

    start = composed(adapters, seed=3)
    save_composed(start, tmp_path / "start")
    for name in ("task_router.json", "task_router.safetensors", "compose_summary.json"):
        (tmp_path / "start" / name).write_text(name)
    frozen = {k: v.clone() for k, v in start.state_dict().items() if not k.startswith("routers.")}
    cfg = GRPOConfig(steps=1, groups_per_step=2, group_size=4, max_new_tokens=6, max_steps=1, lr=5e-2, kl_coef=0.1,
                     save_every=1)
    out = tmp_path / "gates"
    train_gates_grpo(ShortEnv, tmp_path / "start", out, cfg)
    after_one = load_file(out / "composed" / "gates.safetensors")
    # the command line resumes it at step 1 (same settings but the KL, which has no flag)
    cli = subprocess.run([sys.executable, "-m", "trace_agents.cli", "train", "--env", str(Path(__file__).with_name("toy_envs.py")),
                          "--model", "tiny-random", "--composed", str(tmp_path / "start"), "--out", str(out), "--steps", "2",
                          "--groups", "2", "--group-size", "4", "--max-new-tokens", "6", "--max-steps", "1", "--lr", "0.05",
                          "--save-every", "1"], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    for name in ("task_router.json", "task_router.safetensors", "compose_summary.json"):  # kept as they were
        assert (out / "composed" / name).read_text() == name
    trained, _ = load_composed(out / "composed", device="cpu")
    before = start.routers.state_dict()
    moved = [k for k, v in trained.routers.state_dict().items() if not torch.equal(v, before[k])]
    assert moved and any(not torch.equal(v, after_one[k]) for k, v in trained.routers.state_dict().items())
    for k, v in trained.state_dict().items():
        if not k.startswith("routers."):
            assert torch.equal(v, frozen[k]), k
