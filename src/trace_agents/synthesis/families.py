"""Built-in single-turn capability environments for the BFCL target (issue 4, stage 2).

One Env class per capability the rules analyst can select (analysis/probes.py). Each family builds a
new task from an integer seed: BFCL-style function schemas (offered as OpenAI tools exactly as
`BfclEnv` offers them), a natural-language request, and the reference calls. The agent answers in one
assistant turn; `verdict()` compares its calls with the reference by algorithm (matching.py: AST /
argument match with BFCL's tolerances, partial credit = fraction of reference calls matched).

Why they transfer to BFCL: same schema format (BFCL's `dict`/`float` types, required lists,
defaults in descriptions), same reply format (tool calls with JSON arguments), same checker semantics
(exact function name, required + asked-for params, type checks, case-insensitive strings, order-free
parallel calls). Why they cannot leak BFCL: tasks come from the warm-up generator's own catalog and
templates (warmup/data.py never reads BFCL data); a test checks that no function name or request
text equals one of BFCL's.

Seeds: train is 0..99,999 and test is 1,000,000..1,000,999 (disjoint ranges; a task is a pure
function of (capability, seed, difficulty)). `difficulty` in [0, 1] is the knob calibration tunes;
each family says what it moves. The task rng does not depend on the difficulty (common random
numbers: nearby difficulties give related tasks, so calibration curves are smooth). `hint()` is short expert guidance for the current task, which
training may add to a fraction of a group's prompts.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, replace
from typing import Any, Callable, ClassVar

import trace_agents.warmup.data as data
from trace_agents.agent.format import to_openai_tool
from trace_agents.envs.base import Split, Step
from trace_agents.envs.bfcl import SINGLE_TURN, offer_counts
from trace_agents.synthesis.matching import (EXTRA_CALL_PENALTY, Match, call_key, match_calls, parse_calls,
                                             repeated_calls)
from trace_agents.types import Message, Verdict
from trace_agents.warmup.data import CATALOG, Func, Param

TRAIN_SEEDS = range(0, 100_000)
TEST_SEEDS = range(1_000_000, 1_001_000)


def family_seeds(split: Split) -> list[int]:
    """The seeds of a split for the seed-first built-in envs (disjoint train and test ranges)."""
    if split not in ("train", "test"):
        raise ValueError(f"unknown split {split!r}: use train or test")
    return list(TRAIN_SEEDS if split == "train" else TEST_SEEDS)


def checked_difficulty(difficulty: float) -> float:
    if isinstance(difficulty, bool) or not isinstance(difficulty, (int, float)) or not 0 <= difficulty <= 1:
        raise ValueError(f"difficulty must be a number between 0 and 1, got {difficulty!r}")
    return float(difficulty)


@dataclass
class Task:
    functions: list[Func]  # offered, in order
    calls: list[tuple[str, dict]]  # the reference solution
    request: str
    hint: str | None = None


# ---- generation helpers on top of the warm-up catalog ------------------------------------------
def _kind(p: Param) -> str:
    """The catalog's value generator of a param: "integer", "worded", "quoted", "matrix", ..."""
    return p.gen.__qualname__.split(".")[0]


_CONVERTED = {"integer", "ordinal", "money", "percent", "worded", "flag", "with_unit", "num_list", "str_list",
              "matrix", "point", "polygon", "address", "guests", "contact"}
_NESTED = {"matrix", "point", "polygon", "address", "guests", "contact", "num_list", "str_list"}
_PLACES = {"location", "city", "origin", "destination"}
_TRICKY_TEXT = (
    'She said "hello" twice', "C:\\Users\\ana\\notes.txt", "Café crème à 3€", "東京タワーで会いましょう",
    "naïve résumé, déjà vu", "Привет, мир", '{"key": "value", "n": [1, 2]}', "It's 5 o'clock",
    "Use \\d+ to match digits", 'The "best" café in Zürich', "50% off — today only!", "Party time 🎉🎂",
    "¿Dónde está la estación?", "path/to/file [v2] {draft}", "a < b && c > d", 'Size: 5" × 3"',
    "Σ x² = 10", "Grüße aus München", "O'Brien & Sons", "Tab\\tseparated \\\\ text",
)
_TRICKY_PLACES = ("São Paulo", "Zürich", "Kraków", "Reykjavík", "Málaga", "Göteborg", "Düsseldorf",
                  "Montréal, QC", "Brașov", "Hà Nội", "Ōsaka", "A Coruña", "Łódź", "Curaçao")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [s for v in items for s in _strings(v)]


