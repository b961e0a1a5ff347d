import random

import pytest
from conftest import assistant, call

from trace_agents.envs.base import resolve_env
from trace_agents.envs.bfcl import split_of
from trace_agents.synthesis.target_drills import TargetArgumentGroundingEnv, TargetFunctionSelectionEnv
from trace_agents.synthesis.variants import _donors, contrast_words, fresh_values, siblings

DRILLS = (TargetFunctionSelectionEnv, TargetArgumentGroundingEnv)


def _fresh(text, params, enums=(), seed=0):
    return fresh_values(text, params, set(enums), "multiple", "multiple_none", random.Random(seed))


def test_fresh_values_swap_stated_numbers_in_request_and_answer_alike():
    text = "Calculate the area of a triangle with base 4 and height 11."
    for seed in range(20):
        new, params = _fresh(text, {"base": [4], "height": [11], "unit": ["", "square meters"]}, seed=seed)
        base, height = params["base"][0], params["height"][0]
        assert isinstance(base, int) and base != 4 and height != 11
        assert new == f"Calculate the area of a triangle with base {base} and height {height}."
        assert params["unit"] == ["", "square meters"]  # not stated: left as it was


def test_fresh_values_keep_years_decimals_and_optional_markers():
    new, params = _fresh("Sales in 2019 grew by 0.25 points.", {"year": [2019, ""], "growth": [0.25]})
    year, growth = params["year"], params["growth"][0]
    assert year[1] == "" and 2004 <= year[0] <= 2034 and year[0] != 2019
    assert round(growth, 2) == growth != 0.25
    assert new == f"Sales in {year[0]} grew by {growth:.2f} points."


def test_fresh_values_leave_what_cannot_be_swapped_cleanly():
    same = {"a": [5], "b": [5]}  # stated twice: which 5 is which?
    assert _fresh("Add 5 and 5.", same) == ("Add 5 and 5.", same)
    inside = {"n": [15]}  # only inside a longer number
    assert _fresh("Pay 1,150 or 2.15 now.", inside)[0] == "Pay 1,150 or 2.15 now."
    shared = {"year": [2020], "label": ["FY2020"]}  # another param's value mentions it
    assert _fresh("Revenue in the year 2020.", shared)[1] == shared
    assert _fresh("Use mode 3.", {"mode": [3]}, enums={"mode"})[1] == {"mode": [3]}


def test_fresh_strings_come_from_same_named_params_of_other_train_tasks():
    donors = _donors("multiple")
    split = split_of("multiple")
    assert donors and all(split[i] == "train" for found in donors.values() for i, _, _ in found)
    text = "Find a dentist in Springfield please."
    new, params = _fresh(text, {"location": ["Springfield", ""]})
    used = [d for d in donors["location"] if new == text.replace("Springfield", d[1])]
    assert params["location"] in [[*variants, ""] for _, _, variants in used]


def test_siblings_swap_a_request_word_for_its_contrast_and_skip_the_rest():
    f = {"name": "sports.most_points_single_game", "description": "Most points in a single Game.", "parameters": {}}
    contrasts = {"game": ("career", "season")}
    found = siblings(f, "Who scored most points in a single game?", contrasts, set())
    assert [s["name"] for s in found] == ["sports.most_points_single_career", "sports.most_points_single_season"]
    assert found[1]["description"] == "Most points in a single Season." and f["name"].endswith("game")
    assert [s["name"] for s in siblings(f, "Most points in a game or a season?", contrasts, set())] == [
        "sports.most_points_single_career"]  # the request says season: that sibling would be right too
    assert siblings(f, "Who scored most points?", contrasts, set()) == []  # no name word in the request
    assert len(siblings(f, "a single game", contrasts, {"sports.most_points_single_season"})) == 1
    mined = contrast_words("multiple")
    assert "triangle" in mined.get("circle", ()) and all(k not in v for k, v in mined.items())


@pytest.mark.parametrize("drill", DRILLS)
def test_fresh_drills_are_new_tasks_the_reference_solves_and_the_old_answer_fails(drill):
    fresh, plain = drill(1.0, fresh=True), drill(1.0)
    changed = 0
    for seed in range(60):
        request, old = fresh.reset(seed)[-1].content, plain.reset(seed)[-1].content
        if request != old:
            changed += 1
            fresh.step(assistant(call(*plain.reference()[0])))
            assert not fresh.verdict().success, (request, old)
        fresh.reset(seed)
        fresh.step(assistant(call(*fresh.reference()[0])))
        assert fresh.verdict().success, (seed, request, fresh.answer)
    assert changed >= 30


def test_fresh_function_selection_offers_siblings_that_fail():
    env, plain = TargetFunctionSelectionEnv(0.0, fresh=True), TargetFunctionSelectionEnv(0.0)
    with_sibling = 0
    for seed in range(150):
        env.reset(seed)
        plain.reset(seed)
        extra = [f["name"] for f in env.functions if f["name"] not in {g["name"] for g in plain.functions}]
        assert len(extra) <= 1
        for name in extra:
            with_sibling += 1
            (_, args), = env.reference()
            env.reset(seed)
            env.step(assistant(call(name, args)))
            assert env.verdict().details["failure"]
    assert with_sibling >= 10


def test_fresh_is_pinned_by_synthesis_and_refused_without_target_drills(tmp_path):
    from trace_agents.pipeline import SynthesisCfg
    from trace_agents.synthesis.pipeline import Drills, families_for, write_builtin
    from trace_agents.types import DataError

    family = families_for("bfcl/multiple", Drills("target", fresh=True))["argument_value_grounding"]
    assert family[1] == {"category": "multiple", "fresh": True}
    assert resolve_env(str(write_builtin("argument_value_grounding", tmp_path, 0.0, family)))().fresh
    with pytest.raises(DataError, match="fresh applies"):
        families_for("bfcl/multiple", Drills("catalog", fresh=True))
    with pytest.raises(ValueError, match="source: target"):
        SynthesisCfg(fresh=True)
    assert SynthesisCfg(fresh=True, source="target").fresh
