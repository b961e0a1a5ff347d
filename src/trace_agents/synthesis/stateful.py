"""Synthetic multi-step environments on BFCL's own stateful tool classes (stage 2).

Two environments share one machinery:

- `MultiStepEnv` (`multi_step_task_completion`): each user turn asks for one or two operations that
  each take several calls (navigate with `cd`, create, write, read-then-write, look up an id, log in,
  then act), and a turn is only right when *all* of them were done.
- `ErrorRecoveryEnv` (`error_recovery`): the first operation of every task, and about half of the
  later ones, are built so that the natural first call fails with the tool's own error (a folder
  that must be created first, a file name with the wrong case or extension, a file in another
  folder, a nested `cd` path, `echo` into a file that does not exist yet, a message sent to a name
  instead of a user id, acting before logging in). Success needs reading the error and adapting.

Why it transfers to BFCL `multi_turn_base`: the tools are BFCL's classes themselves
(GorillaFileSystem, TwitterAPI, MessageAPI, TicketAPI from `bfcl-eval`), loaded with
`_load_scenario` from a BFCL-shaped `initial_config`, offered with BFCL's own function docs, called
directly with the same result strings and error texts, and scored the way BFCL scores: the agent's
instance state is compared with the state reached by replaying a reference call sequence on a fresh
copy, after every user turn.

A task (`generate_task`) is built from `random.Random(f"{capability}:{seed}")` alone: a random
initial state from built-in word lists (directory trees, file names and contents, tickets, users
and inboxes, tweets), the request text of each user turn, and the reference calls per turn. The
reference is produced by *running* it on a planning copy of the classes while the request is
written, so it is valid by construction (every reference call returns without error, every turn
changes the state). No BFCL task is read: only the classes and their docs.

Verdict: replay the reference turn by turn on fresh instances; after turn t compare every class's
public attributes (`vars(instance)` without `_` keys, like BFCL's state checker) with the agent's
state at the end of its turn t. reward = fraction of turns that matched, success = all matched.

Difficulty (0..1, default 0.5) scales three things:
- tree depth of the generated file system: 1 + round(2·d) folder levels (1..3);
- user turns: 2 .. 2 + round(2·d) (2..4);
- operations per turn: 1, or 2 with probability d (at most 6 operations per task).
Each operation is 1-6 calls (navigation included), so a reference has ~5 calls on average at d=0,
~9 at d=0.5 and ~13 at d=1. A turn's reference never exceeds 6 calls, which leaves a failed try
and a look-around within the default budget of 8 steps per turn (one call per step).

Tools offered (prompts are long on CPU): not the whole class, but the methods the task's reference
(and, for error recovery, the failing first attempt) uses, each class's discovery/login methods
(`cd`, `ls`, `find`; `get_user_id`, `message_login`; `ticket_login`, `get_user_tickets`;
`authenticate_twitter`, `search_tweets`) and two random distractors per class, in BFCL doc order.
Only offered methods can be called; any other name gets BFCL's "name '...' is not defined" error.
"""

from __future__ import annotations

import copy
import importlib
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from trace_agents.agent.format import to_openai_tool
from trace_agents.envs.base import Split, Step
from trace_agents.envs.bfcl import _class_docs, call_string, execute_call
from trace_agents.types import Message, Verdict

Call = tuple[str, dict[str, Any]]

# ---- word lists ---------------------------------------------------------------------------------
ROOTS = ["workspace", "home", "alex", "maria", "kenji", "sofia", "omar", "lena", "projects_root", "office"]
FOLDERS = [
    "documents", "projects", "reports", "archive", "notes", "photos", "music", "data", "logs", "drafts",
    "backup", "research", "invoices", "letters", "recipes", "travel", "budget", "designs", "scripts",
    "assets", "meetings", "clients", "homework", "papers", "receipts", "templates", "exports", "media",
    "shared", "personal", "finance", "marketing", "legal", "sales", "inventory", "planning",
    "experiments", "lectures", "slides", "garden",
]
STEMS = [
    "summary", "draft", "notes", "todo", "budget", "report", "ideas", "plan", "results", "readme", "log",
    "config", "agenda", "checklist", "letter", "recipe", "invoice", "schedule", "inventory", "contacts",
    "minutes", "proposal", "outline", "review", "memo", "journal", "roadmap", "estimate", "feedback",
    "timeline", "survey", "analysis", "quote", "manifest", "changelog", "expenses", "goals", "tasks",
    "itinerary", "poem",
]
EXTS = [".txt", ".md", ".csv", ".log", ".json", ".py", ".pdf", ".doc"]
WORDS = [
    "quarterly", "revenue", "meeting", "garden", "river", "project", "deadline", "coffee", "update",
    "budget", "design", "client", "review", "summer", "server", "network", "invoice", "delivery",
    "schedule", "weather", "forest", "market", "launch", "feedback", "draft", "mountain", "ticket",
    "report", "analysis", "recipe", "travel", "museum", "concert", "library", "lesson", "contract",
    "payment", "planet", "ocean", "station", "window", "kitchen", "bicycle", "camera", "painting",
    "harvest", "festival", "journey", "science", "history", "orange", "silver", "purple", "quiet",
    "rapid", "bright", "final", "early", "late", "new", "old", "green", "blue", "small", "large",
    "checks", "covers", "needs", "shows", "includes", "starts", "moves", "builds", "tracks", "lists",
]
PEOPLE = [
    "Alice", "Bob", "Catherine", "Daniel", "Eve", "Frank", "Grace", "Hector", "Irene", "Jamal", "Kira",
    "Liam", "Maya", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tara", "Uma", "Victor", "Wendy",
    "Xavier", "Yara", "Zane",
]
TICKET_THINGS = ["Printer", "VPN", "Laptop", "Email", "Badge", "Monitor", "Wi-Fi", "Database", "Phone", "Calendar", "Backup", "Payroll"]
TICKET_PROBLEMS = ["not working", "keeps crashing", "too slow", "access denied", "needs replacement", "shows errors", "not syncing", "out of date"]
TAGS = ["#news", "#work", "#travel", "#food", "#tech", "#music", "#weekend", "#update", "#science", "#art", "#fun", "#tips"]

