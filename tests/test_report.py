import base64
import importlib.util
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trace_agents.cli import UsageError, app
from trace_agents.report import build_report
from trace_agents.types import FunctionCall, ToolCall, read_jsonl, write_jsonl

# The synthetic run folder lives with the screenshot benchmark, so the page we test is the page we look at.
_spec = importlib.util.spec_from_file_location("report_screenshot", Path(__file__).parents[1] / "benchmarks" / "report_screenshot.py")
fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture)

EVIL = '<script>alert("x")</script> & </pre><img src=x onerror=1>'


@pytest.fixture
def run(tmp_path) -> Path:
    return fixture.write_fixture_run(tmp_path)


def sections(html: str) -> dict[str, str]:
    return dict(re.findall(r'<section id="([^"]+)">(.*?)</section>', html, flags=re.S))


def test_full_run_renders_every_section(run):
    out = build_report(run)
    assert out == run / "report.html"
    html = out.read_text()
    assert "not run yet" not in html and "could not render" not in html
    assert "<dt>base weights</dt><dd>float32</dd>" in html  # a run from before the dtype option: float32
    for name, *_ in fixture.CAPABILITIES:
        assert name in sections(html)["capabilities"]
    evaluation = sections(html)["evaluation"]
    for system in ["base", "grpo", "composed", *(f"adapter:{c}" for c in fixture.SELECTED)]:
        assert f"<td>{system}</td>" in evaluation
    assert "75.0%" in evaluation and "0.0310" in evaluation  # composed success, composed_vs_base p
    assert "out of band: degenerate_fraction" in sections(html)["environments"]
    # the fixture's GRPO baseline drops one of its 2 groups on odd steps (30 of its 60): 90 of 120 kept
    assert "groups with a reward spread: 90 of 120 (75%)" in sections(html)["training"]
    training = sections(html)["training"]
    assert (f"<td>{fixture.SELECTED[0]}</td><td>64 test seeds of drills + 32 train seeds of target</td>"
            "<td>last step 0.080+0.250, step_16 0.500+0.440, shared 0.300+0.380</td><td>step_16</td>") in training
    assert "<td>grpo</td><td>32 train seeds of target</td><td>last step 0.410, step_32 0.470</td><td>step_32</td>" in training
    # scatter, 3 adapters + GRPO curves, evaluation bars, gate curves, routing bars: all real PNGs
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == 8
    assert all(base64.b64decode(b).startswith(b"\x89PNG") for b in images)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html)
    # the contrast pair: base's first failure (multiple_1) stays failed with composed; multiple_2 is fixed
    examples = sections(html)["examples"]
    assert "base: multiple_2" in examples and "composed: multiple_2" in examples


def test_existing_summary_png_is_embedded_as_is(run):
    import matplotlib.pyplot as plt
    import numpy as np

    png = run / "02_analysis" / "summary.png"
    plt.imsave(png, np.zeros((3, 5, 3)))
    capabilities = sections(build_report(run).read_text())["capabilities"]
    assert re.findall(r'data:image/png;base64,([^"]+)', capabilities) == [base64.b64encode(png.read_bytes()).decode()]


def test_empty_run_folder_says_not_run_everywhere(tmp_path):
    html = build_report(tmp_path, tmp_path / "r.html").read_text()
    found = sections(html)
    assert len(found) == 6 and all("not run yet" in body for body in found.values())
    assert "could not render" not in html and "data:image" not in html
    assert "run.json" in html  # the header says the summary is missing instead of failing


def test_partial_run_ignores_tmp_folders_and_damaged_files(run):
    shutil.rmtree(run / "07_evaluation")
    for name in ("gates.json", "routing.json"):  # `trace-agents compose --out` layout: files at the top
        (run / "06_compose" / "composed" / name).rename(run / "06_compose" / name)
    (run / "08_evaluation.tmp").mkdir()
    (run / "08_evaluation.tmp" / "table.json").write_text("{half")
    (run / "03_synthesis" / "synthesis.json").write_text("{half")
    (run / "run.json").write_text("[")
    html = build_report(run).read_text()
    found = sections(html)
    assert "run.json: not valid JSON" in html.split("<nav>")[0]
    assert "not run yet" in found["evaluation"]
    assert "could not render" in found["environments"] and "synthesis.json" in found["environments"]
    assert "argument_value_grounding" in found["capabilities"] and "data:image/png" in found["training"]
    assert found["routing"].count("data:image/png") == 2 and "48213 tokens" in found["routing"]
    # with no evaluation the example falls back to a failed base rollout, shown alone
    assert "base: multiple_1" in found["examples"] and "composed:" not in found["examples"]


def test_html_special_characters_are_escaped(run):
    path = run / "07_evaluation" / "base.jsonl"
    trajs = read_jsonl(path)
    for t in trajs:
        t.messages[0].content = EVIL
        t.messages[1].tool_calls = [ToolCall(id="c0", function=FunctionCall(name="f<b>", arguments='{"q": "</pre><i>"}'))]
    write_jsonl(path, trajs)
    examples = sections(build_report(run).read_text())["examples"]
    assert "<script>" not in examples and "<img src=x" not in examples and "<i>" not in examples and "f<b>" not in examples
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;/pre&gt;" in examples
    assert "f&lt;b&gt;" in examples and "&lt;/pre&gt;&lt;i&gt;" in examples


def test_cli_report(run, tmp_path):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert str(out) in result.output and "fixture_run" in out.read_text()
    result = CliRunner().invoke(app, ["report", str(tmp_path / "missing")])
    assert isinstance(result.exception, UsageError) and "missing" in str(result.exception)
