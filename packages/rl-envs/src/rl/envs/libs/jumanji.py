"""``JumanjiWrapper`` and ``JumanjiEnv``: InstaDeep's Jumanji (JAX) environments as
:class:`~rl.envs.EnvBase` environments.

Jumanji (https://github.com/instadeepai/jumanji, paper: https://arxiv.org/abs/2306.09884)
is imported on first use; ``pip install "rl-envs[jumanji]"`` installs it (with JAX).
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    TensorSpec,
    Unbounded,
)
from rl.envs._env_base import EnvBase

from ._common import ClassProperty, ForwardsEnvAttributes
from ._jax import (
    JaxKey,
    JaxStateMixin,
    build_functions,
    check_batch_size,
    compiled_functions,
    import_jax,
    to_jax,
    to_torch,
    torch_dtype,
)

__all__ = ["JumanjiEnv", "JumanjiWrapper"]

_has_jumanji = importlib.util.find_spec("jumanji") is not None
_INSTALL = 'pip install "rl-envs[jumanji]"'


def _import_jumanji():
    if not _has_jumanji:
        raise ImportError(f"Jumanji is not installed: {_INSTALL}")
    import jumanji

    return jumanji


def _sub_specs(spec) -> dict[str, Any]:
    """The named parts of a Jumanji composite ``Spec`` (its observation fields)."""
    jumanji = _import_jumanji()
    return {
        name: value
        for name, value in vars(spec).items()
        if not name.startswith("_") and isinstance(value, jumanji.specs.Spec)
    }


def _to_spec(spec, device, categorical: bool) -> TensorSpec:
    """The rl spec of a Jumanji spec (unbatched)."""
    specs = _import_jumanji().specs
    shape = tuple(getattr(spec, "shape", ()))
    if isinstance(spec, specs.DiscreteArray):
        dtype = torch_dtype(spec.dtype)
        if categorical:
            return Categorical(int(spec.num_values), shape=shape, dtype=dtype, device=device)
        return OneHot(int(spec.num_values), shape=(*shape, int(spec.num_values)), device=device)
    if isinstance(spec, specs.MultiDiscreteArray):
        nvec = np.asarray(spec.num_values).reshape(-1)
        if categorical:
            return MultiCategorical(
                torch.as_tensor(nvec), shape=shape, dtype=torch_dtype(spec.dtype), device=device
            )
        return MultiOneHot([int(n) for n in nvec], device=device)
    if isinstance(spec, specs.BoundedArray):
        dtype = torch_dtype(spec.dtype)
        if dtype is torch.bool:
            return Binary(n=shape[-1] if shape else 1, shape=shape, dtype=dtype, device=device)
        low = torch.as_tensor(np.array(spec.minimum)).to(dtype).expand(shape)
        high = torch.as_tensor(np.array(spec.maximum)).to(dtype).expand(shape)
        return Bounded(low=low, high=high, shape=shape, dtype=dtype, device=device)
    if isinstance(spec, specs.Array):
        return Unbounded(shape=shape, dtype=torch_dtype(spec.dtype), device=device)
    parts = _sub_specs(spec)
    if not parts:
        raise TypeError(f"Jumanji spec {spec!r} of type {type(spec).__name__} is not supported")
    return Composite(
        {name: _to_spec(part, device, categorical) for name, part in parts.items()},
        device=device,
    )


def _spec_leaves(spec, prefix=()) -> list[tuple[str, ...]]:
    """The paths of the arrays of a Jumanji spec (``()`` for a single array)."""
    parts = _sub_specs(spec) if not isinstance(spec, _import_jumanji().specs.Array) else {}
    if not parts:
        return [prefix]
    return [path for name, part in parts.items() for path in _spec_leaves(part, (*prefix, name))]


def _reset_one(env, key):
    return env.reset(key)  # (state, timestep)


def _step_one(env, state, action):
    return env.step(state, action)  # (state, timestep)


def _outputs(paths, last_type, timestep):
    """What crosses to torch: the observation arrays, the reward and the two flags."""
    import jax.numpy as jnp

    obs = {}
    for key, path in paths:
        value = timestep.observation
        for name in path:
            value = getattr(value, name)
        # an array of its own: the state may hold the same buffer
        obs[key] = jnp.array(value, copy=True)
    last = timestep.step_type == last_type
    ended = timestep.discount == 0
    return obs, timestep.reward, last & ended, last & ~ended


class JumanjiWrapper(JaxStateMixin, ForwardsEnvAttributes, EnvBase):
    """Wraps a Jumanji ``Environment`` (``jumanji.make(name)``) as an env.

    ``batch_size=[*B]`` runs ``prod(B)`` copies of the environment in one ``jax.vmap``
    of Jumanji's ``reset`` / ``step`` (one compiled function each, with ``jit=True``).
    The JAX state of every copy and the PRNG key live in the wrapper; only the
    observations, the reward and the done flags cross to torch (through DLPack, without a
    copy on CPU).

    Specs come from Jumanji's: each field of the observation is an entry of its own
    (``"board"``, ``"action_mask"``; a single-array observation is ``"observation"``),
    ``DiscreteArray`` actions are ``Categorical`` (``OneHot`` with
    ``categorical_action_encoding=False``), ``MultiDiscreteArray`` ones
    ``MultiCategorical`` (``MultiOneHot``), bounded arrays ``Bounded`` (``Binary`` for
    booleans), the reward ``[*B, 1]`` (``[*B, n]`` for a vector reward). An episode ends
    with a ``LAST`` time step: ``terminated`` when its discount is 0, ``truncated`` (a
    time limit) otherwise; ``done = terminated | truncated``.

    Attributes the wrapper lacks are read from the Jumanji env (``env.num_rows``).

    Seeding: :meth:`set_seed` sets the key (``jax.random.PRNGKey(seed)``); each reset
    splits it into the next key and one key per copy, as TorchRL does, so a seed gives
    the same episodes as stepping Jumanji directly with those keys. An env never seeded
    draws its seed from torch's global generator.

    Args:
        env: the Jumanji environment.
        categorical_action_encoding: discrete actions as integers (``Categorical``,
            the default) rather than one-hot (``OneHot``).
        jit: compile ``reset`` and ``step`` with ``jax.jit`` (the default). Settable:
            ``env.jit = False`` runs them eagerly.

    Keyword Args:
        batch_size: the number of copies, as a shape (``[]``: one env).
        device: where the tensors are written (``None``: CPU).
        from_pixels: not supported (``NotImplementedError``).
        frame_skip: not supported beyond 1; append a ``FrameSkipTransform``.
        allow_done_after_reset: as in :class:`~rl.envs.EnvBase`.
        run_type_checks: as in :class:`~rl.envs.EnvBase`.

    Raises:
        TypeError: ``env`` is not a Jumanji ``Environment``.
        ValueError: ``batch_size`` is not a shape of positive ints.

    Examples:
        >>> import jumanji
        >>> from rl.envs import JumanjiWrapper
        >>> env = JumanjiWrapper(jumanji.make("Game2048-v1", board_size=3), batch_size=[2])
        >>> env.observation_spec["board"].shape
        torch.Size([2, 3, 3])
        >>> env.action_spec
        Categorical(shape=torch.Size([2]), n=4, device=cpu, dtype=torch.int32)
        >>> _ = env.set_seed(0)
        >>> # env.rollout(3): the first reset and step compile (seconds on CPU), then
        >>> # rollout["next", "board"] has shape [2, 3, 3, 3]
    """

    _step_reads_observations = False  # steps from the action and the held JAX state

    git_url = "https://github.com/instadeepai/jumanji"
    libname = "jumanji"

    def __init__(
        self,
        env: Any = None,
        categorical_action_encoding: bool = True,
        jit: bool = True,
        *,
        batch_size=None,
        device=None,
        from_pixels: bool = False,
        pixels_only: bool = False,
        frame_skip: int | None = None,
        allow_done_after_reset: bool = False,
        run_type_checks: bool = False,
    ) -> None:
        jumanji = _import_jumanji()
        if not isinstance(env, jumanji.env.Environment):
            raise TypeError(
                f"env must be a Jumanji Environment (jumanji.make(name)), got {type(env).__name__}"
            )
        if from_pixels or pixels_only:
            raise NotImplementedError(
                "JumanjiWrapper does not render pixels (from_pixels): build it with "
                "from_pixels=False and render a state with the Jumanji env's render()"
            )
        if frame_skip not in (None, 1):
            raise NotImplementedError(
                f"JumanjiWrapper takes frame_skip=1 only, got {frame_skip!r}: append a "
                "FrameSkipTransform to repeat actions"
            )
        super().__init__(
            device=device,
            batch_size=check_batch_size(batch_size),
            allow_done_after_reset=allow_done_after_reset,
            run_type_checks=run_type_checks,
        )
        self._env = env
        self.categorical_action_encoding = categorical_action_encoding
        self.from_pixels = False
        self.pixels_only = False
        self._prng = JaxKey("jumanji")
        self._state = None  # the JAX state of the prod(batch_size) copies
        self._make_specs(env)
        self.jit = jit

    # ------------------------------------------------------------------------ attributes
    @property
    def lib(self):
        """The ``jumanji`` module."""
        return _import_jumanji()

    @ClassProperty
    def available_envs(cls) -> list[str]:
        """The registered Jumanji environments (``[]`` when Jumanji is not installed)."""
        if not _has_jumanji:
            return []
        import jumanji

        return sorted(jumanji.registered_environments())

    @property
    def jit(self) -> bool:
        """Whether ``reset`` and ``step`` run compiled (``jax.jit``); settable."""
        return self._jit

    @jit.setter
    def jit(self, value: bool) -> None:
        import_jax("jumanji")
        self._jit = bool(value)
        paths = tuple(self._obs_paths.items())
        self._fns = compiled_functions(
            self._env,
            ("jumanji", self.numel(), paths, self._jit),
            lambda env_ref: build_functions(
                env_ref,
                self.numel(),
                _reset_one,
                _step_one,
                functools.partial(_outputs, paths, self.lib.types.StepType.LAST),
                jit=self._jit,
            ),
        )

    # --------------------------------------------------------------------------- specs
    def _make_specs(self, env) -> None:
        jumanji = self.lib
        device, bs = self.device, self.batch_size
        self._action_jax = env.action_spec
        self.action_spec = self._expand(
            _to_spec(env.action_spec, device, self.categorical_action_encoding)
        )
        obs_spec = env.observation_spec
        if isinstance(obs_spec, jumanji.specs.Array):
            self._obs_paths = {("observation",): ()}
            observation = Composite(observation=_to_spec(obs_spec, device, True), device=device)
        else:
            self._obs_paths = {path: path for path in _spec_leaves(obs_spec)}
            observation = _to_spec(obs_spec, device, True)
        self.observation_spec = self._expand(observation)
        reward_shape = tuple(env.reward_spec.shape) or (1,)
        self._reward_shape = reward_shape
        self.reward_spec = Unbounded(
            shape=(*bs, *reward_shape), dtype=torch_dtype(env.reward_spec.dtype), device=device
        )
        flag = Categorical(2, shape=(*bs, 1), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(
            done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=bs, device=device
        )

    def _expand(self, spec: TensorSpec) -> TensorSpec:
        bs = self.batch_size
        if isinstance(spec, Composite):
            return spec.expand(bs) if bs else spec
        return spec.expand(*bs, *spec.shape)

    # ------------------------------------------------------------------------ torch side
    def _read_action(self, action: torch.Tensor):
        """The action as the JAX array Jumanji's vmapped ``step`` takes (``[N, *shape]``)."""
        spec = self.action_spec
        if isinstance(spec, OneHot):
            action = action.long().argmax(-1)
        elif isinstance(spec, MultiOneHot):
            action = spec.to_categorical(action)
        shape = tuple(self._action_jax.shape)
        return to_jax(action.reshape(self.numel(), *shape), self._action_jax.dtype)

    def _write(self, outputs, reset: bool = False) -> TensorDict:
        obs, reward, terminated, truncated = outputs
        bs, device = self.batch_size, self.device
        out = {}
        for key, value in obs.items():
            tensor = to_torch(value, device)
            out[key] = tensor.reshape((*bs, *tensor.shape[1:]))
        if reset:  # the episode runs: no reward, no flag set, whatever Jumanji says
            terminated = torch.zeros((*bs, 1), dtype=torch.bool, device=device)
            truncated = terminated.clone()
        else:
            out["reward"] = to_torch(reward, device).reshape(*bs, *self._reward_shape)
            terminated = to_torch(terminated, device).reshape(*bs, 1)
            truncated = to_torch(truncated, device).reshape(*bs, 1)
        out["terminated"] = terminated
        out["truncated"] = truncated
        out["done"] = terminated | truncated
        return TensorDict(out, batch_size=bs, device=device)

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None or self._state is None or bool(mask.all()):
            key, self._state, outputs = self._fns.reset(self._prng.current())
        else:
            jmask = to_jax(mask.reshape(self.numel()), np.bool_)
            key, self._state, outputs = self._fns.reset_some(
                self._prng.current(), self._state, jmask
            )
        self._prng.set(key)
        return self._write(outputs, reset=True)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._state is None:
            raise RuntimeError(f"{type(self).__name__}.step() called before reset()")
        action = self._read_action(tensordict.get("action"))
        self._state, outputs = self._fns.step(self._state, action)
        return self._write(outputs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self._env}, batch_size={self.batch_size})"


