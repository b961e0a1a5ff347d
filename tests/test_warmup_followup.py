"""Multi-turn warm-up examples: the id passed on is the one the tool returned, every turn of a
conversation (first call, follow-up call, closing text) is a target, and no task names are borrowed."""

import json
from collections import Counter

from trace_agents.agent.format import END_OF_TURN, parse_reply
from trace_agents.synthesis import lookup
from trace_agents.warmup.followup import conversation, followup_example
from trace_agents.warmup.sft import encode_example

SEEDS = range(300)


def test_deterministic():
    assert followup_example(7) == followup_example(7)
    assert conversation(7) == conversation(7)


def test_every_turn_is_a_target():
    depth = Counter(sum(m.role == "assistant" for m in followup_example(s).messages) for s in SEEDS)
    assert set(depth) >= {0, 1, 2, 3}
    closing = [followup_example(s) for s in SEEDS if not followup_example(s).calls]
    assert 0.15 < len(closing) / len(SEEDS) < 0.5
    assert all(e.reply and "<tool_call>" not in e.reply for e in closing)


def test_follow_up_calls_use_the_id_the_tool_returned():
    checked = 0
    for s in SEEDS:
        ex = followup_example(s)
        returned = {v for m in ex.messages if m.role == "tool" for v in json.loads(m.content).values()}
        offered = {f["name"]: f for f in ex.functions}
        for name, args in ex.calls:
            assert set(args) == set(offered[name]["parameters"]["required"])
            ids = [v for k, v in args.items() if k.endswith("_id")]
            if ids:
                assert ids[0] in returned, (s, ex.messages, ex.calls)
                checked += 1
    assert checked > 50


def test_target_parses_back():
    for s in range(40):
        ex = followup_example(s)
        parsed = parse_reply(ex.reply)
        assert parsed.error is None
        assert [(c.function.name, c.function.parsed_arguments()) for c in parsed.message.tool_calls or []] == ex.calls


def test_no_names_shared_with_the_lookup_environment():
    ours = {f["name"] for s in SEEDS for f in conversation(s)[0]}
    theirs = {f["name"] for d in lookup.DOMAINS for f in lookup._schemas(d)}
    assert ours and not ours & theirs
    words = {n.lower() for d in lookup.DOMAINS for n in d.names}
    assert not any(w in conversation(s)[1][0].content.lower() for s in SEEDS for w in words)


def test_encoded_labels_cover_only_the_target_turn(tiny):
    tok = tiny[1]
    ex = next(e for e in map(followup_example, SEEDS) if len(e.messages) > 3)
    ids, labels = encode_example(tok, ex, 4096)
    target = tok.decode([t for t in labels if t != -100])
    prompt = tok.decode([t for t, l in zip(ids, labels) if l == -100])
    assert target == ex.reply + END_OF_TURN
    assert "<|im_start|>tool" in prompt and prompt.endswith("<|im_start|>assistant\n")