def _trickable(p: Param) -> bool:
    return _kind(p) == "quoted" or (_kind(p) == "pick" and p.name in _PLACES)


def _delimit(v: str) -> str:
    return f"'{v}'" if "'" not in v else f'"{v}"' if '"' not in v else f"`{v}`"


def _some_optional(f: Func, rng: random.Random, p: float) -> list[str]:
    return [q.name for q in f.params if not q.required and rng.random() < p]


def _optional(f: Func) -> list[str]:
    return [p.name for p in f.params if not p.required]


def _siblings(f: Func) -> list[Func]:
    return [g for g in CATALOG if g.domain == f.domain and g.name != f.name]


def _distractors(f: Func, k: int, similar: float, rng: random.Random) -> list[Func]:
    """k other functions: with probability `similar` each comes from the nearest pool (same name
    prefix, then same domain), otherwise from another domain."""
    prefix = data._prefix(f.name)
    near = [g for g in CATALOG if g.name != f.name and data._prefix(g.name) == prefix]
    names = {g.name for g in near}
    same = [g for g in _siblings(f) if g.name not in names]
    far = [g for g in CATALOG if g.domain != f.domain and g.name not in names]
    for pool in (near, same, far):
        rng.shuffle(pool)
    return [next(p for p in ((near, same, far) if rng.random() < similar else (far, same, near)) if p).pop()
            for _ in range(k)]


