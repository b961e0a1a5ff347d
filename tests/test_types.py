import json

import pytest

from trace_agents.types import DataError, Message, Trajectory, read_jsonl, write_jsonl


def _traj(**over) -> dict:
    base = dict(id="t0", env="bfcl/simple_python", task_id="simple_python_1", seed=1,
                messages=[{"role": "user", "content": "hi"}], tools=[], reward=1.0, success=True,
                tool_calls=0, info={})
    base.update(over)
    return base


def test_round_trip(tmp_path):
    t = Trajectory(**_traj())
    write_jsonl(tmp_path / "a.jsonl", [t, t])
    assert read_jsonl(tmp_path / "a.jsonl") == [t, t]


@pytest.mark.parametrize(
    "line, expected",
    [
        ("{not json", ":2: not valid JSON"),
        ("[1, 2]", ":2: expected a JSON object, got list"),
        (json.dumps({k: v for k, v in _traj().items() if k != "reward"}), ":2: field 'reward': Field required"),
        (json.dumps(_traj(seed="seven")), ":2: field 'seed'"),
        (json.dumps(_traj(messages=[{"role": "robot", "content": "x"}])), ":2: field 'messages.0.role'"),
        (json.dumps(_traj(surprise=1)), ":2: field 'surprise'"),
    ],
)
def test_bad_line_names_file_line_and_field(tmp_path, line, expected):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_traj()) + "\n" + line + "\n")
    with pytest.raises(DataError) as e:
        read_jsonl(path)
    assert str(path) in str(e.value) and expected in str(e.value)


def test_missing_file_and_blank_lines(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        read_jsonl(tmp_path / "none.jsonl")
    (tmp_path / "b.jsonl").write_text("\n" + json.dumps(_traj()) + "\n\n")
    assert len(read_jsonl(tmp_path / "b.jsonl")) == 1


def test_message_to_chat_drops_nulls():
    assert Message(role="user", content="x").to_chat() == {"role": "user", "content": "x"}
