import json
import random
from statistics import mean

import pytest
from conftest import assistant, call

from trace_agents.envs.base import resolve_env
from trace_agents.envs.bfcl import load_category, split_of
from trace_agents.synthesis.target_drills import (TargetArgumentGroundingEnv, TargetFunctionSelectionEnv, TargetParallelCallsEnv, _ask_all,
                                                  _same_job)

DRILLS = (TargetFunctionSelectionEnv, TargetArgumentGroundingEnv)


def _task_of(env) -> str:
    return env.entry["id"]


@pytest.mark.parametrize("drill", DRILLS)
def test_tasks_come_from_the_train_split_only(drill):
    env = drill(1.0)
    split = split_of("multiple")
    seen = set()
    for seed in [*range(300), *env.seeds("test")[:100]]:
        env.reset(seed)
        seen.add(_task_of(env))
    assert seen and all(split[i] == "train" for i in seen)
    test_functions = {f["name"] for i, s in split.items() if s == "test" for f in load_category("multiple")[0][i]["function"]}
    train_functions = {f["name"] for f in env.pool}
    # the pool is the train split's functions; names shared with test tasks are BFCL's own repeats
    assert train_functions - test_functions


@pytest.mark.parametrize("drill", DRILLS)
def test_borrowed_tasks_add_train_material_but_nothing_of_the_target_test_split(drill):
    # BFCL builds `multiple` from simple requests: some simple_python train requests ARE multiple test requests
    multiple, simple = load_category("multiple")[0], load_category("simple_python")[0]
    test = [multiple[i] for i, s in split_of("multiple").items() if s == "test"]
    test_requests = {e["question"][0][-1]["content"] for e in test}
    test_functions = {f["name"] for e in test for f in e["function"]}
    simple_train = [i for i, s in split_of("simple_python").items() if s == "train"]
    assert any(simple[i]["question"][0][-1]["content"] in test_requests for i in simple_train)

    env, own = drill(0.5, fresh=True, extra=("simple_python",)), drill(0.5)
    borrowed = [i for i in env.ids if i.startswith("simple_python_")]
    assert set(own.ids) < set(env.ids) and 100 < len(borrowed) < len(simple_train)
    seen = set()
    for seed in range(400):
        env.reset(seed)
        seen.add(_task_of(env))
        env.step(assistant(call(*env.reference()[0])))
        assert env.verdict().success
    assert seen & set(borrowed) and seen & set(own.ids)
    for i in borrowed:
        assert split_of("simple_python")[i] == "train"
        assert simple[i]["question"][0][-1]["content"] not in test_requests
        assert not {f["name"] for f in simple[i]["function"]} & test_functions
    with pytest.raises(ValueError, match="borrow from"):
        drill(extra=("multi_turn_base",))
    with pytest.raises(ValueError, match="adds no clean train task"):
        drill(extra=("parallel",))  # its train tasks all want several calls


@pytest.mark.parametrize("drill", DRILLS)
def test_live_tasks_are_borrowed_only_when_small_and_answerable(drill):
    # live_multiple's ids are not numbered ("live_multiple_5-3-0"), a third of its tasks offer 5-37 functions,
    # and a few answers cannot pass BFCL's own checker (a param the schema lacks, no accepted value)
    env = drill(0.5, fresh=True, extra=("live_simple", "live_multiple"))
    live = load_category("live_multiple")[0]
    borrowed = [i for i in env.ids if i.startswith("live_multiple_")]
    assert 100 < len(borrowed) < sum(s == "train" for s in split_of("live_multiple").values()) / 2
    assert all(len(live[i]["function"]) <= 4 for i in borrowed)
    assert "live_multiple_964-207-0" not in env.ids and "live_simple_112-68-0" not in env.ids  # unanswerable
    seen = set()
    for seed in range(300):
        env.reset(seed)
        seen.add(_task_of(env).rsplit("_", 1)[0])
        env.step(assistant(call(*env.reference()[0])))
        assert env.verdict().success, _task_of(env)
    assert seen == {"multiple", "live_simple", "live_multiple"}
    with pytest.raises(ValueError, match="borrow from"):
        drill(extra=("live_irrelevance",))


def test_same_seed_same_request_at_any_difficulty_and_more_distractors_when_harder():
    easy, hard = TargetFunctionSelectionEnv(0.0), TargetFunctionSelectionEnv(1.0)
    for seed in range(20):
        assert easy.reset(seed) == hard.reset(seed)
        assert easy.answer == hard.answer
    offered = {d: mean(len(e.reset(s)) and len(e.functions) for s in range(100)) for d, e in ((0, easy), (1, hard))}
    assert offered[1] >= offered[0] + 2


