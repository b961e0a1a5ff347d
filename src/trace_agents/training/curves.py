"""Training curves (reward, success, tool calls, loss) from metrics.jsonl as one PNG."""

from __future__ import annotations

import json
from pathlib import Path


def plot_curves(metrics: str | Path, out: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in Path(metrics).read_text().splitlines() if line.strip()]
    keys = [k for k in ("reward", "success", "tool_calls", "loss") if any(r.get(k) is not None for r in rows)]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3), dpi=110, squeeze=False)
    for ax, key in zip(axes[0], keys):
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    tmp = Path(out).with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(out)
