"""``GymLikeEnv``: the base of envs around a simulator with gym's ``reset`` / ``step``,
and the info-dict readers that copy entries of gym's ``info`` into the output.

A gym-like simulator returns ``(obs, info)`` from ``reset()`` and a tuple from
``step(action)``; a subclass says how to read those tuples (``_output_transform``,
``_reset_output_transform``), the base class turns them into tensordicts shaped by the
specs, and each registered reader (``set_info_dict_reader``) copies entries of ``info``
into the output, its entries joining ``observation_spec``. :class:`~rl.envs.GymWrapper`
is a ``GymLikeEnv`` whose own (faster) ``_step`` / ``_reset`` run the same readers.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase

from rl.core import Composite, NonTensor, TensorSpec, Unbounded

from ._env_base import EnvBase

__all__ = ["BaseInfoDictReader", "GymLikeEnv", "default_info_dict_reader"]

logger = logging.getLogger(__name__)


class BaseInfoDictReader(metaclass=abc.ABCMeta):
    """Base class of info readers: ``reader(info, tensordict)`` writes entries of gym's
    ``info`` dict into ``tensordict``; ``info_spec`` (a ``Composite``) describes them."""

    @abc.abstractmethod
    def __call__(self, info_dict: dict[str, Any], tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the entries read from ``info_dict`` into ``tensordict`` and returns it."""

    @property
    @abc.abstractmethod
    def info_spec(self) -> Composite | None:
        """The specs of the entries written (``None`` while unknown)."""


class default_info_dict_reader(BaseInfoDictReader):  # noqa: N801  (TorchRL's name)
    """Copies entries of gym's ``info`` dict into the env's output, by key.

    Args:
        keys: the info keys to read (default: every key of the first info dict read,
            except those starting with ``"_"`` when ``ignore_private``).
        spec: their specs: a ``Composite``, a dict ``{key: spec}`` or a list matching
            ``keys``. By default each is an ``Unbounded`` of shape ``()`` (with ``keys``)
            or is read from the first values (without).
        ignore_private: leave out the keys that start with ``"_"`` (gymnasium's vector
            envs put a mask ``"_key"`` next to each ``"key"``).

    Values are converted to their spec's dtype; a key the info dict lacks (gym's reset
    info is often empty) gets the spec's zero.

    Raises:
        ValueError: a list of specs whose length differs from ``keys``.
        KeyError: a key the info dict lacks while its spec is unknown.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Unbounded
        >>> reader = default_info_dict_reader(["x"], spec=[Unbounded((), dtype=torch.float64)])
        >>> td = reader({"x": 1.5, "y": 2}, TensorDict())
        >>> td["x"], "y" in td.keys()
        (tensor(1.5000, dtype=torch.float64), False)
        >>> reader({}, TensorDict())["x"]  # a missing key reads as zero
        tensor(0., dtype=torch.float64)
    """

    def __init__(
        self,
        keys: list[str] | None = None,
        spec: Sequence[TensorSpec] | dict[str, TensorSpec] | Composite | None = None,
        ignore_private: bool = True,
    ) -> None:
        self.ignore_private = ignore_private
        self.keys = None if keys is None else list(keys)
        if spec is None:
            info_spec = (
                None
                if keys is None
                else Composite({key: Unbounded(()) for key in self.keys}, shape=())
            )
        elif isinstance(spec, Composite):
            info_spec = spec.clone()
        elif isinstance(spec, Mapping):
            info_spec = Composite(dict(spec), shape=())
        else:
            spec = list(spec)
            if self.keys is None or len(spec) != len(self.keys):
                raise ValueError(
                    f"a list of specs must match the keys one to one, got {len(spec)} specs "
                    f"for keys={self.keys}"
                )
            info_spec = Composite(dict(zip(self.keys, spec, strict=True)), shape=())
        if info_spec is not None and self.keys is None:
            self.keys = list(info_spec.keys())
        self._info_spec = info_spec

    def __call__(self, info_dict: dict[str, Any], tensordict: TensorDictBase) -> TensorDictBase:
        keys = self.keys
        if keys is None:
            keys = [k for k in info_dict if not (self.ignore_private and str(k).startswith("_"))]
            self.keys = keys
        spec = self._info_spec
        inferred = Composite(shape=()) if spec is None else None
        nb = tensordict.batch_dims
        for key in keys:
            if key in info_dict:
                value = info_dict[key]
                if isinstance(value, np.ndarray) and value.dtype == np.dtype("O"):
                    value = np.stack(value)
                if spec is not None and key in spec.keys():
                    leaf = spec[key]
                    if isinstance(leaf, NonTensor):
                        tensordict.set_non_tensor(key, value)
                        continue
                    value = torch.as_tensor(np.asarray(value), dtype=leaf.dtype)
                else:
                    value = torch.as_tensor(np.asarray(value))
                tensordict.set(key, value.to(tensordict.device) if tensordict.device else value)
                if inferred is not None:
                    inferred[key] = Unbounded(
                        value.shape[nb:], dtype=value.dtype, device=tensordict.device
                    )
            elif spec is not None and key in spec.keys():
                leaf = spec[key]
                zero = leaf.zero(tensordict.batch_size)
                tensordict.set(key, zero.to(tensordict.device) if tensordict.device else zero)
            else:
                raise KeyError(
                    f"info key {key!r} is not in the info dict (keys {sorted(info_dict)}) and "
                    "has no spec to fill it with; pass its spec to default_info_dict_reader"
                )
        if inferred is not None:
            self._info_spec = inferred
        return tensordict

    def reset(self) -> None:
        """Forgets the keys and specs read so far (they are read again from the next
        info dict)."""
        self.keys = None
        self._info_spec = None

    @property
    def info_spec(self) -> Composite | None:
        """The specs of the entries read (one env's, no batch dims)."""
        return self._info_spec

    def __repr__(self) -> str:
        return f"default_info_dict_reader(keys={self.keys})"


