"""`trace-agents report RUN_DIR`: one self-contained HTML page summarising a pipeline run folder.

Everything the page needs is inside it (CSS inline, plots as base64 PNG data URIs, no scripts), so it
can be mailed or opened offline. Every section reads its stage folder (`NN_name`, found by name) on
its own and says "not run yet" when that folder or file is missing: a run can stop anywhere.
"""

from __future__ import annotations

import base64
import io
import json
import re
import time
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from trace_agents.types import DataError, Trajectory, atomic_write_text, read_jsonl

if TYPE_CHECKING:
    from matplotlib.figure import Figure

STAGES = ("warmup", "base_rollouts", "analysis", "synthesis", "adapters", "grpo_baseline", "compose", "evaluation")
"""Stage folder names in pipeline order (warm-up is optional), for the header's progress line."""

MAX_CHARS = 1500
"""Characters of one message shown in the examples; system prompts with tool schemas run long."""


def build_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write the report (default RUN_DIR/report.html) atomically and return its path."""
    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / "report.html"
    sections = [_section(anchor, title, lambda: render(run_dir)) for anchor, title, render in SECTIONS]
    nav = "".join(f'<a href="#{anchor}">{escape(title)}</a>' for anchor, title, _ in SECTIONS)
    atomic_write_text(out, _page(f"TRACE report: {run_dir.resolve().name}", _guarded(lambda: _header(run_dir)) + f"<nav>{nav}</nav>", sections))
    return out


# ---- reading the run folder ----------------------------------------------------------------------
def _stage(run_dir: Path, name: str) -> Path | None:
    """The `NN_name` folder of a stage (never its `.tmp` build folder), or None."""
    found = [p for p in run_dir.glob(f"*_{name}") if p.is_dir() and re.fullmatch(rf"\d+_{name}", p.name)]
    # A rerun with another stage list (warm-up added or dropped) can leave an older folder under a
    # different number; the newest one is what the run last wrote.
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


def _file(run_dir: Path, stage: str, *parts: str) -> Path | None:
    folder = _stage(run_dir, stage)
    path = folder.joinpath(*parts) if folder else None
    return path if path is not None and path.exists() else None


def _json(path: Path | None) -> Any:
    if path is None or not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None


# ---- HTML pieces ---------------------------------------------------------------------------------
class Html(str):
    """Markup built here from escaped parts; table cells of this type are not escaped again."""


def _cell(value: Any) -> str:
    if isinstance(value, Html):
        return value
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    return escape(str(value))


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> Html:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return Html(f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>")


def _flag(ok: bool | None, text: str | None = None) -> Html:
    """A green/red marker; grey when unknown."""
    cls = {True: "ok", False: "bad", None: "unknown"}[ok]
    label = text if text is not None else {True: "yes", False: "no", None: "—"}[ok]
    return Html(f'<span class="{cls}">{escape(label)}</span>')


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _seconds(x: float | None) -> str | None:
    return None if x is None else f"{x:.1f}"


def _not_run(stage: str, what: str) -> Html:
    return Html(f'<p class="missing">not run yet: no <code>NN_{escape(stage)}/{escape(what)}</code> in this run folder</p>')


def _guarded(render: Callable[[], str]) -> str:
    try:
        return render()
    except (DataError, OSError, ValueError, KeyError, TypeError) as e:
        # A damaged or older-format file costs its own part of the page, not the whole page.
        return f'<p class="error">could not render this part: {escape(type(e).__name__)}: {escape(str(e))}</p>'


def _section(anchor: str, title: str, render: Callable[[], str]) -> Html:
    return Html(f'<section id="{anchor}"><h2>{escape(title)}</h2>{_guarded(render)}</section>')


def _img(png: bytes, alt: str) -> Html:
    return Html(f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">')


def _figure_img(fig: Figure, alt: str) -> Html:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)  # pyplot keeps every open figure alive otherwise
    return _img(buf.getvalue(), alt)


def _hbar(labels: list[str], values: list[float], xlabel: str, ci: list[tuple[float, float]] | None = None) -> Html:
    """Horizontal bars, first label on top; `ci` adds (lo, hi) error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.45 * len(labels) + 1.2), dpi=110)
    xerr = None
    if ci is not None:  # matplotlib wants distances below and above each bar's end
        xerr = [[max(0.0, v - lo) for v, (lo, _) in zip(values, ci)], [max(0.0, hi - v) for v, (_, hi) in zip(values, ci)]]
    ax.barh(labels, values, xerr=xerr, capsize=4, color="tab:blue", alpha=0.8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return _figure_img(fig, xlabel)


# ---- sections ------------------------------------------------------------------------------------
def _header(run_dir: Path) -> Html:
    run = _json(run_dir / "run.json")
    items: list[tuple[str, Any]] = [("run folder", str(run_dir.resolve()))]
    if run is None:
        items.append(("run.json", "not written yet: the pipeline has not finished"))
    else:
        items += [("model", run.get("model")), ("base weights", run.get("dtype", "float32")), ("target", run.get("target")),
                  ("capabilities", ", ".join(run.get("capabilities") or []) or "none"),
                  ("rollouts per system", run.get("rollouts_per_system"))]
    items.append(("stages", _stage_line(run_dir)))
    items.append(("generated", time.strftime("%Y-%m-%d %H:%M:%S")))
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{_cell(v)}</dd>" for k, v in items)
    return Html(f"<dl class='meta'>{rows}</dl>")


def _stage_line(run_dir: Path) -> Html:
    parts = []
    for name in STAGES:
        folder = _stage(run_dir, name)
        meta = _json(folder / "stage.json") if folder else None
        if folder is None:
            parts.append(_flag(None, f"{name}: not run"))
        else:
            seconds = _seconds((meta or {}).get("seconds"))
            parts.append(_flag(True, name + (f" ({seconds} s)" if seconds else "")))
    return Html(" ".join(parts))


def _capabilities(run_dir: Path) -> str:
    sel = _json(_file(run_dir, "analysis", "capabilities.json"))
    if sel is None:
        return _not_run("analysis", "capabilities.json")
    th = sel["thresholds"]
    base = _file(run_dir, "base_rollouts", "trajectories.jsonl")
    trajs = read_jsonl(base) if base else []
    intro = (f"<p>Base rollouts: {len(trajs)} trajectories, {sum(not t.success for t in trajs)} failed. "
             f"Kept if Δ ≥ {th['delta']} and coverage ≥ {th['rho']} in at least {th['min_runs']} of {th['runs']} runs.</p>")
    rows = [[c["name"], c.get("definition", ""), c["mean_delta"], c["mean_coverage"],
             f"{c['runs_passed']}/{th['runs']}", _flag(c["selected"])] for c in sel["capabilities"]]
    table = _table(["capability", "definition", "mean Δ", "mean coverage", "runs passed", "selected"], rows)
    png = _file(run_dir, "analysis", "summary.png")
    if png is not None:
        plot = _img(png.read_bytes(), "Δ vs coverage")
    else:
        from trace_agents.analysis.report import selection_figure

        plot = _figure_img(selection_figure(sel), "Δ vs coverage")
    return intro + table + plot


def _environments(run_dir: Path) -> str:
    syn_path = _file(run_dir, "synthesis", "synthesis.json")
    syn = _json(syn_path)
    if syn is None:
        return _not_run("synthesis", "synthesis.json")
    rows, notes = [], []
    for cap, env in syn["environments"].items():
        cal = env.get("calibration") or {}
        rows.append([cap, env.get("source"), _flag(env.get("valid")), cal.get("difficulty"),
                     f"{cal['seeds']}×{cal['samples']}" if "seeds" in cal else None,
                     _banded(cal, "mean_reward"), _banded(cal, "success_rate"), cal.get("pass_at_k"),
                     _banded(cal, "degenerate_fraction"), _flag(cal.get("ok"))])
        notes += [f"<li><b>{escape(cap)}</b>: {escape(n)}</li>" for n in _env_notes(syn_path.parent, cap, env)]
    table = _table(["capability", "source", "valid", "difficulty", "seeds×samples", "mean reward",
                    "success rate", "pass@k", "degenerate", "in band"], rows)
    legend = "<p class='small'>Green: inside the calibration band; red: outside; — : not calibrated.</p>"
    return table + legend + (f"<ul class='notes'>{''.join(notes)}</ul>" if notes else "")


def _banded(cal: dict, key: str) -> Html | None:
    """A calibration figure, green inside its band and red outside."""
    if cal.get(key) is None:
        return None
    return _flag((cal.get("in_band") or {}).get(key), f"{cal[key]:.3f}")


def _env_notes(folder: Path, cap: str, env: dict) -> list[str]:
    """Why an environment is missing, invalid or out of band, from the stage's side files."""
    notes = [env["error"]] if env.get("error") else []
    why = (_json(folder / f"{cap}.calibration.json") or {}).get("why_not")
    if why:
        notes.append(f"calibration: {why}")
    checks = (_json(folder / f"{cap}.validation.json") or {}).get("checks", [])
    notes += [f"validation check {c['name']} failed: {c.get('detail', '')}" for c in checks if not c.get("ok")]
    return notes


def _curves(title: str, rows: list[dict], keys: Sequence[str] | None = None) -> str:
    from trace_agents.training.curves import KEYS, curves_figure

    fig = curves_figure(rows, keys or KEYS) if rows else None
    if fig is None:
        return f"<h3>{escape(title)}</h3><p class='missing'>no steps logged yet</p>"
    last = rows[-1]
    summary = ", ".join(f"{k} {_cell(last.get(k))}" for k in (keys or ("reward", "success")))
    return (f"<h3>{escape(title)}</h3><p class='small'>{len(rows)} steps; last: {summary}{_signal(rows)}</p>"
            f"{_figure_img(fig, title)}")


def _signal(rows: list[dict]) -> str:
    """How many GRPO groups had a reward spread (the rest are dropped: their rollouts taught nothing),
    so two runs with one rollout budget can be compared on what the budget bought."""
    groups = sum(r.get("groups") or 0 for r in rows)
    if not groups:
        return ""
    useful = groups - sum(r.get("dropped_groups") or 0 for r in rows)
    return f"; groups with a reward spread: {useful} of {groups} ({useful / groups:.0%})"


def _training(run_dir: Path) -> str:
    from trace_agents.training.curves import read_metrics

    def one(title: str, path: Path) -> str:
        return _curves(title, read_metrics(path) if path.exists() else [])

    adapters = _stage(run_dir, "adapters")
    folders = [d for d in sorted(adapters.iterdir()) if d.is_dir()] if adapters else []
    parts = [one(f"adapter: {d.name}", d / "metrics.jsonl") for d in folders]
    if not parts:
        parts.append("<h3>Adapters</h3>" + _not_run("adapters", "<capability>/metrics.jsonl"))
    grpo = _stage(run_dir, "grpo_baseline")
    parts.append(one("GRPO baseline (target train split)", grpo / "grpo" / "metrics.jsonl") if grpo
                 else "<h3>GRPO baseline</h3>" + _not_run("grpo_baseline", "grpo/metrics.jsonl"))
    parts.append(_guards(folders + ([grpo / "grpo"] if grpo else [])))
    return "".join(parts)


def _guards(folders: list[Path]) -> str:
    """Each guard decision (training.guard_seeds, guard_target): the candidates' mean greedy rewards on
    each probe and the one kept."""
    from trace_agents.training.guard import GUARD_FILE, in_words

    rows = [[d.name, *in_words(g)] for d in folders if (g := _json(d / GUARD_FILE))]
    if not rows:
        return ""
    return "<h3>Guard (greedy episodes; the best sum of mean rewards is kept)</h3>" + _table(
        ["adapter", "scored on", "mean reward", "kept"], rows)


def _evaluation(run_dir: Path) -> str:
    table = _json(_file(run_dir, "evaluation", "table.json"))
    if table is None:
        return _not_run("evaluation", "table.json")
    systems = table["systems"]
    intro = (f"<p>Target {escape(str(table.get('target')))}, split {escape(str(table.get('split')))}, "
             f"{escape(str(table.get('n_tasks')))} tasks. Success with 95% Wilson interval.</p>")
    rows = [[s["system"], s["n"], _pct(s["success_rate"]), f"{_pct(s['ci'][0])} – {_pct(s['ci'][1])}",
             s["mean_reward"], s["mean_tool_calls"], s.get("rollouts_spent"), _seconds(s.get("wall_seconds"))] for s in systems]
    head = ["system", "n", "success", "95% CI", "mean reward", "mean tool calls", "rollouts spent", "wall seconds"]
    chart = _hbar([s["system"] for s in systems], [s["success_rate"] for s in systems], "success rate (95% CI)",
                  ci=[tuple(s["ci"]) for s in systems]) if systems else ""
    # a pair with a system this run did not evaluate (grpo_last_step without a guard, ...) is left out
    names = {s["system"] for s in systems}
    p_rows = [[k.replace("_", " "), "n/a (not enough paired data)" if p is None else f"{p:.4f}"]
              for k, p in (table.get("p_values") or {}).items() if set(k.split("_vs_")) <= names]
    return intro + _table(head, rows) + chart + "<h3>p-values</h3>" + _table(["comparison", "p"], p_rows)


def _routing(run_dir: Path) -> str:
    if _stage(run_dir, "compose") is None:
        return _not_run("compose", "gates.json, routing.json")
    # The pipeline's compose stage writes them into its composed-model folder; `trace-agents compose
    # --out NN_compose` puts them at the top.
    gates = _json(_file(run_dir, "compose", "gates.json") or _file(run_dir, "compose", "composed", "gates.json"))
    routing = _json(_file(run_dir, "compose", "routing.json") or _file(run_dir, "compose", "composed", "routing.json"))
    parts = []
    if gates is None:
        parts.append("<h3>Gate training</h3>" + _not_run("compose", "gates.json"))
    else:
        parts.append(_curves(f"Gate training ({gates.get('steps')} steps, token accuracy {_pct(gates.get('accuracy'))})",
                             gates.get("history") or [], keys=("loss", "accuracy")))
    if routing is None:
        parts.append("<h3>Routing</h3>" + _not_run("compose", "routing.json"))
    else:
        share = routing.get("share") or {}
        parts.append(f"<h3>Routing</h3><p>{escape(str(routing.get('tokens')))} tokens; "
                     f"{_cell(routing.get('switches_per_trajectory'))} expert switches per trajectory"
                     + (f"; {_pct(routing['accuracy'])} of held-out tokens on their capability's expert"
                        if routing.get("accuracy") is not None else "") + ".</p>")
        parts.append(_table(["expert", "share of tokens"], [[k, _pct(v)] for k, v in share.items()]))
        if share:
            parts.append(_hbar(list(share), list(share.values()), "share of tokens"))
    return "".join(parts)


def _examples(run_dir: Path) -> str:
    """A task the base agent failed, beside the composed agent's try at it when there is one."""
    base_path = _file(run_dir, "evaluation", "base.jsonl") or _file(run_dir, "base_rollouts", "trajectories.jsonl")
    if base_path is None:
        return _not_run("evaluation", "base.jsonl")
    composed_path = _file(run_dir, "evaluation", "composed.jsonl")
    base = read_jsonl(base_path)
    composed = {t.task_id: t for t in read_jsonl(composed_path)} if composed_path else {}
    failed = [t for t in base if not t.success]
    if not failed:
        return "<p>The base agent solved every task; nothing to contrast.</p>"
    fixed = [t for t in failed if t.task_id in composed and composed[t.task_id].success]
    pick = (fixed or failed)[0]
    note = ("<p>A task the base agent failed and the composed agent solved.</p>" if fixed else
            "<p>No task where the base agent failed and the composed agent succeeded; showing a base failure.</p>")
    pair = [("base", pick)] + ([("composed", composed[pick.task_id])] if pick.task_id in composed else [])
    return note + "<div class='pair'>" + "".join(_trajectory(label, t) for label, t in pair) + "</div>"


def _trajectory(label: str, t: Trajectory) -> str:
    tools = ", ".join(str(tool.get("function", tool).get("name", "?")) for tool in t.tools)
    head = (f"<h3>{escape(label)}: {escape(t.task_id)} {_flag(t.success, 'success' if t.success else 'failed')}</h3>"
            f"<p class='small'>reward {_cell(t.reward)}, {t.tool_calls} tool calls; tools: {escape(tools) or '—'}"
            + (f"; failure: {escape(str(t.info['failure']))}" if t.info.get("failure") else "") + "</p>")
    return f"<div class='traj'>{head}{''.join(_message(m) for m in t.messages)}</div>"


def _message(m: Any) -> str:
    text = m.content or ""
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS] + f"\n… ({len(text) - MAX_CHARS} more characters)"
    body = f"<pre>{escape(text)}</pre>" if text else ""
    for call in m.tool_calls or []:
        try:
            args: Any = json.loads(call.function.arguments)
        except json.JSONDecodeError:  # show what the model wrote, malformed or not
            args = call.function.arguments
        body += f"<pre class='call'>{escape(json.dumps({'name': call.function.name, 'arguments': args}, indent=2, ensure_ascii=False))}</pre>"
    return f"<div class='msg {escape(m.role)}'><div class='role'>{escape(m.role)}</div>{body}</div>"


