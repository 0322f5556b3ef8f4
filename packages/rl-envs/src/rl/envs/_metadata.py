"""What a process needs to know about an env without holding it: ``EnvMetaData``.

:func:`get_env_metadata` reads it from an env, or builds an env from a factory, reads it
and closes that env; :func:`env_creator` wraps a factory in :class:`EnvCreator`;
:func:`make_tensordict` returns a zero-filled transition of an env, shaped as a real step.
"""

from __future__ import annotations

from collections.abc import Callable
from copy import deepcopy
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import _getitem_batch_size

from rl.core import Composite

from ._batched import EnvCreator
from ._env_base import EnvBase, normalize_device

__all__ = ["EnvMetaData", "env_creator", "get_env_metadata", "make_tensordict"]


def _reset_key(done_key: Any) -> Any:
    if isinstance(done_key, tuple):
        return (*done_key[:-1], "_reset")
    return "_reset"


class EnvMetaData:
    """An env's specs, batch size, device and a zero-filled transition, kept on the CPU.

    What a batched env or a collector reads from a sub-env (built once in the parent,
    then closed) to lay out its buffers without holding the env. ``tensordict`` and
    ``specs`` are stored on the CPU and returned on ``device``.

    Args:
        tensordict: a zero-filled transition (``env.fake_tensordict()`` with a
            ``"_reset"`` entry next to each done key).
        specs: ``env.specs`` (``Composite(output_spec=..., input_spec=...)``).
        batch_size: the env's batch size.
        env_str: the env's ``repr``.
        device: the env's device.
        batch_locked: whether the env only takes its own batch size.
        device_map: the device of each entry of ``tensordict`` (``{key: device}``).
        supports_set_state: whether the env can restore a state (TorchRL's flag).

    Examples:
        >>> from rl.envs import PendulumEnv, get_env_metadata
        >>> meta = get_env_metadata(PendulumEnv)
        >>> meta.batch_size, meta.specs["output_spec", "full_observation_spec", "observation"].shape
        (torch.Size([]), torch.Size([3]))
        >>> sorted(meta.tensordict.keys())
        ['_reset', 'action', 'done', 'next', 'observation', 'terminated', 'truncated']
    """

    def __init__(
        self,
        *,
        tensordict: TensorDictBase,
        specs: Composite,
        batch_size: torch.Size,
        env_str: str,
        device: torch.device,
        batch_locked: bool,
        device_map: dict,
        supports_set_state: bool = False,
    ) -> None:
        self.device = device
        self.tensordict = tensordict
        self.specs = specs
        self.batch_size = torch.Size(batch_size)
        self.env_str = env_str
        self.batch_locked = batch_locked
        self.device_map = device_map
        self.supports_set_state = supports_set_state
        self.has_dynamic_specs = any(-1 in tuple(leaf.shape) for leaf in specs.values(True, True))

    @property
    def tensordict(self) -> TensorDictBase:
        """A copy of the zero-filled transition, on ``device``."""
        td = self._tensordict.copy()
        if self.device is None:
            return td.clear_device_()
        return td if td.device == self.device else td.to(self.device)

    @tensordict.setter
    def tensordict(self, value: TensorDictBase) -> None:
        if value.device is not None and value.device.type != "cpu":
            value = value.to("cpu")
        self._tensordict = value

    @property
    def specs(self) -> Composite:
        """The env's specs, on ``device``."""
        return self._specs.to(self.device) if self.device is not None else self._specs.clone()

    @specs.setter
    def specs(self, value: Composite) -> None:
        self._specs = value.to("cpu")

    @property
    def output_spec(self) -> Composite:
        """``specs["output_spec"]``."""
        return self.specs["output_spec"]

    @property
    def input_spec(self) -> Composite:
        """``specs["input_spec"]``."""
        return self.specs["input_spec"]

    @staticmethod
    def metadata_from_env(env: EnvBase) -> EnvMetaData:
        """Reads the metadata of ``env``."""
        tensordict = env.fake_tensordict().clone()
        for done_key in env.done_keys:
            tensordict.set(
                _reset_key(done_key), torch.zeros_like(tensordict.get(("next", done_key)))
            )
        try:
            env_str = str(env)
        except Exception:  # noqa: BLE001  (a repr that fails must not lose the metadata)
            env_str = f"{type(env).__name__}()"
        device_map = {}
        for key, value in tensordict.items(True, True):
            device_map[key] = getattr(value, "device", None)
        return EnvMetaData(
            tensordict=tensordict,
            specs=env.specs.to("cpu"),
            batch_size=env.batch_size,
            env_str=env_str,
            device=env.device,
            batch_locked=env.batch_locked,
            device_map=device_map,
            supports_set_state=bool(getattr(env, "_supports_set_state", False)),
        )

    def _new(self, **changes: Any) -> EnvMetaData:
        fields = {
            "tensordict": self.tensordict,
            "specs": self.specs,
            "batch_size": self.batch_size,
            "env_str": self.env_str,
            "device": self.device,
            "batch_locked": self.batch_locked,
            "device_map": self.device_map,
            "supports_set_state": self.supports_set_state,
        }
        fields.update(changes)
        return EnvMetaData(**fields)

    def expand(self, *size: int) -> EnvMetaData:
        """The metadata of a batch of such envs (``size`` ends with ``batch_size``)."""
        if len(size) == 1 and isinstance(size[0], torch.Size | list | tuple):
            size = tuple(size[0])
        return self._new(
            tensordict=self.tensordict.expand(*size).clone(),
            specs=self.specs.expand(*size),
            batch_size=torch.Size(size),
        )

    def clone(self) -> EnvMetaData:
        """A deep copy."""
        return self._new(
            tensordict=self.tensordict.clone(),
            specs=self.specs.clone(),
            env_str=deepcopy(self.env_str),
            device_map=dict(self.device_map),
        )

    def to(self, device: torch.device | str | int | None) -> EnvMetaData:
        """The metadata with ``device`` as the env's device (and every entry's)."""
        device = normalize_device(device)
        device_map = self.device_map
        if device is not None:
            device_map = {key: device for key in device_map}
        return self._new(
            tensordict=self.tensordict.contiguous().to(device)
            if device is not None
            else self.tensordict,
            specs=self.specs.to(device) if device is not None else self.specs,
            device=device,
            device_map=device_map,
        )

    def __getitem__(self, item: Any) -> EnvMetaData:
        """The metadata of the envs ``item`` selects along the batch dims."""
        return self._new(
            tensordict=self.tensordict[item],
            specs=self.specs[item],
            batch_size=_getitem_batch_size(self.batch_size, item),
        )

    def __repr__(self) -> str:
        return (
            f"EnvMetaData(env_str={self.env_str!r}, batch_size={self.batch_size}, "
            f"device={self.device}, batch_locked={self.batch_locked})"
        )


