"""Stage 2 with an LLM: TRACE's environment synthesis, for capabilities without a built-in family.

An OpenAI-compatible model follows `prompts/synthesize.md` (the capability, the target's tool schemas,
failed trajectories, the Env protocol with a complete example) and writes one environment module.
The module is validated in a sandbox (`validate.py`); while it fails, the model is asked again with
the validation report appended to the conversation, up to `max_attempts` (paper: 5).

A user may replace the prompt by pointing `prompts_dir` at a folder with their own `synthesize.md`
(placeholders: {capability_name}, {capability_definition}, {target_tools}, {failed_examples}).
Answers are cached on disk by the sha256 of model + request body, like the LLM analyst, so a rerun
replays the same conversation without a server.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from trace_agents.agent.http import RequestFailed, post_with_retries
from trace_agents.analysis.llm import fill
from trace_agents.synthesis.validate import validate_module
from trace_agents.types import DataError, atomic_write_text

PROMPTS = Path(__file__).with_name("prompts")
RETRY = ("Your module failed. Report:\n\n{report}\n\nFix every failing check and answer again with the complete "
         "corrected module in exactly one ```python fenced code block.")


@dataclass
class SynthesisResult:
    ok: bool
    """True when the module at `path` passed validation."""
    attempts: int
    """Answers asked for (each one parsed and, if it held code, validated)."""
    path: Path | None
    """The validated module; after a failure, the last rejected module (`<out>.rejected`), or None."""
    reports: list[str] = field(default_factory=list)
    """One report per attempt: the validation report, or why the answer could not be used."""


# ---- prompt ----------------------------------------------------------------------------------------

def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]} [... {len(text) - limit} chars cut]"


def _short_descriptions(node: Any, limit: int) -> Any:
    if isinstance(node, dict):
        return {k: _cut(v, limit) if k == "description" and isinstance(v, str) else _short_descriptions(v, limit)
                for k, v in node.items()}
    if isinstance(node, list):
        return [_short_descriptions(v, limit) for v in node]
    return node


def render_tools(tools: list[dict[str, Any]], max_chars: int = 12000, max_description: int = 300) -> str:
    """The target's tool schemas, one JSON line each in a fenced block: duplicates (by name) dropped,
    descriptions cut to `max_description` chars, and tools beyond `max_chars` left out (counted)."""
    seen, lines, total = set(), [], 0
    unique = []
    for tool in tools:
        name = tool.get("function", tool).get("name") if isinstance(tool, dict) else None
        if name not in seen:
            seen.add(name)
            unique.append(tool)
    for i, tool in enumerate(unique):
        line = json.dumps(_short_descriptions(tool, max_description), ensure_ascii=False)
        if lines and total + len(line) > max_chars:
            lines.append(f"... ({len(unique) - i} more tools left out)")
            break
        lines.append(line)
        total += len(line) + 1
    return "```json\n" + "\n".join(lines) + "\n```" if lines else "(none given)"


def render_failures(examples: list[str], max_examples: int = 3, max_chars: int = 4000) -> str:
    shown = [_cut(e.strip(), max_chars) for e in examples[:max_examples]]
    more = f"\n\n({len(examples) - max_examples} more not shown)" if len(examples) > max_examples else ""
    return "\n\n".join(shown) + more if shown else "(none given)"


def build_prompt(template: str, capability: dict[str, Any], target_tools: list[dict[str, Any]],
                 failed_examples: list[str]) -> str:
    for key in ("name", "definition"):
        if not isinstance(capability.get(key), str) or not capability[key].strip():
            raise DataError(f"capability needs a non-empty {key!r} (got {capability!r})")
    return fill(template, capability_name=capability["name"], capability_definition=capability["definition"],
                target_tools=render_tools(target_tools), failed_examples=render_failures(failed_examples))


def load_prompt(prompts_dir: Path | None = None) -> str:
    path = Path(prompts_dir or PROMPTS) / "synthesize.md"
    if not path.is_file():
        raise DataError(f"prompts_dir {prompts_dir}: no synthesize.md (copy {PROMPTS / 'synthesize.md'} and edit it)")
    return path.read_text(encoding="utf-8")


# ---- answers ---------------------------------------------------------------------------------------

def extract_module(text: str) -> str:
    """The module in an answer: its ```python fenced block (the longest, if there are several, since
    the module is longer than any usage snippet). Reasoning models' <think> blocks are skipped.
    ValueError says what is wrong."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.S)
    blocks = re.findall(r"```(?:python3?|py)[ \t]*\n(.*?)```", text, flags=re.S)
    if not blocks:
        if re.search(r"```(?:python3?|py)[ \t]*\n", text):
            raise ValueError("the ```python code block is not closed (was the answer cut off? write a shorter module)")
        raise ValueError("no ```python fenced code block in the answer")
    return max(blocks, key=len).strip() + "\n"