def test_offered_functions_keep_the_task_own_and_add_no_duplicate_or_same_job():
    env = TargetFunctionSelectionEnv(1.0)
    entries = load_category("multiple")[0]
    for seed in range(100):
        env.reset(seed)
        names = [f["name"] for f in env.functions]
        own = {f["name"] for f in entries[_task_of(env)]["function"]}
        assert len(names) == len(set(names)) and own <= set(names) and env.answer_name in names
        answer = next(f for f in env.functions if f["name"] == env.answer_name)
        assert not any(_same_job(f, answer) for f in env.functions if f["name"] not in own)
        assert [t["function"]["name"] for t in env.tools] == names


def test_same_job_catches_bfcl_renamed_repeats():
    f = {"name": "compound_interest", "description": "Calculate compound interest for an initial principal amount."}
    assert _same_job(f, {"name": "calc_Compound_Interest", "description": "Compute compound interest."})
    assert not _same_job(f, {"name": "weather.get_by_city_date", "description": "Retrieves the historical weather."})


def test_argument_drill_offers_only_the_answer_and_favours_more_arguments_when_harder():
    easy, hard = TargetArgumentGroundingEnv(0.0), TargetArgumentGroundingEnv(1.0)
    for seed in range(30):
        hard.reset(seed)
        assert [f["name"] for f in hard.functions] == [hard.answer_name]
    n_args = {d: mean(len(e.reset(s)) and len(e.reference()[0][1]) for s in range(200)) for d, e in ((0, easy), (1, hard))}
    assert n_args[1] > n_args[0] + 0.5
    assert "declared type" in hard.hint()


def test_argument_hint_names_every_param_the_answer_needs_optional_ones_too():
    env, optional_named = TargetArgumentGroundingEnv(0.5), 0
    for seed in range(200):
        env.reset(seed)
        (_, accepted), = env.answer[0].items()
        required = set(env._answer_function()["parameters"].get("required", []))
        needed = [k for k, v in accepted.items() if "" not in v]
        named = env.hint().partition("gives a value for ")[2].partition(":")[0].split(", ")
        assert named == (needed or [""])
        optional_named += bool(set(needed) - required)
    assert optional_named >= 10  # the point of the hint: values the schema lets a policy leave out


@pytest.mark.parametrize("drill", DRILLS)
def test_like_target_offers_the_targets_counts_padding_with_unlike_functions(drill):
    counts = {len(e["function"]) for i, e in load_category("multiple")[0].items() if split_of("multiple")[i] == "train"}
    plain, env = drill(0.0, fresh=True), drill(0.0, fresh=True, like_target=True)
    sizes, last = [], 0
    for seed in range(200):
        plain.reset(seed)
        before = {f["name"] for f in plain.functions}
        env.reset(seed)
        names = [f["name"] for f in env.functions]
        assert before <= set(names) and len(names) == len(set(names))  # the drill's own offer is kept, padded only
        assert len(names) >= min(counts) and (len(names) in counts or set(names) == before)
        added = [f for f in env.functions if f["name"] not in before]
        assert not any(_same_job(f, env._answer_function()) for f in added)
        (name, args), = env.reference()
        env.step(assistant(call(name, args)))
        assert env.verdict().success
        sizes.append(len(names))
        last += names[-1] == env.answer_name
    assert len(set(sizes)) > 1 and 0.15 < last / 200 < 0.6  # no answer position to learn
    if drill is TargetArgumentGroundingEnv:
        assert all(len(plain.reset(s) and plain.functions) == 1 for s in range(20))


@pytest.mark.parametrize("drill", DRILLS)
def test_reference_succeeds_and_a_wrong_call_fails(drill):
    env = drill(1.0)
    seed = 7
    env.reset(seed)
    (name, args), = env.reference()
    env.step(assistant(call(name, args)))
    v = env.verdict()
    assert v.success and v.reward == 1.0

    env.reset(seed)
    key = next(iter(args))
    env.step(assistant(call(name, {**args, key: "definitely wrong value"})))
    assert not env.verdict().success
    if drill is TargetFunctionSelectionEnv:
        env.reset(seed)
        other = next(f["name"] for f in env.functions if f["name"] != name)
        env.step(assistant(call(other, args)))
        assert not env.verdict().success
    env.reset(seed)
    env.step(assistant())
    assert env.verdict().details["failure"] == "no_tool_call"