ESSENTIALS = {
    "GorillaFileSystem": ["cd", "ls", "find"],
    "TicketAPI": ["ticket_login", "get_user_tickets"],
    "MessageAPI": ["get_user_id", "message_login"],
    "TwitterAPI": ["authenticate_twitter", "search_tweets"],
}
MAX_REFERENCE_CALLS_PER_TURN = 6  # one call per step, this leaves 2 of the default 8 steps for a failed try or a look-around
NEVER_OFFERED = {"mention"}  # TwitterAPI.mention extends a shared default list: state would leak across episodes


# ---- instances and state ------------------------------------------------------------------------
def new_instance(class_name: str, config: dict) -> Any:
    """A BFCL tool-class instance loaded with (a deep copy of) a BFCL-shaped config."""
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    instance = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)()
    instance._load_scenario(copy.deepcopy(config), long_context=False)
    return instance


def _plain(value: Any, stack: frozenset[int] = frozenset()) -> Any:
    """A comparable, cycle-free copy: objects become dicts of their public attributes (a Directory's
    `parent` back-link is skipped), sets become sorted lists."""
    if isinstance(value, dict):
        return {k: _plain(v, stack) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, stack) for v in value]
    if isinstance(value, (set, frozenset)):
        return {"__set__": sorted(repr(v) for v in value)}
    if hasattr(value, "__dict__"):
        if id(value) in stack:
            return "<cycle>"
        inner = stack | {id(value)}
        attrs = {k: _plain(v, inner) for k, v in vars(value).items() if not k.startswith("_") and k != "parent"}
        return {"__class__": type(value).__name__, **attrs}
    return value


def state_of(instance: Any) -> dict[str, Any]:
    """What BFCL's state checker compares: the public attributes of an instance."""
    return {k: _plain(v) for k, v in vars(instance).items() if not k.startswith("_")}


def _is_error(result: Any) -> bool:
    if isinstance(result, list) and result and isinstance(result[0], dict):
        result = result[0]
    if not isinstance(result, dict):
        return False
    failed = any(result.get(k) is False for k in ("success", "login_status", "authentication_status"))
    return "error" in result or failed


def _run(instances: dict[str, Any], name: str, args: dict) -> Any:
    owner = next(i for i in instances.values() if callable(getattr(i, name, None)) and not name.startswith("_"))
    return getattr(owner, name)(**copy.deepcopy(args))


# ---- the task -----------------------------------------------------------------------------------
@dataclass
class Task:
    classes: list[str]
    config: dict[str, dict]
    """BFCL-shaped initial_config per class."""
    turns: list[str]
    """The user's request, one text per user turn."""
    reference: list[list[Call]]
    """Per turn, the (method, args) calls of a correct solution."""
    hints: list[str]
    """Per turn, short expert guidance."""
    methods: list[str]
    """Offered methods, in BFCL doc order."""
    naive: list[Call] = field(default_factory=list)
    """Error recovery: a natural first attempt from the initial state whose last call fails."""


class _Retry(Exception):
    """This draw cannot make the operation; try another."""


class _Names:
    def __init__(self, rng: random.Random):
        self.rng, self.used = rng, set()

    def _fresh(self, make: Callable[[], str]) -> str:
        for _ in range(200):
            name = make()
            if name.lower() not in self.used:
                self.used.add(name.lower())
                return name
        raise RuntimeError("name lists exhausted")

    def folder(self) -> str:
        r = self.rng
        return self._fresh(lambda: r.choice(FOLDERS) + (r.choice(["", "", f"_{r.randint(2019, 2025)}", "_old", "_new"])))

    def file(self, ext: str | None = None) -> str:
        r = self.rng
        return self._fresh(lambda: r.choice(STEMS) + r.choice(["", "", "", f"_{r.randint(1, 9)}", "_final", "_v2"]) + (ext or r.choice(EXTS)))

    def word_line(self) -> str:
        words = self.rng.sample(WORDS, self.rng.randint(4, 8))
        return " ".join(words).capitalize() + "."

    def text(self, max_lines: int = 4) -> str:
        return "\n".join(self.word_line() for _ in range(self.rng.randint(1, max_lines)))

    def short(self) -> str:
        return " ".join(self.rng.sample(WORDS, self.rng.randint(3, 6))).capitalize()


# ---- initial states -----------------------------------------------------------------------------
def _gen_fs(rng: random.Random, names: _Names, depth: int) -> dict:
    def directory(level: int) -> dict:
        contents: dict[str, dict] = {}
        for _ in range(rng.randint(0 if level == 0 else 1, 2 if level == 0 else 3)):
            contents[names.file()] = {"type": "file", "content": names.text()}
        if level < depth:
            for _ in range(rng.randint(2, 3) if level == 0 else rng.randint(1, 2)):
                contents[names.folder()] = {"type": "directory", "contents": directory(level + 1)}
        return contents

    root = rng.choice(ROOTS)
    names.used.add(root)
    return {"root": {root: {"type": "directory", "contents": directory(0)}}}


def _gen_ticket(rng: random.Random, names: _Names, meta: dict) -> dict:
    user = rng.choice(PEOPLE).lower() + str(rng.randint(1, 99))
    meta["ticket_user"], meta["ticket_password"] = user, f"{rng.choice(WORDS)}{rng.randint(100, 999)}!"
    next_id, queue = rng.randint(1, 30), []
    for _ in range(rng.randint(2, 4)):
        queue.append({
            "id": next_id, "title": _ticket_title(rng, queue), "description": names.short(),
            "status": rng.choice(["Open", "Open", "In Progress", "Closed"]), "priority": rng.randint(1, 5),
            "created_by": user if rng.random() < 0.8 else rng.choice(PEOPLE).lower(),
        })
        next_id += rng.randint(1, 3)
    return {"ticket_queue": queue, "ticket_counter": next_id, "current_user": user if rng.random() < 0.5 else None}


def _ticket_title(rng: random.Random, queue: list[dict]) -> str:
    taken = {t["title"] for t in queue}
    options = [f"{a} {b}" for a in TICKET_THINGS for b in TICKET_PROBLEMS if f"{a} {b}" not in taken]
    return rng.choice(options)


def _gen_message(rng: random.Random, meta: dict) -> dict:
    people = rng.sample(PEOPLE, rng.randint(3, 5))
    user_map = {p: f"USR{i + 1:03d}" for i, p in enumerate(people)}
    meta["me"] = rng.choice(people)
    others = [user_map[p] for p in people if p != meta["me"]]
    inbox = [{rng.choice(others): " ".join(rng.sample(WORDS, rng.randint(3, 7))).capitalize() + "."} for _ in range(rng.randint(1, 3))]
    return {
        "random_seed": rng.randint(1, 10**6), "user_count": len(people), "user_map": user_map, "inbox": inbox,
        "message_count": len(inbox), "current_user": user_map[meta["me"]] if rng.random() < 0.5 else None,
    }


