"""The policies by name, one table: `make_policy("heuristic", archs)`.

Each entry is a factory `(archs, backends, checkpoint, seed, llm) -> policy or None`
that imports its policy on first use, so naming a policy costs nothing until it is made.
`register` adds one (an out-of-tree policy, a test's); "none" means the sampler alone.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

Factory = Callable[..., object]
POLICIES: dict[str, Factory] = {}


def register(name: str):
    """Decorator: make the factory it wraps the policy called `name`."""
    def wrap(factory: Factory) -> Factory:
        POLICIES[name] = factory
        return factory
    return wrap


def make_policy(name: str, archs, backends=None, checkpoint: str | None = None, seed: int = 0,
                llm: dict | None = None):
    """The policy named `name` (a key of POLICIES); `llm`: the LLM policy's options (url,
    model, dataset). ValueError for an unknown name."""
    if name not in POLICIES:
        raise ValueError(f"--policy: {name!r} is not one of {', '.join(POLICIES)}")
    return POLICIES[name](archs, backends, checkpoint, seed, llm)


@register("heuristic")
def _heuristic(archs, backends, checkpoint, seed, llm):
    from .heuristic import HeuristicPolicy
    return HeuristicPolicy(backends=backends)


@register("learned")
def _learned(archs, backends, checkpoint, seed, llm):
    """The checkpoint at `checkpoint` (or the default path) if it exists, else a fresh model."""
    from .learned import LearnedPolicy, default_checkpoint
    path = Path(checkpoint) if checkpoint else default_checkpoint()
    if path.exists():
        return LearnedPolicy.load(path)
    return LearnedPolicy(archs=archs, backends=backends, seed=seed)


@register("random")
def _random(archs, backends, checkpoint, seed, llm):
    from .random import RandomPolicy
    return RandomPolicy(archs, backends, seed)


@register("llm")
def _llm(archs, backends, checkpoint, seed, llm):
    from .llm import from_cli
    return from_cli(seed=seed, backends=backends, **(llm or {}))


@register("none")
def _none(archs, backends, checkpoint, seed, llm):
    return None
