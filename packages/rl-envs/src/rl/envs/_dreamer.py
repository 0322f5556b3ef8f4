"""Dreamer's imagination environment and the transform that decodes its latents to pixels.

As ``torchrl.envs.model_based.dreamer`` (TorchRL 0.14.1): :class:`DreamerEnv` steps a
world model in latent space (``state``, ``belief``); it never ends an episode, since
imagination runs for a fixed horizon.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from torch import nn

from rl.core import Composite

from ._env_base import EnvBase
from ._model_based import ModelBasedEnvBase
from .transforms import Transform

__all__ = ["DreamerDecoder", "DreamerEnv"]


class DreamerEnv(ModelBasedEnvBase):
    """Dreamer's imagination environment: a world model stepped in latent space.

    Args:
        world_model (TensorDictModule): maps ``state``, ``belief`` and ``action`` to the
            ``("next", ...)`` latents and the predicted reward.
        prior_shape (tuple of int): the shape of the stochastic ``state``.
        belief_shape (tuple of int): the shape of the deterministic ``belief``.
        obs_decoder (TensorDictModule, optional): decodes latents to observations
            (used by :meth:`decode_obs` and :class:`DreamerDecoder`).
        device (torch.device, optional): defaults to ``"cpu"``.
        batch_size (torch.Size, optional): the env's batch size.

    ``reset(td)`` starts imagination from the latents in ``td`` (a copy); ``reset()``
    with no input draws them from the specs (set with :meth:`set_specs_from_env`).
    ``done`` is never set, so rollouts always run their ``max_steps``.
    """

    def __init__(
        self,
        world_model: nn.Module,
        prior_shape: Sequence[int],
        belief_shape: Sequence[int],
        obs_decoder: nn.Module | None = None,
        device: torch.device | str | None = "cpu",
        batch_size: Sequence[int] | torch.Size | None = None,
    ) -> None:
        super().__init__(
            world_model, device=device, batch_size=batch_size, allow_done_after_reset=True
        )
        self.obs_decoder = obs_decoder
        self.prior_shape = prior_shape
        self.belief_shape = belief_shape

    _constant_any_done = True

    def any_done(self, tensordict: TensorDictBase) -> bool:
        """Always ``False``: imagination never ends early (no device sync on ``done``)."""
        return False

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """No partial resets in imagination: returns ``tensordict`` unchanged."""
        return tensordict

    def set_specs_from_env(self, env: EnvBase) -> None:
        """Copies ``env``'s specs; the state spec becomes its ``state`` and ``belief`` entries."""
        super().set_specs_from_env(env)
        for key in ("state", "belief"):
            if key not in self.observation_spec.keys():
                raise KeyError(
                    f"DreamerEnv.set_specs_from_env: the observation spec of {type(env).__name__} "
                    f"has no {key!r} entry (keys: {list(self.observation_spec.keys())})"
                )
        self.action_spec = self.action_spec.to(self.device)
        self.state_spec = Composite(
            state=self.observation_spec["state"],
            belief=self.observation_spec["belief"],
            shape=env.batch_size,
        )

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        if tensordict is not None:
            return tensordict.clone()
        batch_size = self.batch_size
        td = self.state_spec.rand(shape=batch_size)
        td.set("action", self.action_spec.rand(shape=batch_size))
        td.set(("next", "reward"), self.reward_spec.rand(shape=batch_size))
        td.update(self.observation_spec.rand(shape=batch_size))
        if self.device is not None:
            td = td.to(self.device)
        return td

    def decode_obs(self, tensordict: TensorDictBase, compute_latents: bool = False):
        """Decodes the latents of ``tensordict`` with ``obs_decoder``.

        Args:
            tensordict (TensorDictBase): holds ``state`` and ``belief``.
            compute_latents (bool): run the world model first. Defaults to ``False``.

        Raises:
            ValueError: when the env has no ``obs_decoder``.
        """
        if self.obs_decoder is None:
            raise ValueError("No observation decoder provided")
        if compute_latents:
            tensordict = self.world_model(tensordict)
        return self.obs_decoder(tensordict)


class DreamerDecoder(Transform):
    """Writes the decoded observation of each imagined step (the parent's ``obs_decoder``).

    Examples:
        >>> model_based_env_eval = model_based_env.append_transform(DreamerDecoder())  # doctest: +SKIP
    """

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        return self.parent.base_env.obs_decoder(next_tensordict)

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase):
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec):
        return observation_spec
