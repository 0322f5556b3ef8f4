"""``DMControlWrapper`` and ``DMControlEnv``: the DeepMind Control Suite as
:class:`~rl.envs.EnvBase` environments.

dm_control (https://github.com/google-deepmind/dm_control, paper:
https://arxiv.org/abs/2006.12983) is imported on first use;
``pip install "rl-envs[dm_control]"`` installs it.
"""

from __future__ import annotations

import ctypes.util
import difflib
import functools
import importlib.util
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import (
    Bounded,
    Categorical,
    Composite,
    OneHot,
    Unbounded,
    load_object_state,
    object_state,
)
from rl.envs._done import default_done_spec
from rl.envs._env_base import EnvBase
from rl.envs._gym_kernel import _key
from rl.envs._gym_spaces import numpy_to_torch_dtype

__all__ = ["DMControlWrapper", "DMControlEnv"]

_has_dm_control = importlib.util.find_spec("dm_control") is not None
_INSTALL = 'pip install "rl-envs[dm_control]"'
logger = logging.getLogger(__name__)
_EMPTY = torch.Size(())


def _headless_gl() -> str | None:
    """The OpenGL back-end for a machine without a display: EGL, else OSMesa, else None."""
    if ctypes.util.find_library("EGL"):
        return "egl"
    if ctypes.util.find_library("OSMesa"):
        return "osmesa"
    return None


def _import_dm_control():
    """Imports dm_control (and ``dm_control.suite``), with the two fixes it needs here.

    - Rendering: without ``MUJOCO_GL``, dm_control picks GLFW when the ``glfw`` module
      imports, which then fails to render without a display. On a machine without
      ``DISPLAY`` and with ``MUJOCO_GL`` unset, ``MUJOCO_GL`` is set to ``egl`` (or
      ``osmesa``, whichever library is found) before dm_control picks its back-end, at
      its first import in the process.
    - dm_control's table of MuJoCo array fields (``sizes.array_sizes``) may name
      fields that the installed MuJoCo no longer has (dm_control 1.0.50 with MuJoCo
      4.0 fails with ``'MjModel' object has no attribute 'flex_vertedge'``); those
      entries are dropped from the table, which only serves named indexing.
    """
    if not _has_dm_control:
        raise ImportError(f"dm_control is not installed: {_INSTALL}")
    if (
        "MUJOCO_GL" not in os.environ
        and not os.environ.get("DISPLAY")
        and "dm_control._render" not in sys.modules
    ):
        backend = _headless_gl()
        if backend is not None:
            os.environ["MUJOCO_GL"] = backend
    import mujoco
    from dm_control import suite
    from dm_control.mujoco.wrapper.mjbindings import sizes

    if not getattr(sizes, "_rl_checked", False):
        model = mujoco.MjModel.from_xml_string("<mujoco/>")
        data = mujoco.MjData(model)
        for name, struct in (("mjmodel", model), ("mjdata", data)):
            table = sizes.array_sizes.get(name, {})
            missing = [field for field in table if not hasattr(struct, field)]
            for field in missing:
                del table[field]
            if missing:
                logger.debug("dm_control: dropped %s fields MuJoCo lacks: %s", name, missing)
        sizes._rl_checked = True
    return suite


def _spec_of(array_spec: Any, categorical: bool):
    """An ``rl.core`` spec of a ``dm_env.specs`` array spec (scalars get shape ``[1]``)."""
    from dm_env import specs as dm_specs

    shape = tuple(array_spec.shape) or (1,)
    if isinstance(array_spec, dm_specs.DiscreteArray):
        n = int(array_spec.num_values)
        if categorical:
            return Categorical(n, shape=tuple(array_spec.shape), dtype=torch.int64)
        return OneHot(n, shape=(*array_spec.shape, n), dtype=torch.int64)
    dtype = numpy_to_torch_dtype(array_spec.dtype)
    if isinstance(array_spec, dm_specs.BoundedArray):
        low = torch.as_tensor(np.broadcast_to(array_spec.minimum, shape).copy()).to(dtype)
        high = torch.as_tensor(np.broadcast_to(array_spec.maximum, shape).copy()).to(dtype)
        return Bounded(low, high, shape=shape, dtype=dtype)
    if getattr(array_spec, "name", None) == "pixels" and dtype == torch.uint8:
        return Bounded(0, 255, shape=shape, dtype=torch.uint8)
    return Unbounded(shape=shape, dtype=dtype)


def _leaves(spec: Any, prefix: tuple = ()) -> list[tuple[tuple[str, ...], Any]]:
    """``(key, dm_env array spec)`` of a (nested) observation spec, keys as tuples."""
    if isinstance(spec, Mapping):
        out = []
        for name, sub in spec.items():
            out += _leaves(sub, (*prefix, str(name)))
        return out
    return [(prefix or ("observation",), spec)]


