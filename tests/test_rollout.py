from conftest import call

from trace_agents.agent.policy import Reply, Request, Sampling, TransformersPolicy
from trace_agents.agent.rollout import rollout
from trace_agents.envs.base import Step, resolve_env
from trace_agents.types import Message, Verdict


class CountEnv:
    """Toy env: the task is to call `inc` exactly `seed` times, then answer in text."""

    name = "toy/count"

    def seeds(self, split):
        return [1, 2, 3]

    def reset(self, seed):
        self.task_id, self.target, self.count = f"count_{seed}", seed, 0
        self.tools = [{"type": "function", "function": {"name": "inc", "parameters": {"type": "object"}}}]
        return [Message(role="user", content=f"call inc {seed} times")]

    def step(self, message):
        if not message.tool_calls:
            return Step(done=True)
        self.count += len(message.tool_calls)
        return Step(messages=[Message(role="tool", tool_call_id=c.id, content=str(self.count)) for c in message.tool_calls])

    def verdict(self):
        ok = self.count == self.target
        return Verdict(reward=float(ok), success=ok, details={"failure": None if ok else "wrong_count"})


class IncPolicy:
    """Calls `inc` until the last tool result says `stop_at`, then answers; one reply is garbage."""

    name = "scripted"

    def __init__(self, stop_at=2):
        self.stop_at, self.batches, self.seeds = stop_at, [], []

    def act(self, requests, sampling):
        self.batches.append(len(requests))
        self.seeds.append(sampling.seed)
        out = []
        for r in requests:
            last = r.messages[-1]
            if last.role == "tool" and int(last.content) >= self.stop_at:
                out.append(Reply(Message(role="assistant", content="done"), "done"))
            elif last.role == "user" and "3 times" in last.content:
                out.append(Reply(Message(role="assistant", content="<tool_call>{oops"), "<tool_call>{oops", error="call 0: bad"))
            else:
                c = call("inc", {}, 0)
                out.append(Reply(Message(role="assistant", content="", tool_calls=[c]), "..."))
        return out


def test_batched_loop_groups_samples_and_scores():
    policy = IncPolicy(stop_at=2)
    trajs = rollout(CountEnv, policy, [1, 2, 3], samples=2, max_steps=5, sampling=Sampling(seed=7))
    assert [t.seed for t in trajs] == [1, 1, 2, 2, 3, 3]
    assert [t.info["sample"] for t in trajs] == [0, 1] * 3
    assert policy.batches[0] == 6 and policy.batches == sorted(policy.batches, reverse=True)
    assert policy.seeds == list(range(7, 7 + len(policy.batches)))  # a new sampling seed each turn
    by_seed = {t.seed: t for t in trajs}
    assert by_seed[2].success and by_seed[2].tool_calls == 2 and by_seed[2].info["steps"] == 3
    assert not by_seed[1].success and by_seed[1].info["failure"] == "wrong_count"
    assert by_seed[3].info["format_errors"] == [{"step": 0, "error": "call 0: bad", "truncated": False,
                                                  "text": "<tool_call>{oops"}]
    roles = [m.role for m in by_seed[2].messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]


def test_step_limit_ends_episode():
    trajs = rollout(CountEnv, IncPolicy(stop_at=99), [2], max_steps=3)
    assert trajs[0].info["hit_step_limit"] and trajs[0].info["steps"] == 3 and not trajs[0].success


def test_tiny_random_model_end_to_end_on_bfcl(tiny):
    model, tok = tiny
    policy = TransformersPolicy(model, tok, name="tiny-random", batch_size=4)
    env = resolve_env("bfcl/simple_python")
    seeds = env().seeds("train")[:3]
    trajs = rollout(env, policy, seeds, samples=2, max_steps=1, sampling=Sampling(max_new_tokens=6, temperature=1.0))
    assert len(trajs) == 6 and all(t.messages[-1].role == "assistant" for t in trajs)
    assert all(t.info["steps"] == 1 and t.info["new_tokens"] <= 6 for t in trajs)
    assert all(t.tools and t.task_id.startswith("simple_python_") for t in trajs)
    # a random model writes no valid call: every episode is a recorded failure, not a crash
    assert not any(t.success for t in trajs)


def test_tiny_random_model_multi_turn(tiny):
    model, tok = tiny
    policy = TransformersPolicy(model, tok, batch_size=2)
    env = resolve_env("bfcl/multi_turn_base")
    trajs = rollout(env, policy, env().seeds("train")[:1], max_steps=3, sampling=Sampling(max_new_tokens=4))
    t = trajs[0]
    assert t.info["steps"] <= 3 and "turns" in t.info and not t.success


def test_greedy_batching_matches_one_at_a_time(tiny):
    model, tok = tiny
    env = resolve_env("bfcl/multiple")
    seeds = env().seeds("train")[:3]
    s = Sampling(max_new_tokens=5)
    batched = rollout(env, TransformersPolicy(model, tok, batch_size=3), seeds, max_steps=1, sampling=s)
    single = rollout(env, TransformersPolicy(model, tok, batch_size=1), seeds, max_steps=1, sampling=s)
    assert [t.messages[-1].content for t in batched] == [t.messages[-1].content for t in single]


