"""Stage 1 end to end: label trajectories (rules or an LLM analyst), select capabilities, and write
a small markdown + PNG summary (Δ vs coverage with the δ/ρ lines, kept capabilities highlighted)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trace_agents.analysis.labels import write_run
from trace_agents.analysis.select import format_table, select_folder
from trace_agents.types import Trajectory, atomic_write_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def analyze(
    trajectories: list[Trajectory],
    out: str | Path,
    *,
    analyst: str = "rules",
    runs: int = 10,
    delta: float = 0.2,
    rho: float = 0.1,
    min_runs: int | None = None,
    prompts_dir: Path | None = None,
) -> dict:
    out = Path(out)
    labels_dir = out / "labels"
    if analyst == "rules":
        from trace_agents.analysis.probes import label_runs

        for labels in label_runs(trajectories, runs):
            write_run(labels_dir, labels)
    else:
        from trace_agents.analysis.llm import LLMAnalyst

        LLMAnalyst.from_spec(analyst, runs=runs, prompts_dir=prompts_dir).analyze(trajectories, out)
    selection = select_folder(labels_dir, out / "capabilities.json", delta=delta, rho=rho, min_runs=min_runs)
    write_summary(selection, trajectories, out, analyst)
    return selection


def write_summary(selection: dict, trajectories: list[Trajectory], out: Path, analyst: str) -> None:
    n_failed = sum(not t.success for t in trajectories)
    th = selection["thresholds"]
    kept = [c["name"] for c in selection["capabilities"] if c["selected"]]
    lines = [
        "# Capability analysis",
        "",
        f"- trajectories: {len(trajectories)} ({n_failed} failed, {len(trajectories) - n_failed} passed)",
        f"- analyst: {analyst}; runs: {th['runs']}; thresholds: Δ ≥ {th['delta']}, coverage ≥ {th['rho']}, "
        f"kept if passed in ≥ {th['min_runs']} of {th['runs']} runs",
        f"- selected: {', '.join(kept) if kept else 'none'}",
        "",
        "```",
        format_table(selection),
        "```",
        "",
        "![Δ vs coverage](summary.png)",
        "",
    ]
    atomic_write_text(out / "summary.md", "\n".join(lines))
    plot(selection, out / "summary.png")


def plot(selection: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = selection_figure(selection)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)


def selection_figure(selection: dict) -> Figure:
    """Δ vs coverage with the δ/ρ lines; selected capabilities in red."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    th = selection["thresholds"]
    fig, ax = plt.subplots(figsize=(7, 5), dpi=110)
    for c in selection["capabilities"]:
        colour = "tab:red" if c["selected"] else "tab:gray"
        ax.scatter(c["mean_coverage"], c["mean_delta"], s=60, color=colour, zorder=3)
        ax.annotate(c["name"], (c["mean_coverage"], c["mean_delta"]), fontsize=8, xytext=(4, 4), textcoords="offset points")
    ax.axhline(th["delta"], color="tab:blue", ls="--", lw=1, label=f"δ = {th['delta']}")
    ax.axvline(th["rho"], color="tab:green", ls="--", lw=1, label=f"ρ = {th['rho']}")
    ax.set_xlabel("mean coverage (share of failures lacking it)")
    ax.set_ylabel("mean Δ = ER⁻ − ER⁺")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(min([-0.1] + [c["mean_delta"] - 0.05 for c in selection["capabilities"]]), 1.02)
    ax.set_title("Capabilities: red = selected")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
