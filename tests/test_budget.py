import pytest

from trace_agents.envs.bfcl import BfclEnv
from trace_agents.models import load_tokenizer
from trace_agents.training.budget import BudgetError, check_budget, reference_lengths, reply_text


def test_a_budget_that_fits_every_reply_passes_silently():
    assert check_budget("bfcl/x", [10, 20, 30], 30, "training.max_new_tokens") is None


def test_a_few_cut_replies_give_a_note_and_many_an_error_naming_a_budget_that_fits():
    lengths = list(range(1, 101))  # 90th percentile 90
    note = check_budget("bfcl/x", lengths, 80, "evaluation.max_new_tokens")
    assert note.startswith("evaluation.max_new_tokens 80 cuts 20 of the 100 reference replies of bfcl/x")
    with pytest.raises(BudgetError, match=r"cuts 26 of the 100 .*Set training.max_new_tokens to at least 96\."):
        check_budget("bfcl/x", lengths, 74, "training.max_new_tokens")


def test_reference_lengths_count_the_reply_the_policy_writes():
    tok = load_tokenizer("tiny-random")
    env = BfclEnv("parallel")
    lengths = reference_lengths(lambda: BfclEnv("parallel"), tok, limit=5)
    env.reset(env.seeds("train")[0])
    assert len(lengths) == 5
    assert lengths[0] == len(tok(reply_text(env.reference()), add_special_tokens=False).input_ids)
    assert reply_text([("f", {"a": 1}), ("f", {"a": 2})]).count("<tool_call>") == 2


def test_parallel_answers_do_not_fit_the_cpu_runs_old_training_budget():
    """The measurement behind the check (issue 7, runs/par_s2): most BFCL parallel answers need over 80 tokens."""
    lengths = reference_lengths(lambda: BfclEnv("parallel"), load_tokenizer("tiny-random"))
    with pytest.raises(BudgetError, match="cuts 93 of the 100"):
        check_budget("bfcl/parallel", lengths, 80, "training.max_new_tokens")
    note = check_budget("bfcl/multiple", reference_lengths(lambda: BfclEnv("multiple"), load_tokenizer("tiny-random")),
                        80, "training.max_new_tokens")
    assert "cuts 1 of the 100" in note


def test_multi_turn_envs_are_not_measured():
    assert reference_lengths(lambda: BfclEnv("multi_turn_base"), load_tokenizer("tiny-random")) == []