def _gen_twitter(rng: random.Random, meta: dict) -> dict:
    def handle() -> str:
        return rng.choice(PEOPLE).lower() + rng.choice(["_", ".", ""]) + rng.choice(WORDS[:30])

    username = handle()
    meta["tw_password"] = f"{rng.choice(WORDS).capitalize()}#{rng.randint(1000, 9999)}"
    tweets = {}
    for i in range(rng.randint(2, 4)):
        author = username if rng.random() < 0.5 else handle()
        tweets[str(i)] = {"id": i, "username": author, "content": " ".join(rng.sample(WORDS, rng.randint(4, 8))).capitalize() + "!",
                          "tags": rng.sample(TAGS, rng.randint(0, 2)), "mentions": []}
    following = sorted({handle() for _ in range(rng.randint(1, 3))} - {username})
    return {"username": username, "password": meta["tw_password"], "authenticated": rng.random() < 0.4,
            "tweets": tweets, "comments": {}, "retweets": {}, "following_list": following, "tweet_counter": len(tweets)}


# ---- the planner: writes the request while running the reference ------------------------------
class _Planner:
    def __init__(self, rng: random.Random, classes: list[str], depth: int):
        self.rng, self.classes, self.names, self.meta = rng, classes, _Names(rng), {}
        gen = {
            "GorillaFileSystem": lambda: _gen_fs(rng, self.names, depth),
            "TicketAPI": lambda: _gen_ticket(rng, self.names, self.meta),
            "MessageAPI": lambda: _gen_message(rng, self.meta),
            "TwitterAPI": lambda: _gen_twitter(rng, self.meta),
        }
        self.config = {c: gen[c]() for c in classes}
        self.inst = {c: new_instance(c, self.config[c]) for c in classes}
        self.calls: list[Call] = []
        self.naive: list[Call] | None = None
        self.used_methods: set[str] = set()

    # running
    def run(self, method: str, /, **args: Any) -> Any:
        result = _run(self.inst, method, args)
        if _is_error(result):
            raise RuntimeError(f"reference call {method}({args}) failed: {result}")  # a generator bug
        self.calls.append((method, args))
        return result

    def fails(self, calls: list[Call]) -> bool:
        """Whether the last of `calls`, run on a copy of the current state, returns an error."""
        sandbox = copy.deepcopy(self.inst)
        results = [_run(sandbox, n, a) for n, a in calls]
        return _is_error(results[-1]) and not any(_is_error(r) for r in results[:-1])

    def set_naive(self, calls: list[Call]) -> None:
        if not self.fails(calls):
            raise RuntimeError(f"naive attempt {calls} does not fail")
        if self.naive is None:
            self.naive = calls
        self.used_methods.update(n for n, _ in calls)

    # file system
    @property
    def fs(self) -> Any:
        return self.inst["GorillaFileSystem"]

    def cwd(self) -> tuple[str, ...]:
        path, d = [], self.fs._current_dir
        while d is not None and d is not self.fs.root:
            path.append(d.name)
            d = d.parent
        return tuple(reversed(path))

    def dirs(self) -> list[tuple[tuple[str, ...], Any]]:
        out, todo = [], [((), self.fs.root)]
        while todo:
            path, d = todo.pop(0)
            out.append((path, d))
            todo += [(path + (k,), v) for k, v in d.contents.items() if hasattr(v, "contents")]
        return out

    def files(self, d: Any) -> list[str]:
        return [k for k, v in d.contents.items() if not hasattr(v, "contents")]

    def subdirs(self, d: Any) -> list[str]:
        return [k for k, v in d.contents.items() if hasattr(v, "contents")]

    def nav_calls(self, target: tuple[str, ...]) -> list[Call]:
        here = self.cwd()
        common = 0
        while common < min(len(here), len(target)) and here[common] == target[common]:
            common += 1
        return [("cd", {"folder": ".."})] * (len(here) - common) + [("cd", {"folder": f}) for f in target[common:]]

    def goto(self, target: tuple[str, ...]) -> None:
        for name, args in self.nav_calls(target):
            self.run(name, **args)

    def pick_dir(self, need_files: int = 0, need_subdirs: int = 0, min_depth: int = 1) -> tuple[tuple[str, ...], Any]:
        options = [(p, d) for p, d in self.dirs() if len(p) >= min_depth
                   and len(self.files(d)) >= need_files and len(self.subdirs(d)) >= need_subdirs]
        if not options:
            raise _Retry
        return self.rng.choice(options)

    def where(self, path: tuple[str, ...]) -> str:
        if not path:
            return f"the top-level folder '{self.fs.root.name}'"
        if len(path) == 1 or self.rng.random() < 0.5:
            return f"the '{path[-1]}' folder"
        return f"'{'/'.join(path)}'"

    # logins (credentials are given once, the first time an operation needs them)
    def ensure_ticket_login(self, explicit: bool = True) -> str:
        if self.inst["TicketAPI"].current_user:
            return ""
        u, pw = self.meta["ticket_user"], self.meta["ticket_password"]
        self.run("ticket_login", username=u, password=pw)
        return f" Log in to the ticket system first as '{u}' with password '{pw}'." if explicit else f" My ticket account is '{u}', password '{pw}'."

    def ensure_message_login(self) -> str:
        api = self.inst["MessageAPI"]
        if api.current_user:
            return ""
        me = self.meta["me"]
        self.run("get_user_id", user=me)
        self.run("message_login", user_id=api.user_map[me])
        return f" I am {me} in the messaging app: log in as me first."

    def ensure_twitter_login(self, explicit: bool = True) -> str:
        api = self.inst["TwitterAPI"]
        if api.authenticated:
            return ""
        self.run("authenticate_twitter", username=api.username, password=api.password)
        if explicit:
            return f" Log in to Twitter first as '{api.username}' with password '{api.password}'."
        return f" My Twitter username is '{api.username}' and my password is '{api.password}'."


Op = Callable[[_Planner], tuple[str, str]]
"""An operation: runs its reference calls on the planner, returns (request sentence, hint)."""