def _shared_and_separate(tiny, monkeypatch, env, seeds, samples: int, max_steps: int, sampling: Sampling):
    """The same rollouts sampled with shared prefill and without, and the number of rows of each
    shared prefill call."""
    model, tok = tiny
    shared = TransformersPolicy(model, tok, batch_size=len(seeds) * samples)
    prefills = []
    real = shared._prefill
    monkeypatch.setattr(shared, "_prefill", lambda ids, mask, rows: prefills.append(len(ids)) or real(ids, mask, rows))
    runs = [rollout(env, policy, seeds, samples=samples, max_steps=max_steps, sampling=sampling, keep_tokens=True)
            for policy in (shared, TransformersPolicy(model, tok, batch_size=len(seeds) * samples, share_prompts=False))]
    return runs[0], runs[1], prefills


def test_shared_prefill_of_a_group_samples_what_separate_prefills_do(tiny, monkeypatch):
    env = resolve_env("bfcl/multiple")
    a, b, prefills = _shared_and_separate(tiny, monkeypatch, env, env().seeds("train")[:2], samples=3, max_steps=1,
                                          sampling=Sampling(max_new_tokens=8, temperature=1.0, seed=3))
    assert prefills == [2]  # 6 rollouts, 2 distinct prompts
    assert [t.info["completion_ids"] for t in a] == [t.info["completion_ids"] for t in b]
    assert len({str(t.info["completion_ids"]) for t in a}) > 2  # sampled: the copies did not all say the same


def test_shared_prefill_cache_gives_each_row_its_own_prompts_logits(tiny):
    import torch

    from trace_agents.agent.policy import cache_keyword

    model, tok = tiny
    env = resolve_env("bfcl/multiple")
    policy = TransformersPolicy(model, tok)
    texts = []
    for seed in env().seeds("train")[:2]:  # prompts of different lengths: the shorter is left-padded
        e = env()
        texts.append(policy.render(Request(e.reset(seed), e.tools)))
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    rows, positions = torch.tensor([1, 0, 0]), (mask.cumsum(-1) - 1).clamp(min=0)  # as generate numbers them
    with torch.no_grad():
        cache = policy._prefill(ids[:, :-1], mask[:, :-1], rows)
        last = model(input_ids=ids[rows, -1:], attention_mask=mask[rows], position_ids=positions[rows, -1:],
                     **{cache_keyword(): cache}).logits[:, -1]
        full = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[rows, -1]
    assert torch.allclose(last, full, atol=1e-4)
    assert not torch.allclose(full[0], full[1], atol=1e-3)  # the two prompts are told apart


def test_later_turns_share_the_opening_prefill_and_sample_what_separate_prefills_do(tiny, monkeypatch):
    env = resolve_env("bfcl/multi_turn_base")  # further user turns come whatever the model says
    a, b, opened = _shared_and_separate(tiny, monkeypatch, env, env().seeds("train")[:1], samples=4, max_steps=2,
                                        sampling=Sampling(max_new_tokens=6, temperature=1.0, seed=5))
    assert [len(t.info["completion_ids"]) for t in a] == [2] * 4
    assert len({str(t.info["completion_ids"][0]) for t in a}) > 1  # the second prompts differ ...
    assert opened == [1, 1]  # ... and still one opening was prefilled per turn
    assert [t.info["completion_ids"] for t in a] == [t.info["completion_ids"] for t in b]


def test_shared_opening_layout_gives_each_row_its_own_prompts_logits(tiny):
    import torch

    from trace_agents.agent.policy import cache_keyword
    from trace_agents.types import Message

    model, tok = tiny
    env = resolve_env("bfcl/simple_python")
    e = env()
    opening = e.reset(e.seeds("train")[0])
    requests = [Request(opening, e.tools),  # a first turn, and two later turns of different lengths
                Request(opening + [Message(role="assistant", content="no"), Message(role="user", content="why not?")], e.tools),
                Request(opening + [Message(role="assistant", content="a longer answer here")], e.tools)]
    policy = TransformersPolicy(model, tok)
    texts = [policy.render(r) for r in requests]
    with torch.no_grad():
        enc = policy._encode_shared(texts, requests, "cpu")
        ids, mask = enc["input_ids"], enc["attention_mask"]
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        last = model(input_ids=ids[:, -1:], attention_mask=mask, position_ids=positions[:, -1:],
                     **{cache_keyword(): enc[cache_keyword()]}).logits[:, -1]
        for row, text in enumerate(texts):  # each prompt alone, unpadded
            alone = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
            assert torch.equal(ids[row][mask[row].bool()], alone[0])
            assert torch.allclose(last[row], model(input_ids=alone).logits[0, -1], atol=1e-4)
