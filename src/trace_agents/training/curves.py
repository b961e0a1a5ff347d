"""Training curves (reward, success, tool calls, loss) from metrics.jsonl as one PNG."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from matplotlib.figure import Figure

KEYS = ("reward", "success", "tool_calls", "loss")


def read_metrics(path: str | Path) -> list[dict]:
    """One dict per logged step; blank lines skipped (a crash can leave a trailing newline)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def curves_figure(rows: list[dict], keys: Sequence[str] = KEYS) -> Figure | None:
    """One panel per key that has at least one value; None when no key has any."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in keys if any(r.get(k) is not None for r in rows)]
    if not keys:
        return None
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3), dpi=110, squeeze=False)
    for ax, key in zip(axes[0], keys):
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_curves(metrics: str | Path, out: str | Path) -> None:
    import matplotlib.pyplot as plt

    fig = curves_figure(read_metrics(metrics))
    if fig is None:
        raise ValueError(f"{metrics}: no {', '.join(KEYS)} values to plot")
    tmp = Path(out).with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(out)
