"""Capability drills in the target's own tool schemas (stage 2, single-turn BFCL targets).

The catalog families (families.py) teach on the warm-up catalog's functions; at 135M their adapters
transfer only part of their gain to BFCL (docs/results.md, issue 7). These envs build each task from the
target's *train* split instead, so the schemas, descriptions and request wording are the target's
own, and reshape it to isolate one capability:
- `function_selection`: a train request among its own functions plus look-alike distractors drawn from
  other train tasks. Difficulty: more added distractors (0-1 at 0, 2-6 at 1) and a larger share of
  look-alikes (25% -> 100%, by shared name and description words).
- `argument_value_grounding`: a train request with only its answer's function offered, so every
  reward is about the values. Difficulty: tasks with more arguments to fill are drawn more often.
- `parallel_call_completeness`: k variants of one train request (fresh values each) in one message,
  answered by k calls of its function (BFCL's parallel checker). Difficulty: k (2 at 0, 3-4 at 1).
  The k requests are phrased as the target phrases them: one sentence listing the one stretch of words
  they differ in, or the requests in a row led by "Also," / "Do the same for" (`_ask_all`).
  BFCL `parallel` has no single-call train task: there it borrows one (`extra`, e.g. simple_python).
With `fresh`, each seed is a procedural variant of its train task (variants.py): new values in the
request and its possible answer, and for function_selection look-alike siblings of the right function.
With `like_target`, a drill offers as many functions as a target train task does (a count drawn from
the target's train tasks: 2-4 for `multiple`), padding with functions unlike the answer's. Without it
argument_value_grounding offers the answer's function alone, and a quarter of the easiest
function_selection drills do too: prompts the target never shows, on which a policy is rewarded for
calling whichever function is listed (measured, issue 7: composed models trained so picked the *last*
offered function in 57 of 84 wrong picks on BFCL multiple's test tasks, plain GRPO in 13 of 46).
With `extra` categories (e.g. simple_python for a `multiple` target), the drills also draw those
categories' train tasks with one reference call, in the same format: more requests and functions than
the target's ~100 train tasks, which the plain-GRPO baseline trains on too. BFCL builds `multiple` from
`simple` requests (43 of its 100 test requests are word for word simple_python ones), so a borrowed
task is left out when it offers a function of the target's test split or its request shares >= 60%
of its words with a test request. The live categories (live_simple, live_multiple: user-contributed
requests on other APIs, BFCL's same format) can be borrowed too; a borrowed task is kept only when it
offers at most 4 functions in at most 2,000 characters of schema and its reference passes BFCL's checker.
They never read the test split (tests pin both), so the held-out evaluation stays clean; the
plain-GRPO baseline trains on the target's train tasks as BFCL offers them.

Seeds: train 0..99,999 and test 1,000,000..1,000,999, as the catalog families (the env's own test
seeds recombine the same train tasks: they measure the capability, the target's test split measures
transfer). Each draw has its own seeded stream (task, distractors, order), so a seed's distractors
do not move when only the order changes. Verdicts are BFCL's own AST checker against the task's
possible answers (`multiple` rules: the answer's function is looked up among those offered).
"""

from __future__ import annotations

import copy
import json
import os
import random
import re
from functools import cached_property, lru_cache
from typing import ClassVar

from trace_agents.agent.format import to_openai_tool
from trace_agents.envs.base import Split
from trace_agents.envs.bfcl import BORROWABLE, SINGLE_TURN, BfclEnv, first_accepted, load_category, offer_counts, single_call_train_ids, split_of
from trace_agents.synthesis.families import checked_difficulty, family_seeds
from trace_agents.synthesis.variants import contrast_words, fresh_values, name_words, siblings
from trace_agents.types import Message

_STOP = {"the", "and", "for", "with", "given", "from", "based", "that", "this", "specified", "specific", "into",
         "note", "provided", "function", "python", "syntax", "which", "their", "about", "certain", "using"}


def _words(f: dict) -> frozenset[str]:
    text = f"{f['name'].replace('.', ' ').replace('_', ' ')} {f.get('description', '')}".lower()
    return frozenset(w for w in re.findall(r"[a-z]{3,}", text) if w not in _STOP)


