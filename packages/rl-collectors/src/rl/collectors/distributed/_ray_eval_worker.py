"""RayEvalWorker: evaluation rollouts of a policy in a Ray actor of their own.

The actor builds the env and the policy once (after an optional ``init_fn``, for
simulators that must set up their process first); each :meth:`RayEvalWorker.submit`
sends weights and starts one rollout there, run by the env's own ``rollout`` (the one
rollout engine), and :meth:`RayEvalWorker.poll` collects its metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rl.core import ExplorationType, set_exploration_type
from rl.core.ray_runtime import import_ray

from .._common import load_weights

__all__ = ["RayEvalWorker"]

_EXTRA = "rl-collectors[ray]"


def _render(env: Any) -> torch.Tensor | None:
    """One ``[C, H, W]`` uint8 frame of the innermost env, or ``None`` if it renders none."""
    while getattr(env, "base_env", None) is not None:
        env = env.base_env
    inner = getattr(env, "_env", None)
    render = getattr(inner, "render", None) or getattr(env, "render", None)
    if render is None:
        return None
    frame = render()
    if frame is None:
        return None
    if isinstance(frame, np.ndarray):
        frame = torch.from_numpy(frame.copy())
    if frame.ndim == 3 and frame.shape[-1] in (3, 4):
        frame = frame[..., :3].permute(2, 0, 1)
    return frame.to(torch.uint8)


class EvalActor:
    """The class of the Ray actor: builds the env and the policy, runs the rollouts."""

    def __init__(
        self,
        init_fn: Callable[[], None] | None,
        env_maker: Callable[[], Any],
        policy_maker: Callable[[Any], Any],
    ) -> None:
        if init_fn is not None:
            init_fn()
        self.env = env_maker()
        self.policy = policy_maker(self.env)

    def eval(
        self,
        weights: Any,
        max_steps: int,
        reward_keys: Any,
        deterministic: bool,
        break_when_any_done: bool,
    ) -> dict[str, Any]:
        if weights is not None:
            load_weights(self.policy, weights)
        frames: list[torch.Tensor] = []

        def record(env: Any, td: TensorDictBase) -> None:
            frame = _render(env)
            if frame is not None:
                frames.append(frame)

        exploration = ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM
        with set_exploration_type(exploration), torch.no_grad():
            rollout = self.env.rollout(
                max_steps,
                self.policy,
                callback=record,
                break_when_any_done=break_when_any_done,
            )
        reward = rollout.get(tuple(reward_keys) if isinstance(reward_keys, list) else reward_keys)
        video = torch.stack(frames).unsqueeze(0) if frames else None
        return {"reward": float(reward.float().mean()), "frames": video}

    def shutdown(self) -> None:
        if not getattr(self.env, "is_closed", False):
            self.env.close()


class RayEvalWorker:
    """Evaluates a policy in a Ray actor, without blocking the caller (TorchRL's).

    The actor runs ``init_fn()`` (process set-up that must come first, e.g. a simulator's
    launcher), then builds ``env = env_maker()`` and ``policy = policy_maker(env)``.
    :meth:`submit` sends weights and starts a rollout of at most ``max_steps`` steps
    (``env.rollout``); :meth:`poll` returns ``{"reward": mean reward per step (over the
    steps and the env's batch), "frames": [1, T, C, H, W] uint8 video or None}`` once it
    finished. With ``name``, the actor is registered under it (detached, as TorchRL), and
    :meth:`from_name` connects to it from another process.

    Args:
        init_fn: called first in the actor (``None``: nothing).
        env_maker: builds the evaluation env in the actor.
        policy_maker: builds the policy from the env, in the actor.

    Keyword Args:
        num_gpus: GPUs of the actor. Defaults to 1, as TorchRL.
        reward_keys: the reward's key in the rollout. Defaults to ``("next", "reward")``.
        name: a name to register the actor under.
        **remote_kwargs: other ``ray.remote()`` options (``num_cpus``, ``runtime_env``).

    Raises:
        ImportError: Ray is not installed (``pip install "rl-collectors[ray]"``).
    """

    def __init__(
        self,
        init_fn: Callable[[], None] | None,
        env_maker: Callable[[], Any],
        policy_maker: Callable[[Any], Any],
        *,
        num_gpus: int = 1,
        reward_keys: tuple[str, ...] = ("next", "reward"),
        name: str | None = None,
        **remote_kwargs: Any,
    ) -> None:
        ray = import_ray("RayEvalWorker", _EXTRA)
        self._reward_keys = reward_keys
        options: dict[str, Any] = {}
        if name is not None:
            options.update(name=name, lifetime="detached")
        actor_cls = ray.remote(num_gpus=num_gpus, **remote_kwargs)(EvalActor)
        self._actor = actor_cls.options(**options).remote(init_fn, env_maker, policy_maker)
        self._name = name
        self._pending_ref = None

    @classmethod
    def from_name(
        cls, name: str, *, reward_keys: tuple[str, ...] = ("next", "reward")
    ) -> RayEvalWorker:
        """A handle on the running worker registered as ``name``.

        Raises:
            ValueError: no actor of that name runs (Ray's message names it).
        """
        ray = import_ray("RayEvalWorker", _EXTRA)
        worker = object.__new__(cls)
        worker._reward_keys = reward_keys
        worker._actor = ray.get_actor(name)
        worker._name = name
        worker._pending_ref = None
        return worker

    def submit(
        self,
        weights: Any,
        max_steps: int,
        *,
        deterministic: bool = True,
        break_when_any_done: bool = True,
    ) -> None:
        """Starts a rollout with ``weights`` (``None``: the actor's current ones); the
        result of an earlier rollout not polled yet is dropped.

        Raises:
            RuntimeError: the worker was shut down.
        """
        if self._actor is None:
            raise RuntimeError("the RayEvalWorker was shut down")
        self._pending_ref = self._actor.eval.remote(
            weights, max_steps, self._reward_keys, deterministic, break_when_any_done
        )

    def poll(self, timeout: float = 0) -> dict | None:
        """The last rollout's metrics, or ``None`` while it runs (waiting up to ``timeout``
        seconds) or when none was submitted.

        Raises:
            RuntimeError: the rollout failed in the actor (naming the worker).
        """
        if self._pending_ref is None:
            return None
        ray = import_ray("RayEvalWorker", _EXTRA)
        ready, _ = ray.wait([self._pending_ref], timeout=timeout)
        if not ready:
            return None
        ref, self._pending_ref = self._pending_ref, None
        try:
            return ray.get(ref)
        except ray.exceptions.RayError as err:
            who = f" {self._name!r}" if self._name is not None else ""
            cause = getattr(err, "cause", None) or err
            raise RuntimeError(f"RayEvalWorker{who}: the rollout failed: {cause!r}") from None

    def shutdown(self) -> None:
        """Closes the env and kills the actor; later calls do nothing."""
        if self._actor is None:
            return
        ray = import_ray("RayEvalWorker", _EXTRA)
        actor, self._actor, self._pending_ref = self._actor, None, None
        try:
            ray.get(actor.shutdown.remote(), timeout=30)
        finally:
            ray.kill(actor, no_restart=True)