def test_hint_names_look_alikes_including_the_answer():
    env = TargetFunctionSelectionEnv(1.0)
    env.reset(3)
    assert env.answer_name in env.hint() and env.task_id == "function_selection_3"


def test_resolves_by_name_and_rejects_bad_input():
    env = resolve_env("target/function_selection", difficulty=0.25)()
    assert isinstance(env, TargetFunctionSelectionEnv) and env.difficulty == 0.25
    assert isinstance(resolve_env("target/argument_value_grounding")(), TargetArgumentGroundingEnv)
    with pytest.raises(ValueError, match="between 0 and 1"):
        TargetFunctionSelectionEnv(2)
    with pytest.raises(ValueError, match="single-turn"):
        TargetFunctionSelectionEnv(category="multi_turn_base")


def test_synthesis_source_target_writes_a_valid_module_for_the_target_category(tmp_path):
    from trace_agents.synthesis.pipeline import Drills, synthesize_all
    from trace_agents.types import DataError

    caps = tmp_path / "capabilities.json"
    caps.write_text(json.dumps({"capabilities": [{"name": "function_selection", "selected": True},
                                                 {"name": "request_detail_coverage", "selected": True}]}))
    summary = synthesize_all(caps, "bfcl/simple_python", tmp_path / "envs", difficulty=0.4, drills=Drills("target"))
    envs = summary["environments"]
    assert envs["function_selection"]["valid"] and envs["request_detail_coverage"]["valid"]
    assert envs["function_selection"]["source"] == "target" and envs["request_detail_coverage"]["source"] == "builtin"
    env = resolve_env(envs["function_selection"]["module"])()
    assert isinstance(env, TargetFunctionSelectionEnv) and env.category == "simple_python" and env.difficulty == 0.4
    assert "target_drills" not in open(envs["request_detail_coverage"]["module"]).read()
    with pytest.raises(DataError, match="single-turn"):
        synthesize_all(caps, "bfcl/multi_turn_base", tmp_path / "mt", drills=Drills("target"))
    with pytest.raises(DataError, match="catalog, target"):
        synthesize_all(caps, "bfcl/multiple", tmp_path / "x", drills=Drills("web"))


def test_reference_passes_bfcl_checker_on_every_train_task():
    # dict params nest accepted values per key; a wrong unwrap would teach gates a failing reference
    env, solved = TargetFunctionSelectionEnv(0.0), {}
    for seed in range(3000):
        env.reset(seed)
        if env.entry["id"] not in solved:
            env.step(assistant(call(*env.reference()[0])))
            solved[env.entry["id"]] = env.verdict().success
    assert len(solved) == len(env.ids) and all(solved.values())


def test_partial_credit_grades_failed_replies_by_closeness_and_never_pays_like_success():
    from trace_agents.envs.bfcl import closeness

    env = TargetArgumentGroundingEnv(0.0, partial_credit=0.5)
    env.reset(0)  # generate_sound_wave(frequency=440, duration=5, wave_type='sine'|'')
    (name, args), = env.reference()

    def reward(*calls):
        env.reset(0)
        env.step(assistant(*calls))
        return env.verdict()

    right = reward(call(name, args))
    assert right.success and right.reward == 1.0
    graded = [reward(), reward(call("other_fn", args)), reward(call(name, {**args, "frequency": 1})),
              reward(call(name, {**args, "frequency": "440 Hz", "duration": 2}))]
    assert [v.success for v in graded] == [False] * 4
    # no call < wrong function < one value wrong; two values wrong sits between
    assert graded[0].reward == 0 < graded[1].reward < graded[3].reward < graded[2].reward < 0.5
    assert graded[2].details["closeness"] == pytest.approx(2 / 3 + 2 / 3 / 3)
    # a surplus call halves it; an optional param left out and case/punctuation differences are accepted
    assert reward(call(name, args), call(name, args, 1)).reward == pytest.approx(0.25)
    assert closeness([(name, {"frequency": 440, "duration": 5})], env.answer) == 1.0
    nested = [{"f": {"grades": [{"math": [90], "art": ["", 1]}], "city": ["New York"]}}]
    assert closeness([("f", {"grades": {"math": 90}, "city": "new-york"})], nested) == 1.0
    assert closeness([("f", {"grades": {"math": 90, "gym": 3}, "city": "NY"})], nested) == pytest.approx(2 / 3)
    plain = TargetArgumentGroundingEnv(0.0)
    plain.reset(0)
    plain.step(assistant(call("other_fn", args)))
    assert plain.verdict().reward == 0.0 and "closeness" not in plain.verdict().details


