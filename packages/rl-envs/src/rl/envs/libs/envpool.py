"""``MultiThreadedEnvWrapper`` and ``MultiThreadedEnv``: EnvPool's C++ thread pools as
batched :class:`~rl.envs.EnvBase` environments.

EnvPool (https://github.com/sail-sg/envpool, paper: https://arxiv.org/abs/2206.10558)
steps ``num_envs`` environments in C++ threads per call. It is imported on first use;
``pip install "rl-envs[envpool]"`` installs it.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import logging
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import Bounded, Composite, Unbounded
from rl.envs._done import default_done_spec
from rl.envs._env_base import EnvBase
from rl.envs._gym_kernel import _key
from rl.envs._gym_spaces import SpaceLeaf, space_leaves, walk
from rl.envs.engine import RolloutKernel

from ._envpool_kernel import EnvPoolKernel

__all__ = ["MultiThreadedEnvWrapper", "MultiThreadedEnv"]

_has_envpool = importlib.util.find_spec("envpool") is not None
_INSTALL = 'pip install "rl-envs[envpool]"'
logger = logging.getLogger(__name__)


def _import_envpool():
    if not _has_envpool:
        raise ImportError(f"EnvPool is not installed: {_INSTALL}")
    import envpool

    return envpool


@contextlib.contextmanager
def _quiet_spaces():
    """EnvPool builds float32 Boxes from float64 bounds each time its spaces are read,
    and gymnasium warns about the cast each time: those warnings are silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered", category=UserWarning)
        yield


def _unbounded_if_open(leaf: SpaceLeaf) -> SpaceLeaf:
    """EnvPool gives its unbounded float observations ``Box(tiny, max)`` bounds (the
    smallest positive float as low): such a leaf is made ``Unbounded``."""
    spec = leaf.spec
    if not isinstance(spec, Bounded) or not spec.dtype.is_floating_point:
        return leaf
    info = torch.finfo(spec.dtype)
    low, high = spec.space.low, spec.space.high
    if bool((high >= info.max).all()) and bool((low <= info.tiny).all()):
        return leaf._replace(spec=Unbounded(shape=spec.shape, dtype=spec.dtype))
    return leaf


