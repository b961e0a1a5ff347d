"""The batched multi-turn rollout loop: every live episode contributes its next assistant turn to one
`policy.act` call, environments answer, finished episodes leave the batch.

`samples` rollouts of a task share the task's seed (a GRPO group needs exactly that).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from trace_agents.agent.policy import Policy, Request, Sampling
from trace_agents.envs.base import Env
from trace_agents.types import Message, Trajectory

DEFAULT_MAX_STEPS = 8


@dataclass
class _Episode:
    env: Env
    seed: int
    sample: int
    messages: list[Message] = field(default_factory=list)
    hint: str | None = None
    steps: int = 0
    tool_calls: int = 0
    new_tokens: int = 0
    format_errors: list[dict] = field(default_factory=list)
    completions: list[list[int]] = field(default_factory=list)
    done: bool = False
    hit_step_limit: bool = False


def rollout(
    make_env: Callable[[], Env],
    policy: Policy,
    seeds: list[int],
    *,
    samples: int = 1,
    max_steps: int = DEFAULT_MAX_STEPS,
    sampling: Sampling | None = None,
    on_episode_done: Callable[[Trajectory], None] | None = None,
    keep_tokens: bool = False,
    hint_samples: int = 0,
) -> list[Trajectory]:
    """Run `samples` episodes per seed to the end (or `max_steps` assistant turns) and score them.
    Returns trajectories in (seed, sample) order. `keep_tokens` stores the sampled token ids of every
    assistant turn in `info["completion_ids"]` (training needs them; files do not). The first
    `hint_samples` rollouts of each seed see the env's `hint()` appended to the first user message
    while sampling; the stored messages stay without it (the loss must not see the hint)."""
    if samples < 1 or max_steps < 1:
        raise ValueError("samples and max_steps must be at least 1")
    sampling = sampling or Sampling()
    episodes = [_Episode(make_env(), seed, k) for seed in seeds for k in range(samples)]
    for ep in episodes:
        ep.messages = list(ep.env.reset(ep.seed))
        if ep.sample < hint_samples and hasattr(ep.env, "hint"):
            ep.hint = ep.env.hint()
    results: dict[int, Trajectory] = {}
    active = list(range(len(episodes)))
    turn = 0
    while active:
        requests = [
            Request(_shown(episodes[i]), episodes[i].env.tools, call_id_prefix=f"call_{episodes[i].steps}")
            for i in active
        ]
        # A different sampling seed per turn keeps reruns identical without repeating noise.
        replies = policy.act(requests, replace(sampling, seed=sampling.seed + turn))
        turn += 1
        for i, reply in zip(active, replies):
            ep = episodes[i]
            ep.messages.append(reply.message)
            ep.steps += 1
            ep.tool_calls += len(reply.message.tool_calls or [])
            ep.new_tokens += reply.new_tokens
            if keep_tokens:
                ep.completions.append(reply.completion_ids or [])
            if reply.error:
                # the raw reply: the message keeps only what parsed, and the broken call is what to look at
                ep.format_errors.append({"step": ep.steps - 1, "error": reply.error, "truncated": reply.truncated,
                                         "text": reply.text})
            step = ep.env.step(reply.message)
            ep.messages.extend(step.messages)
            ep.hit_step_limit = not step.done and ep.steps >= max_steps
            if step.done or ep.hit_step_limit:
                ep.done = True
                results[i] = _finish(ep, keep_tokens)
                if on_episode_done:
                    on_episode_done(results[i])
        active = [i for i in active if not episodes[i].done]
    return [results[i] for i in range(len(episodes))]


def _shown(ep: _Episode) -> list[Message]:
    """The conversation as the policy sees it: with the hint on the first user message, if any."""
    if not ep.hint:
        return ep.messages
    k = next(i for i, m in enumerate(ep.messages) if m.role == "user")
    hinted = ep.messages[k].model_copy(update={"content": f"{ep.messages[k].content}\n\nHint: {ep.hint}"})
    return ep.messages[:k] + [hinted] + ep.messages[k + 1 :]


def _finish(ep: _Episode, keep_tokens: bool) -> Trajectory:
    verdict = ep.env.verdict()
    info = {
        **({"completion_ids": ep.completions} if keep_tokens else {}),
        **verdict.details,
        "steps": ep.steps,
        "new_tokens": ep.new_tokens,
        "format_errors": ep.format_errors,
        "hit_step_limit": ep.hit_step_limit,
        "sample": ep.sample,
        **({"hint": ep.hint} if ep.hint else {}),
    }
    return Trajectory(
        id=f"{ep.env.name}:{ep.env.task_id}:{ep.sample}",
        env=ep.env.name,
        task_id=ep.env.task_id,
        seed=ep.seed,
        messages=ep.messages,
        tools=ep.env.tools,
        reward=verdict.reward,
        success=verdict.success,
        tool_calls=ep.tool_calls,
        info=info,
    )
