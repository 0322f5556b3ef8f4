"""``GymWrapper`` and ``GymEnv``: gymnasium (>= 1.0) environments as :class:`EnvBase`."""

from __future__ import annotations

import functools
import importlib.util
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from tensordict import TensorDict, TensorDictBase

from rl.core import Bounded, Composite

from ._done import default_done_spec
from ._env_base import _EnvMeta
from ._gym_kernel import SIMULATOR_ERRORS, _key, gym_kernel, raise_if_rejected
from ._gym_like import GymLikeEnv
from ._gym_spaces import SpaceLeaf, assemble, space_leaves, walk
from .engine import RolloutKernel

__all__ = ["GymWrapper", "GymEnv", "FrameSkip"]

_has_ale = importlib.util.find_spec("ale_py") is not None


class FrameSkip(gym.Wrapper):
    """Repeats each action ``skip`` times, summing rewards and stopping at a done."""

    def __init__(self, env: gym.Env, skip: int) -> None:
        super().__init__(env)
        self.skip = skip

    def step(self, action):
        total = 0.0
        for _ in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            # a vector reward (MO-Gymnasium) is summed per objective
            total = total + (np.asarray(reward) if np.ndim(reward) else float(reward))
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info


def _check_frame_skip(frame_skip: int | None) -> int:
    if frame_skip is None:
        return 1
    if not isinstance(frame_skip, int) or frame_skip < 1:
        raise ValueError(f"frame_skip must be a positive int, got {frame_skip!r}")
    return frame_skip


def _pixel_wrappers(frame_skip: int, from_pixels: bool, pixels_only: bool) -> list:
    """The gym wrappers applied to each (sub-)env, innermost first."""
    wrappers = []
    if frame_skip > 1:
        wrappers.append(lambda env: FrameSkip(env, frame_skip))
    if from_pixels:
        wrappers.append(
            lambda env: gym.wrappers.AddRenderObservation(
                env, render_only=pixels_only, render_key="pixels", obs_key="observation"
            )
        )
    return wrappers


