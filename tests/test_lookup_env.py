"""The lookup_then_act environment: ids come only from tool results, only actions are scored."""

import json

import pytest
from conftest import assistant, call

from trace_agents.envs.base import Env
from trace_agents.synthesis import builtin_families
from trace_agents.synthesis.lookup import LookupThenActEnv, generate_task


def play(env: LookupThenActEnv, replies) -> list[str]:
    """Send each reply (a list of (name, args)); return the tool results' texts."""
    out = []
    for calls in replies:
        step = env.step(assistant(*[call(n, a, i) for i, (n, a) in enumerate(calls)]))
        out += [m.content for m in step.messages]
    return out


def test_registered_and_protocol():
    env = builtin_families()["lookup_then_act"]()
    assert isinstance(env, Env) and env.name == "synthetic/lookup_then_act"
    assert not set(env.seeds("train")) & set(env.seeds("test"))
    with pytest.raises(ValueError, match="difficulty"):
        LookupThenActEnv(difficulty=1.5)


@pytest.mark.parametrize("difficulty", [0.0, 0.5, 1.0])
def test_reference_one_call_per_step_succeeds_and_ids_come_from_results(difficulty):
    for seed in range(30):
        env = LookupThenActEnv(difficulty)
        env.reset(seed)
        (ref,) = env.reference()
        lookups, actions = ref[0::2], ref[1::2]
        results = play(env, [[c] for c in lookups])
        for (name, args), text in zip(actions, results):
            assert json.loads(text)[next(iter(args))] == next(iter(args.values()))  # the id the action needs
        play(env, [[c] for c in actions])
        assert env.step(assistant()).done
        v = env.verdict()
        assert v.success and v.reward == 1.0, (seed, v.details)


def test_repeated_lookups_are_free_but_a_wrong_or_extra_action_fails():
    env = LookupThenActEnv(0.0)
    env.reset(7)
    (lookup, action), = [env.reference()[0]]
    play(env, [[lookup], [lookup, lookup], [action]])
    assert env.verdict().success  # 3 extra lookups: still right

    env.reset(7)
    wrong = (action[0], {**action[1], next(iter(action[1])): "C-0"})
    assert play(env, [[wrong]]) == ["Error: unknown id."]
    assert not env.verdict().success and env.verdict().details["failure"] == "wrong_value"

    env.reset(7)
    play(env, [[action], [action]])
    assert not env.verdict().success and env.verdict().details["failure"] == "extra_call"


def test_unknown_names_functions_and_step_limit():
    env = LookupThenActEnv(0.0, max_steps=3)
    env.reset(3)
    lookup = env.reference()[0][0]
    assert play(env, [[(lookup[0], {next(iter(lookup[1])): "Nobody Here"})]])[0].startswith("Error: no record")
    assert play(env, [[("delete_everything", {})]]) == ["Error: function 'delete_everything' is not available."]
    action = env.reference()[0][1][0]
    assert play(env, [[(action, {"x": ["a", "list"], "y": {"an": "object"}})]]) == ["Error: unknown id."]
    assert env.done and env.step(assistant(call(*lookup))).done  # step limit reached
    assert env.verdict().details["failure"] == "missing_param"  # the one action lacked the id


def test_deterministic_and_difficulty_adds_operations():
    a, b = LookupThenActEnv(0.5), LookupThenActEnv(0.5)
    assert [a.reset(11)[0].content, a.reference()] == [b.reset(11)[0].content, b.reference()]
    ops = lambda d: sum(len(e.reference()[0]) // 2 for e in [LookupThenActEnv(d)] for s in range(40) if e.reset(s))  # noqa: E731
    assert ops(0.0) == 40 and ops(1.0) > 80


def test_known_ids_state_the_id_make_the_lookup_unneeded_and_leave_old_tasks_alone():
    plain, stated = LookupThenActEnv(0.5), LookupThenActEnv(0.5, known_ids=1.0)
    for seed in range(20):
        request = stated.reset(seed)[0].content
        assert plain.reset(seed)[0].content != request  # the ids are stated ...
        actions = plain.reference()[0][1::2]
        assert stated.reference() == [actions]  # ... so the reference skips every lookup
        for _, args in actions:
            assert next(iter(args.values())) in request
        play(stated, [actions])
        assert stated.verdict().success, (seed, stated.verdict().details)
    # known_ids=0 keeps the tasks of earlier versions (this request was drawn before known_ids existed)
    assert generate_task(3, 0.5).request == ("Get the 4-day forecast for Lisbon and then rename the 'safety guide' "
                                             "document to 'safety guide v9'.")
    share = sum(sum(e.task.known) for e in [LookupThenActEnv(1.0, known_ids=0.5)] for s in range(60) if e.reset(s))
    assert 0.3 < share / sum(len(generate_task(s, 1.0).actions) for s in range(60)) < 0.7
    with pytest.raises(ValueError, match="known_ids"):
        LookupThenActEnv(known_ids=2)


def test_rejected_actions_free_lets_a_retry_after_a_rejected_guess_succeed():
    strict, free = LookupThenActEnv(0.0), LookupThenActEnv(0.0, rejected_actions="free")
    for env in (strict, free):
        env.reset(5)
        lookup, action = env.reference()[0]
        guessed = (action[0], {**action[1], next(iter(action[1])): "no-such-id"})
        assert play(env, [[guessed], [lookup], [action]])[0] == "Error: unknown id."
    assert strict.verdict().details["failure"] == "extra_call"  # the rejected guess is judged ...
    assert free.verdict().success and free.verdict().details["actions"] == [{"name": action[0], "arguments": action[1]}]
    # ... a wrong action the env accepted is still judged under "free"
    free.reset(5)
    play(free, [[lookup], [(action[0], {**action[1], **{k: "?" for k in list(action[1])[1:]}})], [action]])
    assert not free.verdict().success
    with pytest.raises(ValueError, match="rejected_actions"):
        LookupThenActEnv(rejected_actions="ignore")
