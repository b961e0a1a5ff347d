"""Stage 1 with an LLM analyst: TRACE's contrastive capability analysis (DESIGN.md §1, §3).

`discover` shows the analyst a balanced sample of passed and failed trajectories and asks for at most
ten general capabilities; `label_run` asks, once per trajectory, for NA / PRESENT / LACKING on every
capability; `analyze` does both and writes `labels/run_XX.json` for selection. Any OpenAI-compatible
chat completions server works. Prompts are markdown files (`prompts/discover.md`, `prompts/label.md`)
that a user may replace by pointing `prompts_dir` at a folder with the same file names.

Answers are parsed strictly. A trajectory whose answer stays malformed after re-asking, or whose
request fails for good, is MISSING for that run: it goes in no bucket (so it can never bias Δ), and
its id is listed in `labels/run_XX.missing.json`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar

import httpx
from pydantic import BaseModel, Field, ValidationError

from trace_agents.agent.http import RequestFailed, post_with_retries
from trace_agents.analysis.labels import CapabilityLabels, Label, RunLabels, write_run
from trace_agents.types import DataError, Message, Trajectory, atomic_write_text, write_json

SPEC_FORM = "openai:NAME@BASE_URL (e.g. openai:Qwen/Qwen3-8B@http://127.0.0.1:8000/v1)"
PROMPTS = Path(__file__).with_name("prompts")
_FIX = "Your answer could not be used: {error}. Answer again with only the JSON object described above."
T = TypeVar("T")


class Capability(BaseModel):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="snake_case, general (not domain-specific).")
    definition: str = Field(min_length=1, description="2-3 sentences: the skill and how its lack shows.")
    examples: list[str] = Field(default_factory=list, description="Ids of trajectories that show it lacking.")


def read_capabilities(path: str | Path) -> list[Capability]:
    """Capabilities from `capabilities_proposed.json` (as `analyze` writes it), e.g. to relabel."""
    try:
        return [Capability.model_validate(c) for c in json.loads(Path(path).read_text(encoding="utf-8"))["capabilities"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{path}: not a capabilities file ({e})") from None


# ---- rendering -------------------------------------------------------------------------------------

def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]} [... {len(text) - limit} chars cut]"


def _render_message(m: Message, names: dict[str, str], max_chars: int) -> str:
    role = f"tool {names.get(m.tool_call_id or '', '')}".rstrip() if m.role == "tool" else m.role
    text = f"[{role}] {_cut((m.content or '').strip(), max_chars)}"
    for call in m.tool_calls or []:  # calls are cut on their own: they matter more than the prose
        names[call.id] = call.function.name
        text += f"\n-> {call.function.name}({_cut(call.function.arguments, max_chars)})"
    return text


def render_trajectory(t: Trajectory, max_message_chars: int = 1500, max_trajectory_chars: int = 12000) -> str:
    """Compact text of one trajectory for a prompt. Each message is cut to `max_message_chars`
    (marked "[... N chars cut]"). If the whole is longer than `max_trajectory_chars`, the first user
    message (the task) and as many LAST messages as fit are kept, because failures show at the end;
    the gap is marked with the number of messages dropped."""
    head = f"### Trajectory {t.id} (task {t.task_id}) - {'PASSED' if t.success else 'FAILED'}"
    if t.info.get("failure"):
        head += f"\nFailure: {_cut(str(t.info['failure']), max_message_chars)}"
    if t.tools:
        head += "\nTools: " + ", ".join(str(x.get("function", x).get("name", "?")) for x in t.tools)
    names: dict[str, str] = {}
    parts = [_render_message(m, names, max_message_chars) for m in t.messages]
    if len(head) + sum(len(p) + 1 for p in parts) <= max_trajectory_chars:
        return "\n".join([head, *parts])
    first = next((i for i, m in enumerate(t.messages) if m.role == "user"), None)
    marker = lambda n: f"[... {n} messages dropped to fit {max_trajectory_chars} chars ...]"
    # Room for the head, the task and up to two gap markers (before and after the task).
    budget = max_trajectory_chars - len(head) - 2 * (len(marker(len(parts))) + 1)
    budget -= len(parts[first]) + 1 if first is not None else 0
    keep = {first}
    for i in reversed(range(len(parts))):  # a contiguous tail, newest first
        if i == first:
            continue
        if len(parts[i]) + 1 > budget:
            break
        budget -= len(parts[i]) + 1
        keep.add(i)
    lines, gap = [head], 0
    for i, part in enumerate(parts):
        if i not in keep:
            gap += 1
            continue
        lines, gap = lines + ([marker(gap)] if gap else []) + [part], 0
    lines += [marker(gap)] if gap else []
    return "\n".join(lines)


def fill(template: str, **values: str) -> str:
    """Replace `{key}` for the given keys in one pass; other braces (JSON examples) stay as written."""
    return re.sub(r"\{(\w+)\}", lambda m: str(values[m[1]]) if m[1] in values else m[0], template)


# ---- strict parsing --------------------------------------------------------------------------------

def extract_json(text: str) -> dict[str, Any]:
    """The JSON object in an answer: a ```json fenced block if there is one, else the outermost {...}.
    Reasoning models' <think> blocks are skipped (they may contain braces)."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.S)
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, flags=re.S)
    start, end = text.find("{"), text.rfind("}")
    body = fenced[1] if fenced else text[start:end + 1] if 0 <= start < end else text
    try:
        value = json.loads(body)
    except json.JSONDecodeError as e:
        raise ValueError(f"no valid JSON object ({e.msg})") from None
    if not isinstance(value, dict):
        raise ValueError("the answer is not a JSON object")
    return value


def parse_labels(text: str, names: list[str]) -> dict[str, Label]:
    """{name: Label} for every capability in `names`; unknown names are ignored, missing ones or a
    value other than NA/PRESENT/LACKING raise ValueError (the answer is malformed)."""
    labels = extract_json(text).get("labels")
    if not isinstance(labels, dict):
        raise ValueError('no "labels" object')
    missing = [n for n in names if n not in labels]
    if missing:
        raise ValueError(f"no label for {', '.join(missing)}")
    try:
        return {n: Label(str(labels[n]).strip().upper()) for n in names}
    except ValueError:
        bad = {n: labels[n] for n in names if str(labels[n]).strip().upper() not in Label.__members__}
        raise ValueError(f"labels must be NA, PRESENT or LACKING, got {bad}") from None


def parse_capabilities(text: str, limit: int) -> list[Capability]:
    """The proposed capabilities (the first `limit` if the analyst proposed more)."""
    raw = extract_json(text).get("capabilities")
    if not isinstance(raw, list) or not raw:
        raise ValueError('no non-empty "capabilities" list')
    try:
        caps = [Capability.model_validate(c) for c in raw[:limit]]
    except ValidationError as e:
        first = e.errors()[0]
        raise ValueError(f"capability field {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    if len({c.name for c in caps}) < len(caps):
        raise ValueError("capability names must be distinct")
    return caps


def balanced_sample(trajectories: list[Trajectory], sample: int, seed: int = 0) -> tuple[list[Trajectory], list[Trajectory]]:
    """(failed, passed): up to `sample` trajectories, half of each outcome when both have enough
    (the other outcome fills a shortfall). Deterministic for a seed, whatever the input order."""
    rng = random.Random(seed)
    ordered = sorted(trajectories, key=lambda t: t.id)
    failed, passed = [t for t in ordered if not t.success], [t for t in ordered if t.success]
    n_failed = min(len(failed), max(sample // 2, sample - len(passed)))
    n_passed = min(len(passed), sample - n_failed)
    return rng.sample(failed, n_failed), rng.sample(passed, n_passed)


# ---- the analyst -----------------------------------------------------------------------------------

class _Failed(Exception):
    """A question that got no usable answer; the message says why."""


class _Tally:
    """Counters shared by the worker threads of one run."""

    def __init__(self) -> None:
        self.lock, self.counts = threading.Lock(), {"retries": 0, "http_retries": 0}

    def add(self, key: str) -> None:
        with self.lock:
            self.counts[key] += 1


class LLMAnalyst:
    def __init__(self, model: str, base_url: str, *, api_key: str | None = None, runs: int = 10,
                 concurrency: int = 8, timeout: float = 60.0, max_retries: int = 3, max_parse_retries: int = 2,
                 cache_dir: Path | None = None, prompts_dir: Path | None = None, temperature: float = 1.0,
                 backoff: float = 1.0, max_message_chars: int = 1500, max_trajectory_chars: int = 12000):
        self.model, self.url = model, base_url.rstrip("/") + "/chat/completions"
        self.runs, self.concurrency = runs, max(1, concurrency)
        self.max_retries, self.max_parse_retries, self.backoff = max_retries, max_parse_retries, backoff
        self.cache_dir, self.temperature = cache_dir, temperature
        self.max_message_chars, self.max_trajectory_chars = max_message_chars, max_trajectory_chars
        self.prompts = {name: self._prompt(prompts_dir, name) for name in ("discover", "label")}
        key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"  # local servers accept any key
        self.client = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {key}"},
                                   limits=httpx.Limits(max_connections=self.concurrency))

    @classmethod
    def from_spec(cls, spec: str, **kwargs: Any) -> LLMAnalyst:
        """Parse `openai:NAME@BASE_URL`, the form `OpenAIPolicy.from_spec` takes."""
        prefix, _, rest = spec.partition(":")
        model, _, base_url = rest.partition("@")  # model ids have no '@'; a URL may (user@host)
        if prefix != "openai" or not model or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"bad analyst spec {spec!r}: expected {SPEC_FORM}")
        return cls(model, base_url, **kwargs)

    def close(self) -> None:
        self.client.close()

    def discover(self, trajectories: list[Trajectory], max_capabilities: int = 10, sample: int = 40, *,
                 seed: int = 0, cache_dir: Path | None = None) -> list[Capability]:
        """One contrastive pass over a balanced sample. Raises RuntimeError if no usable answer."""
        failed, passed = balanced_sample(trajectories, sample, seed)
        if not failed:
            raise DataError("no failed trajectories: discovery needs failures to contrast with successes")
        # Many trajectories share one prompt, so each gets a quarter of the labelling budget.
        show = lambda ts: "\n\n".join(render_trajectory(t, self.max_message_chars, self.max_trajectory_chars // 4)
                                      for t in ts) or "(none)"
        prompt = fill(self.prompts["discover"], max_capabilities=str(max_capabilities), failed=show(failed),
                      passed=show(passed), n_failed=str(len(failed)), n_passed=str(len(passed)))
        try:
            return self._ask(prompt, seed, lambda text: parse_capabilities(text, max_capabilities),
                             cache_dir or self.cache_dir, _Tally())
        except _Failed as e:
            raise RuntimeError(f"capability discovery with {self.model} failed: {e}") from None

    def label_run(self, run: int, trajectories: list[Trajectory], capabilities: list[Capability], *,
                  cache_dir: Path | None = None) -> tuple[RunLabels, dict[str, Any]]:
        """Labels of one run (request seed = `run`) and stats {"missing", "missing_ids", "errors",
        "retries" (re-asks after malformed answers), "http_retries"}."""
        return self._label_runs([run], trajectories, capabilities, cache_dir or self.cache_dir)[0]

    def analyze(self, trajectories: list[Trajectory], out_dir: str | Path,
                capabilities: list[Capability] | None = None) -> list[Path]:
        """Discovery (unless `capabilities` are given) then runs 1..N, all runs' requests sharing one
        pool. Writes capabilities_proposed.json, labels/run_XX.json and labels/run_XX.missing.json."""
        out = Path(out_dir)
        cache = self.cache_dir or out / ".cache"
        caps = capabilities if capabilities is not None else self.discover(trajectories, cache_dir=cache)
        write_json(out / "capabilities_proposed.json", {"capabilities": [c.model_dump() for c in caps]})
        paths = []
        for labels, stats in self._label_runs(list(range(1, self.runs + 1)), trajectories, caps, cache):
            paths.append(write_run(out / "labels", labels))
            # Written even when empty, so a stale list from an earlier analysis never survives.
            write_json(out / "labels" / f"run_{labels.run:02d}.missing.json", stats["missing_ids"])
        return paths

    def _label_runs(self, runs: list[int], trajectories: list[Trajectory], caps: list[Capability],
                    cache: Path | None) -> list[tuple[RunLabels, dict[str, Any]]]:
        if not caps:
            raise DataError("no capabilities to label")
        if len({t.id for t in trajectories}) < len(trajectories):
            raise DataError("trajectory ids must be unique (labels are keyed by id)")
        names = [c.name for c in caps]
        listing = "\n".join(f"- {c.name}: {c.definition}" for c in caps)
        tallies = {r: _Tally() for r in runs}
        jobs = [(r, t) for r in runs for t in trajectories]

        def label(job: tuple[int, Trajectory]) -> dict[str, Label] | str:
            run, t = job
            prompt = fill(self.prompts["label"], capabilities=listing, names=", ".join(names),
                          trajectory=render_trajectory(t, self.max_message_chars, self.max_trajectory_chars))
            try:
                return self._ask(prompt, run, lambda text: parse_labels(text, names), cache, tallies[run])
            except _Failed as e:
                return str(e)

        # One pool for all runs, sized like the HTTP connection pool, so no request waits for a socket.
        with ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(jobs)))) as pool:
            answers = list(pool.map(label, jobs))
        results = []
        for r in runs:
            labels = RunLabels(run=r, capabilities={n: CapabilityLabels() for n in names},
                               definitions={c.name: c.definition for c in caps})
            errors: dict[str, str] = {}
            for (run, t), answer in zip(jobs, answers):
                if run != r:
                    continue
                if isinstance(answer, str):
                    errors[t.id] = answer
                    continue
                for n in names:
                    labels.capabilities[n].add(t.id, answer[n], t.success)
            results.append((labels, {"missing": len(errors), "missing_ids": list(errors), "errors": errors,
                                     **tallies[r].counts}))
        return results

    def _ask(self, prompt: str, seed: int, parse: Callable[[str], T], cache: Path | None, tally: _Tally) -> T:
        """Ask, and re-ask with the parse error while the answer is malformed. The seed goes into the
        body (and so the cache key): independent runs are independent samples, not cache replays."""
        messages = [{"role": "user", "content": prompt}]
        for attempt in range(self.max_parse_retries + 1):
            body = {"model": self.model, "messages": messages, "temperature": self.temperature, "seed": seed}
            text = self._complete(body, cache, tally)
            try:
                return parse(text)
            except ValueError as e:
                error = str(e)
            if attempt < self.max_parse_retries:
                tally.add("retries")
                # The conversation grows, so each re-ask is a new body: a new cache entry, not a replay.
                messages = messages + [{"role": "assistant", "content": text},
                                       {"role": "user", "content": _FIX.format(error=error)}]
        raise _Failed(f"malformed answer after {self.max_parse_retries + 1} attempts: {error}")

    def _complete(self, body: dict[str, Any], cache: Path | None, tally: _Tally) -> str:
        """The answer text, from the disk cache (keyed by model + full body) or from the server."""
        key = hashlib.sha256(json.dumps([self.model, body], sort_keys=True).encode()).hexdigest()
        path = cache / key[:2] / f"{key}.json" if cache else None
        if path and path.exists():
            return _content(path.read_text(encoding="utf-8"))
        raw = self._post(body, tally)
        text = _content(raw)  # only usable responses are cached; failures are asked again next time
        if path:
            atomic_write_text(path, raw)
        return text

    def _post(self, body: dict[str, Any], tally: _Tally) -> str:
        try:
            return post_with_retries(self.client, self.url, body, max_retries=self.max_retries,
                                     backoff=self.backoff, on_retry=lambda: tally.add("http_retries")).text
        except RequestFailed as e:
            raise _Failed(str(e)) from None

    @staticmethod
    def _prompt(folder: Path | None, name: str) -> str:
        path = Path(folder or PROMPTS) / f"{name}.md"
        if not path.is_file():
            raise DataError(f"prompts_dir {folder}: no {name}.md (copy {PROMPTS / (name + '.md')} and edit it)")
        return path.read_text(encoding="utf-8")


def _content(raw: str) -> str:
    try:
        content = json.loads(raw)["choices"][0]["message"]["content"]
        if not isinstance(content, str):
            raise TypeError
    except (ValueError, KeyError, IndexError, TypeError):
        raise _Failed(f"malformed response: {raw[:200]!r}") from None
    return content