class MultiThreadedEnvWrapper(EnvBase):
    """Wraps an EnvPool pool (made with ``env_type="gymnasium"``) as a batched env.

    The pool's spaces become specs (as :class:`~rl.envs.GymWrapper` converts them); a
    non-Dict observation is written under ``"observation"``, a Dict one under its keys.
    ``batch_size`` is ``[num_envs]``; ``reward``, ``done``, ``terminated`` and
    ``truncated`` have shape ``[num_envs, 1]``.

    EnvPool resets a finished sub-env itself at the next ``step`` (ignoring that step's
    action and returning reward 0). Here a done sub-env is reset explicitly through the
    ``"_reset"`` mask (``pool.reset(env_ids)``), which :meth:`rollout`,
    :meth:`step_and_maybe_reset` and the collectors always do, so that filler step is
    never recorded as a transition. A manual loop that steps a done sub-env without
    resetting it gets EnvPool's filler step.

    EnvPool fixes its seeds when the pool is made (sub-env ``i`` gets ``seed + i``):
    :meth:`set_seed` rebuilds the pool with the same configuration and the new seed
    (``env.env`` is then the new pool) and the next :meth:`reset` resets every sub-env.

    Only synchronous pools are supported (``batch_size == num_envs``, EnvPool's default).

    Args:
        env: the EnvPool pool, ``envpool.make(task_id, env_type="gymnasium", ...)``.
        categorical_action_encoding: Discrete actions as integers (``Categorical``,
            default, what TorchRL's wrapper always gives) rather than one-hot.
        device: device of the output tensors (``None``: CPU).
        batch_size: if given, must be ``[num_envs]``.
        allow_done_after_reset: tolerate done flags right after a reset.
        run_type_checks: debug mode, check every action against ``action_spec``.

    Examples:
        >>> import envpool
        >>> from rl.envs import MultiThreadedEnvWrapper
        >>> pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=4, seed=0)
        >>> env = MultiThreadedEnvWrapper(pool)
        >>> env.rollout(10)["next", "observation"].shape
        torch.Size([4, 10, 4])
        >>> env.close()
    """

    _step_reads_observations = False  # steps from the action alone

    _reset_keeps_unmasked = True  # _reset returns the current rows outside the mask

    def __init__(
        self,
        env: Any = None,
        *,
        categorical_action_encoding: bool = True,
        device=None,
        batch_size=None,
        allow_done_after_reset: bool = False,
        run_type_checks: bool = False,
    ) -> None:
        envpool = _import_envpool()
        from envpool.python.gymnasium_envpool import GymnasiumEnvPoolMixin

        if env is None:
            raise TypeError("MultiThreadedEnvWrapper needs an EnvPool pool: env=envpool.make(...)")
        if not isinstance(env, GymnasiumEnvPoolMixin):
            raise TypeError(
                "env must be an EnvPool pool made with env_type='gymnasium' "
                f"(envpool.make(task_id, env_type='gymnasium', ...)), got {type(env).__name__}"
            )
        config = env.config
        num_envs = int(config["num_envs"])
        if int(config["batch_size"]) != num_envs:
            raise ValueError(
                "only synchronous EnvPool pools are supported (batch_size == num_envs), got "
                f"batch_size={config['batch_size']} and num_envs={num_envs}"
            )
        if batch_size is not None and tuple(torch.Size(batch_size)) != (num_envs,):
            raise ValueError(
                f"batch_size must be [{num_envs}] (the pool's num_envs), got {list(batch_size)}"
            )
        del envpool
        super().__init__(
            device=device,
            batch_size=(num_envs,),
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
        )
        self.num_workers = num_envs
        self.categorical_action_encoding = categorical_action_encoding
        self._env = env
        self._last_obs: list[torch.Tensor] | None = None
        self._build_specs()

    @property
    def env(self) -> Any:
        """The wrapped EnvPool pool."""
        return self._env

    @property
    def lib(self):
        """The ``envpool`` module."""
        return _import_envpool()

    # -------------------------------------------------------------------------- specs
    def _build_specs(self) -> None:
        spec = self._env.spec
        with _quiet_spaces():
            obs_space, act_space = spec.observation_space, spec.action_space
        import gymnasium

        batch = tuple(self.batch_size)
        cat = self.categorical_action_encoding
        obs_key: tuple = () if isinstance(obs_space, gymnasium.spaces.Dict) else ("observation",)
        leaves = space_leaves(obs_space, batch, cat, obs_key)
        self._obs_leaves: list[SpaceLeaf] = [_unbounded_if_open(leaf) for leaf in leaves]
        self._act_leaves: list[SpaceLeaf] = space_leaves(act_space, batch, cat, ("action",))
        if len(self._act_leaves) != 1 or self._act_leaves[0].path != ():
            raise TypeError(
                f"EnvPool action space {act_space!r} is not supported: expected a single "
                "Box or Discrete space"
            )
        bs, dev = self.batch_size, self.device
        obs = Composite(shape=bs, device=dev)
        for leaf in self._obs_leaves:
            obs[_key(leaf.key)] = leaf.spec.to(dev) if dev is not None else leaf.spec
        self.observation_spec = obs
        leaf = self._act_leaves[0]
        self.action_spec = leaf.spec.to(dev) if dev is not None else leaf.spec
        self.reward_spec = Unbounded(shape=(*bs, 1), dtype=torch.float32, device=dev)
        self.full_done_spec = default_done_spec(bs, dev, truncated=True)
        self._obs_np_dtypes = [
            (_key(leaf.key), torch.empty((), dtype=leaf.spec.dtype).numpy().dtype)
            for leaf in self._obs_leaves
        ]
        self._act_shape = leaf.spec.shape
        # integer actions starting at 0 and Box actions go to EnvPool as they are (it
        # casts them to its dtype); one-hot ones and shifted Discrete ones are converted
        direct = isinstance(act_space, gymnasium.spaces.Box) or (
            cat and isinstance(act_space, gymnasium.spaces.Discrete) and int(act_space.start) == 0
        )
        self._act_to_pool = None if direct else leaf.to_gym
        self._flat_keys = all(len(leaf.key) == 1 for leaf in self._obs_leaves)

    # -------------------------------------------------------------------- conversions
    def _obs_arrays(self, obs: Any) -> list[np.ndarray]:
        """The observation leaves of an EnvPool observation (numpy, ``[n, ...]``, in the
        dtypes of the specs)."""
        d = self.__dict__
        out = []
        for leaf, (_, np_dtype) in zip(d["_obs_leaves"], d["_obs_np_dtypes"]):
            value = walk(obs, leaf.path)
            value = value if leaf.from_gym is None else leaf.from_gym(value)
            out.append(np.asarray(value, dtype=np_dtype))
        return out

    def _obs_tensors(self, obs: Any) -> list[torch.Tensor]:
        """Fresh CPU tensors of the observation leaves, in spec dtypes."""
        return [torch.from_numpy(np.array(array)) for array in self._obs_arrays(obs)]

    def _action_from_td(self, tensordict: TensorDictBase, get=None) -> np.ndarray:
        """The EnvPool action (numpy) of the root ``tensordict`` (read with ``get``)."""
        d = self.__dict__
        value = (get or tensordict.get)("action")
        if value.shape != d["_act_shape"]:
            raise ValueError(
                f"action 'action' has shape {tuple(value.shape)}, expected "
                f"{tuple(d['_act_shape'])} from action_spec {self.action_spec!r}"
            )
        array = value.detach().cpu().numpy()
        to_pool = d["_act_to_pool"]
        return array if to_pool is None else to_pool(array)

    def _output(self, tensors: list[torch.Tensor], extra: dict) -> TensorDictBase:
        d = self.__dict__
        device = d["_device"]
        entries = {key: t for (key, _), t in zip(d["_obs_np_dtypes"], tensors)}
        entries.update(extra)
        if device is not None:
            entries = {key: value.to(device) for key, value in entries.items()}
        if d["_flat_keys"]:
            return TensorDict._new_unsafe(entries, batch_size=d["_batch_size"], device=device)
        td = TensorDict({}, batch_size=d["_batch_size"], device=device)
        for key, value in entries.items():
            td.set(key, value)
        return td

    def _flags(self, terminated, truncated) -> dict:
        """``done`` / ``terminated`` / ``truncated`` of shape ``[B, 1]``, one allocation."""
        flags = np.empty((3, *self.__dict__["_batch_size"], 1), dtype=np.bool_)
        flags[1, :, 0] = terminated
        flags[2, :, 0] = truncated
        np.logical_or(flags[1], flags[2], out=flags[0])
        done, term, trunc = torch.from_numpy(flags).unbind(0)
        return {"done": done, "terminated": term, "truncated": trunc}

    # -------------------------------------------------------------------------- hooks
    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        d = self.__dict__
        mask = None if tensordict is None else tensordict.get("_reset", None)
        last = d["_last_obs"]
        ids = None
        if mask is not None and last is not None:
            mask_np = mask.reshape(-1).cpu().numpy()
            if not mask_np.all():
                ids = np.flatnonzero(mask_np)
        if ids is None:
            obs, _ = d["_env"].reset()
            tensors = self._obs_tensors(obs)
        else:
            obs, info = d["_env"].reset(ids)
            rows = np.asarray(info["env_id"])
            tensors = [t.clone() for t in last]
            for tensor, fresh in zip(tensors, self._obs_tensors(obs)):
                tensor[rows] = fresh
        d["_last_obs"] = tensors
        return self._output(tensors, self._flags(False, False))

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        d = self.__dict__
        if d["_last_obs"] is None:
            # EnvPool would answer with its first observations as if it had stepped
            raise RuntimeError(
                f"{type(self).__name__}.step() before reset(): call reset() first (after "
                "construction and after set_seed, which rebuilds the pool)"
            )
        obs, reward, terminated, truncated, _ = d["_env"].step(self._action_from_td(tensordict))
        tensors = self._obs_tensors(obs)
        d["_last_obs"] = tensors
        extra = self._flags(terminated, truncated)
        extra["reward"] = torch.from_numpy(
            np.asarray(reward, dtype=np.float32).reshape(*d["_batch_size"], 1).copy()
        )
        return self._output(tensors, extra)

    def _rebuild(self, seed: int) -> Any:
        """A pool with the configuration of the current one and ``seed``."""
        env = self._env
        spec_cls = type(env.spec)
        config = dict(env.spec.config._asdict())
        config["seed"] = int(seed)
        with _quiet_spaces():
            return type(env)(spec_cls(spec_cls.gen_config(**config)))

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            return
        new = self._rebuild(seed)
        self._env.close()
        self._env = new
        self.__dict__["_last_obs"] = None

    # ---------------------------------------------------------------------- fast paths
    def rollout_kernel(self) -> RolloutKernel:
        """:class:`~rl.envs.libs._envpool_kernel.EnvPoolKernel` (the pool driven directly)
        for a CPU env whose ``_step`` / ``_reset`` are this class's and that was reset;
        else the env's own ``_step`` / ``reset``."""
        cls = type(self)
        on_cpu = self.device is None or self.device.type == "cpu"
        if (
            on_cpu
            and self.__dict__["_last_obs"] is not None
            and cls._step is MultiThreadedEnvWrapper._step
            and cls._reset is MultiThreadedEnvWrapper._reset
        ):
            return EnvPoolKernel(self)
        return super().rollout_kernel()

    def env_state(self) -> dict[str, Any]:
        """Refused: EnvPool keeps its envs' state in C++, out of Python's reach.

        Raises:
            TypeError: always, so a checkpoint is never written without it.
        """
        raise TypeError(
            f"cannot save the state of {self!r}: EnvPool keeps its envs' physics and random "
            "state in C++, where it cannot be read; use rl.envs.ParallelEnv or GymEnv with "
            "vectorization_mode='sync' for a checkpoint that resumes exactly"
        )

    def close(self, *, raise_if_closed: bool = True) -> None:
        if not self.is_closed:
            self._env.close()
        super().close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_workers={self.num_workers}, device={self.device})"


