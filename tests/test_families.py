"""Built-in single-turn capability families: seeded tasks, algorithmic verdicts, difficulty, no leak."""

import json
from statistics import mean

import pytest
from conftest import assistant, call

from trace_agents.envs.base import Env
from trace_agents.envs.bfcl import offer_counts
from trace_agents.synthesis.families import FAMILIES, NoRedundantCallsEnv, ParallelCallsEnv, make_family
from trace_agents.synthesis.matching import call_key, repeated_calls, same, type_ok
from trace_agents.types import FunctionCall, Message, ToolCall

CAPS = sorted(FAMILIES)


def replay(env, calls) -> Message:
    return assistant(*(call(n, a, i) for i, (n, a) in enumerate(calls)))


def run(env, seed, calls):
    env.reset(seed)
    env.step(replay(env, calls))
    return env.verdict()


def perturb(value):
    """A value of the same type that the checker must not accept."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, str):
        return value + " extra"
    if isinstance(value, list):
        return value + value[:1] if value else ["x"]
    return {**value, next(iter(value)): perturb(next(iter(value.values())))}


def test_registry_and_names():
    from trace_agents.analysis.probes import PROBES

    assert set(FAMILIES) <= set(PROBES)
    assert {"function_selection", "argument_value_grounding", "argument_schema_adherence", "request_detail_coverage",
            "parallel_call_completeness", "tool_call_format", "no_redundant_calls"} == set(FAMILIES)
    for cap, cls in FAMILIES.items():
        env = make_family(cap, 0.3)
        assert isinstance(env, cls) and isinstance(env, Env)
        assert cls.capability == cap and env.name == f"synthetic/{cap}" and cls.__doc__ and "BFCL" in cls.__doc__
    with pytest.raises(ValueError, match="known: .*function_selection"):
        make_family("precondition_verification")
    for bad in (-0.1, 1.5, "hard", True):
        with pytest.raises(ValueError, match="difficulty"):
            make_family("function_selection", bad)


@pytest.mark.parametrize("cap", CAPS)
def test_same_seed_same_task_and_seeds_vary(cap):
    a, b = make_family(cap), make_family(cap)
    for seed in (0, 7, 99_999, 1_000_500):
        assert a.reset(seed) == b.reset(seed)
        assert a.tools == b.tools and a.reference() == b.reference() and a.hint() == b.hint()
        assert a.task_id == f"{cap}_{seed}"
    requests = {a.reset(s)[0].content for s in range(50)}
    assert len(requests) >= 45


@pytest.mark.parametrize("cap", CAPS)
def test_splits_are_disjoint(cap):
    env = make_family(cap)
    train, test = env.seeds("train"), env.seeds("test")
    assert len(train) == 100_000 and len(test) == 1_000 and not set(train) & set(test)
    with pytest.raises(ValueError, match="split"):
        env.seeds("dev")


@pytest.mark.parametrize("cap", CAPS)
def test_like_target_pads_offers_to_the_targets_counts_with_unrelated_functions(cap):
    counts = set(offer_counts("multiple"))
    plain, env = make_family(cap, 0.25), FAMILIES[cap](0.25, category="multiple", like_target=True)
    answer_last = 0
    for seed in range(100):
        plain.reset(seed)
        env.reset(seed)
        assert env.task.calls == plain.task.calls and env.task.request == plain.task.request  # no other draw moved
        names = [f["name"] for f in env.functions]
        before = {f["name"] for f in plain.functions}
        assert before <= set(names) and len(names) == len(set(names))
        assert len(names) in counts or (len(before) > max(counts) and set(names) == before)
        taken = {f.domain for f in plain.task.functions}
        assert all(f.domain not in taken for f in env.task.functions if f.name not in before)
        assert run(env, seed, env.reference()).success
        answer_last += names[-1] == env.task.calls[0][0]
    assert 0.15 < answer_last / 100 < 0.6  # no position to learn
    with pytest.raises(ValueError, match="single-turn BFCL category"):
        FAMILIES[cap](like_target=True)


@pytest.mark.parametrize("difficulty", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("cap", CAPS)
def test_reference_gets_full_credit(cap, difficulty):
    env = make_family(cap, difficulty)
    for seed in range(60):
        env.reset(seed)
        ref = env.reference()
        assert ref and env.hint()
        offered = {t["function"]["name"]: t["function"] for t in env.tools}
        for name, args in ref:  # references obey the offered schema
            params = offered[name]["parameters"]
            assert set(params["required"]) <= set(args) <= set(params["properties"])
        reply = replay(env, reversed(ref))  # order-free
        assert env.step(reply).done
        v = env.verdict()
        assert (v.reward, v.success, v.details["failure"]) == (1.0, True, None), (seed, v.details)
        json.dumps(v.details)  # details go into trajectory info


@pytest.mark.parametrize("cap", CAPS)
def test_no_call_scores_zero(cap):
    env = make_family(cap)
    env.reset(3)
    env.step(assistant(content="I cannot help with that."))
    v = env.verdict()
    assert (v.reward, v.success, v.details["failure"]) == (0.0, False, "no_tool_call")
    env.reset(4)  # no step at all: also no call
    assert env.verdict().details["failure"] == "no_tool_call"


@pytest.mark.parametrize("cap", CAPS)
def test_one_wrong_value_is_not_success(cap):
    env = make_family(cap)
    for seed in range(20):
        env.reset(seed)
        (name, args), *rest = env.reference()
        key = next(iter(args))
        v = run(env, seed, [(name, {**args, key: perturb(args[key])}), *rest])
        assert not v.success and v.reward < 1
        assert v.details["failure"] == "wrong_value" and v.details["failure_params"] == [key]


@pytest.mark.parametrize("cap", CAPS)
def test_other_failure_kinds(cap):
    env = make_family(cap)
    env.reset(5)
    ref = env.reference()
    (name, args), rest = ref[0], ref[1:]
    offered = [t["function"]["name"] for t in env.tools]

    v = run(env, 5, [*ref, ref[0]])  # a redundant extra call
    repeat = "redundant_call" if cap == "no_redundant_calls" else "extra_call"
    assert not v.success and v.details["failure"] == repeat and 0 < v.reward < 1

    v = run(env, 5, [(name, {**args, "invented_param": 1}), *rest])
    assert v.details["failure"] == "extra_param" and v.details["failure_params"] == ["invented_param"]

    v = run(env, 5, [(name, {k: x for k, x in list(args.items())[1:]}), *rest])
    assert v.details["failure"] == "missing_param" and v.details["failure_params"] == [next(iter(args))]

    v = run(env, 5, [("no_such_function", args), *rest])
    assert v.details["failure"] == "wrong_function" and not v.success
    assert "no_such_function" not in offered

    bad = ToolCall(id="x", function=FunctionCall(name=name, arguments='{"a": "unterminated'))
    env.reset(5)
    env.step(assistant(bad))
    v = env.verdict()
    assert v.details["failure"] == "bad_arguments" and v.reward == 0


def test_types_are_checked_like_bfcl():
    assert type_ok(5, {"type": "float"}) and not type_ok(5.0, {"type": "integer"})
    assert not type_ok("5", {"type": "integer"}) and not type_ok(True, {"type": "integer"})
    assert not type_ok([1, "2"], {"type": "array", "items": {"type": "integer"}})
    assert same(" Paris ", "paris") and same(5.0, 5) and not same("5", 5) and not same(1, True)
    assert same({"a": [1, 2.0]}, {"a": [1, 2]}) and not same([2, 1], [1, 2])
    env = make_family("argument_schema_adherence")
    for seed in range(200):
        env.reset(seed)
        (name, args), = env.reference()
        key = next((k for k, x in args.items() if type(x) is int), None)
        if key:
            v = run(env, seed, [(name, {**args, key: str(args[key])})])
            assert v.details["failure"] == "wrong_type" and v.details["failure_params"] == [key]
            v = run(env, seed, [(name, {**args, key: float(args[key])})])
            assert v.details["failure"] == "wrong_type"
            return
    raise AssertionError("no integer parameter in 200 tasks")


def test_unrequested_optional_at_default_is_tolerated():
    env = make_family("argument_value_grounding", 0.0)
    for seed in range(300):
        env.reset(seed)
        (name, args), = env.reference()
        props = env.functions[0]["parameters"]["properties"]
        unused = [p for p, s in props.items() if p not in args and "default" in s]
        if unused:
            assert run(env, seed, [(name, {**args, unused[0]: props[unused[0]]["default"]})]).success
            return
    raise AssertionError("no task with an unmentioned optional param that has a default")


@pytest.mark.parametrize("cap", CAPS)
def test_partial_credit_on_several_calls(cap):
    env = make_family(cap, 1.0)
    sizes = [(env.reset(s), len(env.reference()))[1] for s in range(100)]
    if cap not in ("parallel_call_completeness", "tool_call_format", "no_redundant_calls"):
        assert set(sizes) == {1}  # the other families isolate one call
        return
    seed = next(s for s, n in enumerate(sizes) if n >= 3)
    env.reset(seed)
    ref = env.reference()
    v = run(env, seed, ref[1:2])
    assert not v.success and v.reward == pytest.approx(1 / len(ref))
    assert v.details["failure"] == "missing_call" and v.details["matched"] == 1


def test_parallel_one_of_three():
    env = ParallelCallsEnv(0.5)
    seed = next(s for s in range(300) if (env.reset(s), len(env.reference()) == 3)[1])
    ref = env.reference()
    assert run(env, seed, ref[2:]).reward == pytest.approx(1 / 3)
    assert run(env, seed, ref[:2]).reward == pytest.approx(2 / 3)
    v = run(env, seed, [ref[0], ref[0], ref[0]])  # same count, two repeats: they match nothing
    assert v.reward == pytest.approx(1 / 3) and v.details["failure"] in ("wrong_value", "wrong_function")
    v = run(env, seed, [*ref, ref[0]])  # everything plus one repeat: half a call's credit off
    assert v.reward == pytest.approx((3 - 0.5) / 3) and v.details["failure"] == "extra_call"


def test_format_family_rewards_well_formed_calls():
    env = make_family("tool_call_format", 1.0)
    for seed in range(100):
        env.reset(seed)
        (name, args), *rest = env.reference()
        key = next((k for k, x in args.items() if isinstance(x, str)), None)
        if key and not rest:
            v = run(env, seed, [(name, {**args, key: perturb(args[key])})])  # well-formed, wrong value
            assert v.reward == pytest.approx(0.5) and not v.success
            return
    raise AssertionError("no single-call task with a string value")


def test_redundant_family_fails_a_repeated_call():
    env = NoRedundantCallsEnv(0.5)
    for seed in range(40):
        ref = (env.reset(seed), env.reference())[1]
        assert run(env, seed, ref).success
        name, args = ref[-1]
        v = run(env, seed, [*ref, (name, args)])  # everything, one call twice
        assert not v.success and v.reward == pytest.approx(1 - 0.5 / len(ref))
        assert v.details["failure"] == "redundant_call" and v.details["repeated_calls"] == [name]
        if len(ref) > 1:  # the repeat instead of another item: half the credit is gone, still a repeat
            v = run(env, seed, [ref[0], ref[0], *ref[2:]])
            assert v.details["failure"] == "redundant_call" and v.reward == pytest.approx(1 - 1 / len(ref))
    assert repeated_calls([("f", {"a": 1, "b": 2}), ("f", {"b": 2, "a": 1}), ("f", None), ("f", None)]) == ["f"]


@pytest.mark.parametrize("difficulty", [0.0, 1.0])
def test_restated_requests_keep_one_call_each(difficulty):
    env = NoRedundantCallsEnv(difficulty)
    several = 0
    for seed in range(200):
        request = env.reset(seed)[0].content
        keys = [call_key(n, a) for n, a in env.reference()]
        assert len(set(keys)) == len(keys), (seed, env.reference())  # the reference never repeats a call
        assert "once" in env.hint() and f"{len(keys)} call(s)" in env.hint()
        several += len(keys) > 1
        lures = sum(request.count(t.split("{c}")[0]) for t in (*env._CLEAR, *env._PLAIN))
        assert lures >= (len(keys) if difficulty == 1 else 1), request  # at 1 every call is restated
    assert (several > 100) == (difficulty == 1.0)


def hard_strings(env) -> int:
    return sum(1 for _, a in env.reference() for x in json.dumps(a, ensure_ascii=False)
               if not x.isascii() or x == "\\") + sum(json.dumps(a).count('\\"') for _, a in env.reference())


MEASURES = {
    "function_selection": lambda env: len(env.tools),
    "argument_value_grounding": lambda env: sum(  # values not written verbatim in the request
        str(x) not in env.task.request for _, a in env.reference() for x in a.values() if not isinstance(x, str)),
    "argument_schema_adherence": lambda env: len(env.reference()[0][1]),
    "request_detail_coverage": lambda env: len(env.reference()[0][1]),
    "parallel_call_completeness": lambda env: len(env.reference()),
    "tool_call_format": hard_strings,
    "no_redundant_calls": lambda env: len(env.task.request),  # more and longer restatements
}


@pytest.mark.parametrize("cap", CAPS)
def test_difficulty_moves_the_task_distribution(cap):
    def average(difficulty):
        env = make_family(cap, difficulty)
        values = []
        for seed in range(200):
            env.reset(seed)
            values.append(MEASURES[cap](env))
        return mean(values)

    easy, hard = average(0.0), average(1.0)
    assert hard > easy * 1.2, (easy, hard)


def test_selection_distractors_get_closer_with_difficulty():
    def same_domain_share(difficulty):
        env = make_family("function_selection", difficulty)
        shares = []
        for seed in range(200):
            env.reset(seed)
            target = env.reference()[0][0]
            domain = {f.name: f.domain for f in env.task.functions}
            others = [n for n in domain if n != target]
            shares.append(mean(domain[n] == domain[target] for n in others))
        return mean(shares)

    assert same_domain_share(1.0) > same_domain_share(0.0) + 0.3


@pytest.mark.parametrize("cap", CAPS)
def test_builtin_wrapper_module_validates(cap, tmp_path):
    from trace_agents.synthesis.pipeline import write_builtin
    from trace_agents.synthesis.validate import validate_module

    report = validate_module(write_builtin(cap, tmp_path, 0.7), seeds=3, timeout=60)
    assert report.ok, report.text()


@pytest.fixture(scope="module")
def bfcl_texts():
    from trace_agents.envs.bfcl import CATEGORIES, _class_docs, load_category

    names, questions = set(), set()
    for category in CATEGORIES:
        for entry in load_category(category)[0].values():
            names |= {f["name"] for f in entry.get("function", [])}
            names |= {f["name"] for c in entry.get("involved_classes", []) for f in _class_docs(c)}
            questions |= {m["content"].strip() for turn in entry["question"] for m in turn if m.get("content")}
    return names, questions


@pytest.mark.parametrize("cap", CAPS)
def test_no_bfcl_task_leaks_in(cap, bfcl_texts):
    names, questions = bfcl_texts
    assert len(names) > 100 and len(questions) > 100
    ours, requests = set(), set()
    for difficulty in (0.0, 1.0):
        env = make_family(cap, difficulty)
        for seed in [*range(300), *env.seeds("test")[:100]]:
            requests.add(env.reset(seed)[0].content.strip())
            ours |= {t["function"]["name"] for t in env.tools}
    assert not ours & names
    assert not requests & questions
