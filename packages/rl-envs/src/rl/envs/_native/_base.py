"""Shared plumbing of the native torch environments."""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase

from .._done import default_done_spec
from .._env_base import EnvBase
from ._kernel import NativeKernel

__all__ = ["NativeEnv"]


class NativeEnv(EnvBase):
    """An env whose state lives in torch tensors of shape ``[*batch_size, ...]``.

    A subclass writes two tensor-level methods, which both :meth:`_step` / :meth:`_reset`
    and the rollout kernel (:class:`NativeKernel`) call, so a rollout writes the env's
    tensors straight into its buffers without a TensorDict per step:

    - ``_step_entries(action) -> dict``: the step's ``"next"`` entries (observations,
      ``"reward"`` and, unless the step ends no episode, ``"done"`` / ``"terminated"`` /
      ``"truncated"``; absent flags are all False);
    - ``_reset_entries(mask) -> dict``: the reset observations (and flags, if any) of the
      whole batch: the sub-envs outside ``mask`` (``[*batch_size]`` bool, ``None`` for
      all) keep their current values.

    Randomness (reset states) comes from a private ``torch.Generator`` seeded by
    :meth:`set_seed`; until then it is seeded from torch's global generator, so
    ``torch.manual_seed`` before construction makes runs reproducible too.
    """

    _reset_keeps_unmasked = True  # _reset returns the current state outside the mask

    #: whether rollouts step through :class:`NativeKernel` (``_step_entries`` /
    #: ``_reset_entries``). Declared per class: a subclass that writes its own ``_step``,
    #: ``_reset``, ``step`` or ``reset`` gets ``False`` (its methods would be bypassed)
    #: unless it sets the attribute itself.
    uses_native_kernel: bool = True

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "uses_native_kernel" not in cls.__dict__:
            own = ("_step", "_reset", "step", "reset")
            if any(name in cls.__dict__ for name in own):
                cls.uses_native_kernel = False

    def __init__(self, *, device=None, batch_size=None, run_type_checks: bool = False) -> None:
        super().__init__(device=device, batch_size=batch_size, run_type_checks=run_type_checks)
        # gymnasium's three flags (the native envs mirror gymnasium's time limits)
        self.full_done_spec = default_done_spec(self.batch_size, self.device, truncated=True)
        self._tensor_device = self.device if self.device is not None else torch.device("cpu")
        self._generator = torch.Generator(device=self._tensor_device)
        self._generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))

    def to(self, *args, **kwargs) -> NativeEnv:
        """Moves the specs and the state tensors (the generator is re-seeded there)."""
        super().to(*args, **kwargs)
        device = self.device if self.device is not None else torch.device("cpu")
        if device != self._tensor_device:
            d = self.__dict__
            for name, value in list(d.items()):
                if isinstance(value, torch.Tensor) and value.device == self._tensor_device:
                    d[name] = value.to(device)
            seed = int(torch.randint(0, 2**62, (1,), generator=self._generator).item())
            d["_generator"] = torch.Generator(device=device)
            d["_generator"].manual_seed(seed)
            d["_tensor_device"] = device
        return self

    def _raise_action_shape(self, action: torch.Tensor) -> None:
        raise ValueError(
            f"action has shape {tuple(action.shape)}, expected {tuple(self.action_spec.shape)} "
            f"from action_spec {self.action_spec!r}"
        )

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(int(seed))

    def _uniform(self, low: float, high: float, *shape: int) -> torch.Tensor:
        """Float64 samples in ``[low, high)`` of shape ``[*batch_size, *shape]``."""
        sample = torch.rand(
            (*self.batch_size, *shape),
            generator=self._generator,
            dtype=torch.float64,
            device=self._tensor_device,
        )
        return sample * (high - low) + low

    def _reset_mask(self, tensordict: TensorDictBase | None) -> torch.Tensor | None:
        """The ``"_reset"`` mask as ``[*batch_size]`` (``None`` resets everything)."""
        if tensordict is None:
            return None
        mask = tensordict.get("_reset", None)
        if mask is None:
            return None
        return mask.reshape(self.batch_size)

    def _flags(self, terminated: torch.Tensor, truncated: torch.Tensor) -> dict:
        """``done`` / ``terminated`` / ``truncated`` entries of shape ``[*batch_size, 1]``."""
        terminated = terminated.unsqueeze(-1)
        truncated = truncated.unsqueeze(-1)
        return {"done": terminated | truncated, "terminated": terminated, "truncated": truncated}

    def _zero_flags(self) -> dict:
        flags = torch.zeros(
            (3, *self.batch_size, 1), dtype=torch.bool, device=self._tensor_device
        ).unbind(0)
        return {"done": flags[0], "terminated": flags[1], "truncated": flags[2]}

    def _make_td(self, entries: dict) -> TensorDictBase:
        return TensorDict._new_unsafe(entries, batch_size=self.batch_size, device=self.device)

    def _step_entries(self, action: torch.Tensor) -> dict:
        raise NotImplementedError(f"{type(self).__name__} must implement _step_entries(action)")

    def _reset_entries(self, mask: torch.Tensor | None) -> dict:
        raise NotImplementedError(f"{type(self).__name__} must implement _reset_entries(mask)")

    def _check_action(self, action: torch.Tensor) -> None:
        if action.shape != self._action_shape:
            self._raise_action_shape(action)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict["action"]
        self._check_action(action)
        entries = self._step_entries(action)
        if "done" not in entries:
            entries.update(self._zero_flags())
        return self._make_td(entries)

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        entries = self._reset_entries(self._reset_mask(tensordict))
        if "done" not in entries:
            entries.update(self._zero_flags())
        return self._make_td(entries)

    def rollout_kernel(self):
        """:class:`NativeKernel` (the env's tensors written into the rollout's buffers)
        where the class declares it (:attr:`uses_native_kernel`) and without per-step
        type checks; else the env's own ``_step`` / ``reset``."""
        if self.run_type_checks or not self.uses_native_kernel:
            return super().rollout_kernel()
        return NativeKernel(self)