# ---- the shared base --------------------------------------------------------------------------
class SingleTurnFamily:
    """Seed-first single-turn Env: `reset(seed)` builds a task, one assistant reply ends the episode."""

    capability: ClassVar[str] = ""

    def __init__(self, difficulty: float = 0.5, category: str = "", like_target: bool = False):
        """`like_target`: pad each offer to as many functions as a train task of the BFCL `category`
        offers (see `_padded`)."""
        if like_target and category not in SINGLE_TURN:
            raise ValueError(f"like_target needs the target's single-turn BFCL category ({', '.join(SINGLE_TURN)}), "
                             f"got {category!r}")
        self.difficulty = checked_difficulty(difficulty)
        self.category, self.like_target = category, like_target
        self.tricky = 0.0  # share of free-text values made JSON-hostile (ToolCallFormatEnv raises it)
        self.name = f"synthetic/{self.capability}"
        self.task_id = ""
        self.tools: list[dict[str, Any]] = []
        self.functions: list[dict] = []
        self._task: Task | None = None
        self._calls: list = []
        # every call drawn for the current task: (function, values, value texts), so a wrapping
        # family (NoRedundantCallsEnv) can ask for the same call again in other words
        self.drawn: list[tuple[Func, dict, dict]] = []

    def seeds(self, split: Split) -> list[int]:
        return family_seeds(split)

    def reset(self, seed: int) -> list[Message]:
        self.drawn = []
        self._task = self._build(random.Random(f"{self.capability}/{seed}"))
        if self.like_target:
            self._task = replace(self._task, functions=self._padded(random.Random(f"{self.capability}/pad/{seed}")))
        self.task_id = f"{self.capability}_{seed}"
        self.functions = [f.schema() for f in self._task.functions]
        self.tools = [to_openai_tool(f) for f in self.functions]
        self._calls = []
        return [Message(role="user", content=self._task.request)]

    def step(self, message: Message) -> Step:
        self._calls = parse_calls(message, [f["name"] for f in self.functions])
        return Step(done=True)

    def verdict(self) -> Verdict:
        m = match_calls(self._calls, self.task.calls, self.functions)
        details = {"failure": m.failure, "failure_params": m.failure_params(), "matched": m.matched,
                   "n_reference": m.n_reference, "extra_calls": m.extra, "problems": m.problems,
                   "calls": [{"name": n, "arguments": a} for n, a in self._calls],
                   "reference": [{"name": n, "arguments": a} for n, a in self.task.calls]}
        return Verdict(reward=self._reward(m), success=m.success, details=details)

    def reference(self) -> list[tuple[str, dict]]:
        return copy.deepcopy(self.task.calls)

    def hint(self) -> str | None:
        return self.task.hint

    @property
    def task(self) -> Task:
        if self._task is None:
            raise RuntimeError(f"{type(self).__name__}: call reset(seed) first")
        return self._task

    def _padded(self, rng: random.Random) -> list[Func]:
        """The task's offer padded to a count drawn from the target's train tasks with functions of
        other domains than the offered ones (none can serve the request), reshuffled. Most families
        offer one function, which no BFCL `multiple` task does: a policy trained on them learns to
        call whatever is listed (issue 7). Its own seeded stream: no other draw of the task moves."""
        offered = list(self.task.functions)
        want = rng.choice(offer_counts(self.category)) - len(offered)
        domains = {f.domain for f in offered}
        far = [g for g in CATALOG if g.domain not in domains]
        offered += rng.sample(far, max(0, min(want, len(far))))
        rng.shuffle(offered)
        return offered

    def _reward(self, m: Match) -> float:
        return m.reward()

    def _build(self, rng: random.Random) -> Task:
        raise NotImplementedError

    # shared generation
    def _choose(self, rng: random.Random, pool: list[Func], score: Callable[[Func], float], power: float) -> Func:
        """A function, weighted by (1 + score)^power (power 0 = uniform); raising `tricky` also
        favours functions with free text (most), places or nested values."""
        def weight(f: Func) -> float:
            hard = sum(3 if _kind(p) == "quoted" else _trickable(p) or _kind(p) in _NESTED for p in f.params)
            return (1 + score(f)) ** power * (1 + hard) ** (3 * self.tricky)
        return rng.choices(pool, weights=[weight(f) for f in pool])[0]

    def _sample(self, f: Func, rng: random.Random, mention: list[str], words: float = 0.15,
                commands_only: bool = False) -> tuple[dict, str, dict]:
        """(arguments, request core, value texts) for one call of `f` with the required params and
        the optional ones in `mention`; a `words` share of integers 0..100 is written in words."""
        for _ in range(20):
            values, texts = {}, {}
            for p in f.params:
                if p.required or p.name in mention:
                    v, t = p.gen(rng)
                    if type(v) is int and t == str(v) and 0 <= v <= 100 and rng.random() < words:
                        t = data.number_word(v)
                    elif _trickable(p) and self.tricky and rng.random() < self.tricky:
                        quoted = _kind(p) == "quoted"
                        v = rng.choice(_TRICKY_TEXT if quoted else _TRICKY_PLACES)
                        t = _delimit(v) if quoted else v
                    values[p.name], texts[p.name] = v, t
            strings = [v for v in values.values() if isinstance(v, str)]
            if len(strings) == len(set(strings)):
                break
        template = rng.choice(f.commands if commands_only else f.asks)
        self.drawn.append((f, values, texts))
        return values, data._render(f, template, values, texts, rng), texts


# ---- the families -----------------------------------------------------------------------------
class FunctionSelectionEnv(SingleTurnFamily):
    """Trains `function_selection`: call the one function that fits among same-domain look-alikes
    (BFCL `multiple`: the right function among similar offered ones, never an invented one).
    Difficulty: more distractors (1-2 at 0, 4-7 at 1) and a larger share from the same domain or name
    prefix (25% -> 100%)."""

    capability = "function_selection"

    def _build(self, rng: random.Random) -> Task:
        d = self.difficulty
        f = self._choose(rng, CATALOG, lambda f: len(_siblings(f)), 2 * d)
        offered = [f, *_distractors(f, rng.randint(1 + round(3 * d), 2 + round(5 * d)), 0.25 + 0.75 * d, rng)]
        rng.shuffle(offered)
        args, core, _ = self._sample(f, rng, _some_optional(f, rng, 0.3))
        alike = [g for g in offered if g.domain == f.domain]
        hint = ("Read every offered description and call only the function that does what the request asks."
                if len(alike) < 2 else "Several offered functions look alike: " +
                "; ".join(f"{g.name} ({g.description[:-1].lower()})" for g in alike) +
                ". Match the request to one of these descriptions and call only that function.")
        return Task(offered, [(f.name, args)], data._wrap(core, rng), hint)


