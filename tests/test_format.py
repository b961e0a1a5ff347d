import json
import random

from trace_agents.agent.format import format_call, parse_reply, to_openai_tool


def test_parses_calls_and_text():
    r = parse_reply('Sure. <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>\n'
                    '<tool_call>{"name": "g.h", "arguments": "{\\"y\\": [1, 2]}"}</tool_call>')
    assert r.error is None and r.message.content == "Sure."
    calls = r.message.tool_calls
    assert [c.function.name for c in calls] == ["f", "g.h"]
    assert [json.loads(c.function.arguments) for c in calls] == [{"x": 1}, {"y": [1, 2]}]
    assert [c.id for c in calls] == ["call_0", "call_1"]


def test_unterminated_last_call_is_accepted():
    r = parse_reply('<tool_call>{"name": "f", "arguments": {}}')
    assert r.error is None and r.message.tool_calls[0].function.name == "f"


def test_malformed_calls_are_recorded_not_raised():
    r = parse_reply('<tool_call>{"name": "f", "arguments": {"x": 1}</tool_call><tool_call>[1]</tool_call>'
                    '<tool_call>{"arguments": {}}</tool_call><tool_call>{"name": "k", "arguments": 3}</tool_call>')
    assert r.message.tool_calls is None
    assert r.error.count("call") >= 4 and "not valid JSON" in r.error and "no string 'name'" in r.error


def test_plain_text_has_no_calls_and_no_error():
    r = parse_reply("I cannot help with that.")
    assert r.message.tool_calls is None and r.error is None


def test_fuzzed_garbage_never_raises():
    rng = random.Random(0)
    pieces = ["<tool_call>", "</tool_call>", "{", "}", '"name"', '"arguments"', ":", ",", "[", "]", '"f"',
              "1e999", "null", "\\", '"', "<|im_end|>", "\x00", "é", "{" * 50, "]" * 50, "  "]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        r = parse_reply(text)
        for c in r.message.tool_calls or []:
            assert isinstance(json.loads(c.function.arguments), dict)
    deep = "<tool_call>" + '{"name": "f", "arguments": ' + "[" * 100000 + "</tool_call>"
    assert parse_reply(deep).message.tool_calls is None


def test_format_call_round_trips():
    text = format_call("math.gcd", {"a": 12, "b": "1kg"})
    c = parse_reply(text).message.tool_calls[0]
    assert c.function.name == "math.gcd" and json.loads(c.function.arguments) == {"a": 12, "b": "1kg"}


def test_bfcl_types_map_to_json_schema():
    tool = to_openai_tool({"name": "f", "description": "d", "parameters": {"type": "dict", "properties": {
        "a": {"type": "float"}, "b": {"type": "tuple", "items": {"type": "any"}}, "type": {"type": "string"}}}})
    params = tool["function"]["parameters"]
    assert tool["type"] == "function" and params["type"] == "object"
    assert params["properties"]["a"]["type"] == "number"
    assert params["properties"]["b"] == {"type": "array", "items": {"type": "string"}}
    assert params["properties"]["type"] == {"type": "string"}


def test_template_renders_tools_calls_and_is_prefix_preserving(tiny):
    _, tok = tiny
    tools = [to_openai_tool({"name": "f", "description": "d", "parameters": {"type": "dict", "properties": {}}})]
    convo = [{"role": "user", "content": "hi"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]},
             {"role": "tool", "tool_call_id": "a", "content": "2"}]
    full = tok.apply_chat_template(convo, tools=tools, tokenize=False)
    assert '<tools>\n{"name": "f"' in full
    assert '<|im_start|>assistant\n<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call><|im_end|>' in full
    for k in range(1, len(convo)):
        assert full.startswith(tok.apply_chat_template(convo[:k], tools=tools, tokenize=False))
    # what the model is asked to write parses back to the call it rendered
    reply = full.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    assert parse_reply(reply).message.tool_calls[0].function.name == "f"