# ---- operations: file system --------------------------------------------------------------------
def op_new_file(p: _Planner) -> tuple[str, str]:
    path, _ = p.pick_dir(min_depth=0)
    name, text = p.names.file(), p.names.word_line()
    p.goto(path)
    p.run("touch", file_name=name)
    p.run("echo", content=text, file_name=name)
    return f"Create a file named '{name}' in {p.where(path)} and write '{text}' into it.", f"cd to '{path[-1] if path else '/'}', touch '{name}', then echo the text into it."


def op_mkdir(p: _Planner) -> tuple[str, str]:
    path, _ = p.pick_dir(min_depth=1)
    name = p.names.folder()
    p.goto(path)
    p.run("mkdir", dir_name=name)
    return f"Make a new folder called '{name}' inside {p.where(path)}.", f"cd into '{path[-1]}', then mkdir '{name}'."


def op_copy(p: _Planner) -> tuple[str, str]:
    path, d = p.pick_dir(need_files=1)
    src = p.rng.choice(p.files(d))
    dst = p.names.file(ext="." + src.rsplit(".", 1)[-1])
    p.goto(path)
    p.run("cp", source=src, destination=dst)
    return f"Duplicate '{src}' in {p.where(path)} as '{dst}' in the same folder.", f"cd into '{path[-1]}', then cp '{src}' to '{dst}'."


def op_move_new_dir(p: _Planner) -> tuple[str, str]:
    path, d = p.pick_dir(need_files=1)
    src, new = p.rng.choice(p.files(d)), p.names.folder()
    p.goto(path)
    p.run("mkdir", dir_name=new)
    p.run("mv", source=src, destination=new)
    return f"In {p.where(path)}, put '{src}' into a new subfolder named '{new}'.", f"cd into '{path[-1]}', mkdir '{new}', then mv '{src}' into it."


def op_move_sub(p: _Planner) -> tuple[str, str]:
    path, d = p.pick_dir(need_files=1, need_subdirs=1, min_depth=0)
    src, sub = p.rng.choice(p.files(d)), p.rng.choice(p.subdirs(d))
    p.goto(path)
    p.run("mv", source=src, destination=sub)
    return f"Move '{src}' from {p.where(path)} into its subfolder '{sub}'.", f"cd into the folder holding '{src}', then mv it to '{sub}'."


def op_rename(p: _Planner) -> tuple[str, str]:
    path, d = p.pick_dir(need_files=1)
    src = p.rng.choice(p.files(d))
    dst = p.names.file()
    p.goto(path)
    p.run("mv", source=src, destination=dst)
    return f"Rename '{src}' in {p.where(path)} to '{dst}'.", f"cd into '{path[-1]}', then mv '{src}' '{dst}'."


def op_delete(p: _Planner) -> tuple[str, str]:
    path, d = p.pick_dir(need_files=2)
    src = p.rng.choice(p.files(d))
    p.goto(path)
    p.run("rm", file_name=src)
    return f"Delete the file '{src}' from {p.where(path)}.", f"cd into '{path[-1]}', then rm '{src}'."


def op_overwrite(p: _Planner) -> tuple[str, str]:
    path, d = p.pick_dir(need_files=1)
    src, text = p.rng.choice(p.files(d)), p.names.word_line()
    p.goto(path)
    p.run("echo", content=text, file_name=src)
    return f"Replace the contents of '{src}' in {p.where(path)} with '{text}'.", f"cd into '{path[-1]}', then echo the new text into '{src}'."


def op_count(p: _Planner) -> tuple[str, str]:
    path, d = p.pick_dir(need_files=1)
    src = p.rng.choice(p.files(d))
    mode, unit = p.rng.choice([("l", "lines"), ("w", "words"), ("c", "characters")])
    out = p.names.file(ext=".txt")
    p.goto(path)
    count = p.run("wc", file_name=src, mode=mode)["count"]
    p.run("touch", file_name=out)
    p.run("echo", content=str(count), file_name=out)
    return (f"Count the {unit} in '{src}' ({p.where(path)}) and save just the number in a new file '{out}' in the same folder.",
            f"wc '{src}' with mode '{mode}', touch '{out}', then echo the count into it.")


def op_sorted(p: _Planner) -> tuple[str, str]:
    options = [(path, d, f) for path, d in p.dirs() if path for f in p.files(d) if d.contents[f].content.count("\n") >= 1]
    if not options:
        raise _Retry
    path, _, src = p.rng.choice(options)
    out = p.names.file(ext=".txt")
    p.goto(path)
    text = p.run("sort", file_name=src)["sorted_content"]
    p.run("touch", file_name=out)
    p.run("echo", content=text, file_name=out)
    return (f"Sort the lines of '{src}' in {p.where(path)} and store the sorted text in a new file '{out}' next to it.",
            f"sort '{src}', touch '{out}', then echo the sorted text into it.")


FS_OPS: list[Op] = [op_new_file, op_mkdir, op_copy, op_move_new_dir, op_move_sub, op_rename, op_delete, op_overwrite, op_count, op_sorted]


# ---- operations: tickets, messages, tweets -----------------------------------------------------
def _my_tickets(p: _Planner, exclude_status: str) -> list[dict]:
    api = p.inst["TicketAPI"]
    mine = [t for t in api.ticket_queue if t["created_by"] == p.meta["ticket_user"] and t["status"] != exclude_status]
    if not mine:
        raise _Retry
    return mine


def op_ticket_create(p: _Planner) -> tuple[str, str]:
    title, desc, prio = _ticket_title(p.rng, p.inst["TicketAPI"].ticket_queue), p.names.short(), p.rng.randint(1, 5)
    login = p.ensure_ticket_login()
    p.run("create_ticket", title=title, description=desc, priority=prio)
    return f"Open a support ticket titled '{title}' with the description '{desc}' and priority {prio}.{login}", "log in to the ticket system if needed, then create_ticket with title, description and priority."


def op_ticket_close(p: _Planner) -> tuple[str, str]:
    t = p.rng.choice(_my_tickets(p, "Closed"))
    if p.rng.random() < 0.5:
        p.run("close_ticket", ticket_id=t["id"])
        return f"Close ticket number {t['id']}.", f"close_ticket with ticket_id {t['id']}."
    login = p.ensure_ticket_login()
    p.run("get_user_tickets")
    p.run("close_ticket", ticket_id=t["id"])
    return f"Close my ticket titled '{t['title']}'.{login}", "get_user_tickets to find the ticket's id, then close_ticket."