class ArgumentGroundingEnv(SingleTurnFamily):
    """Trains `argument_value_grounding`: turn what the request says into exact values (numbers in
    words and ordinals, "$12.50", "4.5%", units inside strings, phrases for enums and booleans, lists,
    points, matrices, objects) - BFCL's most common value errors. Difficulty: functions with more
    values to convert, more optional params mentioned (30% -> 100%) and more integers written as
    words (10% -> 90%)."""

    capability = "argument_value_grounding"
    _NOTES = {
        "words": "numbers written as words or ordinals become plain numbers ('twelve' -> 12, 'third' -> 3)",
        "money": "amounts and rates lose their '$' and '%' ('$1250.5' -> 1250.5, '4.5%' -> 4.5)",
        "worded": "descriptive phrases map onto the allowed values ('compounded monthly' -> 12, 'with X' -> true)",
        "with_unit": "a value given with its unit ('250g') stays one string when the schema asks for it",
        "list": "lists keep every item in the order given; points and matrices become nested arrays",
        "dict": "objects take exactly the schema's fields, each filled from the request",
    }

    def _build(self, rng: random.Random) -> Task:
        d = self.difficulty
        f = self._choose(rng, CATALOG, lambda f: sum(_kind(p) in _CONVERTED for p in f.params), 3 * d)
        args, core, texts = self._sample(f, rng, _some_optional(f, rng, 0.3 + 0.7 * d), words=0.1 + 0.8 * d)
        kinds = {_kind(p) for p in f.params if p.name in args}
        found = {"words": any(t != str(args[k]) for k, t in texts.items() if type(args[k]) is int)
                 or "ordinal" in kinds, "money": bool(kinds & {"money", "percent"}),
                 "worded": bool(kinds & {"worded", "flag"}), "with_unit": "with_unit" in kinds,
                 "list": bool(kinds & {"num_list", "str_list", "matrix", "point", "polygon"}),
                 "dict": bool(kinds & {"address", "guests", "contact"})}
        notes = [self._NOTES[k] for k, hit in found.items() if hit]
        hint = "Take every value from the request, converted to the parameter's type" + (
            ": " + "; ".join(notes) + "." if notes else ".")
        return Task([f], [(f.name, args)], data._wrap(core, rng), hint)


class SchemaAdherenceEnv(SingleTurnFamily):
    """Trains `argument_schema_adherence`: every required param, no invented param, each value of the
    declared type (integer vs float vs string vs array vs object), as BFCL's type check demands.
    Difficulty: functions with more params and more distinct types; more optional params mentioned
    (20% -> 80%)."""

    capability = "argument_schema_adherence"
    _SAY = {"integer": "a whole number, not quoted", "float": "a number", "string": "a quoted string",
            "boolean": "true or false", "array": "a JSON array", "dict": "a JSON object with the listed fields"}

    def _build(self, rng: random.Random) -> Task:
        d = self.difficulty
        f = self._choose(rng, CATALOG, lambda f: len(f.params) + len({p.type for p in f.params}), 2 * d)
        args, core, _ = self._sample(f, rng, _some_optional(f, rng, 0.2 + 0.6 * d))
        types = "; ".join(f"{p.name}: {self._SAY[p.type]}" for p in f.params if p.name in args)
        required = ", ".join(p.name for p in f.params if p.required)
        hint = (f"Give each value its declared type ({types}). Always fill the required parameters "
                f"({required}) and add no parameter that the schema does not list.")
        return Task([f], [(f.name, args)], data._wrap(core, rng), hint)


