"""Procedural variants of a BFCL train task, so a target drill's seeds are tasks nobody has seen
(stage 2, `fresh` target drills). Two edits, each checkable against BFCL's own possible answer:

- **Fresh values** (`fresh_values`): an answer value the request states verbatim, exactly once, and no
  other param's accepted values mention, is replaced in both the request and the possible answer —
  numbers by a seeded number of like size (years stay year-like, decimals keep their places), strings
  by the stated value of a same-named param of another train task, with that task's accepted variants
  ('' = may be left out is kept from the original).
- **Sibling functions** (`siblings`): BFCL's wrong-function failures are mostly a look-alike of the
  right one (most_points_single_season for _single_game, electric_field for magnetic_field). A sibling
  is the answer's function with one name word the request uses swapped for its contrast word — pairs
  mined from the train tasks' own function sets, whose names differ by one word (circle/triangle,
  derivative/integral) — in the name and the description. The request never uses the new word, so the
  sibling is always wrong and only reading the request tells them apart.

Only train tasks are read (pinned by a test), so the held-out split stays clean.
"""

from __future__ import annotations

import copy
import itertools
import random
import re
from functools import lru_cache
from typing import Any

from trace_agents.envs.bfcl import load_category, split_of

Options = list[Any]


def name_words(f: dict) -> frozenset[str]:
    """The words of a function name (dots, underscores, camelCase), less generic verbs."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", f["name"]).replace(".", " ").replace("_", " ").lower()
    return frozenset(w for w in spaced.split() if w not in {"get", "calc", "calculate", "find", "search"})


def _train_ids(category: str) -> list[str]:
    return sorted(i for i, s in split_of(category).items() if s == "train")


def _request_words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


# ---- fresh values ---------------------------------------------------------------------------------
def _pattern(literal: str, number: bool) -> str:
    # a number must not be part of a longer one (1,000 / 2.5 / x2); a string must be whole words
    return (rf"(?<![\w.,]){re.escape(literal)}(?!\w|[.,]\d)" if number
            else rf"(?<!\w){re.escape(literal)}(?!\w)")


def _stated_once(text: str, literal: str, number: bool) -> bool:
    return len(re.findall(_pattern(literal, number), text)) == 1


def _number_literal(value: int | float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _new_number(value: int | float, rng: random.Random) -> tuple[str, int | float]:
    """(its text, its value): like size; whole numbers stay whole, decimals keep their places."""
    if float(value).is_integer():
        v = int(value)
        if 1000 <= abs(v) <= 2100:  # a year, most likely: stay near it
            new = v + rng.choice((-1, 1)) * rng.randint(1, 15)
        else:
            new = rng.randint(max(1, abs(v) // 2), max(3, abs(v) * 2)) * (1 if v >= 0 else -1)
            new = new if new != v else v + 1
        return str(new), (new if isinstance(value, int) else float(new))
    places = len(repr(float(value)).split(".")[1])
    new = round(float(value) * rng.uniform(0.5, 2.0), places)
    new = new if new not in (0.0, float(value)) else round(float(value) + 10 ** -places, places)
    text = f"{new:.{places}f}"
    return text, float(text)


@lru_cache(maxsize=None)
def _donors(category: str) -> dict[str, tuple[tuple[str, str, tuple], ...]]:
    """Param name -> (task id, the string value its request states, that task's accepted values) over
    the train tasks with one reference call."""
    entries, answers = load_category(category)
    found: dict[str, list] = {}
    for i in _train_ids(category):
        truth = answers[i]["ground_truth"]
        if len(truth) != 1:
            continue
        (_, params), = truth[0].items()
        text = entries[i]["question"][0][-1]["content"]
        for name, options in params.items():
            literal = _stated_string(text, options)
            if literal:
                found.setdefault(name, []).append((i, literal, tuple(o for o in options if o != "")))
    return {k: tuple(v) for k, v in found.items()}


def _stated_string(text: str, options: Options) -> str | None:
    """The longest accepted string the request states once ('New York City' over 'New York')."""
    strings = sorted((o for o in options if isinstance(o, str) and len(o) > 1), key=len, reverse=True)
    return next((o for o in strings if _stated_once(text, o, number=False)), None)


def _replacement(name: str, options: Options, text: str, category: str, task_id: str,
                 rng: random.Random) -> tuple[str, str, Options, bool] | None:
    """(old text, new text, new accepted values, is a number) for one param, or None to leave it."""
    optional = [""] if "" in options else []
    numbers = [o for o in options if isinstance(o, (int, float)) and not isinstance(o, bool)]
    if numbers and len({float(n) for n in numbers}) == 1:
        old = _number_literal(numbers[0])
        if not _stated_once(text, old, number=True):
            return None
        new_text, new = _new_number(numbers[0], rng)
        return old, new_text, [new] + optional, True
    old = _stated_string(text, options)
    if old is None:
        return None
    donors = [d for d in _donors(category).get(name, ()) if d[0] != task_id and d[1].lower() not in text.lower()]
    if not donors:
        return None
    _, new_text, accepted = rng.choice(donors)
    return old, new_text, list(accepted) + optional, False


def fresh_values(text: str, params: dict[str, Options], enums: set[str], category: str, task_id: str,
                 rng: random.Random) -> tuple[str, dict[str, Options]]:
    """(request, possible-answer params) with every value that can be swapped cleanly swapped (see the
    module docstring); `enums` names params whose values the schema restricts (left alone)."""
    params = copy.deepcopy(params)
    for name in sorted(params):
        if name in enums:
            continue
        swap = _replacement(name, params[name], text, category, task_id, rng)
        if swap is None:
            continue
        old, new_text, accepted, number = swap
        others = " ".join(str(o) for k, v in params.items() if k != name for o in v)
        if old.lower() in others.lower() or not _stated_once(text, old, number):
            continue  # another param's value mentions it: swapping one would break the other
        text = re.sub(_pattern(old, number), lambda _: new_text, text, count=1)
        params[name] = accepted
    return text, params


# ---- sibling functions ----------------------------------------------------------------------------
@lru_cache(maxsize=None)
def contrast_words(category: str) -> dict[str, tuple[str, ...]]:
    """Word -> the words it contrasts with: pairs of functions offered together in a train task whose
    names share a word and differ by exactly one each (circle_area / triangle_area -> circle <-> triangle)."""
    entries = load_category(category)[0]
    pairs: dict[str, set[str]] = {}
    for i in _train_ids(category):
        for f, g in itertools.combinations(entries[i]["function"], 2):
            a, b = name_words(f) - name_words(g), name_words(g) - name_words(f)
            if len(a) == 1 and len(b) == 1 and name_words(f) & name_words(g):  # siblings share a stem
                (x,), (y,) = a, b
                pairs.setdefault(x, set()).add(y)
                pairs.setdefault(y, set()).add(x)
    return {k: tuple(sorted(v)) for k, v in sorted(pairs.items())}


def _swap_word(text: str, old: str, new: str) -> str:
    """`old` -> `new` wherever it is a name or description word, keeping an initial capital."""
    def swap(m: re.Match) -> str:
        return new.capitalize() if m.group(0)[0].isupper() else new

    return re.sub(rf"(?<![a-z]){re.escape(old)}(?![a-z])", swap, text, flags=re.IGNORECASE)


def siblings(f: dict, request: str, contrasts: dict[str, tuple[str, ...]], taken: set[str]) -> list[dict]:
    """Every sibling of `f` (see the module docstring) whose name is not among `taken`."""
    said = _request_words(request)
    out = []
    for word in sorted(name_words(f) & said):
        for other in contrasts.get(word, ()):
            name = _swap_word(f["name"], word, other)
            if other in said or name in taken or name == f["name"]:
                continue
            sibling = {**copy.deepcopy(f), "name": name,
                       "description": _swap_word(f.get("description", ""), word, other)}
            out.append(sibling)
            taken = taken | {name}
    return out
