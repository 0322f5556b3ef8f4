"""ModuleTransform: a TensorDict module run as a transform."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch

from rl.core import TensorSpec

from ._base import Transform

__all__ = ["ModuleTransform"]


def _spec_map(value, spec):
    if value is None:
        return spec
    if isinstance(value, TensorSpec):
        return value
    return value(spec)


class ModuleTransform(Transform):
    """Runs a TensorDict module (a ``TensorDictModule``, a policy, ...) as a transform.

    ``in_keys`` / ``out_keys`` are the module's; with ``inverse=True`` the module runs on
    the inverse (action) path instead. Spec changes are given as specs or functions.

    Args:
        module: the module; exclusive with ``module_factory``.
        module_factory: a callable building the module.
        no_grad: run under ``torch.no_grad()``.
        inverse: run on the inverse path.
        device: where the module and its inputs go.
        use_ray_service: not supported here (TorchRL runs the module as a Ray actor).
        actor_name, num_gpus, num_cpus: Ray options, accepted for compatibility.
        observation_spec_transform, action_spec_transform, reward_spec_transform,
        done_spec_transform, state_spec_transform: a spec replacing that spec, or a
            function of it.

    Raises:
        ValueError: both or neither of ``module`` / ``module_factory``.
        NotImplementedError: ``use_ray_service=True``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> t = ModuleTransform(module=TensorDictModule(lambda x: x + 1, ["x"], ["y"]))
        >>> t(TensorDict(x=torch.zeros(2)))["y"]
        tensor([1., 1.])
    """

    def __init__(
        self,
        *,
        module: Any | None = None,
        module_factory: Callable[[], Any] | None = None,
        no_grad: bool = False,
        inverse: bool = False,
        device: torch.device | None = None,
        use_ray_service: bool = False,
        actor_name: str | None = None,
        num_gpus: int | None = None,
        num_cpus: int | None = None,
        observation_spec_transform: TensorSpec | Callable | None = None,
        action_spec_transform: TensorSpec | Callable | None = None,
        reward_spec_transform: TensorSpec | Callable | None = None,
        done_spec_transform: TensorSpec | Callable | None = None,
        state_spec_transform: TensorSpec | Callable | None = None,
    ):
        if module is None and module_factory is None:
            raise ValueError("ModuleTransform needs one of module or module_factory, got neither")
        if module is not None and module_factory is not None:
            raise ValueError("ModuleTransform needs only one of module or module_factory, got both")
        if use_ray_service:
            raise NotImplementedError(
                "ModuleTransform(use_ray_service=True) is not supported: run the module locally"
            )
        super().__init__()
        self.module = module if module is not None else module_factory()
        self._io_device = None
        if device is not None:
            self.module = self.module.to(device)
            self._io_device = torch.device(device)
        self.no_grad = no_grad
        self.inverse = inverse
        self.observation_spec_transform = observation_spec_transform
        self.action_spec_transform = action_spec_transform
        self.reward_spec_transform = reward_spec_transform
        self.done_spec_transform = done_spec_transform
        self.state_spec_transform = state_spec_transform

    def to(self, *args, **kwargs) -> ModuleTransform:
        """Moves the module; with an I/O device given at construction, the data follows it
        to the new device (a dtype-only move keeps it), as TorchRL."""
        out = super().to(*args, **kwargs)
        if self._io_device is not None:
            device = torch._C._nn._parse_to(*args, **kwargs)[0]
            if device is not None:
                self._io_device = torch.device(device)
        return out

    @property
    def in_keys(self):
        module = self.__dict__.get("_modules", {}).get("module")
        if module is None:
            return []
        return [] if self.inverse else list(module.in_keys)

    @in_keys.setter
    def in_keys(self, value) -> None:
        if value:
            raise RuntimeError(f"in_keys {value} cannot be set for ModuleTransform")
        self.__dict__["_in_keys"] = []
        self._on_keys_changed()

    @property
    def out_keys(self):
        module = self.__dict__.get("_modules", {}).get("module")
        if module is None:
            return []
        return [] if self.inverse else list(module.out_keys)

    @out_keys.setter
    def out_keys(self, value) -> None:
        if value:
            raise RuntimeError(f"out_keys {value} cannot be set for ModuleTransform")

    @property
    def in_keys_inv(self):
        module = self.__dict__.get("_modules", {}).get("module")
        return list(module.out_keys) if module is not None and self.inverse else []

    @in_keys_inv.setter
    def in_keys_inv(self, value) -> None:
        if value:
            raise RuntimeError(f"in_keys_inv {value} cannot be set for ModuleTransform")
        self.__dict__["_in_keys_inv"] = []
        self._on_keys_changed()

    @property
    def out_keys_inv(self):
        module = self.__dict__.get("_modules", {}).get("module")
        return list(module.in_keys) if module is not None and self.inverse else []

    @out_keys_inv.setter
    def out_keys_inv(self, value) -> None:
        if value:
            raise RuntimeError(f"out_keys_inv {value} cannot be set for ModuleTransform")

    def _on_keys_changed(self) -> None:
        d = self.__dict__
        d["_io_pairs"] = []
        d["_io_pairs_inv"] = []
        self.empty_cache()

    @property
    def has_step(self) -> bool:
        return not self.inverse

    @property
    def has_inverse(self) -> bool:
        return self.inverse

    def _run(self, tensordict):
        with torch.no_grad() if self.no_grad else nullcontext():
            if self._io_device is not None:
                tensordict = tensordict.to(self._io_device)
            return self.module(tensordict)

    def _call(self, next_tensordict):
        if self.inverse:
            return next_tensordict
        return self._run(next_tensordict)

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)

    def forward(self, tensordict):
        return self._call(tensordict)

    def _inv_call(self, tensordict):
        if not self.inverse:
            return tensordict
        return self._run(tensordict)

    def transform_observation_spec(self, observation_spec):
        return _spec_map(self.observation_spec_transform, observation_spec)

    def transform_reward_spec(self, reward_spec):
        return _spec_map(self.reward_spec_transform, reward_spec)

    def transform_done_spec(self, done_spec):
        return _spec_map(self.done_spec_transform, done_spec)

    def transform_action_spec(self, action_spec):
        return _spec_map(self.action_spec_transform, action_spec)

    def transform_state_spec(self, state_spec):
        return _spec_map(self.state_spec_transform, state_spec)

    def _repr_args(self) -> str:
        return f"module={type(self.module).__name__}, inverse={self.inverse}"