class GymWrapper(GymLikeEnv):
    """Wraps a gymnasium ``Env`` or ``VectorEnv`` as an :class:`EnvBase`.

    Spaces become specs as in TorchRL (Box -> ``Bounded``/``Unbounded``, Discrete ->
    ``OneHot`` or ``Categorical``, MultiDiscrete -> ``MultiOneHot``/``MultiCategorical``,
    MultiBinary -> ``Binary``, Dict -> nested ``Composite``, a Tuple of items of one kind
    -> one spec stacked along a leading item dim, as TorchRL's ``torch.stack``). A Tuple
    of mixed items, which TorchRL cannot stack, becomes a ``Composite`` keyed ``"0"``,
    ``"1"``... A non-Dict observation is written under ``"observation"`` (``"pixels"``
    when it is the rendered frame only), a non-Dict action read from ``"action"``; the
    entries of a Dict action space are the action keys themselves (``"move"``,
    ``"fire"``), as in TorchRL, and the action is sent back to gym as the Dict / Tuple
    its space expects. ``terminated`` and ``truncated`` are kept apart,
    ``done = terminated | truncated``. An env that declares a ``reward_space`` (MO-Gymnasium's
    vector rewards) gets that space's spec as its reward spec (shape ``[*B, *space.shape]``,
    ``[*B, 1]`` for a scalar space), as in TorchRL; otherwise the reward is ``[*B, 1]``.

    It is a :class:`~rl.envs.GymLikeEnv`: :meth:`set_info_dict_reader` registers readers
    that copy entries of gym's ``info`` (at reset and at each step) into the output, and
    their specs into ``observation_spec`` (rollouts then step through ``_step``, not the
    gym kernels, so that the readers run).

    Seeding follows TorchRL: :meth:`set_seed` calls gym's ``reset(seed=seed)`` at once,
    so the first :meth:`reset` after ``set_seed(s)`` is gymnasium's second reset of seed
    ``s`` (TorchRL's first observation; the same seed gives the same rollout).

    A ``VectorEnv`` gives ``batch_size=[num_envs]``. With gymnasium's ``SAME_STEP``
    autoreset mode, ``("next", obs)`` holds the true final observation (from
    ``infos["final_obs"]``) and resetting the done entries (``"_reset"`` mask) returns the
    observation gymnasium already reset to. With ``NEXT_STEP`` or ``DISABLED`` mode the
    done entries are reset through ``reset(options={"reset_mask": ...})``, so the dummy
    step of ``NEXT_STEP`` is never recorded as a transition. ``rollout`` and
    ``step_and_maybe_reset`` always reset done entries; a manual loop that steps a done
    ``NEXT_STEP`` env without resetting it gets gymnasium's dummy step (reward 0).

    Args:
        env: the gymnasium env (or vector env) to wrap.
        categorical_action_encoding: Discrete spaces as integers rather than one-hot.
        from_pixels: add the rendered frame as ``"pixels"`` (uint8 ``[H, W, 3]``); the
            env must have ``render_mode="rgb_array"``. Single envs only.
        pixels_only: with ``from_pixels``, keep only ``"pixels"``.
        frame_skip: repeat each action this many times (rewards summed). Single envs.
        device: device of the output tensors.
        batch_size: must be ``[]`` for an ``Env`` or ``[num_envs]`` for a ``VectorEnv``.
        run_type_checks: debug mode, check every action against ``action_spec``.

    Examples:
        >>> import gymnasium as gym
        >>> from rl.envs import GymWrapper
        >>> env = GymWrapper(gym.make("Pendulum-v1"))
        >>> td = env.rand_step()
        >>> td["next", "observation"].shape
        torch.Size([3])
    """

    _step_reads_observations = False  # steps from the action alone

    def __init__(
        self,
        env: gym.Env | VectorEnv | None = None,
        categorical_action_encoding: bool = False,
        *,
        from_pixels: bool = False,
        pixels_only: bool = True,
        frame_skip: int | None = None,
        device=None,
        batch_size=None,
        run_type_checks: bool = False,
        _wrappers_applied: bool = False,
    ) -> None:
        if env is None:
            raise TypeError("GymWrapper needs the gymnasium env to wrap: GymWrapper(env), got None")
        frame_skip = _check_frame_skip(frame_skip)
        self.is_vector = isinstance(env, VectorEnv)
        expected = (env.num_envs,) if self.is_vector else ()
        if batch_size is not None and tuple(torch.Size(batch_size)) != expected:
            raise ValueError(
                f"batch_size must be {list(expected)} for this gym env "
                f"({'num_envs' if self.is_vector else 'a single env'}), got {list(batch_size)}"
            )
        if self.is_vector and (from_pixels or frame_skip > 1) and not _wrappers_applied:
            raise ValueError(
                "from_pixels and frame_skip apply to single gym envs; use "
                "GymEnv(name, num_envs=N, from_pixels=..., frame_skip=...) for vector envs"
            )
        if (
            from_pixels
            and not _wrappers_applied
            and getattr(env, "render_mode", None) != "rgb_array"
        ):
            raise ValueError(
                "from_pixels=True needs a gym env made with render_mode='rgb_array', got "
                f"render_mode={getattr(env, 'render_mode', None)!r}"
            )
        if not self.is_vector and not _wrappers_applied:
            for wrap in _pixel_wrappers(frame_skip, from_pixels, pixels_only):
                env = wrap(env)
        super().__init__(device=device, batch_size=expected, run_type_checks=run_type_checks)
        self._env = env
        self.from_pixels = from_pixels
        self.pixels_only = pixels_only
        self.frame_skip = frame_skip
        self.categorical_action_encoding = categorical_action_encoding
        self._pending_seed: int | None = None
        self._build_specs()
        if self.is_vector:
            mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
            self.autoreset_mode = AutoresetMode(mode)
            self._autoreset = np.zeros(env.num_envs, dtype=np.bool_)
            self._last_obs = None

    @property
    def env(self) -> gym.Env | VectorEnv:
        """The wrapped gymnasium env."""
        return self._env

    def _build_specs(self) -> None:
        env = self._env
        obs_space = env.single_observation_space if self.is_vector else env.observation_space
        act_space = env.single_action_space if self.is_vector else env.action_space
        self.gym_action_space = act_space
        batch = tuple(self.batch_size)
        cat = self.categorical_action_encoding
        if isinstance(obs_space, gym.spaces.Dict):
            obs_key: tuple = ()
        else:
            obs_key = ("pixels",) if self.from_pixels and self.pixels_only else ("observation",)
        self._obs_leaves: list[SpaceLeaf] = space_leaves(obs_space, batch, cat, obs_key)
        # as TorchRL: the entries of a Dict action space are the action keys themselves
        act_key = () if isinstance(act_space, gym.spaces.Dict) else ("action",)
        self._act_leaves: list[SpaceLeaf] = space_leaves(act_space, batch, cat, act_key)
        bs = self.batch_size
        dev = self.device
        obs = Composite(shape=bs, device=dev)
        for leaf in self._obs_leaves:
            obs[_key(leaf.key)] = leaf.spec.to(dev) if dev is not None else leaf.spec
        self.observation_spec = obs
        act = Composite(shape=bs, device=dev)
        for leaf in self._act_leaves:
            act[_key(leaf.key)] = leaf.spec.to(dev) if dev is not None else leaf.spec
        self.full_action_spec = act
        self.full_done_spec = default_done_spec(bs, dev, truncated=True)  # gym's three flags
        reward_space = _reward_space(env)
        if reward_space is None:
            self._reward_shape: tuple = (1,)
            self._reward_np_dtype = np.dtype(np.float32)
        else:  # as TorchRL: an env's ``reward_space`` (MO-Gymnasium's vector rewards)
            (leaf,) = space_leaves(reward_space, batch, False, ("reward",))
            spec = leaf.spec if leaf.spec.shape[len(batch) :] else leaf.spec.unsqueeze(-1)
            k = self.frame_skip
            if k > 1 and isinstance(spec, Bounded):
                # the sum of 1 to k rewards (fewer at the end of an episode)
                low, high = spec.space.low, spec.space.high
                spec = Bounded(
                    torch.minimum(low, low * k), torch.maximum(high, high * k),
                    shape=spec.shape, dtype=spec.dtype,
                )  # fmt: skip
            self.reward_spec = spec.to(dev) if dev is not None else spec
            self._reward_shape = tuple(spec.shape[len(batch) :])
            self._reward_np_dtype = torch.empty((), dtype=spec.dtype).numpy().dtype
        self._obs_np_dtypes = [
            (_key(leaf.key), torch.empty((), dtype=leaf.spec.dtype).numpy().dtype)
            for leaf in self._obs_leaves
        ]
        self._act_checks = [(_key(leaf.key), leaf.spec.shape, leaf) for leaf in self._act_leaves]
        self._flat_keys = all(len(leaf.key) == 1 for leaf in self._obs_leaves)
        # one array action (a Tuple's items, stacked in one leaf, go to gym as a tuple)
        self._simple_act = (
            len(self._act_leaves) == 1
            and self._act_leaves[0].path == ()
            and not isinstance(act_space, gym.spaces.Tuple)
        )
        self._int_action = (
            not self.is_vector
            and self._simple_act
            and isinstance(self.gym_action_space, gym.spaces.Discrete)
        )

    # ------------------------------------------------------------------ conversions
    def _obs_arrays(self, obs: Any) -> list[np.ndarray]:
        """The observation leaves of a gym observation, in spec layout (numpy)."""
        out = []
        for leaf in self.__dict__["_obs_leaves"]:
            value = walk(obs, leaf.path)
            out.append(np.asarray(value) if leaf.from_gym is None else leaf.from_gym(value))
        return out

    def _obs_entries(self, obs: Any) -> dict:
        """Fresh tensors (copies: gym may reuse its arrays) of the observation leaves."""
        entries = {}
        d = self.__dict__  # plain dict reads: nn.Module attribute reads cost more per step
        device = d["_device"]
        for (key, np_dtype), array in zip(d["_obs_np_dtypes"], self._obs_arrays(obs)):
            tensor = torch.from_numpy(np.array(array, dtype=np_dtype))
            entries[key] = tensor if device is None else tensor.to(device)
        return entries

    def actions_to_gym(self, values: list[np.ndarray]) -> Any:
        """Gym action(s) from the action leaves as numpy arrays (leading dims allowed)."""
        d = self.__dict__
        if d["_simple_act"]:
            return d["_act_leaves"][0].to_gym(values[0])
        converted = {leaf.path: leaf.to_gym(v) for leaf, v in zip(self._act_leaves, values)}
        return assemble(self.gym_action_space, converted)

    def _action_from_td(self, tensordict: TensorDictBase) -> Any:
        values = []
        d = self.__dict__
        for key, shape, leaf in d["_act_checks"]:
            value = tensordict[key]
            if value.shape != shape:
                raise ValueError(
                    f"action {key!r} has shape {tuple(value.shape)}, expected "
                    f"{tuple(shape)} from action_spec {leaf.spec!r}"
                )
            values.append(value.detach().cpu().numpy())
        action = self.actions_to_gym(values)
        return int(action) if d["_int_action"] else action

    def _make_td(self, entries: dict) -> TensorDictBase:
        d = self.__dict__
        if d["_flat_keys"]:
            return TensorDict._new_unsafe(entries, batch_size=d["_batch_size"], device=d["_device"])
        td = TensorDict({}, batch_size=d["_batch_size"], device=d["_device"])
        for key, value in entries.items():
            td.set(key, value)
        return td

    def _flags(self, terminated, truncated) -> dict:
        """``done`` / ``terminated`` / ``truncated`` of shape ``[*B, 1]``, one allocation."""
        d = self.__dict__
        device = d["_device"]
        flags = np.empty((3, *d["_batch_size"], 1), dtype=np.bool_)
        flags[1, ..., 0] = terminated
        flags[2, ..., 0] = truncated
        np.logical_or(flags[1], flags[2], out=flags[0])
        done, term, trunc = torch.from_numpy(flags).unbind(0)
        if device is not None:
            done, term, trunc = done.to(device), term.to(device), trunc.to(device)
        return {"done": done, "terminated": term, "truncated": trunc}

    # -------------------------------------------------------------------------- hooks
    def _set_seed(self, seed: int | None) -> None:
        # As TorchRL's GymWrapper: seeding resets the gym env with ``reset(seed=seed)``
        # at once, so the first ``reset()`` after ``set_seed(s)`` returns gymnasium's
        # second observation of seed ``s`` (the same for the same seed).
        obs, _ = self._env.reset(seed=seed)
        if seed is not None:
            self._env.action_space.seed(seed)
        self._pending_seed = None
        if self.is_vector:
            self.__dict__["_last_obs"] = obs
            self._autoreset[:] = False

    def _take_seed(self) -> int | None:
        seed, self._pending_seed = self._pending_seed, None
        return seed

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        info = None
        if not self.is_vector:
            obs, info = self._env.reset(seed=self._take_seed())
        elif mask is None or self._last_obs is None:
            # a vector env must be reset whole once before it takes a reset mask
            obs, info = self._env.reset(seed=self._take_seed())
            self._autoreset[:] = False
        else:
            mask_np = mask.reshape(-1).cpu().numpy().astype(np.bool_)
            need = mask_np & ~self._autoreset
            if need.any():
                fresh, info = self._env.reset(options={"reset_mask": need})
                # only the reset rows: the fast path may step sub-envs behind the vector
                # env's back, so its other rows can be stale
                self.__dict__["_last_obs"] = _merge_rows(self._last_obs, fresh, need)
            self._autoreset[mask_np] = False
            obs = self._last_obs
        if self.is_vector:
            self.__dict__["_last_obs"] = obs  # plain dict write: not nn.Module.__setattr__
        entries = self._obs_entries(obs)
        entries.update(self._flags(False, False))
        td = self._make_td(entries)
        if self.__dict__.get("_info_dict_reader"):
            td = self._read_info({} if info is None else info, td)
            self._zero_missing_observations(td)
        return td

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        # plain dict reads / writes: nn.Module attribute access costs more at every step
        d = self.__dict__
        action = self._action_from_td(tensordict)
        try:
            obs, reward, terminated, truncated, info = d["_env"].step(action)
        except SIMULATOR_ERRORS as err:
            raise_if_rejected(self, action, err)
            raise
        entries = self._obs_entries(obs)
        if d["is_vector"]:
            d["_last_obs"] = obs
            done = np.logical_or(terminated, truncated)
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                d["_autoreset"] = done.copy()
                if done.any():
                    self._patch_final_obs(entries, info)
        reward = torch.from_numpy(
            np.array(reward, dtype=d["_reward_np_dtype"]).reshape(
                (*d["_batch_size"], *d["_reward_shape"])
            )
        )
        device = d["_device"]
        entries["reward"] = reward if device is None else reward.to(device)
        entries.update(self._flags(terminated, truncated))
        td = self._make_td(entries)
        if d.get("_info_dict_reader"):
            td = self._read_info(info, td)
        return td

    def _output_transform(self, step_outputs_tuple: tuple) -> tuple:
        """gymnasium's ``(obs, reward, terminated, truncated, info)`` as
        ``(obs, reward, terminated, truncated, done, info)``."""
        obs, reward, terminated, truncated, info = step_outputs_tuple
        return obs, reward, terminated, truncated, np.logical_or(terminated, truncated), info

    def _reset_output_transform(self, reset_outputs_tuple: tuple) -> tuple:
        """gymnasium's ``(obs, info)``."""
        obs, info = reset_outputs_tuple
        return obs, info

    def _patch_final_obs(self, entries: dict, info: dict) -> None:
        """Writes ``infos["final_obs"]`` of auto-reset envs over their reset observation."""
        final = info["final_obs"]
        for i in np.flatnonzero(info["_final_obs"]):
            for leaf, array in zip(self._obs_leaves, self._obs_arrays(final[i])):
                entries[_key(leaf.key)][i] = torch.as_tensor(array)

    def rollout_kernel(self) -> RolloutKernel:
        """The gym kernels (:mod:`rl.envs._gym_kernel`: gymnasium stepped directly, outputs
        written into the rollout's buffers) for a CPU env whose ``_step`` / ``_reset`` are
        this class's; else the env's own ``_step`` / ``reset``."""
        cls = type(self)
        on_cpu = self.device is None or self.device.type == "cpu"
        own = cls._step is GymWrapper._step and cls._reset is GymWrapper._reset
        if on_cpu and own and not self.info_dict_reader:
            return gym_kernel(self)
        return super().rollout_kernel()

    def env_state(self) -> dict[str, Any]:
        """The gymnasium env's state (its wrappers' counters, physics and ``np_random``,
        every sub-env of a ``SyncVectorEnv``) as tensors and plain data.

        Raises:
            TypeError: the env is an ``AsyncVectorEnv``, whose sub-envs live in
                gymnasium's worker processes (use a ``SyncVectorEnv`` or a
                :class:`~rl.envs.ParallelEnv` for a checkpoint that resumes exactly).
        """
        if self.is_vector and not isinstance(self._env, gym.vector.SyncVectorEnv):
            raise TypeError(
                f"cannot save the state of {self!r}: its {type(self._env).__name__} keeps "
                "the sub-envs in gymnasium's worker processes; build it with "
                "vectorization_mode='sync' or use rl.envs.ParallelEnv to checkpoint it"
            )
        return super().env_state()

    def render(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped env's ``render()`` (a ``[H, W, 3]`` uint8 array with
        ``render_mode="rgb_array"``), as TorchRL's wrappers forward it; what
        :class:`~rl.envs.PixelRenderTransform` calls."""
        return self._env.render(*args, **kwargs)

    def close(self, *, raise_if_closed: bool = True) -> None:
        if not self.is_closed:
            self._env.close()
        super().close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self._env}, batch_size={self.batch_size}, device={self.device})"


def _reward_space(env: Any) -> Any:
    """The ``reward_space`` an env, one of its wrappers or its unwrapped env declares (for a
    vector env: the vector env's own, the space of one sub-env's reward), else ``None``."""
    space = env.__dict__.get("reward_space")
    get_wrapper_attr = getattr(env, "get_wrapper_attr", None)  # vector envs lack it
    if space is None and get_wrapper_attr is not None:
        try:
            space = get_wrapper_attr("reward_space")
        except AttributeError:
            space = None
    if space is None and getattr(env, "unwrapped", env) is not env:
        space = env.unwrapped.__dict__.get("reward_space")
    return space


def _merge_rows(current: Any, fresh: Any, mask: np.ndarray) -> Any:
    """``current`` with the rows of ``fresh`` selected by ``mask`` (nested dicts/tuples)."""
    if isinstance(current, dict):
        return {k: _merge_rows(current[k], fresh[k], mask) for k in current}
    if isinstance(current, tuple):
        return tuple(_merge_rows(c, f, mask) for c, f in zip(current, fresh))
    out = np.array(current, copy=True)
    out[mask] = fresh[mask]
    return out


def _make_gym(env_name: str, **kwargs) -> Any:
    if env_name.startswith("ALE/"):
        if not _has_ale:
            raise ImportError(f'{env_name} needs ale-py: pip install "rl-envs[atari]"')
        import ale_py

        gym.register_envs(ale_py)
    try:
        return kwargs.pop("_factory")(env_name, **kwargs)
    except gym.error.DependencyNotInstalled as err:
        raise ImportError(
            f"{env_name} needs an optional dependency ({err}); for MuJoCo envs: "
            'pip install "rl-envs[mujoco]", for Atari: pip install "rl-envs[atari]"'
        ) from err


class _GymEnvMeta(_EnvMeta):
    """``GymEnv(..., num_workers=N)`` with ``N > 1`` is a :class:`~rl.envs.ParallelEnv`
    of ``N`` workers, each building ``GymEnv(...)`` with the other arguments (TorchRL's
    ``num_workers``)."""

    def __call__(cls, *args, **kwargs):
        num_workers = kwargs.pop("num_workers", 1)
        if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1:
            raise ValueError(f"num_workers must be a positive int, got {num_workers!r}")
        if num_workers > 1:
            from ._batched import ParallelEnv

            return ParallelEnv(num_workers, functools.partial(cls, *args, **kwargs))
        return super().__call__(*args, **kwargs)


class GymEnv(GymWrapper, metaclass=_GymEnvMeta):
    """A gymnasium environment made by name: ``GymEnv("CartPole-v1")``.

    Args:
        env_name: a registered gymnasium id (``"Pendulum-v1"``, ``"HalfCheetah-v5"`` with
            ``rl-envs[mujoco]``, ``"ALE/Pong-v5"`` with ``rl-envs[atari]``).
        num_envs: ``0`` (the default; ``None`` too) builds one gymnasium env
            (``batch_size=[]``); ``1`` or more builds a gymnasium vector env
            (``batch_size=[num_envs]``, so ``num_envs=1`` gives ``[1]``, as TorchRL) in
            ``SAME_STEP`` autoreset mode.
        num_workers: more than 1 returns a :class:`~rl.envs.ParallelEnv` of
            ``num_workers`` processes, each running ``GymEnv`` with the other arguments
            (``num_workers * num_envs`` envs in all when both are above 1). Defaults to 1.
        vectorization_mode: ``"sync"`` (``SyncVectorEnv``) or ``"async"``
            (``AsyncVectorEnv``, one process per env).
        categorical_action_encoding, from_pixels, pixels_only, frame_skip, device,
        batch_size, run_type_checks: as in :class:`GymWrapper` (here ``from_pixels`` and
            ``frame_skip`` also work with vector envs).
        **kwargs: passed to ``gymnasium.make`` / ``gymnasium.make_vec``.

    Examples:
        >>> from rl.envs import GymEnv
        >>> env = GymEnv("CartPole-v1")
        >>> _ = env.set_seed(0)
        >>> rollout = env.rollout(1000, break_when_any_done=False)
        >>> rollout.batch_size
        torch.Size([1000])
        >>> env = GymEnv("CartPole-v1", num_envs=4)
        >>> env.rollout(10)["next", "observation"].shape[:2]
        torch.Size([4, 10])
        >>> GymEnv("CartPole-v1", num_envs=1).batch_size
        torch.Size([1])
    """

    def __init__(
        self,
        env_name: str,
        *,
        num_envs: int | None = 0,
        vectorization_mode: Literal["sync", "async"] = "sync",
        categorical_action_encoding: bool = False,
        from_pixels: bool = False,
        pixels_only: bool = True,
        frame_skip: int | None = None,
        device=None,
        batch_size=None,
        run_type_checks: bool = False,
        **kwargs,
    ) -> None:
        if num_envs is None:
            num_envs = 0
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 0:
            raise ValueError(
                f"num_envs must be 0 (one env) or a positive int (a vector env), got {num_envs!r}"
            )
        if vectorization_mode not in ("sync", "async"):
            raise ValueError(
                f"vectorization_mode must be 'sync' or 'async', got {vectorization_mode!r}"
            )
        skip = _check_frame_skip(frame_skip)
        if from_pixels:
            kwargs.setdefault("render_mode", "rgb_array")
        self.env_name = env_name
        self.num_envs = num_envs
        env = self._make_env(
            env_name, num_envs, vectorization_mode, _pixel_wrappers(skip, from_pixels, pixels_only),
            **kwargs,
        )  # fmt: skip
        super().__init__(
            env,
            categorical_action_encoding=categorical_action_encoding,
            from_pixels=from_pixels,
            pixels_only=pixels_only,
            frame_skip=skip,
            device=device,
            batch_size=batch_size,
            run_type_checks=run_type_checks,
            # vector envs got the pixel / frame-skip wrappers from make_vec
            _wrappers_applied=num_envs > 0,
        )

    def _make_env(
        self,
        env_name: str,
        num_envs: int,
        vectorization_mode: str,
        wrappers: list,
        **kwargs,
    ) -> gym.Env | VectorEnv:
        """The gymnasium env (``num_envs == 0``) or vector env; ``wrappers`` (pixels, frame
        skip) are for the sub-envs of a vector env, a single env gets them from
        :class:`GymWrapper`."""
        if num_envs == 0:
            return _make_gym(env_name, _factory=gym.make, **kwargs)
        return _make_gym(
            env_name,
            _factory=gym.make_vec,
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP, "copy": False},
            wrappers=wrappers,
            **kwargs,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self.env_name}, batch_size={self.batch_size}, device={self.device})"