class RequestDetailEnv(SingleTurnFamily):
    """Trains `request_detail_coverage`: the request explicitly asks for optional settings ("in
    Fahrenheit", "for 3 passengers"), and the reference passes them - BFCL counts a left-out asked-for
    optional param as a wrong call. Difficulty: more optional params mentioned per request (1 at 0,
    up to 2 at 1, preferring functions with several optional params)."""

    capability = "request_detail_coverage"

    def _build(self, rng: random.Random) -> Task:
        d = self.difficulty
        f = self._choose(rng, [f for f in CATALOG if _optional(f)], lambda f: len(_optional(f)) - 1, 4 * d)
        mention = rng.sample(_optional(f), min(len(_optional(f)), 1 + (rng.random() < d)))
        args, core, _ = self._sample(f, rng, mention)
        hint = (f"Besides the required values, the request asks for specific settings of {', '.join(mention)}: "
                "pass those optional parameters explicitly instead of leaving their defaults.")
        return Task([f], [(f.name, args)], data._wrap(core, rng), hint)


class ParallelCallsEnv(SingleTurnFamily):
    """Trains `parallel_call_completeness`: one request, k independent operations, k calls in one
    reply (BFCL `parallel` and `parallel_multiple`, scored order-free). Partial credit is the fraction
    of calls made right. Difficulty: k (2 at 0, 4-6 at 1)."""

    capability = "parallel_call_completeness"

    def _build(self, rng: random.Random) -> Task:
        d = self.difficulty
        n = rng.randint(2 + round(2 * d), 2 + round(4 * d))
        f = self._choose(rng, CATALOG, lambda f: 0.0, 0.0)
        hint = (f"The request asks for {n} independent operations: reply with {n} tool calls in the same "
                "message, one per item, and do not stop after the first.")
        if f.vary and rng.random() < 0.4:  # "... for Paris, Berlin and Rome"
            arg_list, core, item_texts = data._vary_request(f, n, rng)
            self.drawn += [(f, a, t) for a, t in zip(arg_list, item_texts)]
            return Task([f], [(f.name, a) for a in arg_list], data._wrap(core, rng), hint)
        offered = [f] if rng.random() < 0.5 else [f, *_distractors(f, 1, 0.75, rng)]
        targets = offered + [rng.choice(offered) for _ in range(n - len(offered))]
        rng.shuffle(targets)
        calls: list[tuple[str, dict]] = []
        cores: list[str] = []
        for g in targets:
            for _ in range(20):  # no two identical calls
                args, core, _ = self._sample(g, rng, _some_optional(g, rng, 0.3), commands_only=True)
                if (g.name, args) not in calls:
                    break
            calls.append((g.name, args))
            cores.append(core)
        return Task(offered, calls, data._join_commands(cores, rng), hint)


class ToolCallFormatEnv(SingleTurnFamily):
    """Trains `tool_call_format`: well-formed, executable calls (valid JSON arguments, offered function,
    required params, declared types) when values are hard to write: quotes, backslashes, non-ASCII
    text, nested lists and objects. BFCL counts a reply that does not parse or decode as a failed
    task whatever its content, and a small model loses most BFCL tasks to exactly that. Tasks are the other families' kinds, mixed; the reward is half
    well-formedness (share of reference calls answered by a well-formed call) and half the argument
    match, so format is learned first; success is still a full match. Difficulty: share of
    JSON-hostile string values (15% -> 100%) and preference for nested values."""

    capability = "tool_call_format"
    FORMAT_WEIGHT = 0.5

    def _build(self, rng: random.Random) -> Task:
        sub = rng.choice(_MIXED)(difficulty=0.3)
        sub.tricky = 0.15 + 0.85 * self.difficulty
        task = sub._build(rng)
        strings = [s for _, a in task.calls for s in _strings(a)]
        notes = ["each call's arguments are one JSON object"]
        if any('"' in s for s in strings):
            notes.append('a double quote inside a string is written \\"')
        if any("\\" in s for s in strings):
            notes.append("a backslash inside a string is written \\\\")
        if not all(s.isascii() for s in strings):
            notes.append("non-ASCII letters, symbols and emoji are copied exactly")
        if any(isinstance(v, (list, dict)) for _, a in task.calls for v in a.values()):
            notes.append("every nested bracket and brace is closed")
        return replace(task, hint="Write calls that parse: " + "; ".join(notes) + ".")

    def _reward(self, m: Match) -> float:
        fmt = max(0.0, min(m.well_formed, m.n_reference) - m.extra * EXTRA_CALL_PENALTY) / m.n_reference
        return self.FORMAT_WEIGHT * fmt + (1 - self.FORMAT_WEIGHT) * m.reward()


