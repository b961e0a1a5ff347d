"""Programmatic probes: deterministic labellers for capabilities an algorithm can decide
(`--analyst rules`, the offline default). Same output as the LLM analyst, so selection does not
care who labelled.

Each probe reads one trajectory (and, where the environment has one, its reference solution) and
says LACKING, PRESENT, or NA when the task did not call for that capability. Probes judge the
*agent's behaviour*, not the outcome: the contrast between passed and failed trajectories is left to
selection (Δ, coverage).
"""

from __future__ import annotations

import ast
import json
import random
from dataclasses import dataclass
from typing import Any, Callable

from trace_agents.analysis.labels import CapabilityLabels, Label, RunLabels
from trace_agents.types import Trajectory

NA, PRESENT, LACKING = Label.NA, Label.PRESENT, Label.LACKING


@dataclass
class Reference:
    """What the environment says a correct episode does."""

    calls: list[dict[str, dict[str, list]]] | None = None
    """Single-turn: per expected call {name: {param: [allowed values, "" = may be omitted]}}."""
    turns: list[list[str]] | None = None
    """Multi-turn: per user turn, the function names of the reference calls."""


def reference_of(traj: Trajectory) -> Reference | None:
    """The reference of a trajectory's task: BFCL's possible answers, or the reference a synthetic
    environment put in its verdict details (`info["reference"]`)."""
    if traj.env.startswith("bfcl/"):
        return _bfcl_reference(traj)
    ref = traj.info.get("reference")
    if not ref:
        return None
    if isinstance(ref[0], list):  # multi-turn: per turn, call strings
        return Reference(turns=[[c.split("(", 1)[0] for c in turn] for turn in ref])
    # single-turn: exact reference values become one-element allowed lists, BFCL-style
    return Reference(calls=[{c["name"]: {k: [v] for k, v in c["arguments"].items()}} for c in ref])


def _bfcl_reference(traj: Trajectory) -> Reference | None:
    from trace_agents.envs.bfcl import load_category

    category = traj.env.split("/", 1)[1]
    answer = load_category(category)[1].get(traj.task_id)
    if answer is None:
        return None
    truth = answer["ground_truth"]
    if category.startswith("multi_turn"):
        return Reference(turns=[[ast.parse(c).body[0].value.func.id for c in turn] for turn in truth])
    return Reference(calls=truth)


# ---- reading a trajectory -----------------------------------------------------------------------
@dataclass
class Seen:
    """A trajectory read once for all probes: its calls, offered schemas and reference."""

    traj: Trajectory
    ref: Reference | None
    calls: list[tuple[str, dict | None]]
    schemas: dict[str, dict]

    @classmethod
    def of(cls, traj: Trajectory, ref: Reference | None = None) -> "Seen":
        return cls(traj, ref, _calls(traj), _schemas(traj))


def _calls(traj: Trajectory) -> list[tuple[str, dict | None]]:
    out = []
    for m in traj.messages:
        for c in m.tool_calls or []:
            try:
                args = json.loads(c.function.arguments)
            except json.JSONDecodeError:
                args = None
            out.append((c.function.name, args if isinstance(args, dict) else None))
    return out


def _schemas(traj: Trajectory) -> dict[str, dict]:
    fns = [t.get("function", t) for t in traj.tools]
    return {f["name"]: f.get("parameters", {}) for f in fns}


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list,), "object": (dict,),
}


def _type_ok(value: Any, schema: dict) -> bool:
    expected = _JSON_TYPES.get(schema.get("type", ""))
    if expected is None:
        return True
    if isinstance(value, bool) and bool not in expected:  # JSON true is not an integer
        return False
    return isinstance(value, expected)


def _same(value: Any, allowed: Any) -> bool:
    """BFCL-style value match: case-insensitive for strings, numerically for numbers."""
    if isinstance(value, str) and isinstance(allowed, str):
        return value.strip().lower() == allowed.strip().lower()
    if isinstance(value, (int, float)) and isinstance(allowed, (int, float)) and not isinstance(value, bool):
        return float(value) == float(allowed)
    return value == allowed