def _likeness(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / max(1, len(a | b))


def _same_job(f: dict, g: dict) -> bool:
    """Two train functions that would both serve a request (BFCL repeats a tool under other names:
    compound_interest, financial.compound_interest, calc_Compound_Interest): such a distractor would
    make a right call score 0, so it is never offered."""
    return _likeness(name_words(f), name_words(g)) >= 0.5 or _likeness(_words(f), _words(g)) >= 0.5


def _enums(function: dict) -> set[str]:
    """Params whose values the schema restricts: fresh_values leaves them alone."""
    return {k for k, v in function.get("parameters", {}).get("properties", {}).items() if "enum" in v}


def _category_of(task_id: str) -> str:
    return task_id.rsplit("_", 1)[0]


def _entry(task_id: str) -> dict:
    return load_category(_category_of(task_id))[0][task_id]


def _request_words(entry: dict) -> frozenset[str]:
    return frozenset(re.findall(r"[a-z]{3,}", entry["question"][0][-1]["content"].lower()))


@lru_cache(maxsize=None)
def _test_footprint(category: str) -> tuple[frozenset[str], tuple[frozenset[str], ...]]:
    """(function names, request words) of the category's test tasks: what a borrowed task must not share."""
    entries = load_category(category)[0]
    tests = [entries[i] for i, s in split_of(category).items() if s == "test"]
    return frozenset(f["name"] for e in tests for f in e["function"]), tuple(_request_words(e) for e in tests)


def _leaks(entry: dict, footprint: tuple[frozenset[str], tuple[frozenset[str], ...]]) -> bool:
    names, requests = footprint
    words = _request_words(entry)
    return bool({f["name"] for f in entry["function"]} & names) or any(_likeness(words, r) >= 0.6 for r in requests)


def _fits(entry: dict) -> bool:
    """A borrowed task of about the target's size: at most 4 functions in at most 2,000 characters of
    schema (BFCL `multiple` offers 2-4; a third of live_multiple's tasks offer 5-37, in longer schemas that
    would slow every rollout on them and teach a prompt size the target never shows)."""
    return len(entry["function"]) <= 4 and len(json.dumps(entry["function"])) <= 2000


def _answerable(task_id: str) -> bool:
    """Does the task's reference (`first_accepted`) pass BFCL's checker? Not where the answer names a
    param the schema lacks, accepts no value for one, or leaves a required one out (live_multiple_964-207-0
    answers `question` for a required `statement`; live_simple_112-68-0 accepts nothing for five params):
    such a task would pay 0 whatever the policy did."""
    entries, answers = load_category(_category_of(task_id))
    (name, params), = answers[task_id]["ground_truth"][0].items()
    schema = next((f["parameters"] for f in entries[task_id]["function"] if f["name"] == name), None)
    if schema is None or any(not v for v in params.values()) or set(params) - set(schema.get("properties", {})):
        return False
    return set(schema.get("required", [])) <= set(first_accepted(params))


@lru_cache(maxsize=None)
def _train_material(category: str, extra: tuple[str, ...] = ()) -> tuple[tuple[str, ...], tuple[dict, ...]]:
    """(train task ids with one reference call: the category's, then the clean ones of each `extra`
    category; every distinct function they offer)."""
    ids = list(single_call_train_ids(category))
    footprint = _test_footprint(category)
    for other in dict.fromkeys(c for c in extra if c != category):
        ids += [i for i in single_call_train_ids(other)
                if _fits(_entry(i)) and _answerable(i) and not _leaks(_entry(i), footprint)]
    functions = {f["name"]: f for i in ids for f in _entry(i)["function"]}
    return tuple(ids), tuple(functions[n] for n in sorted(functions))


class _TargetDrill(BfclEnv):
    """A train task of a single-turn BFCL category, reshaped by `_offer` (see the module docstring)."""

    capability: ClassVar[str] = ""

    def __init__(self, difficulty: float = 0.5, category: str = "multiple", partial_credit: float = 0.0,
                 fresh: bool = False, extra: tuple[str, ...] = (), like_target: bool = False):
        difficulty = checked_difficulty(difficulty)
        if category not in SINGLE_TURN:
            raise ValueError(f"{category!r} is not a single-turn BFCL category; target drills take one of {', '.join(SINGLE_TURN)}")
        if unknown := [c for c in extra if c not in BORROWABLE]:
            raise ValueError(f"{unknown} are not single-turn BFCL categories; target drills borrow from {', '.join(BORROWABLE)}")
        super().__init__(category, partial_credit=partial_credit)
        self.checker_category = "multiple"  # the answer is looked up among the offered functions
        self.difficulty = difficulty
        self.fresh = fresh
        self.like_target = like_target
        self.name = f"target/{self.capability}"
        self.extra = tuple(extra)
        self.ids, self.pool = _train_material(category, self.extra)
        if not self.ids:
            raise ValueError(f"bfcl/{category} has no train task with a single reference call")
        for c in self.extra:
            if len(_train_material(category, (c,))[0]) == len(_train_material(category)[0]):
                raise ValueError(f"bfcl/{c} adds no clean train task with a single reference call to bfcl/{category}'s drills")

    def seeds(self, split: Split) -> list[int]:
        return family_seeds(split)

    def reset(self, seed: int) -> list[Message]:
        category, index = self._task(random.Random(f"target/{self.capability}/task/{seed}")).rsplit("_", 1)
        messages = self._open(category, index)  # live ids end in "5-3-0", not a number
        if self.fresh:
            messages = self._freshen(category, random.Random(f"target/{self.capability}/values/{seed}"))
        offered = self._offer(random.Random(f"target/{self.capability}/extra/{seed}"))
        if self.like_target:
            offered += self._padding(random.Random(f"target/{self.capability}/pad/{seed}"), offered)
        random.Random(f"target/{self.capability}/order/{seed}").shuffle(offered)
        self.entry = {**copy.deepcopy(self.entry), "function": offered}
        self.functions = offered
        self.tools = [to_openai_tool(f) for f in offered]
        self.task_id = f"{self.capability}_{seed}"
        return messages

    def _task(self, rng: random.Random) -> str:
        return rng.choice(self.ids)

    def _freshen(self, category: str, rng: random.Random) -> list[Message]:
        """Fresh values in the request and the possible answer (variants.fresh_values; donor values
        come from the task's own category)."""
        question = copy.deepcopy(self.entry["question"])
        (name, params), = self.answer[0].items()
        enums = _enums(self._answer_function())
        question[0][-1]["content"], params = fresh_values(question[0][-1]["content"], params, enums,
                                                          category, self.task_id, rng)
        self.entry, self.answer = {**self.entry, "question": question}, [{name: params}]
        return [Message(**m) for m in question[0]]

    def _ask_several(self) -> None:
        """From now on every seed asks k variants of its train task in one message (`_variants`): only
        tasks with a value to vary are drawn, and BFCL's parallel checker judges the k calls."""
        self.fresh = True  # the k calls are variants
        self.checker_category = "parallel"
        self.ids = tuple(i for i in self.ids if _variable(i))
        if not self.ids:
            raise ValueError(f"no train task of bfcl/{self.category} {self.extra} has a value to vary")

    def _variants(self, category: str, rng: random.Random, k: int) -> list[Message]:
        """k variants of the drawn train task (fresh values each, distinct replies), asked in one message
        (`_ask_all`); the answer is their k calls."""
        original = self.entry, self.answer
        texts, answers, forms = [], [], set()
        for _ in range(4 * k):  # distinct replies; a task with few values to vary may give fewer than k
            self.entry, self.answer = original
            messages = _TargetDrill._freshen(self, category, rng)  # one variant; subclasses' _freshen lead here
            if (form := _form(next(iter(self.answer[0].values())))) not in forms:
                forms.add(form)
                texts.append(messages[-1].content)
                answers.append(self.answer[0])
            if len(answers) == k:
                break
        question = copy.deepcopy(self.entry["question"])
        question[0][-1]["content"] = _ask_all(texts, rng)
        self.entry, self.answer = {**self.entry, "question": question}, answers
        return [Message(**m) for m in question[0]]

    def _offer(self, rng: random.Random) -> list[dict]:
        raise NotImplementedError

    def _padding(self, rng: random.Random, offered: list[dict]) -> list[dict]:
        """Functions unlike the answer's (the less alike half of the pool, never one doing its job) up
        to a count a target train task offers: the target's format, with no choice harder than it was."""
        want = rng.choice(offer_counts(self.category)) - len(offered)
        if want <= 0:
            return []
        words = _words(self._answer_function())
        rest = sorted(self._others({f["name"] for f in offered}), key=lambda f: (_likeness(words, _words(f)), f["name"]))
        return rng.sample(rest[:max(want, len(rest) // 2)], min(want, len(rest)))

    def _others(self, taken: set[str]) -> list[dict]:
        """Pool functions that may be offered beside the answer: not `taken`, never one doing its job."""
        target = self._answer_function()
        return [f for f in self.pool if f["name"] not in taken and not _same_job(f, target)]

    @property
    def answer_name(self) -> str:
        return next(iter(self.answer[0]))

    def _answer_function(self) -> dict:
        return next(f for f in self.entry["function"] if f["name"] == self.answer_name)



class TargetFunctionSelectionEnv(_TargetDrill):
    """Trains `function_selection` on the target's train requests among more look-alike functions
    than BFCL offers (BFCL `multiple`: pick the one right function, never an invented one)."""

    capability = "function_selection"

    def _offer(self, rng: random.Random) -> list[dict]:
        offered = self.entry["function"] + self._distractors(rng)
        return offered + self._siblings(rng, {f["name"] for f in offered})

    def _siblings(self, rng: random.Random, taken: set[str]) -> list[dict]:
        """Fresh drills only: 1 (difficulty 0) to 3 (1) siblings of the answer's function."""
        if not self.fresh:
            return []
        request = self.entry["question"][0][-1]["content"]
        found = siblings(self._answer_function(), request, contrast_words(self.category), taken)
        return rng.sample(found, min(len(found), 1 + round(2 * self.difficulty)))

    def _distractors(self, rng: random.Random) -> list[dict]:
        d = self.difficulty
        rest = self._others({f["name"] for f in self.entry["function"]})
        words = _words(self._answer_function())
        near = sorted(rest, key=lambda f: (-_likeness(words, _words(f)), f["name"]))
        k = min(len(rest), rng.randint(round(2 * d), 1 + round(5 * d)))
        chosen: list[dict] = []
        for _ in range(k):
            pool = near[:8] if rng.random() < 0.25 + 0.75 * d else near
            pick = rng.choice([f for f in pool if f not in chosen] or [f for f in near if f not in chosen])
            chosen.append(pick)
        return chosen

    def hint(self) -> str:
        words = _words(self._answer_function())
        alike = sorted(self.functions, key=lambda f: -_likeness(_words(f), words))[:3]
        return ("Several offered functions look alike: " + "; ".join(
            f"{f['name']} ({f.get('description', '').split('.')[0].lower()})" for f in sorted(alike, key=lambda f: f["name"]))
            + ". Match the request to one of these descriptions, call only that function, and take every"
              " value from the request.")


class TargetArgumentGroundingEnv(_TargetDrill):
    """Trains `argument_value_grounding`: a train request with only its answer's function offered, so
    the reward is all about turning the request's words into exact values of the declared types. On a
    `parallel` target it asks 2-3 variants of the request in one message, as the target does (its single-call
    drill taught one call: wrong count on 41 of 100 test tasks, plt_s2, issue 7)."""

    capability = "argument_value_grounding"

    def __init__(self, difficulty: float = 0.5, **kwargs):
        super().__init__(difficulty, **kwargs)
        if self.category == "parallel":  # every target answer there is several calls: one would teach a wrong count
            self._ask_several()

    def _freshen(self, category: str, rng: random.Random) -> list[Message]:
        if self.checker_category == "parallel":
            return self._variants(category, rng, rng.randint(2, 3))
        return super()._freshen(category, rng)

    def _task(self, rng: random.Random) -> str:
        return rng.choices(self.ids, weights=self._weights)[0]

    @cached_property
    def _weights(self) -> list[float]:
        """More arguments to fill at higher difficulty: weight (1 + n)^(3d), uniform at 0."""
        n = [len(next(iter(load_category(_category_of(i))[1][i]["ground_truth"][0].values()))) for i in self.ids]
        return [(1 + k) ** (3 * self.difficulty) for k in n]

    def _offer(self, rng: random.Random) -> list[dict]:
        return [self._answer_function()]

    def hint(self) -> str:
        """Names the params the answer cannot do without, optional ones included: a common miss of the
        trained policies on BFCL multiple's test tasks is leaving out a value the request states ("at
        January 1, 2022" -> `date`; 13 and 15 of 100 replies of composed and GRPO, fsl_s2)."""
        params = self._answer_function().get("parameters", {}).get("properties", {})
        (_, accepted), = self.answer[0].items()
        stated = [k for k, v in accepted.items() if "" not in v]
        needed = (f" The request gives a value for {', '.join(stated)}: pass each of them, even optional ones."
                  if stated else "")
        several = (f"The message holds {len(self.answer)} requests: make {len(self.answer)} calls, one per request. "
                   if len(self.answer) > 1 else "")
        return (several + "Take every value from the request, converted to the parameter's declared type ("
                + ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in params.items()) + ")." + needed
                + " Invent no value.")


class TargetParallelCallsEnv(_TargetDrill):
    """Trains `parallel_call_completeness` in the target's own schemas: k requests of one train task, each
    with fresh values (variants.fresh_values), asked in one message; one reply must make all k calls
    (BFCL's parallel checker: order-free, the right count). BFCL `parallel` asks for one function several
    times, and the warmed base's commonest failure there is the wrong number of calls (45 of 88 failed
    train tasks, issue 7). Only tasks with a value that can be varied are drawn. Difficulty: k (2 at 0,
    3-4 at 1); every seed is a set of variants, with or without `fresh`."""

    capability = "parallel_call_completeness"

    def __init__(self, difficulty: float = 0.5, **kwargs):
        super().__init__(difficulty, **kwargs)
        self._ask_several()

    def _freshen(self, category: str, rng: random.Random) -> list[Message]:
        return self._variants(category, rng, rng.randint(2 + round(self.difficulty), 2 + round(2 * self.difficulty)))

    def _offer(self, rng: random.Random) -> list[dict]:
        return [self._answer_function()]

    def hint(self) -> str:
        return (f"The message holds {len(self.answer)} separate requests: reply with {len(self.answer)} calls to "
                f"{self.answer_name} in one message, one per request, each with that request's values.")


def _form(params: dict) -> str:
    """The reply a possible answer's reference makes (its first accepted values), as a comparable string."""
    return json.dumps(first_accepted(params), sort_keys=True)


def _variable(task_id: str) -> bool:
    """Does fresh_values give the task's answer at least 4 distinct forms in 6 tries? (Some requests
    state no value verbatim, some only one value with few donors: they could not make k calls.)"""
    entry, answer = _entry(task_id), load_category(_category_of(task_id))[1][task_id]["ground_truth"]
    (name, params), = answer[0].items()
    enums = _enums(next(f for f in entry["function"] if f["name"] == name))
    text = entry["question"][0][-1]["content"]
    forms = {_form(fresh_values(text, params, enums, _category_of(task_id), task_id, random.Random(i))[1])
             for i in range(6)}
    return len(forms) >= 4


# Words a request may start with that are not names, so "Also, " may lower-case them.
_OPENERS = {"calculate", "compute", "find", "get", "what", "what's", "how", "can", "could", "please", "determine",
            "give", "tell", "show", "check", "fetch", "retrieve", "search", "look", "is", "are", "which",
            "who", "when", "where", "provide", "estimate", "convert", "predict", "identify", "list", "generate"}


def _ask_all(requests: list[str], rng: random.Random) -> str:
    """Several requests in one message, as BFCL `parallel` asks them: when the requests differ in one
    stretch of words, one sentence listing it ("... of navy, purple and maroon?"); otherwise the requests
    in a row, the later ones led by "Also," or "Do the same for" (parallel_16, parallel_161). A numbered
    list would be a format the target never shows."""
    words = [r.split() for r in requests]
    head = _shared_run(words)
    tail = _shared_run([w[head:][::-1] for w in words])
    middles = [w[head:len(w) - tail] for w in words]
    stop = next((c for c in ".?!" if all(m and m[-1].endswith(c) for m in middles)), "")
    spans = [" ".join(m).removesuffix(stop) for m in middles]
    one_span = (head >= 2 and not words[0][head - 1].endswith(",")  # "a player, X, Y and Z" would read as a list of four
                and all(s and len(m) <= 6 and "," not in s and " and " not in s for m, s in zip(middles, spans)))
    if one_span and rng.random() < 0.75:
        end = " ".join(words[0][len(words[0]) - tail:])
        listed = ", ".join(spans[:-1]) + " and " + spans[-1]
        return " ".join(filter(None, (" ".join(words[0][:head]), listed + stop, end)))
    later = [(f"Do the same for {s}." if one_span and rng.random() < 0.5 else _also(r))
             for s, r in zip(spans[1:], requests[1:])]
    return " ".join([requests[0].strip(), *later])


def _shared_run(lists: list[list[str]]) -> int:
    """How many leading items every list shares, leaving each at least one item of its own
    (os.path.commonprefix compares any sequences item by item, not only strings)."""
    return min(len(os.path.commonprefix(lists)), min(len(w) for w in lists) - 1)


def _also(request: str) -> str:
    first, _, rest = request.strip().partition(" ")
    return "Also, " + (first.lower() if first.lower() in _OPENERS else first) + (" " + rest if rest else "")
