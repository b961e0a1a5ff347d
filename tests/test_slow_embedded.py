"""Runs on the real embedded model (minutes on CPU): `make test-slow` or `pytest -m slow`."""

import pytest

from trace_agents.agent.policy import Sampling, make_policy
from trace_agents.agent.rollout import rollout
from trace_agents.envs.base import resolve_env

pytestmark = pytest.mark.slow


def test_embedded_model_runs_bfcl_single_and_multi_turn():
    policy = make_policy("smollm2-135m", batch_size=4)
    env = resolve_env("bfcl/simple_python")
    trajs = rollout(env, policy, env().seeds("test")[:4], max_steps=1, sampling=Sampling(max_new_tokens=96))
    assert len(trajs) == 4 and all(t.info["new_tokens"] > 0 for t in trajs)
    env = resolve_env("bfcl/multi_turn_base")
    (t,) = rollout(env, policy, env().seeds("test")[:1], max_steps=4, sampling=Sampling(max_new_tokens=64))
    assert len(t.info["turns"]) >= 1 and t.info["steps"] <= 4