class JumanjiEnv(JumanjiWrapper):
    """A Jumanji environment built by name: ``JumanjiWrapper(jumanji.make(env_name, **kwargs))``.

    Args:
        env_name: a registered Jumanji environment (see :attr:`available_envs`).
        categorical_action_encoding: as in :class:`JumanjiWrapper`.
        jit: as in :class:`JumanjiWrapper`.

    Keyword Args:
        batch_size, device, from_pixels, frame_skip, allow_done_after_reset,
        run_type_checks: as in :class:`JumanjiWrapper`.
        **kwargs: passed to ``jumanji.make`` (the environment's own arguments, e.g.
            ``num_rows`` of ``"Snake-v1"``); TorchRL refuses them.

    Raises:
        ValueError: ``env_name`` is not a registered Jumanji environment (the message
            lists the close names).

    Examples:
        >>> from rl.envs import JumanjiEnv
        >>> env = JumanjiEnv("Snake-v1", num_rows=5, num_cols=5, batch_size=[8])
        >>> sorted(env.observation_spec.keys())
        ['action_mask', 'grid', 'step_count']
        >>> env.observation_spec["grid"].shape
        torch.Size([8, 5, 5, 5])
    """

    def __init__(
        self,
        env_name: str,
        categorical_action_encoding: bool = True,
        jit: bool = True,
        *,
        batch_size=None,
        device=None,
        from_pixels: bool = False,
        pixels_only: bool = False,
        frame_skip: int | None = None,
        allow_done_after_reset: bool = False,
        run_type_checks: bool = False,
        **kwargs,
    ) -> None:
        jumanji = _import_jumanji()
        available = self.available_envs
        if env_name not in available:
            close = difflib.get_close_matches(str(env_name), available, n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ValueError(f"env_name {env_name!r} is not a registered Jumanji env{hint}")
        self.env_name = env_name
        super().__init__(
            jumanji.make(env_name, **kwargs),
            categorical_action_encoding,
            jit,
            batch_size=batch_size,
            device=device,
            from_pixels=from_pixels,
            pixels_only=pixels_only,
            frame_skip=frame_skip,
            allow_done_after_reset=allow_done_after_reset,
            run_type_checks=run_type_checks,
        )

    def __repr__(self) -> str:
        return f"JumanjiEnv(env={self.env_name}, batch_size={self.batch_size})"