def _match_calls(seen: Seen) -> list[tuple[dict, dict[str, list]]]:
    """Pairs (agent args, reference params) for calls whose function name matches a reference call,
    each reference call used at most once, in order."""
    pool = [next(iter(c.items())) for c in seen.ref.calls or []] if seen.ref else []
    pairs = []
    for name, args in seen.calls:
        for k, (ref_name, params) in enumerate(pool):
            if ref_name == name and args is not None:
                pairs.append((args, params))
                pool.pop(k)
                break
    return pairs


# ---- probes --------------------------------------------------------------------------------------
def tool_call_format(seen: Seen) -> Label:
    if seen.traj.info.get("format_errors"):
        return LACKING
    return PRESENT if seen.calls else NA


def function_selection(seen: Seen) -> Label:
    names = [n for n, _ in seen.calls]
    offered = seen.schemas
    if any(n not in offered for n in names):
        return LACKING  # an invented function
    if not names or len(offered) < 2:
        return NA  # nothing chosen, or nothing to choose between
    if seen.ref and seen.ref.calls is not None:
        wanted = {next(iter(c)) for c in seen.ref.calls}
        return PRESENT if set(names) == wanted else LACKING
    return PRESENT


def argument_schema_adherence(seen: Seen) -> Label:
    offered, judged = seen.schemas, False
    for name, args in seen.calls:
        if name not in offered or args is None:
            continue
        judged = True
        props, required = offered[name].get("properties", {}), offered[name].get("required", [])
        if any(r not in args for r in required) or any(a not in props for a in args):
            return LACKING
        if not all(_type_ok(v, props[a]) for a, v in args.items()):
            return LACKING
    return PRESENT if judged else NA


def argument_value_grounding(seen: Seen) -> Label:
    """Values of the right call match the reference (or, without one, appear in the request)."""
    if seen.ref and seen.ref.calls is not None:
        pairs = _match_calls(seen)
        if not pairs:
            return NA
        for args, params in pairs:
            for p, v in args.items():
                allowed = params.get(p)
                if allowed is not None and not any(_same(v, a) for a in allowed if a != ""):
                    return LACKING
        return PRESENT
    text = " ".join((m.content or "") for m in seen.traj.messages if m.role in ("user", "tool")).lower()
    values = [v for _, a in seen.calls if a for v in a.values() if isinstance(v, (str, int, float)) and not isinstance(v, bool)]
    if not values:
        return NA
    return PRESENT if all(str(v).lower() in text for v in values) else LACKING


def request_detail_coverage(seen: Seen) -> Label:
    """Optional parameters that the request asked for (the reference does not allow omitting them)."""
    if not seen.ref or seen.ref.calls is None:
        return NA
    pairs, judged = _match_calls(seen), False
    for args, params in pairs:
        needed = [p for p, allowed in params.items() if "" not in allowed]
        judged = judged or bool(needed)
        if any(p not in args for p in needed):
            return LACKING
    return PRESENT if judged else NA


def parallel_call_completeness(seen: Seen) -> Label:
    if not seen.ref or not seen.ref.calls or len(seen.ref.calls) < 2:
        return NA
    return PRESENT if len(seen.calls) >= len(seen.ref.calls) else LACKING


def no_redundant_calls(seen: Seen) -> Label:
    calls = [(n, json.dumps(a, sort_keys=True)) for n, a in seen.calls]
    if len(calls) < 2:
        return NA
    return LACKING if len(set(calls)) < len(calls) else PRESENT


def multi_step_task_completion(seen: Seen) -> Label:
    """Every user turn gets at least as many calls as the reference needs (no stopping early)."""
    if not seen.ref or seen.ref.turns is None:
        return NA
    decoded = seen.traj.info.get("decoded") or []
    for t, wanted in enumerate(seen.ref.turns):
        done = sum(len(step) for step in decoded[t]) if t < len(decoded) else 0
        if wanted and done < len(wanted):
            return LACKING
    return PRESENT