def get_env_metadata(
    env_or_creator: EnvBase | Callable,
    kwargs: dict | None = None,
    *,
    env_validator: Callable[[EnvBase], None] | None = None,
) -> EnvMetaData:
    """The :class:`EnvMetaData` of an env, or of the env a factory builds.

    A factory (an :class:`EnvCreator` included) is called with ``kwargs``; the env it
    built is closed afterwards, also when reading the metadata (or the validator)
    raised.

    Args:
        env_or_creator: an env, or a callable returning one.
        kwargs: keyword arguments of the factory. With an :class:`EnvCreator` they must
            be empty or equal to its ``create_env_kwargs``.
        env_validator: called with the env before its metadata is read (e.g. to refuse
            a transform a worker process cannot run).

    Raises:
        RuntimeError: ``kwargs`` that differ from an ``EnvCreator``'s.
        TypeError: ``env_or_creator`` is neither an env nor a callable.

    Examples:
        >>> from rl.envs import CartPoleEnv, get_env_metadata
        >>> get_env_metadata(CartPoleEnv(), env_validator=lambda env: None).batch_size
        torch.Size([])
    """
    if isinstance(env_or_creator, EnvBase):
        if env_validator is not None:
            env_validator(env_or_creator)
        return EnvMetaData.metadata_from_env(env_or_creator)
    if not callable(env_or_creator):
        raise TypeError(
            f"get_env_metadata takes an env or a callable returning one, got "
            f"{type(env_or_creator).__name__}"
        )
    if isinstance(env_or_creator, EnvCreator):
        if kwargs and dict(kwargs) != dict(env_or_creator.create_env_kwargs):
            raise RuntimeError(
                "kwargs mismatch between EnvCreator and the kwargs provided to "
                f"get_env_metadata: got EnvCreator.create_env_kwargs="
                f"{env_or_creator.create_env_kwargs} and kwargs={kwargs}"
            )
        if env_validator is None and env_or_creator._meta_data is not None:
            return env_or_creator.meta_data.clone()  # the shadow env's, no new env
        kwargs = None
    env = env_or_creator(**(kwargs or {}))
    try:
        if env_validator is not None:
            env_validator(env)
        return EnvMetaData.metadata_from_env(env)
    finally:
        env.close(raise_if_closed=False)


def env_creator(fun: Callable) -> EnvCreator:
    """``EnvCreator(fun)``: TorchRL's shorthand.

    Examples:
        >>> from rl.envs import PendulumEnv, env_creator
        >>> env_creator(PendulumEnv)().batch_size
        torch.Size([])
    """
    return EnvCreator(fun)


def make_tensordict(
    env: EnvBase,
    policy: Callable[[TensorDictBase], TensorDictBase] | None = None,
) -> TensorDictBase:
    """A zero-filled transition of ``env``, with the entries a real step writes.

    Resets ``env``, takes one step (with ``policy``'s action, or a random one from
    ``action_spec``) and returns that transition with every entry set to zero: unlike
    ``env.fake_tensordict()``, it holds what the env and policy write beyond their
    specs. No gradient is recorded.

    Args:
        env: the environment (it is reset and stepped once).
        policy: a callable writing the action into a tensordict.

    Examples:
        >>> from rl.envs import PendulumEnv, make_tensordict
        >>> td = make_tensordict(PendulumEnv())
        >>> td["next", "observation"].abs().sum().item(), sorted(td["next"].keys())
        (0.0, ['done', 'observation', 'reward', 'terminated', 'truncated'])
    """
    with torch.no_grad():
        tensordict = env.reset()
        if policy is not None:
            tensordict.update(policy(tensordict))
        else:
            tensordict.update(env.full_action_spec.rand())
        tensordict = env.step(tensordict)
        return tensordict.zero_()
