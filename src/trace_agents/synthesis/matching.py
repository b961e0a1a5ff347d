"""The argument checker of the single-turn synthetic families: the agent's calls against the reference
calls, by algorithm, with BFCL's AST-checker semantics.

- Function names match exactly (a server that forbids dots may send `math_gcd` for `math.gcd`).
- Arguments: the key set of the reference (required + the optional params the request asked for);
  an unrequested optional param is tolerated only at its schema default. Types as BFCL checks them:
  an integer param takes no 5.0 and no "5", a float param takes 5, booleans are not numbers; array
  items and object fields are checked too. Values: strings case-insensitive and stripped, numbers
  numerically, lists in order, dicts by key, recursively.
- Calls are matched order-insensitively (maximum bipartite matching), so parallel replies may come in
  any order; each reference call is used once.

Reward: partial credit, as in the paper: (matched reference calls − EXTRA_CALL_PENALTY · calls beyond
the reference count) / reference count, clipped to [0, 1]. Success means full credit: every
reference call matched and no extra call.

`details["failure"]` is the most basic thing that went wrong, in the vocabulary of the analysis probes:
no_tool_call, bad_arguments (not a JSON object), wrong_function (a different or invented function),
missing_param, extra_param (invented, or an unrequested optional off its default), wrong_type,
wrong_value, missing_call, extra_call. `repeated_calls` names the functions called twice with identical
arguments (what the `no_redundant_calls` probe looks for). `failure_params` names the parameters (param kinds) or the
functions (call kinds) concerned.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from trace_agents.types import Message

EXTRA_CALL_PENALTY = 0.5
"""Cost of each call beyond the reference count, in units of one matched reference call."""

FAILURE_ORDER = ("no_tool_call", "bad_arguments", "wrong_function", "missing_param", "extra_param",
                 "wrong_type", "wrong_value", "missing_call", "extra_call")
_PARAM_KINDS = ("missing_param", "extra_param", "wrong_type", "wrong_value")

Call = tuple[str, "dict[str, Any] | None"]  # arguments None: they were not a JSON object


def parse_calls(message: Message, offered: list[str]) -> list[Call]:
    """The tool calls of an assistant message as (name, arguments or None)."""
    out: list[Call] = []
    for c in message.tool_calls or []:
        try:
            args: dict | None = c.function.parsed_arguments()
        except ValueError:
            args = None
        out.append((_canonical(c.function.name, offered), args))
    return out


def call_key(name: str, args: dict | None) -> tuple[str, str]:
    """Identity of a call: two calls with equal keys are the same call made twice."""
    return name, json.dumps(args, sort_keys=True)


def repeated_calls(calls: list[Call]) -> list[str]:
    """Functions called more than once with identical (decoded) arguments, each named once."""
    seen: set[tuple[str, str]] = set()
    repeated = []
    for name, args in calls:
        if args is not None:  # undecodable arguments are bad_arguments, not a repeat
            key = call_key(name, args)
            if key in seen:
                repeated.append(name)
            seen.add(key)
    return list(dict.fromkeys(repeated))


def _canonical(name: str, offered: list[str]) -> str:
    matches = [n for n in offered if n.replace(".", "_") == name]
    return matches[0] if name not in offered and len(matches) == 1 else name


# ---- values and types -------------------------------------------------------------------------
def same(value: Any, ref: Any) -> bool:
    if isinstance(ref, str):
        return isinstance(value, str) and value.strip().lower() == ref.strip().lower()
    if isinstance(ref, bool) or isinstance(value, bool):
        return value is ref
    if isinstance(ref, (int, float)):
        return isinstance(value, (int, float)) and math.isclose(value, ref, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(ref, list):
        return isinstance(value, list) and len(value) == len(ref) and all(map(same, value, ref))
    if isinstance(ref, dict):
        return isinstance(value, dict) and value.keys() == ref.keys() and all(same(value[k], ref[k]) for k in ref)
    return value == ref


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "float": (int, float), "number": (int, float), "boolean": (bool,),
    "array": (list,), "tuple": (list,), "dict": (dict,), "object": (dict,),
}


def type_ok(value: Any, schema: dict) -> bool:
    expected = _TYPES.get(schema.get("type", ""))
    if expected is None:
        return True
    if isinstance(value, bool) and bool not in expected or not isinstance(value, expected):
        return False
    if isinstance(value, list) and "items" in schema:
        return all(type_ok(v, schema["items"]) for v in value)
    if isinstance(value, dict) and "properties" in schema:
        props = schema["properties"]
        return set(value) <= set(props) and all(type_ok(v, props[k]) for k, v in value.items())
    return True


def check_call(args: dict, ref: dict, params: dict) -> list[tuple[str, list[str]]]:
    """What is wrong with `args` for a call whose reference arguments are `ref` ([] = it matches);
    `params` is the function's "parameters" schema."""
    props = params.get("properties", {})

    def tolerated(p: str) -> bool:  # an unrequested optional param left at its default
        return p in props and "default" in props[p] and same(args[p], props[p]["default"])

    problems = {
        "missing_param": [p for p in ref if p not in args],
        "extra_param": [p for p in args if p not in ref and not tolerated(p)],
        "wrong_type": [p for p in args if p in ref and p in props and not type_ok(args[p], props[p])],
    }
    problems["wrong_value"] = [p for p in args if p in ref and p not in problems["wrong_type"]
                               and not same(args[p], ref[p])]
    return [(kind, ps) for kind, ps in problems.items() if ps]