def _is_error(content: str) -> bool:
    """A failed tool call: our executor's "Error during execution: ..." or BFCL's {"error": ...}."""
    if content.startswith("Error"):
        return True
    if content.startswith("{"):
        try:
            value = json.loads(content)
        except json.JSONDecodeError:
            return False
        return isinstance(value, dict) and "error" in value
    return False


def error_recovery(seen: Seen) -> Label:
    """After a tool error, the next call is different (the agent adapts instead of repeating)."""
    msgs, seen_error = seen.traj.messages, False
    for i, m in enumerate(msgs):
        if m.role == "tool" and _is_error(m.content or ""):
            seen_error = True
            failed = next((x for x in reversed(msgs[:i]) if x.role == "assistant"), None)
            retry = next((x for x in msgs[i + 1 :] if x.role == "assistant"), None)
            if retry is None or not retry.tool_calls:
                return LACKING
            if failed and failed.tool_calls and [c.function for c in retry.tool_calls] == [c.function for c in failed.tool_calls]:
                return LACKING
    return PRESENT if seen_error else NA


Probe = Callable[[Seen], Label]

PROBES: dict[str, tuple[Probe, str]] = {
    "tool_call_format": (tool_call_format, "Writes every tool call in the required format, well-formed and complete, so that it can be executed."),
    "function_selection": (function_selection, "Chooses the function(s) that match the request among similar offered ones and never invents a function."),
    "argument_schema_adherence": (argument_schema_adherence, "Fills arguments as the schema demands: every required parameter, no invented parameters, values of the declared types."),
    "argument_value_grounding": (argument_value_grounding, "Extracts argument values exactly from the request or earlier tool results (numbers, names, units, strings), converting wording into the expected value."),
    "request_detail_coverage": (request_detail_coverage, "Passes the optional parameters that the request explicitly asks for, instead of leaving them at defaults."),
    "parallel_call_completeness": (parallel_call_completeness, "Issues one call per requested item when a request asks for several independent operations."),
    "no_redundant_calls": (no_redundant_calls, "Avoids repeating identical calls; each call adds information or changes state."),
    "multi_step_task_completion": (multi_step_task_completion, "Carries a multi-step request through every required action in each turn instead of stopping early."),
    "error_recovery": (error_recovery, "After a tool returns an error, changes the call (fixes arguments or takes another route) instead of repeating it or giving up."),
}


def probe_all(trajectories: list[Trajectory]) -> list[dict[str, Label]]:
    """Every probe's label for every trajectory (computed once; runs only resample)."""
    out = []
    for traj in trajectories:
        seen = Seen.of(traj, reference_of(traj))
        out.append({name: probe(seen) for name, (probe, _) in PROBES.items()})
    return out


def label_runs(trajectories: list[Trajectory], runs: int, sample_fraction: float = 0.8) -> list[RunLabels]:
    """Labels of `runs` runs. The probes are deterministic, so independent runs differ only in which
    trajectories they see: run r labels a seeded subsample (`sample_fraction`, without replacement).
    K-of-N then measures whether a capability's selection survives resampling."""
    labelled = probe_all(trajectories)
    result = []
    for run in range(runs):
        rng = random.Random(f"rules-run-{run}")
        idx = range(len(trajectories))
        if sample_fraction < 1:
            idx = sorted(rng.sample(idx, max(1, round(sample_fraction * len(trajectories)))))
        caps = {name: CapabilityLabels() for name in PROBES}
        for i in idx:
            t = trajectories[i]
            for name, label in labelled[i].items():
                caps[name].add(t.id, label, t.success)
        result.append(RunLabels(run=run + 1, capabilities=caps, definitions={n: d for n, (_, d) in PROBES.items()}))
    return result
