"""An env that rolls a :class:`~rl.modules.WorldModel` out in its latent space."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import NestedKey, TensorDict, TensorDictBase
from torch import nn

from rl.core import Composite

from ._env_base import EnvBase
from ._model_based import ModelBasedEnvBase

__all__ = ["WorldModelEnv"]


def _rebatch_spec(spec: Composite, batch_size: torch.Size) -> Composite:
    """``spec`` with its batch dims replaced by ``batch_size`` (a clone)."""
    for _ in range(len(spec.shape)):
        spec = spec[0]
    return spec.expand(batch_size).clone()


class WorldModelEnv(ModelBasedEnvBase):
    """Rolls a world model out through the ordinary env API (Ha & Schmidhuber 2018,
    https://arxiv.org/abs/1803.10122).

    Each step runs the world model's :attr:`~rl.modules.WorldModel.step_module`
    (dynamics and heads, not the encoder) on the latent in the input and lifts what it
    wrote under ``("next", ...)`` to the step's output; a reward or done entry the model
    does not write is zero. A reset does not encode: it takes the starting latent from
    the tensordict it is given (``world_model.encode(obs_td)``), so the latent must be
    there. The action, reward and done specs are those of ``base_env``, which is never
    stepped; the observation spec is ``base_env``'s, or ``observation_spec``.

    Args:
        world_model: a :class:`~rl.modules.WorldModel` (anything with ``step_module``).
        base_env: the env whose specs the imagined env copies.
        observation_spec: the observation spec to use instead of ``base_env``'s (the
            latent's spec, say).
        batch_size: the env's batch size; default ``base_env``'s, ``[1]`` if that is empty.
        device: default ``base_env``'s.
        latent_key: the entry that holds the latent; a reset needs it.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.core import Composite, Unbounded
        >>> from rl.envs import PendulumEnv, WorldModelEnv
        >>> from rl.modules import WorldModel
        >>> class Dynamics(torch.nn.Module):
        ...     def forward(self, latent, action):
        ...         return latent + action.mean(-1, keepdim=True)
        >>> wm = WorldModel(
        ...     TensorDictModule(torch.nn.Linear(3, 4), ["observation"], ["latent"]),
        ...     TensorDictModule(Dynamics(), ["latent", "action"], [("next", "latent")]),
        ...     TensorDictModule(torch.nn.Linear(4, 1), [("next", "latent")], [("next", "reward")]),
        ... )
        >>> env = WorldModelEnv(
        ...     wm, PendulumEnv(), observation_spec=Composite(latent=Unbounded((4,))), batch_size=[5]
        ... )
        >>> start = wm.encode(TensorDict(observation=torch.randn(5, 3), batch_size=[5]))
        >>> env.rollout(10, tensordict=start)["next", "latent"].shape
        torch.Size([5, 10, 4])
    """

    def __init__(
        self,
        world_model: nn.Module,
        base_env: EnvBase,
        *,
        observation_spec: Composite | None = None,
        batch_size: int | Sequence[int] | torch.Size | None = None,
        device: torch.device | str | None = None,
        latent_key: NestedKey = "latent",
    ) -> None:
        batch_size = _default_batch_size(base_env, batch_size)
        super().__init__(
            world_model.step_module,
            device=base_env.device if device is None else device,
            batch_size=batch_size,
            allow_done_after_reset=True,  # a done head may end an imagined episode at once
        )
        # the whole model, for encode / decode; ``self.world_model`` is its step
        self._world_model = world_model
        self.latent_key = latent_key
        self.full_action_spec = self._from_base(base_env.full_action_spec)
        self.full_reward_spec = self._from_base(base_env.full_reward_spec)
        self.full_done_spec = self._from_base(base_env.full_done_spec)
        if observation_spec is None:
            observation_spec = base_env.full_observation_spec
        if not isinstance(observation_spec, Composite):
            raise TypeError(
                f"observation_spec must be a Composite, got {type(observation_spec).__name__}"
            )
        if observation_spec.shape != self.batch_size:
            observation_spec = _rebatch_spec(observation_spec, self.batch_size)
        self.observation_spec = observation_spec.to(self.device)

    def _from_base(self, spec: Composite) -> Composite:
        return _rebatch_spec(spec, self.batch_size).to(self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        # the model writes ("next", ...) like a real transition; the env returns it at root
        out = self.world_model(tensordict.copy())
        nxt = out.get("next", None)
        result = TensorDict(batch_size=out.batch_size, device=self.device)
        if nxt is None:
            nxt = TensorDict(batch_size=out.batch_size)
        for key in self.observation_spec.keys(True, True):
            value = nxt.get(key, None)
            if value is not None:
                result.set(key, value)
        for spec in (self.full_reward_spec, self.full_done_spec):
            for key in spec.keys(True, True):
                value = nxt.get(key, None)
                if value is None:
                    leaf = spec[key]
                    value = torch.zeros(
                        *out.batch_size,
                        *leaf.shape[len(self.batch_size) :],
                        dtype=leaf.dtype,
                        device=self.device,
                    )
                result.set(key, value)
        return result

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        if tensordict is None or self.latent_key not in tensordict.keys(True):
            raise RuntimeError(
                f"WorldModelEnv cannot draw an initial latent: reset it with a tensordict "
                f"holding one under {self.latent_key!r} (world_model.encode(obs_td)), e.g. "
                "env.reset(start) or env.rollout(..., tensordict=start)"
            )
        out = tensordict.copy()
        for key in self.full_done_spec.keys(True, True):
            leaf = self.full_done_spec[key]
            out.set(
                key,
                torch.zeros(
                    *out.batch_size,
                    *leaf.shape[len(self.batch_size) :],
                    dtype=leaf.dtype,
                    device=self.device,
                ),
            )
        return out


def _default_batch_size(base_env: EnvBase, batch_size) -> torch.Size:
    if batch_size is not None:
        return torch.Size([batch_size] if isinstance(batch_size, int) else batch_size)
    return base_env.batch_size if len(base_env.batch_size) else torch.Size([1])
