"""Labels of one analysis run (DESIGN.md §5): for every capability, which trajectories lack it, have
it, or did not need it, split by whether the trajectory passed.

File shape, `labels/run_XX.json`:
    {"run": r, "capabilities": {name: {"lacking_failed": [ids], "present_failed": [...],
     "na_failed": [...], "lacking_passed": [...], "present_passed": [...], "na_passed": [...]}},
     "definitions": {name: "..."}}      # definitions is optional
Whoever labels (programmatic probes or an LLM analyst) writes this shape; selection reads only it.
"""

from __future__ import annotations

import json
import re
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trace_agents.types import DataError, write_json


class Label(str, Enum):
    NA = "NA"
    PRESENT = "PRESENT"
    LACKING = "LACKING"


BUCKETS = ("lacking_failed", "present_failed", "na_failed", "lacking_passed", "present_passed", "na_passed")


def bucket(label: Label, success: bool) -> str:
    return f"{label.value.lower()}_{'passed' if success else 'failed'}"


class CapabilityLabels(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lacking_failed: list[str] = Field(default_factory=list)
    present_failed: list[str] = Field(default_factory=list)
    na_failed: list[str] = Field(default_factory=list)
    lacking_passed: list[str] = Field(default_factory=list)
    present_passed: list[str] = Field(default_factory=list)
    na_passed: list[str] = Field(default_factory=list)

    def add(self, trajectory_id: str, label: Label, success: bool) -> None:
        getattr(self, bucket(label, success)).append(trajectory_id)


class RunLabels(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run: int
    capabilities: dict[str, CapabilityLabels]
    definitions: dict[str, str] = Field(default_factory=dict)


def run_path(folder: str | Path, run: int) -> Path:
    return Path(folder) / f"run_{run:02d}.json"


def write_run(folder: str | Path, labels: RunLabels) -> Path:
    path = run_path(folder, labels.run)
    write_json(path, labels.model_dump())
    return path


_RUN_FILE = re.compile(r"run_(\d+)\.json$")


def read_runs(folder: str | Path) -> list[RunLabels]:
    """Every `run_XX.json` in `folder`, sorted by run number. Errors name the file and the field."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: not a folder of run_XX.json label files")
    files = sorted((p for p in folder.iterdir() if _RUN_FILE.search(p.name)), key=lambda p: int(_RUN_FILE.search(p.name).group(1)))
    if not files:
        raise DataError(f"{folder}: no run_XX.json label files (run `trace-agents analyze` first)")
    runs = []
    for path in files:
        try:
            runs.append(RunLabels.model_validate(json.loads(path.read_text(encoding="utf-8"))))
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
        except ValidationError as e:
            first = e.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise DataError(f"{path}: field '{field}': {first['msg']}") from None
    return runs