def test_partial_credit_rejects_bad_values_and_catalog_sources(tmp_path):
    from trace_agents.envs.bfcl import BfclEnv
    from trace_agents.pipeline import SynthesisCfg
    from trace_agents.synthesis.pipeline import Drills, families_for, write_builtin
    from trace_agents.types import DataError

    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        TargetFunctionSelectionEnv(0.0, partial_credit=1.0)
    with pytest.raises(ValueError, match="multi-turn"):
        BfclEnv("multi_turn_base", partial_credit=0.3)
    assert families_for("bfcl/multiple", Drills("target", 0.5))["function_selection"][1] == {"category": "multiple", "partial_credit": 0.5}
    assert families_for("bfcl/multiple", Drills("target"))["function_selection"][1] == {"category": "multiple"}
    module = write_builtin("function_selection", tmp_path, 0.0, families_for("bfcl/multiple", Drills("target", 0.5))["function_selection"])
    assert resolve_env(str(module))().partial_credit == 0.5  # the synthesized module pins it
    with pytest.raises(DataError, match="source 'target'"):
        families_for("bfcl/multiple", Drills("catalog", 0.5))
    with pytest.raises(DataError, match=r"\[0, 1\)"):
        families_for("bfcl/multiple", Drills("target", -0.1))
    with pytest.raises(ValueError, match="source: target"):
        SynthesisCfg(partial_credit=0.5)
    assert SynthesisCfg(partial_credit=0.5, source="target").partial_credit == 0.5
    pinned = families_for("bfcl/multiple", Drills("target", extra=("simple_python",)))["argument_value_grounding"][1]
    module = write_builtin("argument_value_grounding", tmp_path, 0.0, (TargetArgumentGroundingEnv, pinned))
    assert resolve_env(str(module))().extra == ("simple_python",)
    with pytest.raises(DataError, match="not single-turn BFCL categories"):
        families_for("bfcl/multiple", Drills("target", extra=("web",)))
    with pytest.raises(ValueError, match="source: target"):
        SynthesisCfg(extra_categories=["simple_python"])
    # `capability=category` borrows for one drill only; plain entries reach every drill
    each = families_for("bfcl/multiple", Drills("target", extra=("simple_python", "function_selection=live_multiple")))
    assert each["function_selection"][1]["extra"] == ("simple_python", "live_multiple")
    assert each["argument_value_grounding"][1]["extra"] == ("simple_python",)
    only = families_for("bfcl/multiple", Drills("target", extra=("function_selection=live_multiple",)))
    assert "extra" not in only["argument_value_grounding"][1]
    with pytest.raises(ValueError, match="function_selection=CATEGORY"):
        SynthesisCfg(source="target", extra_categories=["selection=live_multiple"])
    with pytest.raises(ValueError, match="live_simple, live_multiple"):
        SynthesisCfg(source="target", extra_categories=["function_selection=web"])
    assert SynthesisCfg(offer_like_target=True).offer_like_target  # the catalog families pad too
    with pytest.raises(DataError, match="like_target needs a single-turn"):
        families_for("bfcl/multi_turn_base", Drills(like_target=True))
    catalog = families_for("bfcl/multiple", Drills(like_target=True))
    assert catalog["argument_schema_adherence"][1] == {"category": "multiple", "like_target": True}
    assert catalog["error_recovery"][1] == {}  # multi-turn families keep their offers
    module = write_builtin("argument_schema_adherence", tmp_path, 0.0, catalog["argument_schema_adherence"])
    env = resolve_env(str(module))()
    env.reset(0)
    assert env.like_target and len(env.functions) > 1  # the written module pins the padding
    pinned = families_for("bfcl/multiple", Drills("target", like_target=True))["function_selection"][1]
    module = write_builtin("function_selection", tmp_path, 0.0, (TargetFunctionSelectionEnv, pinned))
    assert resolve_env(str(module))().like_target
    assert "offer_like_target" not in str(SynthesisCfg(source="target"))  # older run folders keep their fingerprints
    cfg = SynthesisCfg(source="target", partial_credit=0.25, fresh=True, extra_categories=["simple_python"], offer_like_target=True)
    assert cfg.drills() == Drills("target", 0.25, True, ("simple_python",), True)  # every option reaches the families


def _reply(calls):
    return assistant(*(call(n, a, i) for i, (n, a) in enumerate(calls)))