# ---- the page ------------------------------------------------------------------------------------
CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2330; background: #f5f6f8; margin: 0; }
main { max-width: 1300px; margin: 0 auto; padding: 16px 28px 48px; }
h1 { font-size: 24px; margin: 12px 0 4px; } h2 { font-size: 19px; margin: 0 0 10px; } h3 { font-size: 15px; margin: 16px 0 6px; }
nav a { margin-right: 14px; color: #2456a6; text-decoration: none; }
section { background: #fff; border: 1px solid #dde1e7; border-radius: 8px; padding: 14px 18px; margin: 16px 0; }
table { border-collapse: collapse; margin: 8px 0; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid #e4e7ec; padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f0f2f5; font-weight: 600; }
td:nth-child(2) { max-width: 520px; }
img { max-width: 100%; display: block; margin: 10px 0; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 3px 14px; margin: 8px 0; }
dt { font-weight: 600; color: #4a5262; }
dd { margin: 0; }
.ok, .bad, .unknown { padding: 1px 6px; border-radius: 4px; white-space: nowrap; }
.ok { background: #dff3e3; color: #17602a; } .bad { background: #fbe1e1; color: #8f1d1d; } .unknown { background: #eceef2; color: #5b6270; }
.missing { color: #6b7280; font-style: italic; } .error { color: #8f1d1d; } .small { color: #5b6270; font-size: 13px; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; align-items: start; }
.traj { min-width: 0; }
.msg { border-left: 3px solid #c5cbd5; padding: 2px 8px; margin: 6px 0; }
.msg.assistant { border-color: #2456a6; } .msg.tool { border-color: #b7791f; } .msg.user { border-color: #17602a; }
.role { font-size: 12px; text-transform: uppercase; color: #5b6270; }
pre { white-space: pre-wrap; word-break: break-word; margin: 2px 0; font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace; }
pre.call { background: #eef3fb; padding: 4px 6px; border-radius: 4px; }
"""


SECTIONS: tuple[tuple[str, str, Callable[[Path], str]], ...] = (
    ("capabilities", "Capabilities (stage 1)", _capabilities),
    ("environments", "Environments (stage 2)", _environments),
    ("training", "Training curves (stage 3)", _training),
    ("evaluation", "Evaluation", _evaluation),
    ("routing", "Composition and routing (stage 4)", _routing),
    ("examples", "Example trajectories", _examples),
)
"""(anchor, title, render) of each section, in page order."""


def _page(title: str, header: str, sections: list[Html]) -> str:
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{CSS}</style></head><body><main><h1>{escape(title)}</h1>{header}"
            f"{''.join(sections)}</main></body></html>\n")