class NoRedundantCallsEnv(SingleTurnFamily):
    """Trains `no_redundant_calls`: make each distinct call once, even when the request asks for it
    again in other words ("...; to be clear, that's just one lookup for Paris") or mentions an item of
    a list twice. BFCL expects exactly one call in `simple`/`multiple` and exactly one per item in
    `parallel`, so a repeated identical call fails the task there however right its arguments are.
    Tasks are the other families' kinds (one call, or several that may differ in one argument) with
    some calls restated at the end of the request; the reference makes each distinct call once. The
    reward is the argument match (a repeat is an extra call); a repeat is reported as failure
    "redundant_call" and is never a success. Difficulty: share of the calls restated (25% -> 100%,
    at least one), share of several-call tasks (20% -> 80%), restatements that no longer say it is
    the same request, and up to half the time a third mention."""

    capability = "no_redundant_calls"
    # a restatement asks for the same call again; the clear ones also say that it is the same one
    _CLEAR = ("To be clear, that is just one request: {c}.", "In other words, {c} - once is enough.",
              "Just to confirm, I need you to {c}, a single time.", "To repeat, {c}; same request, not a new one.")
    _PLAIN = ("Like I mentioned, {c}.", "As I said, {c}.", "Don't forget to {c}.", "Remember, {c}.")

    def _build(self, rng: random.Random) -> Task:
        d = self.difficulty
        several = rng.random() < 0.2 + 0.6 * d  # more items: the restated ones hide among them
        sub = (ParallelCallsEnv if several else rng.choice(_SINGLE))(difficulty=0.3)
        task = sub._build(rng)
        drawn = {call_key(f.name, v): (f, v, t) for f, v, t in sub.drawn}
        items = [drawn[call_key(n, a)] for n, a in task.calls]
        again = [x for x in items if rng.random() < 0.25 + 0.75 * d] or [rng.choice(items)]
        if rng.random() < d / 2:  # a third mention of the same call: a stronger pull to repeat it
            again.append(again[0])
        rng.shuffle(again)
        said = [rng.choice(self._PLAIN if rng.random() < d else self._CLEAR)
                .format(c=data._render(f, rng.choice(f.commands), values, texts, rng)) for f, values, texts in again]
        sep = "\n" if "\n" in task.request else " "  # after a numbered list, not inside its last item
        hint = (f"The request asks for some operations more than once: make each distinct call once, "
                f"{len(task.calls)} call(s) in all, never the same function with the same arguments twice.")
        return replace(task, request=task.request + sep + sep.join(said), hint=hint)

    def verdict(self) -> Verdict:
        v = super().verdict()
        repeated = repeated_calls(self._calls)
        v.details["repeated_calls"] = repeated
        if repeated:  # the capability's own failure first, whatever else went wrong
            v.details.update(failure="redundant_call", failure_params=repeated)
            v.success = False
        return v


_SINGLE = (FunctionSelectionEnv, ArgumentGroundingEnv, SchemaAdherenceEnv, RequestDetailEnv)
_MIXED = (*_SINGLE, ParallelCallsEnv)

FAMILIES: dict[str, type[SingleTurnFamily]] = {c.capability: c for c in (*_MIXED, ToolCallFormatEnv,
                                                                          NoRedundantCallsEnv)}


def make_family(capability: str, difficulty: float = 0.5) -> SingleTurnFamily:
    """A fresh built-in environment for `capability`."""
    if capability not in FAMILIES:
        raise ValueError(f"no built-in environment family for capability {capability!r}; "
                         f"known: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[capability](difficulty)