def op_ticket_resolve(p: _Planner) -> tuple[str, str]:
    t = p.rng.choice(_my_tickets(p, "Resolved"))
    note = p.names.short()
    login = p.ensure_ticket_login()
    p.run("get_user_tickets")
    p.run("resolve_ticket", ticket_id=t["id"], resolution=note)
    return f"Resolve my ticket '{t['title']}' with the resolution '{note}'.{login}", "get_user_tickets to find the id, then resolve_ticket with the resolution."


def op_ticket_priority(p: _Planner) -> tuple[str, str]:
    t = p.rng.choice(_my_tickets(p, ""))
    prio = p.rng.choice([x for x in range(1, 6) if x != t["priority"]])
    p.run("edit_ticket", ticket_id=t["id"], updates={"priority": prio})
    return f"Change the priority of ticket {t['id']} to {prio}.", "edit_ticket with updates={'priority': ...}."


def _other_person(p: _Planner) -> str:
    api = p.inst["MessageAPI"]
    return p.rng.choice([n for n in api.user_map if n != p.meta["me"]])


def op_msg_send(p: _Planner) -> tuple[str, str]:
    who, text = _other_person(p), p.names.short() + "."
    login = p.ensure_message_login()
    uid = p.run("get_user_id", user=who)["user_id"]
    p.run("send_message", receiver_id=uid, message=text)
    return f"Send {who} the message '{text}'.{login}", f"get_user_id of {who}, then send_message to that id."


def op_msg_new_contact(p: _Planner) -> tuple[str, str]:
    api = p.inst["MessageAPI"]
    who = p.rng.choice([n for n in PEOPLE if n not in api.user_map])
    text = p.names.short() + "."
    login = p.ensure_message_login()
    uid = p.run("add_contact", user_name=who)["user_id"]
    p.run("send_message", receiver_id=uid, message=text)
    return f"Add {who} as a new contact and send them '{text}'.{login}", "add_contact returns the new user id; send_message to it."


def op_msg_delete(p: _Planner) -> tuple[str, str]:
    api = p.inst["MessageAPI"]
    ids = {v: k for k, v in api.user_map.items()}
    receivers = sorted({next(iter(m)) for m in api.inbox} & set(ids))
    if not receivers:
        raise _Retry
    who = ids[p.rng.choice(receivers)]
    login = p.ensure_message_login()
    uid = p.run("get_user_id", user=who)["user_id"]
    p.run("delete_message", receiver_id=uid)
    return f"Delete the latest message sent to {who}.{login}", f"get_user_id of {who}, then delete_message with that receiver id."


def op_tw_post(p: _Planner) -> tuple[str, str]:
    text = p.names.short() + "!"
    tags = p.rng.sample(TAGS, p.rng.randint(0, 2))
    login = p.ensure_twitter_login()
    args: dict[str, Any] = {"content": text}
    extra = ""
    if tags:
        args["tags"] = tags
        extra = " with the tags " + " and ".join(tags)
    p.run("post_tweet", **args)
    return f"Post a tweet saying '{text}'{extra}.{login}", "authenticate if needed, then post_tweet (tags as a list, in the order given)."


def op_tw_follow(p: _Planner) -> tuple[str, str]:
    api = p.inst["TwitterAPI"]
    who = p.rng.choice(PEOPLE).lower() + "_" + p.rng.choice(WORDS[30:60])
    if who in api.following_list:
        raise _Retry
    login = p.ensure_twitter_login()
    p.run("follow_user", username_to_follow=who)
    return f"Follow the Twitter user '{who}'.{login}", f"follow_user '{who}'."


def _unique_tweet_word(p: _Planner) -> tuple[int, str]:
    api = p.inst["TwitterAPI"]
    options = []
    for tid, tw in api.tweets.items():
        for word in tw["content"].rstrip("!").lower().split():
            if len(api.search_tweets(word)) == 1:
                options.append((tid, word))
    if not options:
        raise _Retry
    return p.rng.choice(options)


def op_tw_comment(p: _Planner) -> tuple[str, str]:
    tid, word = _unique_tweet_word(p)
    text = p.names.short()
    login = p.ensure_twitter_login()
    p.run("search_tweets", keyword=word)
    p.run("comment", tweet_id=tid, comment_content=text)
    return f"Comment '{text}' on the tweet that contains the word '{word}'.{login}", f"search_tweets for '{word}' to get the tweet id, then comment."


def op_tw_retweet(p: _Planner) -> tuple[str, str]:
    tid, word = _unique_tweet_word(p)
    if tid in p.inst["TwitterAPI"].retweets.get(p.inst["TwitterAPI"].username, []):
        raise _Retry
    login = p.ensure_twitter_login()
    p.run("search_tweets", keyword=word)
    p.run("retweet", tweet_id=tid)
    return f"Retweet the tweet that contains the word '{word}'.{login}", f"search_tweets for '{word}', then retweet its id."


def _pick_file(p: _Planner) -> tuple[tuple[str, ...], str]:
    path, d = p.pick_dir(need_files=1)
    return path, p.rng.choice(p.files(d))


def op_x_tweet_file(p: _Planner) -> tuple[str, str]:
    path, src = _pick_file(p)
    p.goto(path)
    text = p.run("cat", file_name=src)["file_content"]
    login = p.ensure_twitter_login()
    p.run("post_tweet", content=text)
    return f"Post the contents of '{src}' in {p.where(path)} as a tweet.{login}", f"cd to the folder, cat '{src}', then post_tweet with exactly that text."


def op_x_send_file(p: _Planner) -> tuple[str, str]:
    path, src = _pick_file(p)
    who = _other_person(p)
    p.goto(path)
    text = p.run("cat", file_name=src)["file_content"]
    login = p.ensure_message_login()
    uid = p.run("get_user_id", user=who)["user_id"]
    p.run("send_message", receiver_id=uid, message=text)
    return f"Send {who} the contents of '{src}' from {p.where(path)}.{login}", f"cat '{src}', get_user_id of {who}, then send_message with the file text."


def op_x_ticket_file(p: _Planner) -> tuple[str, str]:
    path, src = _pick_file(p)
    title = _ticket_title(p.rng, p.inst["TicketAPI"].ticket_queue)
    p.goto(path)
    text = p.run("cat", file_name=src)["file_content"]
    login = p.ensure_ticket_login()
    p.run("create_ticket", title=title, description=text)
    return f"Open a ticket titled '{title}' whose description is the text of '{src}' in {p.where(path)}.{login}", f"cat '{src}', then create_ticket with that text as description."


