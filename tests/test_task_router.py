"""The task-level router ("Select & Adapt"): zero-shot it is the base model's own label-token scoring,
fitting trains only its head, it routes a whole episode to one adapter, save/load, and the CLI path
(compose -> evaluate --router task -> the vLLM proxy's router)."""

import json
import re
import subprocess
import sys

import pytest
import torch

from test_compose import base_model, save_lora
from trace_agents.agent.policy import Request, Sampling, TransformersPolicy
from trace_agents.compose import compose, load_task_router
from trace_agents.compose.gates import reference_trajectory
from trace_agents.compose.task_router import (
    TaskRoutedPolicy,
    env_prompts,
    features,
    fit_task_router,
    label_token_ids,
    load_router,
    new_router,
    routing_prompt,
    save_router,
)
from trace_agents.envs.base import resolve_env
from trace_agents.models import tiny_random
from trace_agents.types import Message

SKILLS = {"alpha": "Chooses the right function among look-alikes.", "beta": "Makes one call per requested item."}
ENVS = {"alpha": "synthetic/function_selection", "beta": "synthetic/parallel_call_completeness"}


@pytest.fixture(scope="module")
def tok():
    return tiny_random(0)[1]


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("task_adapters")
    return {name: save_lora(root / name, 4, ["q_proj", "v_proj"], seed=i) for i, name in enumerate(SKILLS)}


@pytest.fixture(scope="module")
def examples():
    return {name: env_prompts(resolve_env(env), 12, SKILLS) for name, env in ENVS.items()}


def test_unfitted_router_is_the_base_models_label_token_scoring(tok):
    model = base_model()
    router = new_router(model, tok, SKILLS)
    chat = routing_prompt([Message(role="user", content="Weather in Oslo and Rome?")], [], SKILLS)
    ids = label_token_ids(tok, len(SKILLS))
    text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    with torch.no_grad():
        lm = model(**tok(text, return_tensors="pt", add_special_tokens=False)).logits[0, -1, ids]
        ours = router(features(model, tok, [chat]))[0]
    torch.testing.assert_close(ours, lm, rtol=1e-4, atol=1e-4)


def test_fit_trains_only_the_head_and_separates_environments(tok, examples):
    model = base_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    router, metrics = fit_task_router(model, tok, SKILLS, examples, steps=300)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert metrics["accuracy"] >= 0.9 and metrics["examples"] == 24
    # held-out seeds of the same environments route to their own adapter
    held = {name: env_prompts(resolve_env(env), 12, SKILLS, split="test") for name, env in ENVS.items()}
    probs = router(features(model, tok, held["alpha"] + held["beta"])).softmax(-1)
    picks = [router.choose(p)[0] for p in probs]
    assert sum(p == "alpha" for p in picks[:12]) + sum(p == "beta" for p in picks[12:]) >= 18


def test_top_p_cut_keeps_the_mass(tok):
    router = new_router(base_model(), tok, SKILLS, top_p=0.7)
    assert router.choose(torch.tensor([0.1, 0.6, 0.3])) == ["alpha", "beta"]
    assert router.choose(torch.tensor([0.8, 0.1, 0.1])) == ["none"]


def test_save_load_round_trip(tok, examples, tmp_path):
    model = base_model()
    router, metrics = fit_task_router(model, tok, SKILLS, examples, steps=20)
    save_router(router, tmp_path, metrics)
    again = load_router(tmp_path)
    f = features(model, tok, examples["alpha"][:3])
    torch.testing.assert_close(router(f), again(f))
    assert again.names == ["alpha", "beta"] and json.loads((tmp_path / "task_router.json").read_text())["fit"]


def test_routed_policy_runs_the_chosen_adapter_for_the_whole_episode(tok, adapters, examples):
    model = compose(base_model(), adapters, base_model_name="tiny-random").eval()
    router, _ = fit_task_router(model, tok, SKILLS, examples, steps=300)
    policy = TaskRoutedPolicy(TransformersPolicy(model, tok, name="tiny-random+composed"), router)
    env = resolve_env(ENVS["beta"])()
    messages = env.reset(env.seeds("test")[0])
    req = Request(messages, env.tools)
    sampling = Sampling(max_new_tokens=6)
    routed = policy.act([req], sampling)[0]
    label = next(iter(policy.chosen.values()))
    model.force_expert(0 if label == "none" else label)
    forced = TransformersPolicy(model, tok).act([req], sampling)[0]
    model.force_expert(None)
    assert routed.completion_ids == forced.completion_ids
    # a later step of the same episode keeps the adapter: same routing key, no new routing
    later = Request([*messages, Message(role="assistant", content="ok"), Message(role="user", content="and now?")], env.tools)
    policy.act([later], sampling)
    assert len(policy.chosen) == 1 and model.forced_expert is None


def test_reference_trajectories_score_full_credit():
    for env in (*ENVS.values(), "synthetic/multi_step_task_completion"):
        t = reference_trajectory(resolve_env(env), 5)
        assert t.success and t.reward == 1.0 and t.tool_calls >= 1


def run(*args):
    return subprocess.run([sys.executable, "-m", "trace_agents.cli", *args], capture_output=True, text=True, timeout=600)


def test_cli_compose_then_evaluate_with_both_routers(adapters, tmp_path):
    out = tmp_path / "composed"
    args = [f"--adapter={n}={p}" for n, p in adapters.items()] + [f"--env={n}={e}" for n, e in ENVS.items()]
    p = run("compose", "--model", "tiny-random", *args, "--out", str(out), "--gate-steps", "3", "--gate-trajectories", "4")
    assert p.returncode == 0, p.stderr
    assert {"composed.json", "gates.safetensors", "gates.json", "routing.json", "task_router.json"} <= {f.name for f in out.iterdir()}
    said = " ".join((p.stdout + p.stderr).split())  # rich wraps long lines; the console may write to stderr
    assert "on reply tokens" in said and "task router accuracy" in said and not re.search(r"accuracy nan\b", said)
    for router, key in (("task", "episodes_share"), ("token", "switches_per_trajectory")):
        summary = tmp_path / f"{router}.json"
        p = run("evaluate", "--env", ENVS["alpha"], "--model", "tiny-random", "--composed", str(out), "--router", router,
                "--limit", "2", "--max-new-tokens", "4", "--out", str(summary))
        assert p.returncode == 0, p.stderr
        assert key in json.loads(summary.read_text())["routing"]
    route = load_task_router(out)
    env = resolve_env(ENVS["beta"])()
    assert route(env.reset(0), env.tools) in {"alpha", "beta", None}
    # the vLLM proxy's loader: OpenAI-style dict messages, the adapters it may choose
    from trace_agents.serve.vllm import ExportError, load_router

    proxy_route = load_router(out)
    assert proxy_route.router.names == ["alpha", "beta"]
    assert proxy_route([{"role": "user", "content": "Weather in Oslo?"}], []) in {"alpha", "beta", None}
    with pytest.raises(ExportError, match="task router"):
        load_router(tmp_path)


def test_cli_compose_bad_input_exits_2(adapters, tmp_path):
    p = run("compose", "--model", "tiny-random", f"--adapter=alpha={adapters['alpha']}", "--out", str(tmp_path / "c"))
    assert p.returncode == 2 and "--env" in p.stderr
    p = run("compose", "--model", "tiny-random", "--adapter", "alpha", "--out", str(tmp_path / "c"))
    assert p.returncode == 2 and "NAME=VALUE" in p.stderr
