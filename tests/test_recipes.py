"""benchmarks/recipes.py: every recipe pooled from the committed run records, GRPO always at its last step."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def _recipes():
    spec = importlib.util.spec_from_file_location("recipes", ROOT / "benchmarks/recipes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(tmp: Path, run: str, guard_target: int, spent: int = 64, **systems: list[int]) -> None:
    verdicts = {name: {f"t{i}": float(v) for i, v in enumerate(vals)} for name, vals in systems.items()}
    rows = [{"system": name, "rollouts_spent": 0 if name == "base" else spent if name == "composed" else 64}
            for name in systems]
    (tmp / f"{run}.json").write_text(json.dumps({"config": {"run_dir": f"runs/{run}", "training": {
        "seed": int(run[-1]), "guard_target": guard_target}}, "table": {"systems": rows}, "verdicts": verdicts}))


def test_every_recipe_pools_from_the_committed_records():
    recipes = _recipes()
    rows = [recipes.recipe_row(*recipe) for recipe in recipes.RECIPES]
    assert [r["recipe"] for r in rows] == [r[0] for r in recipes.RECIPES]
    for row in rows:
        assert 0 <= row["base"] < row["composed"] <= 1 and 0 <= row["p_vs_grpo"] <= 1
    assert "| `own` |" in recipes.markdown(rows)


def test_grpo_is_its_last_step_and_a_borrowed_last_step_must_be_the_same_baseline(tmp_path, monkeypatch):
    recipes = _recipes()
    _record(tmp_path, "a_s2", 32, base=[0, 0, 1, 0], composed=[1, 1, 1, 0], grpo=[1, 0, 0, 0], grpo_last_step=[1, 1, 1, 1])
    _record(tmp_path, "b_s4", 0, base=[0, 0, 0, 0], composed=[1, 0, 0, 0], grpo=[1, 1, 0, 0])
    _record(tmp_path, "c_s2", 32, base=[0, 0, 0, 0], composed=[0, 0, 0, 0], grpo=[1, 0, 0, 0])
    _record(tmp_path, "d_s2", 32, base=[0, 0, 0, 0], composed=[0, 0, 0, 0], grpo=[0, 1, 0, 0])
    monkeypatch.setattr(recipes, "LAST_STEP_FROM", {"c_s2": "a_s2", "d_s2": "a_s2"})

    row = recipes.recipe_row("x", "", ["a_s2", "b_s4"], "composed", tmp_path)
    assert (row["base"], row["composed"], row["grpo_last_step"]) == (0.125, 0.5, 0.75)  # a: last step 1.0, b: grpo 0.5
    assert row["composed_minus_grpo_points"] == -25.0 and row["seeds"] == [2, 4]
    assert recipes.recipe_row("y", "", ["c_s2"], "composed", tmp_path)["grpo_last_step"] == 1.0  # a_s2's last step
    with pytest.raises(SystemExit, match="do not share their GRPO baseline"):
        recipes.recipe_row("z", "", ["d_s2"], "composed", tmp_path)
    _record(tmp_path, "e_s2", 0, spent=128, base=[0], composed=[1], grpo=[0])
    with pytest.raises(SystemExit, match="not the same budget"):
        recipes.recipe_row("w", "", ["e_s2"], "composed", tmp_path)
    monkeypatch.setattr(recipes, "LAST_STEP_FROM", {})
    with pytest.raises(SystemExit, match="lacks grpo_last_step"):
        recipes.recipe_row("z", "", ["c_s2"], "composed", tmp_path)


def test_run_table_renders_every_system_of_a_record():
    text = _recipes().run_table("own_s6")
    assert "| composed_last_step | 53% [43, 62] | 0.53 |" in text and text.count("\n| ") == 7  # header, rule, 6 systems
    assert "composed_last_step vs grpo_last_step 0.66" in text
