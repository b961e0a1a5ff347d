"""TRACE efficiency reward (DESIGN.md §4; seed 000, HyperEyes arXiv 2605.07177).

After a rollout of task x with correctness acc and t tool calls (t clamped to ``max_calls``):

* ``mode="threshold"`` (default): correct → r_pos − lam·max(0, t − l(x)); wrong → r_neg.
  While l(x) = inf (before the first tightening) every correct rollout gets r_pos.
* ``mode="per_call"`` (the seed's literal formula): correct → r_pos − lam·t; wrong → r_neg.
  l(x) is still tracked (and saved) but does not enter the reward.
* ``mode="hypereyes"``: (r_pos if correct else r_neg) + the group-rank bonus of the published
  HyperEyes code (github.com/DeepExperience/HyperEyes, RL/relax-hypereyes/examples/HyperEyes/
  HyperEyes_reward_V1_2_w_dynamic_w_OPD_v0.py, read as reference, not copied), see
  `_hypereyes_bonus`. With the defaults r_pos=1, r_neg=0 this is the published ``acc + bonus``;
  ``lam`` is unused in this mode (the guard still applies).

l(x) is tightened only by `end_epoch()`: per task (``scope="task"``) or one bucket shared by all
tasks (``scope="global"``, the seed's literal wording), take the fewest calls among the epoch's
*correct* rollouts; if epoch ≥ warmup_epochs: new = min(old, best), a finite old one drops by at
most ``max_drop``, and new ≥ ``floor``. Buckets without a correct rollout keep their threshold.
Epochs are counted from 0; the caller (training loop / TRL callback) must call `end_epoch()`.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

MODES = ("threshold", "per_call", "hypereyes")
SCOPES = ("task", "global")
_GLOBAL = "__global__"  # the single bucket of scope="global"

# HyperEyes constants, as in the published reward (examples/HyperEyes/HyperEyes_reward_*.py).
_WITHIN = (0.05, 0.20)  # (worst rank, best rank) bonus of correct rollouts within the reference
_OVER = (-0.10, -0.02)  # same for correct rollouts over the reference
_WRONG_OUTSIDE = -0.1  # wrong answer with calls outside [l, 1.5·l]


def _rank_bonus(keys: list[tuple[int, int]], lo: float, hi: float) -> list[float]:
    """Best (smallest) distinct key → hi, worst → lo, linear in the rank of the distinct keys;
    ties share a rank, a single distinct key gets hi."""
    ranks = {k: r for r, k in enumerate(sorted(set(keys)))}
    m = len(ranks)
    return [hi if m == 1 else hi - (hi - lo) * ranks[k] / (m - 1) for k in keys]


class EfficiencyReward:
    """Stateful TRACE reward; see the module docstring for the formulas.

    Also a TRL reward function: ``reward(prompts=None, completions=None, *, task_id, correct,
    tool_calls, parallel_width=None, **ignored) -> list[float]`` with one list entry per
    completion (TRL passes dataset columns and extra fields as keyword lists). Completions that
    share a ``task_id`` in one call form a group (what hypereyes mode ranks within).
    """

    __name__ = "trace_efficiency"  # TRL logs reward functions under their __name__

    def __init__(
        self,
        r_pos: float = 1.0,
        r_neg: float = 0.0,
        lam: float = 0.05,
        mode: str = "threshold",
        scope: str = "task",
        warmup_epochs: int = 1,
        max_calls: int = 16,
        floor: int = 0,
        max_drop: int | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
        for name, value, low in (("lam", lam, 0), ("max_calls", max_calls, 1),
                                 ("warmup_epochs", warmup_epochs, 0), ("floor", floor, 0)):
            if not value >= low:  # `not >=` also rejects NaN
                raise ValueError(f"{name} must be >= {low}, got {value!r}")
        if max_drop is not None and not max_drop > 0:
            raise ValueError(f"max_drop must be None or > 0, got {max_drop!r}")
        # Reward-hacking guard: a wrong answer must never pay as much as the worst correct one,
        # else refusing hard tasks quickly becomes optimal.
        worst = r_pos - lam * max_calls
        if not worst > r_neg:
            raise ValueError(f"r_pos - lam*max_calls ({r_pos} - {lam}*{max_calls} = {worst}) must "
                             f"be strictly above r_neg ({r_neg}); lower lam or max_calls, "
                             "raise r_pos or lower r_neg")
        if mode == "hypereyes" and not r_pos + _OVER[0] > r_neg:
            raise ValueError(f"hypereyes mode: r_pos + {_OVER[0]} must be strictly above r_neg "
                             f"({r_pos} vs {r_neg})")
        self.config: dict[str, Any] = dict(r_pos=r_pos, r_neg=r_neg, lam=lam, mode=mode,
                                           scope=scope, warmup_epochs=warmup_epochs,
                                           max_calls=max_calls, floor=floor, max_drop=max_drop)
        self.epoch = 0
        self._thresholds: dict[str, float] = {}  # absent bucket = inf
        self._best: dict[str, int] = {}  # fewest calls of a correct rollout this epoch

    # ------------------------------------------------------------------ thresholds
    def _bucket(self, task_id: Any) -> str:
        return _GLOBAL if self.config["scope"] == "global" else str(task_id)

    def threshold(self, task_id: Any) -> float:
        return self._thresholds.get(self._bucket(task_id), math.inf)

    def _clamp(self, tool_calls: int) -> int:
        if tool_calls < 0:
            raise ValueError(f"tool_calls must be >= 0, got {tool_calls}")
        return min(int(tool_calls), self.config["max_calls"])

    def _record(self, task_id: Any, correct: bool, calls: int) -> None:
        # Hypereyes ignores 0-call correct answers as reference (likely lucky guesses), as published.
        if correct and (calls > 0 or self.config["mode"] != "hypereyes"):
            b = self._bucket(task_id)
            self._best[b] = min(self._best.get(b, calls), calls)

    def end_epoch(self) -> None:
        c = self.config
        if self.epoch >= c["warmup_epochs"]:
            for b, best in self._best.items():
                old = self._thresholds.get(b, math.inf)
                new = min(old, best)
                if math.isfinite(old) and c["max_drop"] is not None:
                    new = max(new, old - c["max_drop"])  # limit how fast the bar rises
                self._thresholds[b] = float(max(new, c["floor"]))
        self._best.clear()
        self.epoch += 1

    # ------------------------------------------------------------------ scoring
    def score(self, task_id: Any, correct: bool, tool_calls: int) -> float:
        """Reward of one rollout (recorded for this epoch). In hypereyes mode it is scored as a
        group of one."""
        return self.score_group(task_id, [correct], [tool_calls])[0]

    def score_group(self, task_id: Any, correct: Sequence[bool], tool_calls: Sequence[int],
                    parallel_width: Sequence[int] | None = None) -> list[float]:
        """Rewards of a group of rollouts of one task (all recorded for this epoch)."""
        if len(correct) != len(tool_calls) or (parallel_width is not None
                                               and len(parallel_width) != len(correct)):
            raise ValueError("correct, tool_calls and parallel_width must have equal lengths")
        c = self.config
        ok = [bool(x) for x in correct]
        calls = [self._clamp(t) for t in tool_calls]
        l = self.threshold(task_id)  # read before recording: this group cannot tighten its own bar
        if c["mode"] == "hypereyes":
            widths = list(parallel_width) if parallel_width is not None else [0] * len(ok)
            bonus = self._hypereyes_bonus(ok, calls, widths, l)
            out = [(c["r_pos"] if a else c["r_neg"]) + b for a, b in zip(ok, bonus)]
        else:
            excess = (lambda t: t) if c["mode"] == "per_call" else (lambda t: max(0.0, t - l))
            out = [c["r_pos"] - c["lam"] * excess(t) if a else c["r_neg"] for a, t in zip(ok, calls)]
        for a, t in zip(ok, calls):
            self._record(task_id, a, t)
        return [float(r) for r in out]

    @staticmethod
    def _hypereyes_bonus(ok: list[bool], calls: list[int], widths: list[int],
                         l: float) -> list[float]:
        """Bonus of the published HyperEyes reward (compute_group_bonus, reimplemented):

        * correct with 0 calls → 0 (a likely guess; also never becomes the reference);
        * correct with 0 < calls ≤ l → +0.20 … +0.05 by rank of (calls, parallel_width) among those,
          smaller first; correct with calls > l → −0.02 … −0.10 by the same rank among those
          (so the penalty grows with the excess through the rank, not linearly);
        * wrong → −0.1 if calls < l or calls > 1.5·l (too little exploration, or flailing), else 0.
        Differences: the published reference l is a per-sample SFT call count (its dynamic cache
        is disabled there) and also demands total searches ≤ the reference's; here l is the
        TRACE threshold l(x) (calls only) and, while it is inf, the group's fewest calls among
        its correct rollouts with calls > 0. With no reference at all, wrong answers get 0.
        """
        if math.isinf(l):
            l = min((t for a, t in zip(ok, calls) if a and t > 0), default=math.inf)
        bonus = [0.0] * len(ok)
        for lo_hi, pick in ((_WITHIN, lambda t: t <= l), (_OVER, lambda t: t > l)):
            idx = [i for i in range(len(ok)) if ok[i] and calls[i] > 0 and pick(calls[i])]
            for i, b in zip(idx, _rank_bonus([(calls[i], widths[i]) for i in idx], *lo_hi)):
                bonus[i] = b
        if math.isfinite(l):
            for i in range(len(ok)):
                if not ok[i] and (calls[i] < l or calls[i] > 1.5 * l):
                    bonus[i] = _WRONG_OUTSIDE
        return bonus

    def __call__(self, prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float]:
        task_ids, correct, tool_calls = kwargs["task_id"], kwargs["correct"], kwargs["tool_calls"]
        widths = kwargs.get("parallel_width")
        groups: dict[str, list[int]] = {}
        for i, tid in enumerate(task_ids):  # group by task, keeping first-seen order
            groups.setdefault(str(tid), []).append(i)
        out = [0.0] * len(task_ids)
        for idx in groups.values():
            rewards = self.score_group(task_ids[idx[0]], [correct[i] for i in idx],
                                       [tool_calls[i] for i in idx],
                                       None if widths is None else [widths[i] for i in idx])
            for i, r in zip(idx, rewards):
                out[i] = r
        return out

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (thresholds are finite; an absent task means inf)."""
        return {"config": dict(self.config), "epoch": self.epoch,
                "thresholds": dict(self._thresholds), "records": dict(self._best)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore config (re-validated), thresholds, this epoch's records and the epoch counter."""
        # Re-running __init__ re-validates the saved config, so a default-constructed instance
        # becomes an exact copy of the saved one.
        self.__init__(**state["config"])  # type: ignore[misc]
        self.epoch = int(state["epoch"])
        self._thresholds = {str(k): float(v) for k, v in state["thresholds"].items()
                            if v not in (None, "inf")}  # inf = absent
        self._best = {str(k): int(v) for k, v in state["records"].items()}
