import json

import pytest

from trace_agents.analysis.labels import CapabilityLabels, RunLabels, write_run
from trace_agents.analysis.select import format_table, run_stats, select, select_folder
from trace_agents.types import DataError


def cap(lf=0, pf=0, nf=0, lp=0, pp=0, np_=0) -> CapabilityLabels:
    """Labels with the given bucket sizes (ids are unique per bucket; only counts matter)."""
    ids = lambda prefix, k: [f"{prefix}{i}" for i in range(k)]
    return CapabilityLabels(lacking_failed=ids("lf", lf), present_failed=ids("pf", pf), na_failed=ids("nf", nf),
                            lacking_passed=ids("lp", lp), present_passed=ids("pp", pp), na_passed=ids("np", np_))


def runs_of(n: int, **caps_per_run) -> list[RunLabels]:
    """n runs; each keyword maps a capability name to a function run_index -> CapabilityLabels | None."""
    out = []
    for r in range(n):
        caps = {name: f(r) for name, f in caps_per_run.items() if f(r) is not None}
        out.append(RunLabels(run=r, capabilities=caps))
    return out


GOOD = cap(lf=6, pf=2, nf=2, lp=1, pp=9)  # passes defaults: Cov 0.6 ≥ 0.1, Δ 0.65 ≥ 0.2
BAD = cap(lf=1, pf=9, lp=1, pp=9)  # Cov 0.1, ER⁻ 0.1, ER⁺ 0.1, Δ 0 -> fails


def test_paper_arithmetic():
    # failed = 6+2+2 = 10 -> Cov = 6/10 = 0.6; ER⁻ = 6/(6+2) = 0.75; ER⁺ = 1/(1+9) = 0.1; Δ = 0.65
    s = run_stats(GOOD, delta=0.2, rho=0.1)
    assert s.coverage == pytest.approx(0.6) and s.er_failed == pytest.approx(0.75)
    assert s.er_passed == pytest.approx(0.1) and s.delta == pytest.approx(0.65)
    assert s.passed and not s.missing and (s.n_failed, s.n_passed) == (10, 10)


def test_delta_exactly_at_threshold_passes():
    # ER⁻ = 3/4 = 0.75, ER⁺ = 11/20 = 0.55; 0.75 - 0.55 = 0.19999999999999996 in floating point
    s = run_stats(cap(lf=3, pf=1, lp=11, pp=9), delta=0.2, rho=0.1)
    assert s.delta < 0.2 and s.passed
    # same counts with δ just above Δ: fails
    assert not run_stats(cap(lf=3, pf=1, lp=11, pp=9), delta=0.2001, rho=0.1).passed


def test_coverage_exactly_at_and_just_under_rho():
    # Cov = 1/10 = 0.1 (= ρ) passes; ER⁻ = 1/1 = 1, ER⁺ = 0 -> Δ 1
    assert run_stats(cap(lf=1, nf=9), delta=0.2, rho=0.1).passed
    # Cov = 1/11 ≈ 0.0909 < 0.1 fails although Δ = 1
    s = run_stats(cap(lf=1, nf=10), delta=0.2, rho=0.1)
    assert s.delta == 1.0 and s.coverage == pytest.approx(1 / 11) and not s.passed


def test_no_failed_trajectories_cannot_pass():
    # no failed: Cov 0, ER⁻ 0; ER⁺ = 0/5 = 0 -> Δ 0; fails even at ρ = δ = 0
    s = run_stats(cap(pp=5), delta=0.0, rho=0.0)
    assert (s.coverage, s.er_failed, s.er_passed, s.delta) == (0.0, 0.0, 0.0, 0.0) and not s.passed
    assert s.n_failed == 0 and s.n_passed == 5


def test_all_failed_are_na():
    # ER⁻ denominator LF+PF = 0 -> ER⁻ 0; Cov = 0/4 = 0; ER⁺ = 2/(2+2) = 0.5 -> Δ = -0.5
    s = run_stats(cap(nf=4, lp=2, pp=2), delta=0.2, rho=0.1)
    assert (s.coverage, s.er_failed, s.er_passed, s.delta) == (0.0, 0.0, 0.5, -0.5) and not s.passed


def test_na_everywhere_not_selected():
    sel = select(runs_of(3, na=lambda r: cap(nf=5, np_=5)), delta=0.0, rho=0.0)
    (c,) = sel["capabilities"]
    assert (c["mean_coverage"], c["mean_delta"], c["runs_passed"], c["selected"]) == (0.0, 0.0, 0, False)


