"""Does the reply budget fit the answers? `max_new_tokens` against the length of reference replies.

A reply cut at `max_new_tokens` is malformed and earns nothing, so a budget shorter than most answers
leaves GRPO without reward whatever the policy learns. Measured, issue 7 (`runs/par_s2`): with
training.max_new_tokens 80 on bfcl/parallel, 93 of its 100 train tasks' reference replies need more
tokens (median 126); plain GRPO had no success in 79 of its 96 steps and every trained system ended
below the base. The pipeline measures each env it trains on before training and stops with the budget
to set, rather than spend hours on a run that cannot learn.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from trace_agents.agent.format import END_OF_TURN, format_call

# A few long answers may be cut (BFCL parallel has 8-call ones); more than this share is an error.
MAX_CUT_SHARE = 0.25


class BudgetError(ValueError):
    """The reply budget cuts too many reference replies of an env to learn from it."""


def reply_text(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """A reply making `calls` as the policy writes it: the calls one per line, then the end of turn."""
    return "\n".join(format_call(name, args) for name, args in calls) + END_OF_TURN


def reference_lengths(make_env: Callable[[], Any], tokenizer, limit: int = 100) -> list[int]:
    """Tokens of the reference reply of each of the env's first `limit` train seeds; [] for envs
    without a single-reply reference (multi-turn ones reply once per call)."""
    env = make_env()
    if getattr(env, "multi_turn", False) or not callable(getattr(env, "reference", None)):
        return []
    lengths = []
    for seed in env.seeds("train")[:limit]:
        env.reset(seed)
        reference = env.reference()
        if reference and isinstance(reference[0], list):  # calls per user turn: one reply per call
            return []
        lengths.append(len(tokenizer(reply_text(reference), add_special_tokens=False).input_ids))
    return lengths


def check_budget(name: str, lengths: list[int], max_new_tokens: int, setting: str) -> str | None:
    """None when every reference reply fits; a note when a few are cut; BudgetError when more than
    MAX_CUT_SHARE are, naming the budget that would fit nine in ten."""
    cut = sum(n > max_new_tokens for n in lengths)
    if not cut:
        return None
    ordered = sorted(lengths)
    p90 = ordered[math.ceil(0.9 * len(ordered)) - 1]
    summary = (f"{setting} {max_new_tokens} cuts {cut} of the {len(lengths)} reference replies of {name}'s train "
               f"tasks (median {ordered[len(ordered) // 2]} tokens, 90th percentile {p90})")
    if cut > MAX_CUT_SHARE * len(lengths):
        raise BudgetError(f"{summary}: a cut reply earns no reward, so training on {name} could not learn. "
                          f"Set {setting} to at least {16 * math.ceil(p90 / 16)}.")
    return summary