def test_parallel_drill_asks_k_variants_of_one_train_task_and_wants_every_call():
    split = split_of("multiple")
    for difficulty, counts in ((0.0, {2}), (1.0, {3, 4})):
        env = TargetParallelCallsEnv(difficulty)
        for seed in range(40):
            request = env.reset(seed)[-1].content
            calls = env.reference()
            assert len(calls) in counts and split[env.entry["id"]] == "train"
            assert len({n for n, _ in calls}) == 1 and len({json.dumps(a, sort_keys=True) for _, a in calls}) == len(calls)
            assert "\n" not in request and len(env.functions) == 1  # one message in running text, as the target
            assert all(_states(request, v) for c in env.answer for k, v in next(iter(c.values())).items()
                       if len({json.dumps(a.get(k)) for _, a in calls}) > 1)  # every call's own values are asked for
            env.step(_reply(reversed(calls)))  # any order
            assert env.verdict().success, env.task_id
            env.reset(seed)
            env.step(_reply(calls[:-1]))  # one call short: BFCL's wrong count
            assert env.verdict().details["failure"].endswith("wrong_count")
            env.reset(seed)
            env.step(_reply([calls[0]] * len(calls)))  # the first request's values every time
            assert not env.verdict().success
    assert str(len(calls)) in env.hint() and env.answer_name in env.hint()


def _states(request: str, options: list) -> bool:
    """Does the request state one of a param's accepted values?"""
    return any((f"{o:g}" if isinstance(o, float) else str(o)).lower() in request.lower()
               for o in options if isinstance(o, (int, float, str)) and o != "")


def test_several_requests_are_asked_in_running_text_as_bfcl_parallel_does():
    rng = random.Random(0)
    asks = {_ask_all(["What is the HEX value of navy?", "What is the HEX value of dark red?"], rng) for _ in range(40)}
    assert "What is the HEX value of navy and dark red?" in asks  # the one stretch they differ in, listed
    assert "What is the HEX value of navy? Do the same for dark red." in asks
    assert "What is the HEX value of navy? Also, what is the HEX value of dark red?" in asks
    assert "Find cafes in Paris, Rome and Oslo." in {_ask_all(["Find cafes in Paris.", "Find cafes in Rome.", "Find cafes in Oslo."],
                                                              random.Random(i)) for i in range(10)}
    several = ["Please convert 3 km and 4 m.", "Please convert 5 km and 6 m."]  # two stretches differ: never listed as one
    assert all(a.startswith("Please convert 3 km and 4 m. ") for a in (_ask_all(several, random.Random(i)) for i in range(20)))
    assert _ask_all(["John likes 3 apples.", "John likes 4 pears and figs."], random.Random(0)).count("John") == 2  # a name keeps its capital


def test_grounding_drill_asks_several_calls_on_a_parallel_target():
    env = TargetArgumentGroundingEnv(0.5, category="parallel", extra=("simple_python",), fresh=False)
    single = TargetArgumentGroundingEnv(0.5, category="multiple", fresh=True)
    for seed in range(10):
        env.reset(seed)
        calls = env.reference()
        assert 2 <= len(calls) <= 3 and len(env.functions) == 1 and env.checker_category == "parallel"
        env.step(_reply(calls[1:]))
        assert env.verdict().details["failure"].endswith("wrong_count")
        env.reset(seed)
        env.step(_reply(calls))
        assert env.verdict().success and f"{len(calls)} calls" in env.hint()
        single.reset(seed)
        assert len(single.reference()) == 1 and "calls" not in single.hint()  # other targets keep one call


def test_parallel_drill_on_the_parallel_target_borrows_single_call_tasks_and_validates(tmp_path):
    from trace_agents.synthesis.pipeline import Drills, synthesize_all

    with pytest.raises(ValueError, match="no train task with a single reference call"):
        TargetParallelCallsEnv(category="parallel")  # BFCL parallel's answers all hold several calls
    caps = tmp_path / "capabilities.json"
    caps.write_text(json.dumps({"capabilities": [{"name": "parallel_call_completeness", "selected": True}]}))
    summary = synthesize_all(caps, "bfcl/parallel", tmp_path / "envs", difficulty=0.0,
                             drills=Drills("target", extra=("parallel_call_completeness=simple_python",)))
    entry = summary["environments"]["parallel_call_completeness"]
    assert entry["valid"] and entry["source"] == "target"
    env = resolve_env(entry["module"])()
    assert isinstance(env, TargetParallelCallsEnv) and env.category == "parallel" and env.extra == ("simple_python",)
    assert all(i.startswith("simple_python_") for i in env.ids)
