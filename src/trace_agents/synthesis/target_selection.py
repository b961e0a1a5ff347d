"""`function_selection` drills in the target's own tool schemas (stage 2, BFCL targets).

The catalog family (families.FunctionSelectionEnv) teaches selection on the warm-up catalog's
functions; at 135M its adapter transfers only part of its gain to BFCL (README, issue 7). This env
builds each task from the target's *train* split instead, so the schemas, descriptions and request
wording are the target's own: a train request and its reference call, offered among the task's own
functions plus look-alike distractors drawn from other train tasks. It never reads the test split
(a test pins this), so the held-out evaluation stays clean; the plain-GRPO baseline trains on the same
train tasks without the added distractors.

Seeds: train 0..99,999 and test 1,000,000..1,000,999, as the catalog families (the env's own test
seeds recombine the same train tasks with other distractors: they measure the capability, the
target's test split measures transfer). Difficulty in [0, 1]: more added distractors (0-1 at 0, 2-6 at
1) and a larger share of them look-alikes (25% -> 100%, by shared name and description words). The
task and distractor draws use their own streams, so the request of a seed does not depend on the
difficulty (common random numbers, as calibration expects). Verdicts are BFCL's own AST checker
against the task's possible answers.
"""

from __future__ import annotations

import copy
import random
import re
from functools import lru_cache

from trace_agents.agent.format import to_openai_tool
from trace_agents.envs.base import Split
from trace_agents.envs.bfcl import BfclEnv, load_category, split_of
from trace_agents.synthesis.families import TEST_SEEDS, TRAIN_SEEDS
from trace_agents.types import Message

_STOP = {"the", "and", "for", "with", "given", "from", "based", "that", "this", "specified", "specific", "into",
         "note", "provided", "function", "python", "syntax", "which", "their", "about", "certain", "using"}


def _words(f: dict) -> frozenset[str]:
    text = f"{f['name'].replace('.', ' ').replace('_', ' ')} {f.get('description', '')}".lower()
    return frozenset(w for w in re.findall(r"[a-z]{3,}", text) if w not in _STOP)


def _name_words(f: dict) -> frozenset[str]:
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", f["name"]).replace(".", " ").replace("_", " ").lower()
    return frozenset(w for w in spaced.split() if w not in {"get", "calc", "calculate", "find", "search"})


def _likeness(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / max(1, len(a | b))


def _same_job(f: dict, g: dict) -> bool:
    """Two train functions that would both serve a request (BFCL repeats a tool under other names:
    compound_interest, financial.compound_interest, calc_Compound_Interest): such a distractor would
    make a right call score 0, so it is never offered."""
    return _likeness(_name_words(f), _name_words(g)) >= 0.5 or _likeness(_words(f), _words(g)) >= 0.5


@lru_cache(maxsize=None)
def _train_material(category: str) -> tuple[tuple[str, ...], tuple[dict, ...]]:
    """(train task ids with one reference call, every distinct function of the train split)."""
    entries, answers = load_category(category)
    ids = sorted(i for i, s in split_of(category).items() if s == "train" and len(answers[i]["ground_truth"]) == 1)
    functions = {f["name"]: f for i in ids for f in entries[i]["function"]}
    return tuple(ids), tuple(functions[n] for n in sorted(functions))


class TargetFunctionSelectionEnv(BfclEnv):
    """Trains `function_selection` on the target's train requests among more look-alike functions
    than BFCL offers (BFCL `multiple`: pick the one right function, never an invented one)."""

    capability = "function_selection"

    def __init__(self, difficulty: float = 0.5, category: str = "multiple"):
        if isinstance(difficulty, bool) or not isinstance(difficulty, (int, float)) or not 0 <= difficulty <= 1:
            raise ValueError(f"difficulty must be a number between 0 and 1, got {difficulty!r}")
        if category.startswith("multi_turn"):
            raise ValueError(f"{category!r} is multi-turn; target function-selection drills need a single-turn category")
        super().__init__(category)
        self.checker_category = "multiple"  # the answer is one of several offered functions
        self.difficulty = float(difficulty)
        self.name = f"target/{self.capability}"
        self.ids, self.pool = _train_material(category)
        if not self.ids:
            raise ValueError(f"bfcl/{category} has no train task with a single reference call")

    def seeds(self, split: Split) -> list[int]:
        if split not in ("train", "test"):
            raise ValueError(f"unknown split {split!r}: use train or test")
        return list(TRAIN_SEEDS if split == "train" else TEST_SEEDS)

    def reset(self, seed: int) -> list[Message]:
        task_id = random.Random(f"target_fs/task/{seed}").choice(self.ids)
        messages = super().reset(int(task_id.rsplit("_", 1)[1]))
        offered = self.entry["function"] + self._distractors(random.Random(f"target_fs/extra/{seed}"))
        random.Random(f"target_fs/order/{seed}").shuffle(offered)
        self.entry = {**copy.deepcopy(self.entry), "function": offered}
        self.functions = offered
        self.tools = [to_openai_tool(f) for f in offered]
        self.task_id = f"{self.capability}_{seed}"
        return messages

    def _distractors(self, rng: random.Random) -> list[dict]:
        d = self.difficulty
        taken = {f["name"] for f in self.entry["function"]}
        target = next(f for f in self.entry["function"] if f["name"] == self.answer_name)
        rest = [f for f in self.pool if f["name"] not in taken and not _same_job(f, target)]
        near = sorted(rest, key=lambda f: (-_likeness(_words(target), _words(f)), f["name"]))
        k = min(len(rest), rng.randint(round(2 * d), 1 + round(5 * d)))
        chosen: list[dict] = []
        for _ in range(k):
            pool = near[:8] if rng.random() < 0.25 + 0.75 * d else near
            pick = rng.choice([f for f in pool if f not in chosen] or [f for f in near if f not in chosen])
            chosen.append(pick)
        return chosen

    @property
    def answer_name(self) -> str:
        return next(iter(self.answer[0]))

    def hint(self) -> str:
        alike = sorted(self.functions, key=lambda f: -_likeness(_words(f), _words(self._answer_function())))[:3]
        return ("Several offered functions look alike: " + "; ".join(
            f"{f['name']} ({f.get('description', '').split('.')[0].lower()})" for f in sorted(alike, key=lambda f: f["name"]))
            + ". Match the request to one of these descriptions, call only that function, and take every"
              " value from the request.")

    def _answer_function(self) -> dict:
        return next(f for f in self.functions if f["name"] == self.answer_name)

    def reference(self) -> list[tuple[str, dict]]:
        """One accepted solution: each param's first accepted value ('' = may be left out)."""
        (name, params), = self.answer[0].items()
        return [(name, {k: copy.deepcopy(v[0]) for k, v in params.items() if v and v[0] != ""})]
