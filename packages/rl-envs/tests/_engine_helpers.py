"""The engine driving an env through its own ``_step`` / ``reset`` (:class:`EnvKernel`): the
reference a back-end's kernel is compared with."""

from __future__ import annotations

from rl.envs.engine import EnvKernel, run_rollout


def rollout_generic(env, max_steps, tensordict, **kwargs):
    """``run_rollout`` with :class:`EnvKernel` (``callback`` defaults to ``None``)."""
    kwargs.setdefault("callback", None)
    return run_rollout(env, max_steps, tensordict, kernel=EnvKernel(env), **kwargs)