CLASS_OPS: dict[str, list[Op]] = {
    "GorillaFileSystem": FS_OPS,
    "TicketAPI": [op_ticket_create, op_ticket_close, op_ticket_resolve, op_ticket_priority],
    "MessageAPI": [op_msg_send, op_msg_new_contact, op_msg_delete],
    "TwitterAPI": [op_tw_post, op_tw_follow, op_tw_comment, op_tw_retweet],
}
CROSS_OPS: dict[str, list[Op]] = {"TwitterAPI": [op_x_tweet_file], "MessageAPI": [op_x_send_file], "TicketAPI": [op_x_ticket_file]}


# ---- operations whose natural first attempt fails ------------------------------------------------
def err_missing_dir(p: _Planner) -> tuple[str, str]:
    path, _ = p.pick_dir(min_depth=0)
    new, name, text = p.names.folder(), p.names.file(), p.names.word_line()
    p.set_naive(p.nav_calls(path) + [("cd", {"folder": new})])
    p.goto(path)
    p.run("mkdir", dir_name=new)
    p.run("cd", folder=new)
    p.run("touch", file_name=name)
    p.run("echo", content=text, file_name=name)
    return (f"Go into the folder '{new}' inside {p.where(path)} and create a file '{name}' there containing '{text}'.",
            f"'{new}' does not exist yet (cd fails): mkdir it first, then cd into it, touch and echo.")


def _variant(p: _Planner, name: str) -> str:
    stem, ext = name.rsplit(".", 1)
    if p.rng.random() < 0.5:
        return stem.capitalize() + "." + ext.upper() if stem == stem.capitalize() else stem.capitalize() + "." + ext
    return stem + p.rng.choice([e for e in EXTS if e != "." + ext])


def err_wrong_name(p: _Planner) -> tuple[str, str]:
    path, d = p.pick_dir(need_files=1)
    real = p.rng.choice(p.files(d))
    wrong = _variant(p, real)
    stem = wrong.rsplit(".", 1)[0].lower()
    if any(f.rsplit(".", 1)[0].lower() == stem for f in p.files(d) if f != real) or wrong in d.contents:
        raise _Retry
    action = p.rng.choice(["rm", "mv", "cp"])
    args = {"file_name": wrong} if action == "rm" else {"source": wrong, "destination": p.names.file()}
    p.set_naive(p.nav_calls(path) + [(action, args)])
    p.goto(path)
    if action == "rm":
        p.run("rm", file_name=real)
        ask = f"Delete the file I think is named '{wrong}' from {p.where(path)}."
    else:
        p.run(action, source=real, destination=args["destination"])
        verb = "Rename" if action == "mv" else "Make a copy of"
        ask = f"{verb} the file I think is named '{wrong}' in {p.where(path)} {'to' if action == 'mv' else 'called'} '{args['destination']}'."
    return ask + " I may have the case or the extension of the name wrong.", f"'{wrong}' is not the exact name: ls the folder and use the file whose name matches except for case/extension."


def err_wrong_dir(p: _Planner) -> tuple[str, str]:
    path, d = p.pick_dir(need_files=1)
    said = p.rng.choice([q for q, _ in p.dirs() if q and q != path] or [None])
    if said is None:
        raise _Retry
    src, dst = p.rng.choice(p.files(d)), p.names.file()
    p.set_naive(p.nav_calls(said) + [("mv", {"source": src, "destination": dst})])
    p.run("find", path="/", name=src)
    p.goto(path)
    p.run("mv", source=src, destination=dst)
    return (f"Rename '{src}', which should be in {p.where(said)}, to '{dst}'.",
            f"'{src}' is not in '{said[-1]}': find(path='/', name='{src}') shows its real folder; cd there and mv it.")


def err_echo_missing(p: _Planner) -> tuple[str, str]:
    path, _ = p.pick_dir(min_depth=0)
    name, text = p.names.file(ext=".txt"), p.names.word_line()
    p.set_naive(p.nav_calls(path) + [("echo", {"content": text, "file_name": name})])
    p.goto(path)
    p.run("touch", file_name=name)
    p.run("echo", content=text, file_name=name)
    return f"Write '{text}' into the file '{name}' in {p.where(path)}.", f"'{name}' does not exist yet (echo fails): touch it first, then echo."


def err_nested_cd(p: _Planner) -> tuple[str, str]:
    path, d = p.pick_dir(need_files=2, min_depth=2)
    src = p.rng.choice(p.files(d))
    full = "/" + "/".join(path)
    p.set_naive([("cd", {"folder": full})])
    p.goto(path)
    p.run("rm", file_name=src)
    return f"Go to {full} and delete '{src}' there.", f"cd takes one folder at a time: cd {', then cd '.join(repr(x) for x in path)}."


def err_dir_exists(p: _Planner) -> tuple[str, str]:
    path, d = p.pick_dir(need_files=1, need_subdirs=1, min_depth=0)
    src, sub = p.rng.choice(p.files(d)), p.rng.choice(p.subdirs(d))
    p.set_naive(p.nav_calls(path) + [("mkdir", {"dir_name": sub})])
    p.goto(path)
    p.run("mv", source=src, destination=sub)
    return f"Create a folder '{sub}' in {p.where(path)} and move '{src}' into it.", f"'{sub}' already exists (mkdir fails): just mv '{src}' into it."


def err_msg_name(p: _Planner) -> tuple[str, str]:
    who, text = _other_person(p), p.names.short() + "."
    p.set_naive([("send_message", {"receiver_id": who, "message": text})])
    login = p.ensure_message_login()
    uid = p.run("get_user_id", user=who)["user_id"]
    p.run("send_message", receiver_id=uid, message=text)
    return f"Send '{text}' to {who}.{login}", f"Send_message needs a user id, not a name (and a logged-in user): get_user_id('{who}') first."


def err_ticket_login(p: _Planner) -> tuple[str, str]:
    if p.inst["TicketAPI"].current_user:
        raise _Retry
    title, desc = _ticket_title(p.rng, p.inst["TicketAPI"].ticket_queue), p.names.short()
    p.set_naive([("create_ticket", {"title": title, "description": desc})])
    login = p.ensure_ticket_login(explicit=False)
    p.run("create_ticket", title=title, description=desc)
    return f"Create a ticket '{title}' described as '{desc}'.{login}", "create_ticket fails until you ticket_login with the given account."


