"""Multi-turn warm-up examples: call, read the tool result, call again with what it returned, stop.

The single-turn examples of warmup/data.py teach the reply format; they never show a tool result,
so a model warmed on them alone keeps calling after its work is done (on a multi-step environment
it burned all 6 steps in every episode and solved 0 of 16). These teach the *protocol* of a
conversation with tools: a name is turned into an id by one call, the id read from the result is
passed to the next call, and a short text reply without calls ends the episode.

Own domains and words (tickets, playlists, recipes, ...): none of the names of the `lookup_then_act`
environment (synthesis/lookup.py) or of BFCL, so the warm-up teaches the shape, not those tasks.
Each example is one assistant turn of a seeded conversation: the history before it is the prompt,
that turn is the target (a turn of calls, or the closing text).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from trace_agents.agent.format import function_doc
from trace_agents.types import FunctionCall, Message, ToolCall
from trace_agents.warmup.data import Example


@dataclass(frozen=True)
class _Domain:
    noun: str
    lookup: str
    key: str
    id_field: str
    prefix: str
    names: tuple[str, ...]
    actions: tuple[tuple[str, str, str, str, tuple], ...]  # (name, description, param, type, values)


_DOMAINS = (
    _Domain("ticket", "find_ticket", "subject", "ticket_id", "T-",
            ("printer jam", "vpn outage", "login loop", "slow laptop", "broken badge", "email bounce"),
            (("close_ticket", "Close a support ticket.", "resolution", "string", ("fixed", "duplicate", "wont fix")),
             ("escalate_ticket", "Escalate a ticket to a support level.", "level", "integer", (2, 3)))),
    _Domain("playlist", "get_playlist", "title", "playlist_id", "P-",
            ("morning run", "road trip", "study focus", "rainy day", "dinner jazz", "party mix"),
            (("add_song", "Add a song to a playlist.", "song", "string", ("Blue Sky", "Night Drive", "Golden Hour")),
             ("set_volume", "Set the playback volume of a playlist.", "volume", "integer", (20, 40, 60, 80)))),
    _Domain("recipe", "search_recipe", "dish", "recipe_id", "R-",
            ("lentil soup", "banana bread", "pad thai", "apple pie", "veggie chili", "fish tacos"),
            (("save_recipe", "Save a recipe into a folder.", "folder", "string", ("weeknight", "favorites", "holiday")),
             ("scale_recipe", "Scale a recipe to a number of servings.", "servings", "integer", (2, 4, 6, 8)))),
    _Domain("vehicle", "find_vehicle", "plate", "vehicle_id", "V-",
            ("KX-2041", "BT-7730", "ZR-1188", "MN-5402", "QA-9915", "HD-3307"),
            (("book_service", "Book a service appointment for a vehicle.", "day", "string", ("Tuesday", "Thursday", "Saturday")),
             ("log_mileage", "Record a vehicle's odometer reading.", "miles", "integer", (12000, 48250, 90310)))),
    _Domain("project", "find_project", "project_name", "project_id", "PR-",
            ("apollo", "greenfield", "moonshot", "atlas", "harbor", "northstar"),
            (("add_member", "Add a member to a project by email.", "email", "string", ("kai@corp.test", "liv@corp.test")),
             ("set_priority", "Set a project's priority from 1 to 5.", "priority", "integer", (1, 3, 5)))),
)
_CLOSINGS = ("Done.", "All done.", "Done: everything you asked for is complete.", "Finished.")


def _schemas(d: _Domain) -> list[dict]:
    key = d.key.replace("_", " ")
    out = [function_doc(d.lookup, f"Find a {d.noun} by its {key}; returns its {d.id_field}.",
                        {d.key: ("string", f"The {key} of the {d.noun}.")})]
    for name, desc, param, kind, _ in d.actions:
        out.append(function_doc(name, desc, {d.id_field: ("string", f"The {d.noun} id from {d.lookup}."),
                                             param: (kind, param.replace("_", " ").capitalize() + ".")}))
    return out


def _op(d: _Domain, rng: random.Random, taken: set) -> tuple[tuple, tuple, str, str]:
    """(lookup call, action call, id, request clause) for one operation on a fresh record."""
    name = rng.choice([n for n in d.names if (d.lookup, n) not in taken])
    taken.add((d.lookup, name))
    ident = f"{d.prefix}{rng.randint(100, 9999)}"
    action, _, param, _, values = rng.choice(d.actions)
    value = rng.choice(values)
    clause = f"{action.replace('_', ' ')} for the {d.noun} '{name}' with {param.replace('_', ' ')} {value}"
    return (d.lookup, {d.key: name}), (action, {d.id_field: ident, param: value}), ident, clause


def _assistant(calls: list[tuple[str, dict]], turn: int) -> Message:
    tcs = [ToolCall(id=f"call_{turn}_{i}", function=FunctionCall(name=n, arguments=json.dumps(a)))
           for i, (n, a) in enumerate(calls)]
    return Message(role="assistant", content="", tool_calls=tcs)


def conversation(seed: int) -> tuple[list[dict], list[Message], list[list[tuple[str, dict]]], str, dict[str, str]]:
    """(functions, user message, call turns in order, closing text, id each lookup returns keyed by
    the lookup call's JSON) of one seeded conversation. 1-2 operations; with two, the lookups are
    sometimes made together in one turn."""
    rng = random.Random(f"warmup-followup/{seed}")
    domains = rng.sample(_DOMAINS, 3)
    n_ops = rng.choice((1, 1, 2))
    used = [rng.choice(domains[:2]) for _ in range(n_ops)]
    taken: set = set()
    ops = [_op(d, rng, taken) for d in used]
    offered = list(dict.fromkeys(used)) + [d for d in domains if d not in used][:1]
    rng.shuffle(offered)
    functions = [f for d in offered for f in _schemas(d)]
    request = "Please " + " and then ".join(clause for *_, clause in ops) + "."
    if n_ops == 2 and rng.random() < 0.4:
        turns = [[op[0] for op in ops], [op[1] for op in ops]]
    else:
        turns = [[c] for op in ops for c in op[:2]]
    ids = {json.dumps(lookup): ident for lookup, _, ident, _ in ops}
    return functions, [Message(role="user", content=request)], turns, rng.choice(_CLOSINGS), ids


def _result(call: tuple[str, dict], ids: dict[str, str]) -> str:
    """What the tool answers: a lookup its record's id, an action {"status": "ok"}."""
    lookup = next((d for d in _DOMAINS if d.lookup == call[0]), None)
    return json.dumps({lookup.id_field: ids[json.dumps(call)]} if lookup else {"status": "ok"})


def followup_example(seed: int) -> Example:
    """One assistant turn of `conversation(seed)` as a warm-up Example (prompt = history before it).
    The turn is picked by the seed, so a stream of seeds covers first calls, follow-up calls that
    reuse a returned id, and the closing text."""
    functions, messages, turns, closing, ids = conversation(seed)
    pick = random.Random(f"warmup-followup-turn/{seed}").randrange(len(turns) + 1)
    history = list(messages)
    for t, calls in enumerate(turns[:pick]):
        msg = _assistant(calls, t)
        history.append(msg)
        for tc, call in zip(msg.tool_calls or [], calls):
            history.append(Message(role="tool", tool_call_id=tc.id, content=_result(call, ids)))
    if pick == len(turns):
        return Example(functions=functions, messages=history, calls=[], text=closing)
    return Example(functions=functions, messages=history, calls=list(turns[pick]))

