"""The one tool-call format used everywhere: Hermes-style `<tool_call>{json}</tool_call>` replies in a
ChatML template that renders `tools` into the system turn.

Why our own template: SmolLM2's template ignores `tools`, and we want one compact format for every
local model (prompts are long on CPU already). It is prefix-preserving (rendering a conversation
and then one more turn only appends text), which the GRPO stage relies on to find the tokens of each
assistant turn.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from trace_agents.types import FunctionCall, Message, ToolCall

DEFAULT_SYSTEM = "You are a helpful assistant. You call functions to do what the user asks."

CHAT_TEMPLATE = (
    "{%- set sys = messages[0]['content'] if messages and messages[0]['role'] == 'system' else '"
    + DEFAULT_SYSTEM
    + "' -%}"
    "{{- '<|im_start|>system\\n' + sys }}"
    "{%- if tools %}{{- '\\n\\nYou can call these functions:\\n<tools>\\n' }}"
    "{%- for t in tools %}{{- (t['function'] if 'function' in t else t) | tojson }}{{- '\\n' }}{%- endfor %}"
    "{{- '</tools>\\nTo call a function, reply with "
    '<tool_call>{\"name\": <function-name>, \"arguments\": <args-json-object>}</tool_call>'
    " for each call.' }}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- for m in messages %}{%- if not (loop.first and m['role'] == 'system') %}"
    "{{- '<|im_start|>' + m['role'] + '\\n' }}"
    "{%- if m['content'] %}{{- m['content'] }}{%- endif %}"
    "{%- if m['role'] == 'assistant' and m.get('tool_calls') %}"
    "{%- for c in m['tool_calls'] %}{%- if not loop.first or m['content'] %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>{\"name\": ' + (c['function']['name'] | tojson) + ', \"arguments\": ' "
    "+ c['function']['arguments'] + '}</tool_call>' }}"
    "{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

END_OF_TURN = "<|im_end|>"

_CALL_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


@dataclass
class ParsedReply:
    """An assistant reply read from model text. `error` is set when any part was malformed."""

    message: Message
    error: str | None = None


def format_call(name: str, arguments: dict[str, Any]) -> str:
    """The exact text a model should write for one call (used by warm-up targets)."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "</tool_call>"


def _read_call(body: str) -> tuple[str, dict[str, Any]]:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        raise ValueError(f"tool call is not valid JSON ({e.msg})") from None
    if not isinstance(obj, dict):
        raise ValueError("tool call is not a JSON object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("tool call has no string 'name'")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models double-encode the arguments
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            raise ValueError(f"arguments of {name!r} are not valid JSON") from None
    if not isinstance(args, dict):
        raise ValueError(f"arguments of {name!r} are not a JSON object")
    return name, args


def parse_reply(text: str, call_id_prefix: str = "call") -> ParsedReply:
    """Parse model text into an assistant Message. Never raises: malformed calls are dropped and
    described in `error`, so a rollout records a failed step instead of crashing."""
    text = text.replace(END_OF_TURN, "")
    calls: list[ToolCall] = []
    errors: list[str] = []
    for i, match in enumerate(_CALL_RE.finditer(text)):
        try:
            name, args = _read_call(match.group(1).strip())
        except (ValueError, RecursionError) as e:
            errors.append(f"call {i}: {e}")
            continue
        fc = FunctionCall(name=name, arguments=json.dumps(args, ensure_ascii=False))
        calls.append(ToolCall(id=f"{call_id_prefix}_{i}", function=fc))
    content = _CALL_RE.sub("", text).strip()
    if "</tool_call>" in content:
        errors.append("stray </tool_call> without an opening tag")
    message = Message(role="assistant", content=content, tool_calls=calls or None)
    return ParsedReply(message=message, error="; ".join(errors) or None)


def function_doc(name: str, description: str, params: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """A BFCL-style function doc whose parameters, {name: (BFCL type, description)}, are all required."""
    return {"name": name, "description": description,
            "parameters": {"type": "dict", "required": list(params),
                           "properties": {p: {"type": t, "description": d} for p, (t, d) in params.items()}}}


def to_openai_tool(function: dict[str, Any]) -> dict[str, Any]:
    """Wrap a bare function schema as an OpenAI tool, mapping BFCL's types to JSON Schema
    ("dict" -> "object", "float" -> "number", "tuple" -> "array", "any" -> "string")."""
    if function.get("type") == "function" and "function" in function:
        return function
    return {"type": "function", "function": _json_schema(function)}


_TYPE_MAP = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}


def _json_schema(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _json_schema(v) for k, v in node.items()}
        if isinstance(out.get("type"), str):
            out["type"] = _TYPE_MAP.get(out["type"], out["type"])
        return out
    if isinstance(node, list):
        return [_json_schema(v) for v in node]
    return node