def well_formed(name: str, args: dict | None, schemas: dict[str, dict]) -> bool:
    """Executable as written: JSON-object arguments, an offered function, every required param, no
    unknown param, every value of its declared type."""
    if args is None or name not in schemas:
        return False
    props, required = schemas[name].get("properties", {}), schemas[name].get("required", [])
    return (all(r in args for r in required) and set(args) <= set(props)
            and all(type_ok(v, props[k]) for k, v in args.items()))


# ---- matching ---------------------------------------------------------------------------------
def _max_matching(ok: list[list[bool]]) -> dict[int, int]:
    """Reference index -> call index, as many pairs as possible (Kuhn's augmenting paths)."""
    owner: dict[int, int] = {}  # call -> reference

    def place(r: int, seen: set[int]) -> bool:
        for c, good in enumerate(ok[r]):
            if good and c not in seen:
                seen.add(c)
                if c not in owner or place(owner[c], seen):
                    owner[c] = r
                    return True
        return False

    for r in range(len(ok)):
        place(r, set())
    return {r: c for c, r in owner.items()}


@dataclass
class Match:
    n_reference: int
    n_calls: int
    matched: int
    well_formed: int
    problems: list[dict] = field(default_factory=list)  # {"kind", "function", "params"}

    @property
    def extra(self) -> int:
        return max(0, self.n_calls - self.n_reference)

    @property
    def success(self) -> bool:
        return self.matched == self.n_reference == self.n_calls

    def reward(self, penalty: float = EXTRA_CALL_PENALTY) -> float:
        return min(1.0, max(0.0, (self.matched - penalty * self.extra) / self.n_reference))

    @property
    def failure(self) -> str | None:
        if self.n_calls == 0:
            return "no_tool_call"
        kinds = {p["kind"] for p in self.problems}
        return next((k for k in FAILURE_ORDER if k in kinds), None)

    def failure_params(self) -> list[str]:
        kind = self.failure
        out = [x for p in self.problems if p["kind"] == kind
               for x in (p["params"] if kind in _PARAM_KINDS else [p["function"]])]
        return list(dict.fromkeys(out))


def match_calls(calls: list[Call], reference: list[tuple[str, dict]], functions: list[dict]) -> Match:
    """Score `calls` against `reference`; `functions` are the offered (bare, BFCL-style) schemas."""
    schemas = {f["name"]: f.get("parameters", {}) for f in functions}
    ok = [[a is not None and n == rn and not check_call(a, ra, schemas.get(rn, {})) for n, a in calls]
          for rn, ra in reference]
    pairs = _max_matching(ok)
    problems = [{"kind": "bad_arguments", "function": n, "params": []} for n, a in calls if a is None]
    free = [c for c, (_, a) in enumerate(calls) if a is not None and c not in pairs.values()]
    for r, (rn, ra) in enumerate(reference):
        if r in pairs:
            continue
        same_name = [c for c in free if calls[c][0] == rn]
        if same_name:  # the right function, wrong arguments: say which
            found = [check_call(calls[c][1], ra, schemas.get(rn, {})) for c in same_name]  # type: ignore[arg-type]
            best = min(range(len(found)), key=lambda i: sum(len(ps) for _, ps in found[i]))
            free.remove(same_name[best])
            problems += [{"kind": k, "function": rn, "params": ps} for k, ps in found[best]]
        elif free:
            problems.append({"kind": "wrong_function", "function": calls[free.pop(0)][0], "params": []})
        else:
            problems.append({"kind": "missing_call", "function": rn, "params": []})
    problems += [{"kind": "extra_call", "function": calls[c][0], "params": []} for c in free]
    return Match(n_reference=len(reference), n_calls=len(calls), matched=len(pairs),
                 well_formed=sum(well_formed(n, a, schemas) for n, a in calls), problems=problems)