def err_twitter_login(p: _Planner) -> tuple[str, str]:
    if p.inst["TwitterAPI"].authenticated:
        raise _Retry
    text = p.names.short() + "!"
    p.set_naive([("post_tweet", {"content": text})])
    login = p.ensure_twitter_login(explicit=False)
    p.run("post_tweet", content=text)
    return f"Tweet '{text}'.{login}", "post_tweet fails until you authenticate_twitter with the given account."


ERROR_OPS: dict[str, list[Op]] = {
    "GorillaFileSystem": [err_missing_dir, err_wrong_name, err_wrong_dir, err_echo_missing, err_nested_cd, err_dir_exists],
    "MessageAPI": [err_msg_name],
    "TicketAPI": [err_ticket_login],
    "TwitterAPI": [err_twitter_login],
}

COMBOS = [
    ("GorillaFileSystem",), ("GorillaFileSystem",), ("GorillaFileSystem",),
    ("GorillaFileSystem", "TwitterAPI"), ("GorillaFileSystem", "MessageAPI"), ("GorillaFileSystem", "TicketAPI"),
    ("MessageAPI",), ("TicketAPI",), ("TwitterAPI", "MessageAPI"),
]
ERROR_COMBOS = [  # most failure kinds live in the file system: weight it up
    ("GorillaFileSystem",), ("GorillaFileSystem",), ("GorillaFileSystem",), ("GorillaFileSystem",),
    ("GorillaFileSystem", "TwitterAPI"), ("GorillaFileSystem", "MessageAPI"), ("GorillaFileSystem", "TicketAPI"),
    ("MessageAPI",), ("TicketAPI",), ("TwitterAPI", "MessageAPI"),
]


# ---- generation ---------------------------------------------------------------------------------
def _pool(classes: tuple[str, ...], table: dict[str, list[Op]], cross: bool) -> list[Op]:
    ops = [op for c in classes for op in table.get(c, [])]
    if cross and "GorillaFileSystem" in classes:
        ops += [op for c in classes for op in CROSS_OPS.get(c, [])]
    return ops


def _try(p: _Planner, pool: list[Op]) -> tuple[str, str]:
    """Run the first operation of a shuffled pool that applies; an operation that does not apply
    raises _Retry before running anything."""
    for op in p.rng.sample(pool, len(pool)):
        try:
            return op(p)
        except _Retry:
            continue
    raise _Retry


def _turn(p: _Planner, capability: str, t: int, n_ops: int, pools: dict[str, list[Op]], secondary_turn: int) -> tuple[str, list[Call], str]:
    """One user turn: (request text, reference calls, hint); raises _Retry if this draw is unusable."""
    before = {c: state_of(i) for c, i in p.inst.items()}
    p.calls, sentences, tips = [], [], []
    for k in range(n_ops):
        if capability == "error_recovery" and ((t == 0 and k == 0) or p.rng.random() < 0.5):
            pool = pools["errors"]
        elif t == secondary_turn and k == 0:
            pool = pools["secondary"]
        else:
            pool = pools["normal"]
        sentence, tip = _try(p, pool)
        sentences.append(sentence if not sentences else "Then " + sentence[0].lower() + sentence[1:])
        tips.append(tip[0].upper() + tip[1:])
    if {c: state_of(i) for c, i in p.inst.items()} == before:
        raise _Retry  # every turn must change the state, or doing nothing would pass it
    if len(p.calls) > MAX_REFERENCE_CALLS_PER_TURN:
        raise _Retry  # keep every turn doable within the default step budget, one call per step
    return " ".join(sentences), p.calls, " ".join(tips)


def _build(rng: random.Random, capability: str, difficulty: float, classes: tuple[str, ...]) -> Task:
    p = _Planner(rng, list(classes), depth=1 + round(2 * difficulty))
    n_turns = rng.randint(2, 2 + round(2 * difficulty))
    per_turn = [1 + (rng.random() < difficulty) for _ in range(n_turns)]
    while sum(per_turn) > 6:
        per_turn[per_turn.index(max(per_turn))] -= 1
    secondary = _pool(classes[-1:], CLASS_OPS, cross=False) + (CROSS_OPS.get(classes[-1], []) if "GorillaFileSystem" in classes else [])
    pools = {"normal": _pool(classes, CLASS_OPS, cross=True), "errors": _pool(classes, ERROR_OPS, cross=False), "secondary": secondary}
    secondary_turn = rng.randrange(n_turns) if len(classes) > 1 else -1
    turns, reference, hints = [], [], []
    for t, n_ops in enumerate(per_turn):
        for _ in range(30):  # redraw a turn that came out unusable, from the state before it
            saved = (copy.deepcopy(p.inst), set(p.names.used), p.naive, set(p.used_methods))
            try:
                text, calls, hint = _turn(p, capability, t, n_ops, pools, secondary_turn)
                break
            except _Retry:
                p.inst, p.names.used, p.naive, p.used_methods = saved
        else:
            raise _Retry
        turns.append(text)
        reference.append(calls)
        hints.append(hint)
    if capability == "error_recovery" and not p.naive:
        raise _Retry
    used = {n for turn in reference for n, _ in turn} | p.used_methods
    methods = []
    for c in classes:
        names = [f["name"] for f in _class_docs(c) if f["name"] not in NEVER_OFFERED]
        wanted = used | set(ESSENTIALS[c])
        rest = [n for n in names if n not in wanted]
        wanted |= set(rng.sample(rest, min(2, len(rest))))
        methods += [n for n in names if n in wanted]
    return Task(list(classes), p.config, turns, reference, hints, methods, p.naive or [])


def generate_task(capability: str, seed: int, difficulty: float = 0.5) -> Task:
    """The task of a seed: a pure function of (capability, seed, difficulty)."""
    rng = random.Random(f"{capability}:{seed}")
    classes = rng.choice(ERROR_COMBOS if capability == "error_recovery" else COMBOS)
    for _ in range(100):
        try:
            return _build(rng, capability, difficulty, classes)
        except _Retry:
            continue
    raise RuntimeError(f"could not generate a {capability} task for seed {seed}")


