"""``MOGymWrapper`` and ``MOGymEnv``: MO-Gymnasium's multi-objective environments.

An MO-Gymnasium env is a gymnasium env whose reward is a vector, one entry per objective,
described by its ``reward_space``. The wrappers are :class:`~rl.envs.GymWrapper` /
:class:`~rl.envs.GymEnv` (which read a declared ``reward_space``): the reward spec has
shape ``[*batch, n_objectives]``, built from that space (a ``Bounded`` spec for finite
bounds), and ``("next", "reward")`` holds the vector. With ``frame_skip`` the vectors are
summed per objective.

MO-Gymnasium (https://github.com/Farama-Foundation/MO-Gymnasium, paper:
https://arxiv.org/abs/2307.01293) is imported on first use;
``pip install "rl-envs[mo_gymnasium]"`` installs it.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

import gymnasium as gym

from rl.envs._gym import GymEnv, GymWrapper, _make_gym, _reward_space

from ._common import ClassProperty

__all__ = ["MOGymEnv", "MOGymWrapper"]

_has_mo = importlib.util.find_spec("mo_gymnasium") is not None
_INSTALL = 'pip install "rl-envs[mo_gymnasium]"'


def _import_mo_gymnasium() -> ModuleType:
    if not _has_mo:
        raise ImportError(f"mo-gymnasium is not installed: {_INSTALL} to use MOGymEnv")
    import mo_gymnasium

    return mo_gymnasium


def _mo_envs() -> list[str]:
    """The ids MO-Gymnasium registers with gymnasium (``[]`` without it)."""
    if not _has_mo:
        return []
    _import_mo_gymnasium()
    return sorted(
        env_id
        for env_id, spec in gym.envs.registry.items()
        if str(spec.entry_point).startswith("mo_gymnasium")
    )


class MOGymWrapper(GymWrapper):
    """Wraps an MO-Gymnasium env (``mo_gymnasium.make(name)``) as an env.

    As :class:`~rl.envs.GymWrapper`, with the reward spec read from the env's
    ``reward_space``: ``reward`` has shape ``[n_objectives]`` (``[num_envs,
    n_objectives]`` for an ``MOSyncVectorEnv`` / ``MOAsyncVectorEnv``).

    Args:
        env: the MO-Gymnasium env (or vector env) to wrap.
        categorical_action_encoding, from_pixels, pixels_only, frame_skip, device,
        batch_size, run_type_checks: as in :class:`~rl.envs.GymWrapper`.

    Raises:
        TypeError: ``env`` declares no ``reward_space`` (not an MO-Gymnasium env).

    Examples:
        >>> import mo_gymnasium
        >>> from rl.envs import MOGymWrapper
        >>> env = MOGymWrapper(mo_gymnasium.make("deep-sea-treasure-v0"))
        >>> env.reward_spec.shape
        torch.Size([2])
        >>> env.rand_step()["next", "reward"].shape
        torch.Size([2])
    """

    git_url = "https://github.com/Farama-Foundation/MO-Gymnasium"
    libname = "mo-gymnasium"

    def __init__(self, env: Any = None, categorical_action_encoding: bool = False, **kwargs):
        _import_mo_gymnasium()
        if env is not None and _reward_space(env) is None:
            raise TypeError(
                f"{type(self).__name__} wraps an MO-Gymnasium env (one with a reward_space), "
                f"got {env!r} with no reward_space; use GymWrapper for a scalar-reward env"
            )
        super().__init__(env, categorical_action_encoding, **kwargs)

    @property
    def lib(self) -> ModuleType:
        """The ``mo_gymnasium`` module."""
        return _import_mo_gymnasium()

    @ClassProperty
    def available_envs(cls) -> list[str]:
        """The MO-Gymnasium env ids (``[]`` when it is not installed)."""
        return _mo_envs()


class MOGymEnv(GymEnv):
    """An MO-Gymnasium env by name: ``MOGymEnv("deep-sea-treasure-v0")``.

    As :class:`~rl.envs.GymEnv` (same arguments), built with ``mo_gymnasium.make``; with
    ``num_envs >= 1`` the sub-envs run in MO-Gymnasium's ``MOSyncVectorEnv``
    (``vectorization_mode="sync"``, gymnasium's ``NEXT_STEP`` auto-reset) or gymnasium's
    ``AsyncVectorEnv`` (``"async"``, one process per env, ``SAME_STEP`` auto-reset). The reward is the vector of the objectives: shape
    ``[n_objectives]``, ``[num_envs, n_objectives]`` for a vector env.

    Args:
        env_name: an MO-Gymnasium id (see :attr:`available_envs`).
        num_envs: ``0`` (the default) builds one env; ``1`` or more an MO vector env
            (``batch_size=[num_envs]``).
        vectorization_mode: ``"sync"`` or ``"async"``.
        categorical_action_encoding, from_pixels, pixels_only, frame_skip, device,
        batch_size, run_type_checks: as in :class:`~rl.envs.GymWrapper`.
        **kwargs: passed to ``mo_gymnasium.make``.

    Raises:
        ImportError: mo-gymnasium is not installed.
        gymnasium.error.Error: ``env_name`` is not a registered id.

    Examples:
        >>> from rl.envs import MOGymEnv, check_env_specs
        >>> env = MOGymEnv("deep-sea-treasure-v0")
        >>> check_env_specs(env, seed=0)
        >>> env.reward_spec.shape
        torch.Size([2])
        >>> vec = MOGymEnv("deep-sea-treasure-v0", num_envs=3)
        >>> vec.rollout(4, break_when_any_done=False)["next", "reward"].shape
        torch.Size([3, 4, 2])
    """

    git_url = MOGymWrapper.git_url
    libname = MOGymWrapper.libname

    @property
    def lib(self) -> ModuleType:
        """The ``mo_gymnasium`` module."""
        return _import_mo_gymnasium()

    @ClassProperty
    def available_envs(cls) -> list[str]:
        """The MO-Gymnasium env ids (``[]`` when it is not installed)."""
        return _mo_envs()

    def _make_env(
        self,
        env_name: str,
        num_envs: int,
        vectorization_mode: str,
        wrappers: list,
        **kwargs,
    ):
        mo_gym = _import_mo_gymnasium()
        if num_envs == 0:
            return _make_gym(env_name, _factory=mo_gym.make, **kwargs)
        from mo_gymnasium.wrappers.vector import MOSyncVectorEnv

        def make_one():
            env = _make_gym(env_name, _factory=mo_gym.make, **kwargs)
            for wrap in wrappers:
                env = wrap(env)
            return env

        probe = make_one()  # an unknown name fails here, not in a worker process
        reward_space = probe.unwrapped.reward_space
        probe.close()
        if vectorization_mode == "sync":
            return MOSyncVectorEnv([make_one] * num_envs)
        # gymnasium's AsyncVectorEnv stacks vector rewards (MO-Gymnasium's own async env
        # does not run with gymnasium 1.4); it is told the per-env reward space, as
        # MOSyncVectorEnv is
        vector = gym.vector.AsyncVectorEnv(
            [make_one] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
        )
        vector.reward_space = reward_space
        return vector