def test_missing_from_some_runs():
    # present (and passing, Δ 0.65, Cov 0.6) in runs 0..7 of 10, missing in 8 and 9
    runs = runs_of(10, c=lambda r: GOOD if r < 8 else None, other=lambda r: BAD)
    sel = select(runs, min_runs=8)
    c = next(x for x in sel["capabilities"] if x["name"] == "c")
    assert c["runs_passed"] == 8 and c["selected"]
    assert c["mean_delta"] == pytest.approx(0.65) and c["mean_coverage"] == pytest.approx(0.6)  # over present runs
    missing = c["per_run"][9]
    assert missing["missing"] is True and missing["passed"] is False and missing["run"] == 9
    assert all(missing[k] is None for k in ("delta", "coverage", "er_failed", "er_passed"))
    assert c["per_run"][0]["missing"] is False
    # with K = 9 the two missing runs make it fail
    assert not next(x for x in select(runs, min_runs=9)["capabilities"] if x["name"] == "c")["selected"]


@pytest.mark.parametrize("passes, selected", [(8, True), (7, False)])
def test_k_of_n(passes, selected):
    sel = select(runs_of(10, c=lambda r: GOOD if r < passes else BAD), min_runs=8)
    (c,) = sel["capabilities"]
    assert c["runs_passed"] == passes and c["selected"] is selected and len(c["per_run"]) == 10


@pytest.mark.parametrize("n, k", [(10, 8), (3, 3), (1, 1), (5, 4)])
def test_default_k(n, k):
    # ceil(0.8·10) = 8, ceil(0.8·3) = ceil(2.4) = 3, ceil(0.8) = 1, ceil(4.0) = 4
    assert select(runs_of(n, c=lambda r: GOOD))["thresholds"] == {"delta": 0.2, "rho": 0.1, "min_runs": k, "runs": n}


def test_sort_order_and_shape():
    runs = runs_of(
        2,
        low=lambda r: BAD,  # Δ 0
        high=lambda r: GOOD,  # Δ 0.65, Cov 0.6
        # b_tie / a_tie: ER⁻ 1, ER⁺ 0.35 -> Δ 0.65 as well; coverage decides, then the name
        b_tie=lambda r: cap(lf=7, nf=3, lp=7, pp=13),  # Cov 0.7 -> before high
        a_tie=lambda r: cap(lf=6, nf=4, lp=7, pp=13),  # Cov 0.6 -> same as high, 'a_tie' < 'high'
    )
    runs[1].definitions = {"high": "Uses the right tool.", "low": ""}
    sel = select(runs)
    assert [c["name"] for c in sel["capabilities"]] == ["b_tie", "a_tie", "high", "low"]
    high = sel["capabilities"][2]
    assert high["definition"] == "Uses the right tool." and sel["capabilities"][3]["definition"] == ""
    assert {"name", "definition", "mean_delta", "mean_coverage", "runs_passed", "selected", "per_run"} <= high.keys()
    assert {"delta", "coverage", "er_failed", "er_passed"} <= high["per_run"][0].keys()
    json.dumps(sel)  # serialisable as is


@pytest.mark.parametrize(
    "kwargs, flag",
    [({"delta": 1.5}, "--delta"), ({"delta": -0.1}, "--delta"), ({"delta": float("nan")}, "--delta"),
     ({"rho": 2}, "--rho"), ({"min_runs": 0}, "--min-runs"), ({"min_runs": 4}, "--min-runs")],
)
def test_bad_thresholds(kwargs, flag):
    with pytest.raises(ValueError, match=flag) as e:
        select(runs_of(3, c=lambda r: GOOD), **kwargs)
    assert "between" in str(e.value)


def test_no_runs():
    with pytest.raises(ValueError, match="no labelling runs"):
        select([])


def test_select_folder_round_trip(tmp_path):
    labels = tmp_path / "labels"
    for r in range(1, 4):
        write_run(labels, RunLabels(run=r, capabilities={"c": GOOD, "d": BAD}, definitions={"c": "Does c."}))
    sel = select_folder(labels, tmp_path / "out" / "capabilities.json")
    assert json.loads((tmp_path / "out" / "capabilities.json").read_text()) == sel
    assert sel["thresholds"]["runs"] == 3 and sel["thresholds"]["min_runs"] == 3
    assert [(c["name"], c["selected"]) for c in sel["capabilities"]] == [("c", True), ("d", False)]
    assert [p["run"] for p in sel["capabilities"][0]["per_run"]] == [1, 2, 3]


def test_select_folder_corrupt_file(tmp_path):
    write_run(tmp_path, RunLabels(run=0, capabilities={"c": GOOD}))
    (tmp_path / "run_01.json").write_text("{oops", encoding="utf-8")
    with pytest.raises(DataError, match="run_01.json"):
        select_folder(tmp_path, tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()


def test_format_table():
    sel = select(runs_of(10, c=lambda r: GOOD if r < 8 else BAD, d=lambda r: BAD))
    text = format_table(sel)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["capability", "mean", "Δ"]
    assert lines[2].split() == ["c", "+0.520", "0.500", "8/10", "yes"]  # (8·0.65 + 2·0)/10, (8·0.6 + 2·0.1)/10
    assert lines[3].split() == ["d", "+0.000", "0.100", "0/10", "no"]
    assert "8 of 10" in lines[-1]
    assert "(no capabilities)" in format_table({"thresholds": sel["thresholds"], "capabilities": []})
