"""The synthetic warm-up generator: deterministic, varied, valid calls, grounded values."""

import ast
import json
import re
from collections import Counter
from pathlib import Path

import pytest

import trace_agents.warmup.data as data
from trace_agents.agent.format import parse_reply
from trace_agents.warmup.data import (
    CATALOG,
    KINDS,
    Example,
    make_example,
    make_examples,
    number_word,
    ordinal_suffix,
    ordinal_word,
)

SEEDS = range(600)


@pytest.fixture(scope="module")
def examples() -> list[Example]:
    return [make_example(s) for s in SEEDS]


def request(ex: Example) -> str:
    return ex.messages[0].content


def type_ok(value, schema: dict) -> bool:
    t = schema["type"]
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "string":
        return isinstance(value, str)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "array":
        return isinstance(value, list) and all(type_ok(v, schema["items"]) for v in value)
    if t == "dict":
        props = schema["properties"]
        return (isinstance(value, dict) and set(value) <= set(props)
                and all(k in value for k in schema.get("required", []))
                and all(type_ok(v, props[k]) for k, v in value.items()))
    raise AssertionError(f"unknown type {t}")


def strings_in(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings_in(v)


def number_forms(n) -> list[str]:
    forms = [str(n)]
    if isinstance(n, int) and 0 <= n <= 100:
        forms += [number_word(n)]
        if n > 0:
            forms += [ordinal_word(n), ordinal_suffix(n)]
    return forms


def test_number_words():
    assert [number_word(n) for n in (0, 5, 16, 42, 100)] == ["zero", "five", "sixteen", "forty-two", "one hundred"]
    assert [ordinal_word(n) for n in (1, 2, 5, 16, 20, 21, 40)] == [
        "first", "second", "fifth", "sixteenth", "twentieth", "twenty-first", "fortieth"]
    assert [ordinal_suffix(n) for n in (1, 2, 3, 11, 12, 13, 16, 22, 101)] == [
        "1st", "2nd", "3rd", "11th", "12th", "13th", "16th", "22nd", "101st"]


def test_never_imports_bfcl():
    tree = ast.parse(Path(data.__file__).read_text())
    modules = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    modules += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in modules if "bfcl" in m.lower()]


def test_catalog_is_wide_and_well_formed():
    assert len(CATALOG) >= 60
    assert len({f.name for f in CATALOG}) == len(CATALOG)
    assert len({f.domain for f in CATALOG}) >= 12
    assert any("." in f.name for f in CATALOG) and any("." not in f.name for f in CATALOG)
    types = {p.type for f in CATALOG for p in f.params}
    assert types == {"string", "integer", "float", "boolean", "array", "dict"}
    for f in CATALOG:
        required = {p.name for p in f.params if p.required}
        assert f.commands, f"{f.name} needs a command phrasing for multi-call requests"
        for ask in f.asks:
            assert not ask.startswith("{") and ask[0].islower(), (f.name, ask)
            assert set(re.findall(r"{(\w+)}", ask)) == required, (f.name, ask)
        if f.vary:
            assert f.vary in required
        assert all(p.description.strip() for p in f.params)


def test_same_seed_same_example():
    for seed in (0, 1, 17, 12345):
        assert make_example(seed) == make_example(seed)
        for kind in KINDS:
            assert make_example(seed, kind) == make_example(seed, kind)
    assert make_examples(40, 5) == [make_example(s) for s in range(40, 45)]


def test_seeds_give_varied_examples(examples):
    assert len({request(e) for e in examples[:100]}) >= 90
    used = {n for e in examples for n, _ in e.calls}
    assert len(used) >= 0.8 * len(CATALOG)


def test_kind_mix(examples):
    counts = Counter(
        "parallel" if len(e.calls) > 1 else "simple" if len(e.functions) == 1 else "multiple" for e in examples)
    assert 0.35 < counts["simple"] / len(examples) < 0.55
    assert 0.25 < counts["multiple"] / len(examples) < 0.45
    assert 0.12 < counts["parallel"] / len(examples) < 0.28


@pytest.mark.parametrize("kind", KINDS)
def test_kinds_have_the_right_shape(kind):
    for seed in range(150):
        ex = make_example(seed, kind)
        n_funcs, n_calls = len(ex.functions), len(ex.calls)
        if kind == "simple":
            assert (n_funcs, n_calls) == (1, 1)
        elif kind == "multiple":
            assert 2 <= n_funcs <= 4 and n_calls == 1
        else:
            assert 1 <= n_funcs <= 2 and 2 <= n_calls <= 4
            assert {n for n, _ in ex.calls} == {f["name"] for f in ex.functions}
        assert len({f["name"] for f in ex.functions}) == n_funcs


