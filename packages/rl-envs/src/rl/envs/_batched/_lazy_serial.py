"""``SerialEnv(..., use_buffers=False)``: sub-envs whose entries may differ in shape.

Without buffers the sub-envs' outputs are stacked at every call: densely when they
agree, as a ``LazyStackedTensorDict`` when their entries differ in shape (heterogeneous
sub-envs, TorchRL's ``use_buffers=False``). Slower than the buffered ``SerialEnv``, which
is what ``SerialEnv`` builds unless asked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDictBase

from .._env_base import EnvBase
from ..engine import EnvKernel, RolloutKernel
from ._base import _bind_workers
from ._options import batched_options
from ._serial import SerialEnv

__all__ = ["LazySerialEnv"]


def _stack(items: list[TensorDictBase]) -> TensorDictBase:
    return LazyStackedTensorDict.maybe_dense_stack(items, 0)


class LazySerialEnv(SerialEnv):
    """The ``SerialEnv`` built by ``SerialEnv(..., use_buffers=False)`` (see the module doc).

    Its specs are the sub-envs' specs stacked (a ``StackedComposite`` where they
    differ), its outputs the sub-envs' outputs stacked.

    Examples:
        >>> from rl.envs import PendulumEnv, SerialEnv
        >>> env = SerialEnv(2, PendulumEnv, use_buffers=False)
        >>> env.rollout(4)["next", "observation"].shape
        torch.Size([2, 4, 3])
    """

    def rollout_kernel(self) -> RolloutKernel:
        """The env's own ``_step`` / ``reset`` (its outputs are stacked, not buffered)."""
        return EnvKernel(self)

    _reset_keeps_unmasked = True

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., EnvBase] | Sequence[Callable[..., EnvBase]],
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        device: torch.device | str | None = None,
        run_type_checks: bool = False,
        mp_start_method: str | None = None,
        num_sub_threads: int = 1,
        **options: Any,
    ) -> None:
        self.batched_options = batched_options(type(self).__name__, options)
        _bind_workers(self, num_workers, create_env_fn, create_env_kwargs)
        self._init_kwargs = {"device": device, "run_type_checks": run_type_checks, **options}
        first = self.__dict__.pop("_first_env", None)  # built by SerialEnv.__new__
        creators = self._creators if first is None else self._creators[1:]
        envs = [] if first is None else [first]
        envs += [self._check_env(creator()) for creator in creators]
        sub_batch = envs[0].batch_size
        for index, env in enumerate(envs):
            if env.batch_size != sub_batch:
                raise ValueError(
                    f"sub-env {index} has batch_size {tuple(env.batch_size)}, expected "
                    f"{tuple(sub_batch)} (that of sub-env 0)"
                )
        self.sub_batch_size = sub_batch
        EnvBase.__init__(
            self,
            device=device if device is not None else envs[0].device,
            batch_size=(num_workers, *sub_batch),
            run_type_checks=run_type_checks,
        )
        self.__dict__["_output_spec"] = torch.stack([env.output_spec for env in envs], 0)
        self.__dict__["_input_spec"] = torch.stack([env.input_spec for env in envs], 0)
        self._envs = envs
        self._cores = []
        self._pending_promote = []
        self.is_closed = False

    def _check_composite(self, name: str, value: Any):
        return value  # stacked specs: checked by the sub-envs

    def _ensure_started(self) -> None:
        if self.is_closed:
            self._envs = [creator() for creator in self._creators]
            self.is_closed = False

    def close(self, *, raise_if_closed: bool = True) -> None:
        if self.is_closed:
            return
        for env in self._envs:
            env.close()
        self._envs = []
        self.is_closed = True

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._ensure_started()
        return _stack([env.step(tensordict[i])["next"] for i, env in enumerate(self._envs)])

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        self._ensure_started()
        mask = None if tensordict is None else tensordict.get("_reset", None)
        outs = []
        for i, env in enumerate(self._envs):
            if mask is not None and not bool(mask[i].any()):
                outs.append(tensordict[i].exclude("_reset", "next"))
                continue
            sub = None
            if tensordict is not None:
                sub = tensordict[i].exclude("_reset", "next")
                if mask is not None and env.batch_size:
                    sub.set("_reset", mask[i])
            outs.append(env.reset(sub))
        return _stack(outs)

    def reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        """Resets the sub-envs (those of the ``"_reset"`` mask); returns a new tensordict."""
        if kwargs:
            raise TypeError(
                f"{type(self).__name__}.reset got unexpected arguments {sorted(kwargs)}"
            )
        if tensordict is not None:
            self._check_batch(tensordict, "reset()")
        return self._reset(tensordict)

    def step_and_maybe_reset(self, tensordict: TensorDictBase):
        return EnvBase.step_and_maybe_reset(self, tensordict)
