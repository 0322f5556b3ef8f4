"""Environments whose dynamics are a (learned) world model."""

from __future__ import annotations

import abc
import warnings
from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from torch import nn

from ._env_base import EnvBase

__all__ = ["ModelBasedEnvBase"]


class ModelBasedEnvBase(EnvBase, metaclass=abc.ABCMeta):
    """Base class of environments that step a world model instead of a simulator.

    ``_step`` runs ``world_model`` on a shallow copy of its input and keeps the
    observation, reward and done entries the specs declare; a missing done flag is
    filled with ``False`` by :meth:`step`. The env is not batch-locked: it takes
    tensordicts with any leading batch dims, which is what planners need to roll out
    many candidates at once. Subclasses set the specs and write ``_reset``.

    Args:
        world_model: a TensorDict module mapping ``(state, action)`` to the next state
            and the reward (e.g. :class:`~rl.modules.WorldModelWrapper`).
        params: parameters to call ``world_model`` with (TorchRL's functional form).
        buffers: buffers to call ``world_model`` with.
        device: where the env's tensors live.
        batch_size: the env's batch shape.
        run_type_checks: check step outputs against the specs.
        allow_done_after_reset: allow ``done`` right after a reset.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.core import Composite, Unbounded
        >>> from rl.envs import ModelBasedEnvBase
        >>> class MyMBEnv(ModelBasedEnvBase):
        ...     def __init__(self, world_model, device="cpu", batch_size=None):
        ...         super().__init__(world_model, device=device, batch_size=batch_size)
        ...         self.observation_spec = Composite(hidden_observation=Unbounded((4,)))
        ...         self.state_spec = Composite(hidden_observation=Unbounded((4,)))
        ...         self.action_spec = Unbounded((1,))
        ...         self.reward_spec = Unbounded((1,))
        ...
        ...     def _reset(self, tensordict):
        ...         td = TensorDict(batch_size=self.batch_size, device=self.device)
        ...         return td.update(self.full_observation_spec.rand())
        >>> world_model = TensorDictModule(
        ...     lambda obs, act: (obs + act, -obs.pow(2).sum(-1, keepdim=True)),
        ...     in_keys=["hidden_observation", "action"],
        ...     out_keys=["hidden_observation", "reward"],
        ... )
        >>> env = MyMBEnv(world_model)
        >>> env.rollout(10)["next", "reward"].shape
        torch.Size([10, 1])
    """

    def __new__(cls, *args, **kwargs):
        return super().__new__(cls, *args, _inplace_update=False, _batch_locked=False, **kwargs)

    def __init__(
        self,
        world_model: nn.Module,
        params: Sequence[torch.Tensor] | None = None,
        buffers: Sequence[torch.Tensor] | None = None,
        device: torch.device | str | None = "cpu",
        batch_size: Sequence[int] | torch.Size | None = None,
        run_type_checks: bool = False,
        allow_done_after_reset: bool = False,
    ) -> None:
        super().__init__(
            device=device,
            batch_size=batch_size,
            run_type_checks=run_type_checks,
            allow_done_after_reset=allow_done_after_reset,
        )
        self.world_model = world_model.to(self.device) if self.device is not None else world_model
        self.world_model_params = params
        self.world_model_buffers = buffers

    @property
    def batch_locked(self) -> bool:
        """``False``: the env takes any leading batch dims (read-only, as in TorchRL)."""
        return self.__dict__.get("_batch_locked", False)

    @batch_locked.setter
    def batch_locked(self, value: bool) -> None:
        raise RuntimeError("batch_locked is a read-only property")

    def set_specs_from_env(self, env: EnvBase) -> None:
        """Copies ``env``'s input and output specs (moved to this env's device)."""
        output_spec = env.output_spec.clone()
        input_spec = env.input_spec.clone()
        if self.device is not None:
            output_spec = output_spec.to(self.device)
            input_spec = input_spec.to(self.device)
        self.output_spec = output_spec
        self.input_spec = input_spec

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = tensordict.clone(recurse=False)
        if self.world_model_params is not None:
            out = self.world_model(
                out, params=self.world_model_params, buffers=self.world_model_buffers
            )
        else:
            out = self.world_model(out)
        keys = [
            *self.observation_spec.keys(True, True),
            *self.full_done_spec.keys(True, True),
            *self.full_reward_spec.keys(True, True),
        ]
        return out.select(*keys, strict=False)

    @abc.abstractmethod
    def _reset(self, tensordict: TensorDictBase | None, **kwargs) -> TensorDictBase:
        raise NotImplementedError

    def _set_seed(self, seed: int | None) -> None:
        warnings.warn("Set seed isn't needed for model based environments", stacklevel=2)