def _walk(value: Any, key: tuple[str, ...]) -> Any:
    for name in key:
        value = value[name]
    return value


class _classproperty:
    def __init__(self, fget) -> None:
        self.fget = fget

    def __get__(self, instance, owner):
        return self.fget(owner)


class DMControlWrapper(EnvBase):
    """Wraps a dm_control ``Environment`` (``suite.load(domain, task)``) as an env.

    Specs come from the dm_env specs: each observation array is an entry of its own
    (``"position"``, ``"velocity"``...; nested observation dicts become nested keys,
    scalars get shape ``[1]``), the action is ``Bounded`` (its dtype, float64 for the
    suite), the reward ``[1]`` in the env's dtype (float64). An episode ends with a
    ``LAST`` step: with discount 0 it is ``terminated``, with discount 1 (the time limit)
    ``truncated``; ``done = terminated | truncated``.

    With ``from_pixels=True`` the scene is rendered by MuJoCo (dm_control's pixels
    wrapper) into ``"pixels"`` (uint8 ``[H, W, 3]``, 240 x 320 by default); headless
    machines need an OpenGL back-end (``MUJOCO_GL=egl`` is set when none is chosen and
    there is no display).

    Args:
        env: the dm_control environment (or a ``pixels.Wrapper`` around one).
        from_pixels: add the rendered frame as ``"pixels"``.
        pixels_only: with ``from_pixels``, keep only ``"pixels"``.
        frame_skip: repeat each action this many times (rewards summed, stopping at
            the end of an episode).
        camera_id: the camera rendered with ``from_pixels``.
        render_kwargs: more arguments of ``physics.render`` (``height``, ``width``).
        categorical_action_encoding: discrete specs as integers rather than one-hot.
        device: device of the output tensors.
        batch_size: must be ``[]`` (one dm_control env).
        allow_done_after_reset: tolerate done flags right after a reset.
        run_type_checks: debug mode, check every action against ``action_spec``.

    Examples:
        >>> from dm_control import suite
        >>> from rl.envs import DMControlWrapper
        >>> env = DMControlWrapper(suite.load("cartpole", "balance"))
        >>> sorted(env.observation_spec.keys())
        ['position', 'velocity']
        >>> env.rand_step()["next", "reward"].dtype
        torch.float64
    """

    _step_reads_observations = False  # steps from the action alone

    def __init__(
        self,
        env: Any = None,
        *,
        from_pixels: bool = False,
        pixels_only: bool = False,
        frame_skip: int | None = None,
        camera_id: int | str = 0,
        render_kwargs: Mapping[str, Any] | None = None,
        categorical_action_encoding: bool = False,
        device=None,
        batch_size=None,
        allow_done_after_reset: bool = False,
        run_type_checks: bool = False,
    ) -> None:
        _import_dm_control()
        from dm_control.rl.control import Environment
        from dm_control.suite.wrappers import pixels
        from dm_env import StepType

        if not isinstance(env, (Environment, pixels.Wrapper)):
            raise TypeError(
                "env must be a dm_control Environment (dm_control.suite.load(domain, task)) "
                f"or a pixels.Wrapper, got {type(env).__name__}"
            )
        if frame_skip is None:
            frame_skip = 1
        if not isinstance(frame_skip, int) or frame_skip < 1:
            raise ValueError(f"frame_skip must be a positive int, got {frame_skip!r}")
        if batch_size is not None and tuple(torch.Size(batch_size)) != ():
            raise ValueError(f"batch_size must be [] for a dm_control env, got {list(batch_size)}")
        super().__init__(
            device=device,
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
        )
        self.from_pixels = from_pixels
        self.pixels_only = pixels_only
        self.frame_skip = frame_skip
        self.categorical_action_encoding = categorical_action_encoding
        if from_pixels and not isinstance(env, pixels.Wrapper):
            self.render_kwargs = {"camera_id": camera_id, **dict(render_kwargs or {})}
            env = pixels.Wrapper(env, pixels_only=pixels_only, render_kwargs=self.render_kwargs)
        self._env = env
        self._last = StepType.LAST  # dm_env is imported here, once, not at each step
        self._build_specs()

    @property
    def env(self) -> Any:
        """The wrapped dm_control environment."""
        return self._env

    @property
    def lib(self):
        """The ``dm_control`` module."""
        _import_dm_control()
        import dm_control

        return dm_control

    @_classproperty
    def available_envs(cls) -> list[tuple[str, list[str]]]:
        """``(domain, [tasks])`` of the suite (benchmarking and extra tasks)."""
        suite = _import_dm_control()
        found: dict[str, list[str]] = {}
        for domain, task in (*suite.BENCHMARKING, *suite.EXTRA):
            found.setdefault(domain, []).append(task)
        return list(found.items())

    def _build_specs(self) -> None:
        env = self._env
        cat = self.categorical_action_encoding
        dev = self.device
        self._obs_keys = []
        obs = Composite(shape=(), device=dev)
        for key, array_spec in _leaves(env.observation_spec()):
            spec = _spec_of(array_spec, cat)
            obs[_key(key)] = spec.to(dev) if dev is not None else spec
            self._obs_keys.append((key, spec.shape, np.dtype(array_spec.dtype)))
        self.observation_spec = obs
        act = _spec_of(env.action_spec(), cat)
        self.action_spec = act.to(dev) if dev is not None else act
        self._act_np_dtype = np.dtype(env.action_spec().dtype)
        self._act_onehot = isinstance(act, OneHot)
        reward = env.reward_spec()
        reward_dtype = numpy_to_torch_dtype(reward.dtype)
        self.reward_spec = Unbounded(shape=(1,), dtype=reward_dtype, device=dev)
        self.full_done_spec = default_done_spec((), dev, truncated=True)  # as TorchRL's
        self._reward_np_dtype = np.dtype(reward.dtype)

    def _obs_entries(self, observation: Mapping) -> dict:
        entries = {}
        for key, shape, np_dtype in self.__dict__["_obs_keys"]:
            value = np.array(_walk(observation, key), dtype=np_dtype).reshape(shape)
            entries[key] = torch.from_numpy(value)
        return entries

    def _output(self, entries: dict, flags: np.ndarray) -> TensorDictBase:
        """The output TensorDict: ``entries`` (``{key tuple: tensor}``, shapes fixed by the
        specs) and the ``[3, 1]`` boolean ``flags`` (done, terminated, truncated), assembled
        without per-entry validation."""
        device = self.__dict__["_device"]
        tree: dict = {}
        for key, value in entries.items():
            node = tree
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = value if device is None else value.to(device)
        done, terminated, truncated = torch.from_numpy(flags).unbind(0)
        if device is not None:
            done, terminated, truncated = (t.to(device) for t in (done, terminated, truncated))
        tree["done"], tree["terminated"], tree["truncated"] = done, terminated, truncated
        return TensorDict._new_unsafe(tree, batch_size=_EMPTY, device=device)

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        timestep = self._env.reset()
        return self._output(self._obs_entries(timestep.observation), np.zeros((3, 1), dtype=bool))

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        d = self.__dict__
        action = tensordict.get("action", None)
        if action is None:
            raise KeyError("action")  # EnvBase.step names the key and the action spec
        action = action.detach().cpu().numpy()
        if d["_act_onehot"]:
            action = action.argmax(-1)
        action = np.asarray(action, dtype=d["_act_np_dtype"])
        env, last = d["_env"], d["_last"]
        total = 0.0
        for _ in range(self.frame_skip):
            timestep = env.step(action)
            total += float(timestep.reward or 0.0)
            if timestep.step_type == last:
                break
        flags = np.zeros((3, 1), dtype=bool)  # done, terminated, truncated
        if timestep.step_type == last:
            # dm_env: discount 0 ends the episode for good, 1 is a cut (time limit)
            flags[2 if np.isclose(timestep.discount, 1.0) else 1] = True
            flags[0] = True
        entries = self._obs_entries(timestep.observation)
        entries[("reward",)] = torch.from_numpy(np.array([total], dtype=d["_reward_np_dtype"]))
        return self._output(entries, flags)

    def _task(self) -> Any:
        env = self._env
        inner = getattr(env, "_env", env)  # pixels.Wrapper keeps the env in ``_env``
        return inner.task

    def _set_seed(self, seed: int | None) -> None:
        """Gives the task a new ``RandomState(seed)``: the next reset draws from it."""
        if seed is None:
            return
        task = self._task()
        if not hasattr(task, "_random"):
            raise RuntimeError(f"the dm_control task {type(task).__name__} has no _random to seed")
        task._random = np.random.RandomState(seed)

    def env_state(self) -> dict[str, Any]:
        """The physics' integration state (``mj_getState``), the task's attributes (its
        ``RandomState`` included) and the env's step counter, as tensors and plain data."""
        inner = getattr(self._env, "_env", self._env)  # pixels.Wrapper keeps it in _env
        name = repr(self)
        return {
            "physics": object_state(inner.physics.data.ptr, name=name),
            "task": object_state(self._task(), name=name),
            "steps": [int(inner._step_count), bool(inner._reset_next_step)],
        }

    def load_env_state(self, state: dict[str, Any]) -> None:
        inner = getattr(self._env, "_env", self._env)
        name = repr(self)
        steps = state.get("steps") if isinstance(state, dict) else None
        if not (isinstance(steps, list) and len(steps) == 2 and "physics" in state):
            raise ValueError(
                f"cannot restore the state of {name}: expected the dict of "
                f"{type(self).__name__}.env_state(), got {type(state).__name__}"
            )
        load_object_state(inner.physics.data.ptr, state["physics"], name=name)
        load_object_state(self._task(), state["task"], name=name)
        inner._step_count, inner._reset_next_step = int(steps[0]), bool(steps[1])

    def close(self, *, raise_if_closed: bool = True) -> None:
        if not self.is_closed:
            self._env.close()
        super().close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self._env}, batch_size={self.batch_size})"


