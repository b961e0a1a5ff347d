"""Data shapes shared by every stage (DESIGN.md §5): messages in OpenAI chat format, trajectories,
verdicts, and JSONL read/write whose errors name the file, the line and the field."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FunctionCall(_Model):
    name: str
    arguments: str = Field(description="JSON object as a string, as OpenAI's API sends it.")

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a dict; raises ValueError if they are not a JSON object."""
        value = json.loads(self.arguments)
        if not isinstance(value, dict):
            raise ValueError(f"arguments of {self.name!r} are not a JSON object")
        return value


class ToolCall(_Model):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Model):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = ""
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def to_chat(self) -> dict[str, Any]:
        """The message as a plain dict for chat templates and HTTP APIs (no null fields)."""
        return self.model_dump(exclude_none=True)


class Verdict(_Model):
    """What an environment's checker says about one finished episode."""

    reward: float
    success: bool
    details: dict[str, Any] = Field(default_factory=dict)


class Trajectory(_Model):
    id: str
    env: str
    task_id: str
    seed: int
    messages: list[Message]
    tools: list[dict[str, Any]] = Field(default_factory=list)
    reward: float
    success: bool
    tool_calls: int
    info: dict[str, Any] = Field(default_factory=dict)


class DataError(ValueError):
    """Bad input data; the message says where (file:line) and which field."""


M = TypeVar("M", bound=BaseModel)


def _describe(err: ValidationError) -> str:
    first = err.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "(record)"
    more = f" (and {err.error_count() - 1} more problems)" if err.error_count() > 1 else ""
    return f"field '{field}': {first['msg']}{more}"


def read_jsonl(path: str | Path, model: type[M] = Trajectory) -> list[M]:  # type: ignore[assignment]
    """Read one `model` per non-empty line. Raises DataError naming file, line and field."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    items: list[M] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(raw, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(raw).__name__}")
            try:
                items.append(model.model_validate(raw))
            except ValidationError as e:
                raise DataError(f"{path}:{lineno}: {_describe(e)}") from None
    return items


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write via a temporary file and rename, so a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_jsonl(path: str | Path, items: Iterable[BaseModel]) -> None:
    atomic_write_text(path, "".join(item.model_dump_json(exclude_none=True) + "\n" for item in items))


def write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
