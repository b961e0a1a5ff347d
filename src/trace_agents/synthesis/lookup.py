"""`lookup_then_act`: a light multi-step environment — look an id up, then act with it (stage 2).

BFCL's multi-turn tasks are full of this pattern (`get_user_id` then `send_message`, `find` then
`cat`): the request names a thing, the action needs its id, and only a tool result gives the id. So
the agent must call, read the result, and call again. `synthesis/stateful.py` covers it on BFCL's own
classes, whose long docs make one episode cost minutes on a CPU; this family keeps the same shape
with short schemas (a lookup and one or two actions per domain), so multi-step GRPO runs fit here.

What is scored: only the *action* calls (`match_calls` against the reference actions, order-free,
BFCL tolerances). Lookups are free: repeating one, or looking up before every action, never fails a
task. That is on purpose — it is where the verifier reward is blind and the TRACE efficiency reward
(training/rewards.py) is not: both reach the same success, one with fewer calls.

Episode: the agent's calls are executed in the order given; a lookup of a known name returns its id
as JSON, anything unknown returns an error text; an action with a known id returns {"status": "ok"}.
A reply without tool calls ends the episode, as does `max_steps` replies with calls.

Difficulty (0..1): operations per task (1 at 0, up to 3 at 1), known records per lookup (3 -> 6),
and 1 + round(2·d) unused domains offered.
`known_ids` (0..1, default 0): the share of operations whose request already states the id ("...
(Priya Shah has contact_id C-1234)"). Their lookup is a wasted call — BFCL's multi-turn tasks often
carry ids from earlier turns, and an agent trained only on lookup-then-act looks them up anyway; it
is the setting where successes carry calls the efficiency reward can cut. It draws from its own
random stream, so tasks at known_ids=0 are those of earlier versions.
`rejected_actions` ("fail", default, or "free"): whether an action the env rejected (an unknown id)
still counts as an extra call. "free" judges like BFCL multi-turn's state-based checker: a call that
changed nothing is not scored, so guessing an id, reading the error, looking it up and retrying
still succeeds — with wasted calls the verifier does not see and the efficiency reward does.
Seeds: train 0..99,999, test 1,000,000..1,000,999; a task is a pure function of (seed, difficulty,
known_ids).
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass
from typing import Any, Literal

from trace_agents.agent.format import function_doc, to_openai_tool
from trace_agents.envs.base import Split, Step
from trace_agents.synthesis.families import family_seeds
from trace_agents.synthesis.matching import match_calls
from trace_agents.types import Message, Verdict

Call = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Domain:
    lookup: str  # function name
    key: str  # the lookup's parameter (a name) ...
    id_field: str  # ... and the id it returns
    noun: str
    names: tuple[str, ...]
    id_prefix: str
    actions: tuple[str, ...]


_PEOPLE = ("Priya Shah", "Tom Becker", "Ana Lima", "Kenji Mori", "Sofia Rossi", "Omar Haddad", "Lena Vogel",
           "Maya Cohen", "Ivan Petrov", "Grace Kim", "Liam Walsh", "Nora Berg")
_PRODUCTS = ("blue desk lamp", "steel water bottle", "wireless mouse", "oak bookshelf", "green yoga mat",
             "travel backpack", "ceramic teapot", "usb charger", "wool blanket", "glass vase", "office chair")
_DOCS = ("budget plan", "team roadmap", "travel notes", "client proposal", "meeting minutes", "design review",
         "sales report", "hiring plan", "release checklist", "research summary", "safety guide")
_CITIES = ("Oslo", "Lisbon", "Vienna", "Madrid", "Prague", "Dublin", "Athens", "Warsaw", "Zurich", "Helsinki")
DOMAINS = (
    Domain("find_contact", "name", "contact_id", "contact", _PEOPLE, "C-", ("send_message", "schedule_call")),
    Domain("search_products", "product_name", "sku", "product", _PRODUCTS, "SKU-", ("add_to_cart", "check_stock")),
    Domain("find_document", "title", "doc_id", "document", _DOCS, "D-", ("share_document", "rename_document")),
    Domain("find_city", "city", "city_code", "city", _CITIES, "L-", ("get_forecast", "book_hotel")),
)
_TEXTS = ("running ten minutes late", "the slides are ready", "see you at noon", "thanks for the update",
          "please review the draft", "lunch is on me today")


def _schemas(d: Domain) -> list[dict]:
    """BFCL-style function docs of a domain: its lookup, then its actions."""
    idp = {d.id_field: ("string", f"The {d.noun} id returned by {d.lookup}.")}
    docs = {
        "send_message": ("Send a text message to a contact.", {**idp, "text": ("string", "The message text.")}),
        "schedule_call": ("Schedule a call with a contact.", {**idp, "day": ("string", "Weekday of the call, e.g. 'Monday'."),
                          "minutes": ("integer", "Length of the call in minutes.")}),
        "add_to_cart": ("Add a product to the shopping cart.", {**idp, "quantity": ("integer", "How many items.")}),
        "check_stock": ("Check whether a product is in stock at a store.", {**idp, "store": ("string", "Store city.")}),
        "share_document": ("Share a document with someone by email.", {**idp, "email": ("string", "Recipient email address.")}),
        "rename_document": ("Give a document a new title.", {**idp, "new_title": ("string", "The new title.")}),
        "get_forecast": ("Weather forecast for a city.", {**idp, "days": ("integer", "Number of days ahead, 1-7.")}),
        "book_hotel": ("Book a hotel room in a city.", {**idp, "nights": ("integer", "Number of nights."),
                       "guests": ("integer", "Number of guests.")}),
    }
    out = [function_doc(d.lookup, f"Look up a {d.noun} by its {d.key.replace('_', ' ')} and return its {d.id_field}.",
                        {d.key: ("string", f"The {d.key.replace('_', ' ')} of the {d.noun}.")})]
    out += [function_doc(a, *docs[a]) for a in d.actions]
    return out


def _operation(d: Domain, name: str, ident: str, rng: random.Random) -> tuple[Call, str]:
    """(reference action call, request sentence) for one action on the record `name`."""
    action = rng.choice(d.actions)
    k = d.id_field
    if action == "send_message":
        text = rng.choice(_TEXTS)
        return (action, {k: ident, "text": text}), f"send {name} the message '{text}'"
    if action == "schedule_call":
        day, minutes = rng.choice(("Monday", "Tuesday", "Friday")), rng.choice((15, 30, 45))
        return (action, {k: ident, "day": day, "minutes": minutes}), f"schedule a {minutes}-minute call with {name} on {day}"
    if action == "add_to_cart":
        q = rng.randint(1, 5)
        return (action, {k: ident, "quantity": q}), f"add {q} of the {name} to my cart"
    if action == "check_stock":
        store = rng.choice(_CITIES)
        return (action, {k: ident, "store": store}), f"check if the {name} is in stock at the {store} store"
    if action == "share_document":
        email = f"{rng.choice(('sam', 'ria', 'ben', 'ada'))}@example.com"
        return (action, {k: ident, "email": email}), f"share the '{name}' document with {email}"
    if action == "rename_document":
        new = f"{name} v{rng.randint(2, 9)}"
        return (action, {k: ident, "new_title": new}), f"rename the '{name}' document to '{new}'"
    if action == "get_forecast":
        days = rng.randint(1, 7)
        return (action, {k: ident, "days": days}), f"get the {days}-day forecast for {name}"
    nights, guests = rng.randint(1, 6), rng.randint(1, 4)
    return (action, {k: ident, "nights": nights, "guests": guests}), f"book a hotel in {name} for {nights} nights, {guests} guests"


@dataclass
class Task:
    records: dict[str, dict[str, str]]  # lookup function -> {name (lowercase): id}
    functions: list[dict]
    request: str
    lookups: list[Call]
    actions: list[Call]
    known: list[bool]  # per operation: the request states its id, the lookup is not needed


def generate_task(seed: int, difficulty: float, known_ids: float = 0.0) -> Task:
    rng = random.Random(f"lookup_then_act/{seed}")
    stated = random.Random(f"lookup_then_act/{seed}/known")  # own stream: known_ids=0 keeps old tasks
    n_ops = 1 + sum(rng.random() < difficulty for _ in range(2))
    domains = rng.sample(DOMAINS, len(DOMAINS))
    used = [rng.choice(domains[:2]) for _ in range(n_ops)]
    records: dict[str, dict[str, str]] = {}
    for d in domains:
        names = rng.sample(d.names, 1 + round(3 * difficulty) + 2)
        records[d.lookup] = {n.lower(): f"{d.id_prefix}{rng.randint(100, 9999)}" for n in names}
    lookups, actions, asks, known, seen = [], [], [], [], set()
    for d in used:
        name = rng.choice([n for n in d.names if n.lower() in records[d.lookup] and (d.lookup, n) not in seen])
        seen.add((d.lookup, name))
        ident = records[d.lookup][name.lower()]
        call, ask = _operation(d, name, ident, rng)
        known.append(stated.random() < known_ids)
        lookups.append((d.lookup, {d.key: name}))
        actions.append(call)
        asks.append(f"{ask} ({name} has {d.id_field} {ident})" if known[-1] else ask)
    offered = list(dict.fromkeys(used)) + [d for d in domains if d not in used][: 1 + round(2 * difficulty)]
    rng.shuffle(offered)
    request = " and then ".join(asks)
    request = request[0].upper() + request[1:] + "."
    return Task(records, [f for d in offered for f in _schemas(d)], request, lookups, actions, known)


class LookupThenActEnv:
    """Trains `lookup_then_act`: call the lookup that turns a named thing into its id, read the
    result, then call the action with that id (BFCL multi_turn's get_user_id -> send_message shape).
    Only the actions are scored; lookups are free, so this is where the efficiency reward can cut
    calls the verifier does not see."""

    capability = "lookup_then_act"

    def __init__(self, difficulty: float = 0.0, max_steps: int = 6, known_ids: float = 0.0,
                 rejected_actions: Literal["fail", "free"] = "fail"):
        if rejected_actions not in ("fail", "free"):
            raise ValueError(f"rejected_actions must be 'fail' or 'free', got {rejected_actions!r}")
        self.rejected_actions = rejected_actions
        for field, value in (("difficulty", difficulty), ("known_ids", known_ids)):
            if isinstance(value, bool) or not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"{field} must be a number between 0 and 1, got {value!r}")
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.difficulty, self.max_steps, self.known_ids = float(difficulty), max_steps, float(known_ids)
        self.name = f"synthetic/{self.capability}"
        self.task_id = ""
        self.tools: list[dict[str, Any]] = []
        self._task: Task | None = None

    def seeds(self, split: Split) -> list[int]:
        return family_seeds(split)

    def reset(self, seed: int) -> list[Message]:
        self._task = generate_task(seed, self.difficulty, self.known_ids)
        self.task_id = f"{self.capability}_{seed}"
        self.functions = self._task.functions
        self.tools = [to_openai_tool(f) for f in self.functions]
        self.actions: list[tuple[str, dict | None]] = []
        self.steps, self.done = 0, False
        return [Message(role="user", content=self._task.request)]

    @property
    def task(self) -> Task:
        if self._task is None:
            raise RuntimeError("LookupThenActEnv: call reset(seed) first")
        return self._task

    def reference(self) -> list[list[Call]]:
        """One user turn: each needed lookup followed by its action (no lookup for a stated id)."""
        t = self.task
        calls = [c for lk, act, known in zip(t.lookups, t.actions, t.known) for c in ([act] if known else [lk, act])]
        return [copy.deepcopy(calls)]

    def hint(self) -> str:
        t = self.task
        steps = [f"the request states the id for {act}: call it directly" if known else
                 f"{lk}({json.dumps(a)}) gives the id for {act}"
                 for (lk, a), (act, _), known in zip(t.lookups, t.actions, t.known)]
        return "Look an id up only when the request does not state it: " + "; ".join(steps) + \
            ". Call each action with its id."

    def _execute(self, name: str, args: dict | None) -> str:
        offered = {f["name"] for f in self.functions}
        if name not in offered:
            return f"Error: function '{name}' is not available."
        if args is None:
            return "Error: arguments are not valid JSON."
        if name in self.task.records:
            records = self.task.records[name]
            value = str(next(iter(args.values()), "")) if len(args) == 1 else ""
            if value.lower() in records:
                field = next(d.id_field for d in DOMAINS if d.lookup == name)
                return json.dumps({field: records[value.lower()]})
            return f"Error: no record matches {json.dumps(args)}."
        known = {i for r in self.task.records.values() for i in r.values()}
        # the agent may send any JSON (lists, objects): only a string can be an id
        ok = any(isinstance(v, str) and v in known for v in args.values())
        if ok or self.rejected_actions == "fail":
            self.actions.append((name, args))
        return json.dumps({"status": "ok"}) if ok else "Error: unknown id."

    def step(self, message: Message) -> Step:
        if self.done:
            return Step(done=True)
        calls = message.tool_calls or []
        if not calls:
            self.done = True
            return Step(done=True)
        results = []
        for c in calls:
            try:
                args = c.function.parsed_arguments()
            except ValueError:
                args = None
            results.append(Message(role="tool", tool_call_id=c.id, content=self._execute(c.function.name, args)))
        self.steps += 1
        self.done = self.steps >= self.max_steps
        return Step(messages=results, done=self.done)

    def verdict(self) -> Verdict:
        scored = [(n, a) for n, a in self.actions if a is not None]
        m = match_calls(scored, self.task.actions, self.functions)
        details = {"failure": m.failure, "matched": m.matched, "n_reference": m.n_reference, "extra_calls": m.extra,
                   "actions": [{"name": n, "arguments": a} for n, a in scored],
                   "reference": [{"name": n, "arguments": a} for n, a in self.task.actions]}
        return Verdict(reward=m.reward(), success=m.success, details=details)