def test_multiple_offers_similar_distractors():
    similar = 0
    for seed in range(200):
        ex = make_example(seed, "multiple")
        target = ex.calls[0][0]
        others = [f["name"] for f in ex.functions if f["name"] != target]
        prefix = target.split(".")[0] if "." in target else "_".join(target.split("_")[:2])
        similar += any(o.startswith(prefix) for o in others)
    assert similar >= 100


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown kind"):
        make_example(0, "parallel_multiple")


def test_calls_match_the_offered_schemas(examples):
    for ex in examples:
        offered = {f["name"]: f for f in ex.functions}
        assert [t["function"]["name"] for t in ex.tools] == list(offered)
        for name, args in ex.calls:
            params = offered[name]["parameters"]
            assert params["type"] == "dict"
            assert set(params["required"]) <= set(args), (name, args)
            assert set(args) <= set(params["properties"]), (name, args)
            for key, value in args.items():
                schema = params["properties"][key]
                assert type_ok(value, schema), (name, key, value, schema)
                if "enum" in schema:
                    assert value in schema["enum"]


def test_reply_parses_back_to_the_calls(examples):
    for ex in examples:
        parsed = parse_reply(ex.reply)
        assert parsed.error is None and parsed.message.content == ""
        got = [(c.function.name, c.function.parsed_arguments()) for c in parsed.message.tool_calls]
        assert got == ex.calls
        # JSON round trip keeps numeric types (ints stay ints, floats stay floats)
        assert json.loads(json.dumps(ex.calls)) == [list(c) for c in ex.calls]


def test_values_are_grounded_in_the_request(examples):
    for ex in examples:
        text = request(ex)
        offered = {f["name"]: f["parameters"] for f in ex.functions}
        for name, args in ex.calls:
            for key, value in args.items():
                schema = offered[name]["properties"][key]
                if "enum" in schema or isinstance(value, bool):
                    continue  # worded: "in Fahrenheit" -> "fahrenheit", "with hourly details" -> true
                for s in strings_in(value):
                    assert s in text, (name, key, s, text)
                if key in offered[name]["required"] and isinstance(value, (int, float)):
                    assert any(form in text for form in number_forms(value)), (name, key, value, text)
                if isinstance(value, list) and value and isinstance(value[0], (int, float)):
                    assert all(str(v) in text for v in value), (name, key, value, text)


def test_value_variety(examples):
    """Optional params are mentioned about half the time; numbers sometimes appear as words."""
    optional_mentioned = optional_total = worded = integers = 0
    for ex in examples:
        text = request(ex)
        offered = {f["name"]: f["parameters"] for f in ex.functions}
        for name, args in ex.calls:
            params = offered[name]
            optional = set(params["properties"]) - set(params["required"])
            optional_total += len(optional)
            optional_mentioned += len(optional & set(args))
            for key in params["required"]:
                v = args[key]
                if params["properties"][key]["type"] == "integer" and 0 < v <= 100:
                    integers += 1
                    worded += str(v) not in text
    assert 0.35 < optional_mentioned / optional_total < 0.65
    assert 0.1 < worded / integers < 0.35
    all_text = " ".join(request(e) for e in examples)
    assert re.search(r"\d+(kg|g|oz|am|pm)\b", all_text)
    assert re.search(r"\b\w+, [A-Z]{2}\b", all_text)  # "Austin, TX"
    floats = [v for e in examples for _, a in e.calls for v in a.values() if isinstance(v, float)]
    assert len(floats) > 50


def test_no_function_name_is_shared_with_bfcl():
    """The warm-up must teach the format, not BFCL's functions: no name of any BFCL task of the four
    categories we use (train or test) may appear in the generator's catalog."""
    from trace_agents.envs.bfcl import CATEGORIES, _class_docs, load_category

    ours = {f["name"] for e in make_examples(0, 3000) for f in e.functions}
    theirs = set()
    for category in CATEGORIES:
        for entry in load_category(category)[0].values():
            theirs |= {f["name"] for f in entry.get("function", [])}
            theirs |= {f["name"] for c in entry.get("involved_classes", []) for f in _class_docs(c)}
    assert len(ours) > 100 and not ours & theirs