def _content(raw: str) -> tuple[str, str | None]:
    """(content, finish_reason) of a chat completion; ValueError if the response is not one."""
    try:
        choice = json.loads(raw)["choices"][0]
        content = choice["message"]["content"]
        if not isinstance(content, str):
            raise TypeError
    except (ValueError, KeyError, IndexError, TypeError):
        raise ValueError(f"malformed response: {raw[:200]!r}") from None
    return content, choice.get("finish_reason")


class _Chat:
    """One model on one server, with an optional disk cache keyed by model + request body."""

    def __init__(self, model: str, base_url: str, api_key: str | None, timeout: float, cache_dir: Path | None,
                 max_retries: int, backoff: float):
        self.model, self.url = model, base_url.rstrip("/") + "/chat/completions"
        self.cache_dir, self.max_retries, self.backoff = cache_dir, max_retries, backoff
        key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"  # local servers accept any key
        self.client = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {key}"})

    def complete(self, body: dict[str, Any]) -> tuple[str, str | None]:
        key = hashlib.sha256(json.dumps([self.model, body], sort_keys=True).encode()).hexdigest()
        path = self.cache_dir / key[:2] / f"{key}.json" if self.cache_dir else None
        if path and path.exists():
            return _content(path.read_text(encoding="utf-8"))
        raw = post_with_retries(self.client, self.url, body, max_retries=self.max_retries, backoff=self.backoff).text
        answer = _content(raw)  # only usable responses are cached
        if path:
            atomic_write_text(path, raw)
        return answer


# ---- synthesis -------------------------------------------------------------------------------------

def synthesize_env(capability: dict[str, Any], target_tools: list[dict[str, Any]], failed_examples: list[str],
                   out_path: str | Path, *, model: str, base_url: str, api_key: str | None = None,
                   max_attempts: int = 5, timeout: float = 120.0, cache_dir: Path | None = None,
                   prompts_dir: Path | None = None, temperature: float = 0.7, seed: int = 0,
                   max_tokens: int | None = None, max_retries: int = 3, backoff: float = 1.0,
                   validation: dict[str, Any] | None = None) -> SynthesisResult:
    """Ask `model` for an environment module training `capability` ({"name", "definition"}), write each
    candidate to `out_path` (atomically) and validate it (`validation`: keyword arguments of
    `validate_module`); on failure, ask again with the report, up to `max_attempts`. After a final
    failure the last candidate is moved to `<out_path>.rejected`, so `out_path` only ever holds a
    validated module. A request that fails for good (after HTTP retries) ends the synthesis."""
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    out_path = Path(out_path)
    prompt = build_prompt(load_prompt(prompts_dir), dict(capability), target_tools, failed_examples)
    chat = _Chat(model, base_url, api_key, timeout, cache_dir, max_retries, backoff)
    messages: list[dict[str, str]] = [{"role": "user", "content": prompt}]
    reports: list[str] = []
    written = False
    try:
        for attempt in range(1, max_attempts + 1):
            body: dict[str, Any] = {"model": model, "messages": messages, "temperature": temperature, "seed": seed}
            if max_tokens:
                body["max_tokens"] = max_tokens
            try:
                text, finish = chat.complete(body)
            except (RequestFailed, ValueError) as e:
                reports.append(f"Attempt {attempt}: the request to {model} failed: {e}")
                break
            try:
                code = extract_module(text)
            except ValueError as e:
                cut = " The answer hit the token limit." if finish == "length" else ""
                report = f"Attempt {attempt}: the answer could not be used: {e}.{cut}"
            else:
                atomic_write_text(out_path, code)
                written = True
                result = validate_module(out_path, **(validation or {}))
                if result.ok:
                    reports.append(result.text())
                    return SynthesisResult(ok=True, attempts=attempt, path=out_path, reports=reports)
                report = result.text(timing=False)
            reports.append(report)
            # The conversation grows: the model sees its own answer and what was wrong with it.
            messages = messages + [{"role": "assistant", "content": text},
                                   {"role": "user", "content": fill(RETRY, report=report)}]
    finally:
        chat.client.close()
    rejected = None
    if written and out_path.exists():
        rejected = out_path.with_name(out_path.name + ".rejected")
        os.replace(out_path, rejected)
    return SynthesisResult(ok=False, attempts=len(reports), path=rejected, reports=reports)