# ---- the environments ---------------------------------------------------------------------------
class _StatefulEnv:
    capability = ""

    def __init__(self, difficulty: float = 0.5, max_steps_per_turn: int = 8):
        if not 0.0 <= difficulty <= 1.0:
            raise ValueError(f"difficulty must be between 0 and 1, got {difficulty}")
        if max_steps_per_turn < 1:
            raise ValueError("max_steps_per_turn must be at least 1")
        self.difficulty, self.max_steps_per_turn = difficulty, max_steps_per_turn
        self.name = f"synthetic/{self.capability}"
        self.task_id = ""
        self.tools: list[dict[str, Any]] = []

    def seeds(self, split: Split) -> list[int]:
        if split == "train":
            return list(range(0, 100_000))
        if split == "test":
            return list(range(1_000_000, 1_001_000))
        raise ValueError(f"unknown split {split!r}: use 'train' or 'test'")

    def reset(self, seed: int) -> list[Message]:
        self.task = generate_task(self.capability, seed, self.difficulty)
        self.task_id = f"{self.capability}_{seed}"
        self._instances = {c: new_instance(c, self.task.config[c]) for c in self.task.classes}
        owners = {n: i for i in self._instances.values() for n in self.task.methods if callable(getattr(i, n, None))}
        self._methods = {n: getattr(owners[n], n) for n in self.task.methods}
        docs = {f["name"]: f for c in self.task.classes for f in _class_docs(c)}
        self.tools = [to_openai_tool(docs[n]) for n in self.task.methods]
        self.turn, self.steps_in_turn, self.done = 0, 0, False
        self.decoded: list[list[list[str]]] = [[]]
        self._snapshots: list[dict[str, Any]] = []
        return [Message(role="user", content=self.task.turns[0])]

    def reference(self) -> list[list[Call]]:
        """Per user turn, the (method, args) calls of a correct solution."""
        return copy.deepcopy(self.task.reference)

    def hint(self) -> str:
        """Short expert guidance for the current task, turn by turn."""
        if len(self.task.hints) == 1:
            return self.task.hints[0]
        return " ".join(f"Turn {t + 1}: {h}" for t, h in enumerate(self.task.hints))

    def naive_attempt(self) -> list[Call]:
        """The natural first attempt from the initial state whose last call fails (error recovery)."""
        return copy.deepcopy(self.task.naive)

    # ---- episode -----------------------------------------------------------------------------
    def _execute(self, name: str, args: dict | None) -> str:
        return execute_call(self._methods, name, args)

    def step(self, message: Message) -> Step:
        if self.done:
            return Step(done=True)
        parsed: list[tuple[str, dict | None]] = []
        for call in message.tool_calls or []:
            try:
                parsed.append((call.function.name, call.function.parsed_arguments()))
            except ValueError:
                parsed.append((call.function.name, None))
        if not parsed:
            return self._next_turn([])
        results = [
            Message(role="tool", tool_call_id=c.id, content=self._execute(n, a))
            for c, (n, a) in zip(message.tool_calls or [], parsed)
        ]
        self.decoded[self.turn].append([s for n, a in parsed if a is not None and (s := call_string(n, a))])
        self.steps_in_turn += 1
        if self.steps_in_turn >= self.max_steps_per_turn:
            return self._next_turn(results)
        return Step(messages=results)

    def _state(self) -> dict[str, Any]:
        return {c: state_of(i) for c, i in self._instances.items()}

    def _next_turn(self, pending: list[Message]) -> Step:
        self._snapshots.append(self._state())
        self.turn += 1
        self.steps_in_turn = 0
        if self.turn >= len(self.task.turns):
            self.done = True
            return Step(messages=pending, done=True)
        self.decoded.append([])
        return Step(messages=pending + [Message(role="user", content=self.task.turns[self.turn])])

    # ---- verdict -----------------------------------------------------------------------------
    def verdict(self) -> Verdict:
        n = len(self.task.turns)
        current = self._state()
        agent = (self._snapshots + [current] * n)[:n]  # turns never reached keep the last state
        decoded = (self.decoded + [[] for _ in range(n)])[:n]
        truth = {c: new_instance(c, self.task.config[c]) for c in self.task.classes}
        turns, errors = [], []
        for t, calls in enumerate(self.task.reference):
            for name, args in calls:
                _run(truth, name, args)
            expected = {c: state_of(i) for c, i in truth.items()}
            diff = [f"{c}.{k}" for c in expected for k in expected[c] if agent[t][c].get(k) != expected[c][k]]
            turns.append({"turn": t, "valid": not diff})
            if diff:
                errors.append(f"turn {t}: state differs in {', '.join(diff)}")
        passed = sum(t["valid"] for t in turns)
        first_bad = next((t["turn"] for t in turns if not t["valid"]), None)
        failure = None
        if first_bad is not None:
            failure = "empty_turn" if not any(decoded[first_bad]) else "state_mismatch"
        details = {
            "category": self.name, "difficulty": self.difficulty, "turns": turns, "turns_passed": passed,
            "failure": failure, "errors": errors, "decoded": decoded,
            "reference": [[call_string(nm, a) for nm, a in calls] for calls in self.task.reference],
        }
        return Verdict(reward=passed / n, success=passed == n, details=details)


class MultiStepEnv(_StatefulEnv):
    """Trains `multi_step_task_completion`: carrying every user turn through all of its required
    actions (navigate, create, read-then-write, look up an id, log in, then act) instead of stopping
    after the first call. Transfers to BFCL multi_turn_base because it is the same setting: BFCL's
    own stateful classes and function docs, several user turns, and a per-turn state comparison
    against a replayed reference — a turn passes only if every state change was made."""

    capability = "multi_step_task_completion"


class ErrorRecoveryEnv(_StatefulEnv):
    """Trains `error_recovery`: every task opens with an operation whose natural first call fails
    with the tool's own error (a folder to create before `cd`, a misspelt file name to look up with
    `ls`/`find`, a file in another folder, a nested `cd` path, `echo` into a missing file, a name
    where an id is needed, acting before logging in); success needs reading the error and taking
    another route. Transfers to BFCL multi_turn_base because the errors are the exact strings BFCL's
    classes return there, on the same schemas, under the same per-turn state checking."""

    capability = "error_recovery"


STATEFUL_FAMILIES: dict[str, type[_StatefulEnv]] = {
    "multi_step_task_completion": MultiStepEnv,
    "error_recovery": ErrorRecoveryEnv,
}
