"""An env of Gaussian state beliefs stepped by a probabilistic world model (PILCO)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import NestedKey, TensorDict, TensorDictBase
from torch import nn

from rl.core import Composite, Unbounded

from ._env_base import EnvBase
from ._model_based import ModelBasedEnvBase
from ._world_model_env import _default_batch_size, _rebatch_spec

__all__ = ["ImaginedEnv"]


class ImaginedEnv(ModelBasedEnvBase):
    """Imagined rollouts of a state belief ``N(mean, var)`` for policy search (PILCO,
    Deisenroth & Rasmussen 2011, https://dl.acm.org/doi/10.5555/3104482.3104541).

    The observation is a belief: ``("observation", "mean")`` ``[*B, D]`` and
    ``("observation", "var")`` ``[*B, D, D]``. Each step runs ``world_model_module``
    (e.g. :class:`~rl.modules.GPWorldModel`), which reads ``"action"`` and
    ``"observation"`` and writes the next belief under ``next_observation_key``. The
    env never ends an episode (``done`` is always ``False``, the reward is zero: a cost
    such as :class:`~rl.objectives.ExponentialQuadraticCost` scores the beliefs); the
    rollout's ``max_steps`` sets its length.

    A reset keeps a belief given in full; otherwise it starts from the certain belief
    of the given flat ``"observation"`` (or one drawn from ``base_env``'s observation
    spec): that mean and a zero covariance.

    Args:
        world_model_module: writes the next belief (a ``mean`` / ``var`` tensordict)
            under ``next_observation_key``.
        base_env: the real env; its action, reward and done specs are copied, and its
            ``"observation"`` spec gives ``D``.
        batch_size: default ``base_env``'s, ``[1]`` if that is empty.
        next_observation_key: where the model writes the next belief.
        **kwargs: passed on to :class:`~rl.envs.ModelBasedEnvBase`.

    Raises:
        KeyError: ``base_env`` has no ``"observation"``; a step's model wrote nothing
            under ``next_observation_key``.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.envs import ImaginedEnv, PendulumEnv
        >>> class Drift(torch.nn.Module):  # mean + 0.1, variance grows by 0.01
        ...     def forward(self, action, observation):
        ...         var = observation["var"] + 0.01 * torch.eye(3)
        ...         return observation["mean"] + 0.1, var
        >>> wm = TensorDictModule(
        ...     Drift(), ["action", "observation"],
        ...     [("next", "observation", "mean"), ("next", "observation", "var")],
        ... )
        >>> env = ImaginedEnv(wm, PendulumEnv())
        >>> out = env.rollout(4)
        >>> out["next", "observation", "var"][0, -1].diagonal()
        tensor([0.0400, 0.0400, 0.0400])
    """

    def __init__(
        self,
        world_model_module: nn.Module,
        base_env: EnvBase,
        batch_size: int | Sequence[int] | torch.Size | None = None,
        next_observation_key: NestedKey = ("next", "observation"),
        **kwargs,
    ) -> None:
        self.next_observation_key = next_observation_key
        super().__init__(
            world_model_module,
            device=base_env.device,
            batch_size=_default_batch_size(base_env, batch_size),
            allow_done_after_reset=True,
            **kwargs,
        )
        if "observation" not in base_env.observation_spec.keys():
            raise KeyError(
                "ImaginedEnv needs an 'observation' entry in base_env's observation_spec; "
                f"got {list(base_env.observation_spec.keys(True, True))}"
            )
        obs = _rebatch_spec(base_env.full_observation_spec, self.batch_size)["observation"]
        self._base_observation_spec = obs.to(self.device)
        d = obs.shape[-1]
        bs = self.batch_size
        self.observation_spec = Composite(
            observation=Composite(
                mean=Unbounded((*bs, d), dtype=obs.dtype, device=self.device),
                var=Unbounded((*bs, d, d), dtype=obs.dtype, device=self.device),
                shape=bs,
                device=self.device,
            ),
            shape=bs,
            device=self.device,
        )
        self.full_action_spec = _rebatch_spec(base_env.full_action_spec, bs).to(self.device)
        self.full_reward_spec = _rebatch_spec(base_env.full_reward_spec, bs).to(self.device)
        self.full_done_spec = _rebatch_spec(base_env.full_done_spec, bs).to(self.device)

    _constant_any_done = True

    def any_done(self, tensordict: TensorDictBase) -> bool:
        """``False``: imagined rollouts never end (and no device sync is spent asking)."""
        return False

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Nothing to reset: imagined rollouts never end."""
        return tensordict

    def _zeros(self, spec: Composite, batch: torch.Size) -> TensorDict:
        out = TensorDict(batch_size=batch, device=self.device)
        for key in spec.keys(True, True):
            leaf = spec[key]
            tail = leaf.shape[len(self.batch_size) :]
            out.set(key, torch.zeros(*batch, *tail, dtype=leaf.dtype, device=self.device))
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = self.world_model(tensordict.copy())
        belief = out.get(self.next_observation_key, None)
        if belief is None:
            raise KeyError(
                f"the world model wrote no next belief under {self.next_observation_key!r} "
                f"(ImaginedEnv's next_observation_key); it wrote {sorted(map(str, out.keys(True, True)))}"
            )
        result = self._zeros(self.full_reward_spec, out.batch_size)
        result.update(self._zeros(self.full_done_spec, out.batch_size))
        result.set("observation", belief)
        return result

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        if tensordict is None:
            tensordict = TensorDict(batch_size=self.batch_size, device=self.device)
        keys = tensordict.keys(True)
        if ("observation", "mean") in keys and ("observation", "var") in keys:
            return tensordict.copy()
        obs = tensordict.get("observation", None)
        if obs is None:
            obs = self._base_observation_spec.rand()
        obs = obs.to(self.device)
        if obs.ndim == 1:
            obs = obs.expand(*self.batch_size, -1)
        batch = obs.shape[:-1]
        d = obs.shape[-1]
        out = self._zeros(self.full_done_spec, batch)
        out.set(("observation", "mean"), obs)
        out.set(("observation", "var"), obs.new_zeros(*batch, d, d))
        return out