class MultiThreadedEnv(MultiThreadedEnvWrapper):
    """An EnvPool pool made by name: ``MultiThreadedEnv(8, "CartPole-v1")``.

    An alternative to :class:`~rl.envs.ParallelEnv` for the environments EnvPool
    implements (Atari, MuJoCo, classic control, DeepMind Control, ...): the sub-envs
    step in C++ threads of this process, with no worker process and no copy between
    processes. See :class:`MultiThreadedEnvWrapper` for resets and seeding.

    Args:
        num_workers: the number of sub-envs (``batch_size=[num_workers]``).
        env_name: an EnvPool task id (``envpool.list_all_envs()``); gymnasium's
            ``"ALE/Pong-v5"`` is accepted for EnvPool's ``"Pong-v5"``. The two
            arguments may also be given in the order ``(env_name, num_workers)``.
        create_env_kwargs: keyword arguments of ``envpool.make`` (``seed``,
            ``num_threads``, ``max_episode_steps``, Atari's ``episodic_life``...).
        categorical_action_encoding: as in :class:`MultiThreadedEnvWrapper`.
        device: as in :class:`MultiThreadedEnvWrapper`.
        batch_size: as in :class:`MultiThreadedEnvWrapper`.
        allow_done_after_reset: as in :class:`MultiThreadedEnvWrapper`.
        run_type_checks: as in :class:`MultiThreadedEnvWrapper`.

    Raises:
        ValueError: ``env_name`` is not an EnvPool task, or ``num_workers`` is not a
            positive int.

    Examples:
        >>> from rl.envs import MultiThreadedEnv, check_env_specs
        >>> env = MultiThreadedEnv(4, "CartPole-v1", create_env_kwargs={"seed": 0})
        >>> check_env_specs(env)
        >>> rollout = env.rollout(50, break_when_any_done=False)
        >>> rollout.batch_size
        torch.Size([4, 50])
        >>> env.close()
    """

    def __init__(
        self,
        num_workers: int,
        env_name: str,
        *,
        create_env_kwargs: Mapping[str, Any] | None = None,
        categorical_action_encoding: bool = True,
        device=None,
        batch_size=None,
        allow_done_after_reset: bool = False,
        run_type_checks: bool = False,
    ) -> None:
        if isinstance(num_workers, str) and not isinstance(env_name, str):
            num_workers, env_name = env_name, num_workers
        if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1:
            raise ValueError(f"num_workers must be a positive int, got {num_workers!r}")
        if not isinstance(env_name, str):
            raise TypeError(f"env_name must be a str, got {type(env_name).__name__}")
        envpool = _import_envpool()
        env_name = env_name.removeprefix("ALE/")  # EnvPool's names for ALE games
        known = envpool.list_all_envs()
        if env_name not in known:
            close = difflib.get_close_matches(env_name, known, n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ValueError(
                f"env_name {env_name!r} is not an EnvPool task (see envpool.list_all_envs()){hint}"
            )
        self.env_name = env_name
        self.create_env_kwargs = dict(create_env_kwargs or {})
        for key in ("env_type", "num_envs", "task_id"):
            if key in self.create_env_kwargs:
                raise ValueError(
                    f"create_env_kwargs may not set {key!r} (set by MultiThreadedEnv), got "
                    f"{self.create_env_kwargs[key]!r}"
                )
        pool = self._make_pool(num_workers)
        super().__init__(
            pool,
            categorical_action_encoding=categorical_action_encoding,
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            run_type_checks=run_type_checks,
        )

    def _make_pool(self, num_workers: int) -> Any:
        envpool = _import_envpool()
        with _quiet_spaces():
            return envpool.make(
                self.env_name, env_type="gymnasium", num_envs=num_workers, **self.create_env_kwargs
            )

    def _rebuild(self, seed: int) -> Any:
        self.create_env_kwargs["seed"] = int(seed)
        return self._make_pool(self.num_workers)

    def __repr__(self) -> str:
        return (
            f"MultiThreadedEnv(env={self.env_name}, num_workers={self.num_workers}, "
            f"device={self.device})"
        )