def _flag(value: Any, batch_size: torch.Size) -> torch.Tensor | None:
    """A done flag as a ``[*batch, 1]`` bool tensor (``None`` stays ``None``)."""
    if value is None:
        return None
    return torch.as_tensor(np.asarray(value), dtype=torch.bool).reshape(*batch_size, 1)


class GymLikeEnv(EnvBase):
    """Base class of the envs that wrap a simulator with gym's ``reset`` / ``step`` API.

    A subclass sets ``self._env`` (the simulator) and the specs in its ``__init__``,
    implements ``_set_seed``, and says how to read the simulator's outputs:

    - ``_output_transform(step_outputs)`` returns ``(obs, reward, terminated, truncated,
      done, info)`` from what ``self._env.step(action)`` returned (``None`` for a flag
      the simulator does not give: ``done`` is then ``terminated | truncated``);
    - ``_reset_output_transform(reset_outputs)`` returns ``(obs, info)``.

    The base class converts the action to numpy (:meth:`read_action`), steps the
    simulator ``wrapper_frame_skip`` times (rewards summed, stopping at a done), reads
    the observation (a dict is read key by key with ``observation_spec``, anything else
    goes to the first observation key; a ``"state"`` entry is renamed ``"observation"``),
    the reward and the flags (``[*batch, 1]``), and runs the info readers
    (:meth:`set_info_dict_reader`). :class:`~rl.envs.GymWrapper` is a ``GymLikeEnv``
    with its own faster ``_step`` / ``_reset``.

    Examples:
        >>> import numpy as np
        >>> import torch
        >>> from rl.core import Bounded, Composite, Unbounded
        >>> class Walk:  # a simulator with gym's API
        ...     def reset(self):
        ...         self.x = 0.0
        ...         return np.array([self.x]), {}
        ...     def step(self, action):
        ...         self.x += float(action[0])
        ...         return np.array([self.x]), -abs(self.x), self.x > 2, False, {"dist": abs(self.x)}
        >>> class WalkEnv(GymLikeEnv):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self._env = Walk()
        ...         self.observation_spec = Composite(observation=Unbounded((1,), dtype=torch.float64))
        ...         self.action_spec = Bounded(-1.0, 1.0, shape=(1,))
        ...     def _output_transform(self, out):
        ...         obs, reward, terminated, truncated, info = out
        ...         return obs, reward, terminated, truncated, None, info
        ...     def _reset_output_transform(self, out):
        ...         return out
        ...     def _set_seed(self, seed):
        ...         pass
        >>> env = WalkEnv().set_info_dict_reader(default_info_dict_reader(["dist"]))
        >>> td = env.rollout(3, actions=[torch.ones(1)] * 3)
        >>> td["next", "observation"].squeeze(-1).tolist(), td["next", "dist"].tolist()
        ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
        >>> td["next", "terminated"].squeeze(-1).tolist()
        [False, False, True]
    """

    #: how many times ``_step`` repeats an action (rewards summed)
    wrapper_frame_skip: int = 1
    #: ``_step`` converts the action to numpy before handing it to the simulator
    _convert_actions_to_numpy: bool = True

    # ------------------------------------------------------------------ info readers
    @property
    def info_dict_reader(self) -> list[BaseInfoDictReader]:
        """The registered info readers, in the order they run."""
        return self.__dict__.setdefault("_info_dict_reader", [])

    def set_info_dict_reader(
        self,
        info_dict_reader: BaseInfoDictReader | None = None,
        ignore_private: bool = True,
    ) -> GymLikeEnv:
        """Registers an info reader and adds its entries to ``observation_spec``.

        Args:
            info_dict_reader: a :class:`BaseInfoDictReader` or a callable
                ``reader(info, tensordict)`` writing into ``tensordict`` (its entries
                are then not in the specs). Default: a :class:`default_info_dict_reader`
                of every info key.
            ignore_private: for the default reader, leave out the keys starting with
                ``"_"``.

        A reader whose specs are unknown (a ``default_info_dict_reader`` without keys)
        reads them from a reset and a random step of the env, then the env is reset.

        Returns:
            the env itself.
        """
        if info_dict_reader is None:
            info_dict_reader = default_info_dict_reader(ignore_private=ignore_private)
        self.info_dict_reader.append(info_dict_reader)
        if isinstance(info_dict_reader, BaseInfoDictReader):
            if info_dict_reader.info_spec is None and isinstance(
                info_dict_reader, default_info_dict_reader
            ):
                logger.info(
                    "%s: the info reader has no specs; reading them from a random step "
                    "(pass spec= to skip it)",
                    type(self).__name__,
                )
                # gym's reset info may lack keys: they are read from a step's info
                tensordict = self.reset()
                info_dict_reader.reset()
                self.rand_step(tensordict)
                self.reset()
            self._add_info_specs(info_dict_reader.info_spec)
        return self

    def _add_info_specs(self, info_spec: Composite | None) -> None:
        if info_spec is None:
            return
        spec = self.full_observation_spec.clone()
        batch = tuple(self.batch_size)
        for key, leaf in info_spec.items(True, True):
            if tuple(leaf.shape[: len(batch)]) != batch or isinstance(leaf, NonTensor):
                leaf = leaf.expand(*batch, *leaf.shape)
            spec[key] = leaf.to(self.device) if self.device is not None else leaf
        self.full_observation_spec = spec

    def _read_info(self, info: Any, tensordict: TensorDictBase) -> TensorDictBase:
        """Runs the info readers on ``info`` (a dict), writing into ``tensordict``."""
        if not isinstance(info, Mapping):
            logger.warning(
                "%s: expected the info to be a dict, got %s",
                type(self).__name__,
                type(info).__name__,
            )
            return tensordict
        for reader in self.info_dict_reader:
            out = reader(info, tensordict)
            if out is not None:
                tensordict = out
        return tensordict

    def auto_register_info_dict(
        self,
        ignore_private: bool = True,
        *,
        info_dict_reader: BaseInfoDictReader | None = None,
    ) -> EnvBase:
        """Registers an info reader and makes sure the env passes ``check_env_specs``.

        Info entries that the reset does not produce are filled with zeros by the
        default reader; where the env still fails the check, it is wrapped in a
        ``TransformedEnv`` with a ``TensorDictPrimer`` of the info specs (as TorchRL).

        Args:
            ignore_private: leave out the keys starting with ``"_"``.
            info_dict_reader: the reader (default: every info key).

        Returns:
            the env, or the ``TransformedEnv`` around it.

        Raises:
            RuntimeError: the env already has an info reader.
        """
        from ._utils import check_env_specs
        from .transforms import TensorDictPrimer, TransformedEnv

        if self.info_dict_reader:
            raise RuntimeError(f"{type(self).__name__} already has an info-dict reader")
        self.set_info_dict_reader(info_dict_reader, ignore_private=ignore_private)
        try:
            check_env_specs(self)
            return self
        except (AssertionError, RuntimeError, ValueError, KeyError):
            env = TransformedEnv(self, TensorDictPrimer(self.info_dict_reader[0].info_spec))
            check_env_specs(env)
            return env

    def fast_encoding(self, mode: bool = True) -> None:
        """TorchRL's switch to memoize the encoding of the outputs: the conversions are
        direct here already, so this only records ``mode`` on the specs."""
        self.full_observation_spec.memoize_encode(mode)
        self.full_reward_spec.memoize_encode(mode)

    # -------------------------------------------------------------------- readers
    def read_action(self, action: Any) -> Any:
        """The action as the simulator takes it (numpy; a dict for several action keys)."""
        spec = self.full_action_spec
        keys = self.action_keys
        if len(keys) == 1:
            spec = spec[keys[0]]
        return spec.to_numpy(action, safe=False)

    def read_done(
        self,
        terminated: bool | np.ndarray | None = None,
        truncated: bool | np.ndarray | None = None,
        done: bool | np.ndarray | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor, bool]:
        """``(terminated, truncated, done, stop)`` as ``[*batch, 1]`` bool tensors.

        ``done`` defaults to ``terminated | truncated``; ``stop`` says whether a
        frame-skip loop must stop (any entry done). A flag not given stays ``None``.
        """
        batch = self.batch_size
        terminated, truncated = _flag(terminated, batch), _flag(truncated, batch)
        done = _flag(done, batch)
        if done is None:
            if terminated is None and truncated is None:
                raise ValueError(f"{type(self).__name__}: the step gave no done flag at all")
            parts = [f for f in (terminated, truncated) if f is not None]
            done = parts[0] if len(parts) == 1 else parts[0] | parts[1]
        return terminated, truncated, done, bool(done.any())

    def read_reward(self, reward: Any) -> torch.Tensor:
        """The reward as a tensor of ``reward_spec`` (NaN when the simulator gave
        ``None``)."""
        spec = self.reward_spec
        if reward is None:
            return torch.full(spec.shape, float("nan"), dtype=spec.dtype)
        return spec.encode(reward, ignore_device=True)

    def read_obs(self, observations: Any) -> dict[str, Any]:
        """The observation entries, encoded with ``observation_spec``."""
        spec = self.observation_spec
        if isinstance(observations, Mapping):
            observations = dict(observations)
            if "state" in observations and "observation" not in observations:
                observations["observation"] = observations.pop("state")
            out = {}
            for key, value in observations.items():
                leaf = spec[key]
                if isinstance(leaf, NonTensor):
                    out[key] = NonTensorData(value)
                else:
                    out[key] = leaf.encode(value, ignore_device=True)
            return out
        key = next(iter(spec.keys(True, True)), None)
        if key is None:
            raise RuntimeError(f"{type(self).__name__} has no observation spec to read into")
        return {key: spec[key].encode(observations, ignore_device=True)}

    # ---------------------------------------------------------------------- hooks
    @abc.abstractmethod
    def _output_transform(self, step_outputs_tuple: tuple) -> tuple:
        """``(obs, reward, terminated, truncated, done, info)`` from the simulator's step
        output (``None`` for a flag it does not give)."""

    @abc.abstractmethod
    def _reset_output_transform(self, reset_outputs_tuple: tuple) -> tuple:
        """``(obs, info)`` from the simulator's reset output."""

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        keys = self.action_keys
        if len(keys) == 1:
            action = tensordict.get(keys[0])
        else:
            action = tensordict.select(*keys).to_dict()
        if self._convert_actions_to_numpy:
            action = self.read_action(action)
        reward = 0
        for _ in range(self.wrapper_frame_skip):
            obs, step_reward, terminated, truncated, done, info = self._output_transform(
                self._env.step(action)
            )
            if step_reward is not None:
                reward = reward + step_reward
            terminated, truncated, done, stop = self.read_done(terminated, truncated, done)
            if stop:
                break
        entries = self.read_obs(obs)
        entries[self.reward_key] = self.read_reward(reward)
        entries["done"] = done
        entries["terminated"] = done.clone() if terminated is None else terminated
        if truncated is not None and "truncated" in self.full_done_spec.keys():
            entries["truncated"] = truncated  # (only when the done spec declares it)
        out = TensorDict(entries, batch_size=self.batch_size)
        if self.device is not None:
            out = out.to(self.device)
        if self.info_dict_reader and info is not None:
            out = self._read_info(info, out)
        return out

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is not None and not bool(mask.all()):
            raise RuntimeError(
                f"{type(self).__name__} resets its simulator whole: a partial '_reset' mask "
                f"{mask.reshape(-1).tolist()} is not supported"
            )
        obs, info = self._reset_output_transform(self._env.reset(**kwargs))
        out = TensorDict(self.read_obs(obs), batch_size=self.batch_size)
        if self.device is not None:
            out = out.to(self.device)
        if self.info_dict_reader:
            if info is not None:
                out = self._read_info(info, out)
            self._zero_missing_observations(out)
        return out

    def _zero_missing_observations(self, td: TensorDictBase) -> None:
        """Writes zeros for the ``observation_spec`` entries ``td`` lacks (info entries a
        reset does not give)."""
        present = set(td.keys(True, True))
        for key, leaf in self.observation_spec.items(True, True):
            if key not in present:
                td.set(key, leaf.zero())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self._env}, batch_size={self.batch_size})"
