"""Capability selection (DESIGN.md §3): keep the capabilities whose absence explains failures.

Per run r and capability c, over that run's labels:
    Cov  = LF / (LF + PF + NF)          share of failed trajectories lacking c (NA stays in the denominator)
    ER⁻  = LF / (LF + PF)               error rate among failed trajectories that needed c (NA excluded)
    ER⁺  = LP / (LP + PP)               the same among passed trajectories (NA excluded)
    Δ    = ER⁻ − ER⁺
c passes r if Cov ≥ ρ and Δ ≥ δ; c is selected if it passes at least K of the N runs.
Output shape: DESIGN.md §9 (`trace-agents select`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from trace_agents.analysis.labels import CapabilityLabels, RunLabels, read_runs
from trace_agents.types import write_json

EPS = 1e-12  # so that Δ == δ computed in floating point (e.g. 0.75 - 0.55) still passes


@dataclass
class RunStats:
    delta: float | None
    coverage: float | None
    er_failed: float | None
    er_passed: float | None
    passed: bool
    missing: bool = False
    n_failed: int = 0
    n_passed: int = 0


def _ratio(num: int, den: int) -> float:
    return num / den if den else 0.0  # an empty denominator carries no evidence, so it counts as 0


def run_stats(c: CapabilityLabels, delta: float, rho: float) -> RunStats:
    """Figures of one capability in one run. Edge cases:
    - no failed trajectories: Cov = 0 and ER⁻ = 0, so the run cannot pass;
    - every failed trajectory NA (ER⁻ denominator 0): ER⁻ = 0; likewise ER⁺ = 0 with no LP/PP;
    - NA everywhere: Cov 0, Δ 0, never passes.
    A run also never passes when no failed trajectory lacks c (LF = 0): with ρ > 0 that already
    follows from Cov ≥ ρ; the explicit check keeps ρ = δ = 0 from selecting a capability that
    explains no failure at all."""
    lf, pf, nf = len(c.lacking_failed), len(c.present_failed), len(c.na_failed)
    lp, pp, np_ = len(c.lacking_passed), len(c.present_passed), len(c.na_passed)
    cov, er_f, er_p = _ratio(lf, lf + pf + nf), _ratio(lf, lf + pf), _ratio(lp, lp + pp)
    d = er_f - er_p
    passed = lf > 0 and cov >= rho - EPS and d >= delta - EPS
    return RunStats(d, cov, er_f, er_p, passed, n_failed=lf + pf + nf, n_passed=lp + pp + np_)


def _check(flag: str, value: float, lo: float, hi: float) -> None:
    if not lo <= value <= hi:  # also rejects NaN
        raise ValueError(f"{flag} must be between {lo:g} and {hi:g}, got {value}")


def select(runs: list[RunLabels], delta: float = 0.2, rho: float = 0.1, min_runs: int | None = None) -> dict:
    """Selection over N labelling runs; K (`min_runs`) defaults to ceil(0.8·N), the paper's 8 of 10.
    A capability missing from a run does not pass it (per-run figures null, "missing": true);
    its mean Δ and mean coverage are taken over the runs where it is present."""
    n = len(runs)
    if n == 0:
        raise ValueError("no labelling runs to select from")
    k = math.ceil(0.8 * n) if min_runs is None else min_runs
    _check("--delta", delta, 0, 1)
    _check("--rho", rho, 0, 1)
    _check("--min-runs", k, 1, n)

    names = sorted({name for r in runs for name in r.capabilities})
    capabilities = []
    for name in names:
        stats = [run_stats(r.capabilities[name], delta, rho) if name in r.capabilities
                 else RunStats(None, None, None, None, passed=False, missing=True) for r in runs]
        present = [s for s in stats if not s.missing]  # never empty: the name came from some run
        passed = sum(s.passed for s in stats)
        capabilities.append({
            "name": name,
            "definition": next((r.definitions[name] for r in runs if r.definitions.get(name)), ""),
            "mean_delta": sum(s.delta for s in present) / len(present),  # type: ignore[misc]
            "mean_coverage": sum(s.coverage for s in present) / len(present),  # type: ignore[misc]
            "runs_passed": passed,
            "selected": passed >= k,
            "per_run": [{"run": r.run, "delta": s.delta, "coverage": s.coverage, "er_failed": s.er_failed,
                         "er_passed": s.er_passed, "passed": s.passed, "missing": s.missing,
                         "n_failed": s.n_failed, "n_passed": s.n_passed} for r, s in zip(runs, stats)],
        })
    # rounded so that means equal up to float noise count as ties and fall through to coverage, then name
    capabilities.sort(key=lambda c: (-round(c["mean_delta"], 12), -round(c["mean_coverage"], 12), c["name"]))
    return {"thresholds": {"delta": delta, "rho": rho, "min_runs": k, "runs": n}, "capabilities": capabilities}


def select_folder(labels_dir: str | Path, out_path: str | Path, delta: float = 0.2, rho: float = 0.1,
                  min_runs: int | None = None) -> dict:
    """Read `labels_dir/run_XX.json` (DataError names a bad file), select, write `out_path` atomically."""
    selection = select(read_runs(labels_dir), delta=delta, rho=rho, min_runs=min_runs)
    write_json(out_path, selection)
    return selection


def format_table(selection: dict) -> str:
    """Plain-text table for terminals and notes, in the selection's order (mean Δ descending)."""
    n = selection["thresholds"]["runs"]
    rows = [(c["name"], f"{c['mean_delta']:+.3f}", f"{c['mean_coverage']:.3f}", f"{c['runs_passed']}/{n}",
             "yes" if c["selected"] else "no") for c in selection["capabilities"]]
    header = ("capability", "mean Δ", "mean cov", "passed", "selected")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:  # name left-aligned, figures right-aligned
        return "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths)))

    out = [line(header), "  ".join("-" * w for w in widths), *map(line, rows)]
    if not rows:
        out.append("(no capabilities)")
    t = selection["thresholds"]
    out.append(f"δ={t['delta']:g}  ρ={t['rho']:g}  kept if passed ≥ {t['min_runs']} of {n} runs")
    return "\n".join(out) + "\n"
