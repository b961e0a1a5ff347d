"""Tiny environments for training tests (loadable as env modules by path)."""

from trace_agents.envs.base import Step
from trace_agents.types import Message, Verdict


class ShortEnv:
    """Reward = how short the reply is, so a random model's groups never tie."""

    name = "toy/short"
    tools: list = []

    def seeds(self, split):
        return list(range(100)) if split == "train" else list(range(1000, 1010))

    def reset(self, seed):
        self.task_id, self.text = f"short_{seed}", ""
        return [Message(role="user", content=f"Say something about {seed}.")]

    def hint(self):
        return "Be brief."

    def step(self, message):
        self.text = message.content or ""
        return Step(done=True)

    def verdict(self):
        return Verdict(reward=1.0 / (1 + len(self.text)), success=len(self.text) < 5, details={})