class DMControlEnv(DMControlWrapper):
    """A dm_control suite task by name: ``DMControlEnv("cheetah", "run")``.

    Args:
        env_name: the suite domain (``"cheetah"``, ``"walker"``, ``"cartpole"``...).
        task_name: the task of that domain (``"run"``, ``"walk"``, ``"balance"``...).
        num_workers: more than 1 returns a :class:`~rl.envs.ParallelEnv` of that many
            ``DMControlEnv`` (same arguments) in worker processes, as TorchRL does.
        from_pixels: as in :class:`DMControlWrapper`.
        pixels_only: as in :class:`DMControlWrapper`.
        frame_skip: as in :class:`DMControlWrapper`.
        camera_id: as in :class:`DMControlWrapper`.
        render_kwargs: as in :class:`DMControlWrapper`.
        categorical_action_encoding: as in :class:`DMControlWrapper`.
        device: as in :class:`DMControlWrapper`.
        batch_size: as in :class:`DMControlWrapper`.
        allow_done_after_reset: as in :class:`DMControlWrapper`.
        run_type_checks: as in :class:`DMControlWrapper`.
        seed: seeds the task's random state (as ``set_seed`` does).
        **task_kwargs: passed to the task (``time_limit``...) through
            ``suite.load(..., task_kwargs=...)``.

    Raises:
        ValueError: the domain or the task is not in the suite (the message lists the
            close names).

    Examples:
        >>> from rl.envs import DMControlEnv, check_env_specs
        >>> env = DMControlEnv("cheetah", "run")
        >>> check_env_specs(env)
        >>> _ = env.set_seed(0)
        >>> rollout = env.rollout(10)
        >>> rollout["next", "position"].shape
        torch.Size([10, 8])
    """

    def __new__(cls, *args, num_workers: int | None = None, **kwargs):
        if num_workers is not None and num_workers != 1:
            if not isinstance(num_workers, int) or num_workers < 1:
                raise ValueError(f"num_workers must be a positive int, got {num_workers!r}")
            from rl.envs import ParallelEnv

            # TorchRL's DMControlEnv(..., num_workers=N): N single envs in worker processes
            return ParallelEnv(num_workers, functools.partial(cls, *args, **kwargs))
        return super().__new__(cls, *args, **kwargs)

    def __init__(
        self,
        env_name: str,
        task_name: str,
        *,
        num_workers: int | None = None,
        from_pixels: bool = False,
        pixels_only: bool = False,
        frame_skip: int | None = None,
        camera_id: int | str = 0,
        render_kwargs: Mapping[str, Any] | None = None,
        categorical_action_encoding: bool = False,
        device=None,
        batch_size=None,
        allow_done_after_reset: bool = False,
        run_type_checks: bool = False,
        seed: int | None = None,
        **task_kwargs,
    ) -> None:
        suite = _import_dm_control()
        available = dict(self.available_envs)
        if env_name not in available:
            close = difflib.get_close_matches(str(env_name), list(available), n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ValueError(f"env_name {env_name!r} is not a dm_control suite domain{hint}")
        if task_name not in available[env_name]:
            raise ValueError(
                f"task_name {task_name!r} is not a task of the dm_control domain "
                f"{env_name!r}; its tasks are {available[env_name]}"
            )
        self.env_name = env_name
        self.task_name = task_name
        if seed is not None:
            task_kwargs["random"] = np.random.RandomState(seed)
        env = suite.load(env_name, task_name, task_kwargs=task_kwargs)
        super().__init__(
            env,
            from_pixels=from_pixels,
            pixels_only=pixels_only,
            frame_skip=frame_skip,
            camera_id=camera_id,
            render_kwargs=render_kwargs,
            categorical_action_encoding=categorical_action_encoding,
            device=device,
            batch_size=batch_size,
            allow_done_after_reset=allow_done_after_reset,
            run_type_checks=run_type_checks,
        )

    def __repr__(self) -> str:
        return (
            f"DMControlEnv(env={self.env_name}, task={self.task_name}, "
            f"batch_size={self.batch_size})"
        )
