"""Supervised losses of a deterministic world model's heads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from ._loss import LossModule
from ._reduction import _check_loss_function, distance_loss

__all__ = ["WorldModelLoss"]

_LOSSES = ("reward", "done", "reconstruction", "latent")


class WorldModelLoss(LossModule):
    """Regression losses of a :class:`~rl.modules.WorldModel` on real transitions.

    Any subset of four terms, each a mean distance (``"l2"``, ``"l1"`` or
    ``"smooth_l1"``) times its weight:

    - ``loss_reward``: the predicted ``("next", reward)`` against the data's;
    - ``loss_done``: the predicted ``("next", done)`` against the data's (as floats);
    - ``loss_reconstruction``: the decoder's ``reconstructed_observation`` against
      ``observation``;
    - ``loss_latent``: ``predicted_latent`` against ``target_latent`` (a deterministic
      latent model; RSSM-style KL terms are :class:`DreamerModelLoss`'s).

    The data's reward and done flags are moved to ``("next", true_reward)`` /
    ``("next", true_done)`` / ``("next", true_terminated)`` of a shallow copy before the
    model runs, so the model writes its predictions where the data was.

    Args:
        world_model: the model to train (called on the whole transition).
        losses: the terms to compute, default ``["reward"]``.
        reward_loss, done_loss, reconstruction_loss, latent_loss: each term's distance.
        reward_weight, done_weight, reconstruction_weight, latent_weight: their weights.

    Raises:
        ValueError: an unknown term or distance.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.modules import WorldModel
        >>> from rl.objectives import WorldModelLoss
        >>> class Dynamics(torch.nn.Module):
        ...     def forward(self, latent, action):
        ...         return latent + action
        >>> wm = WorldModel(
        ...     TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["latent"]),
        ...     TensorDictModule(Dynamics(), ["latent", "action"], [("next", "latent")]),
        ...     TensorDictModule(torch.nn.Linear(2, 1), [("next", "latent")], [("next", "reward")]),
        ... )
        >>> data = TensorDict(
        ...     {"observation": torch.randn(4, 3), "action": torch.randn(4, 2),
        ...      ("next", "reward"): torch.randn(4, 1)},
        ...     batch_size=[4],
        ... )
        >>> WorldModelLoss(wm)(data)["loss_reward"].shape
        torch.Size([])
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read by WorldModelLoss.

        Attributes:
            reward: the reward under ``"next"`` (data, then prediction).
            true_reward: where the data's reward is kept under ``"next"``.
            done: the done flag under ``"next"`` (data, then prediction).
            true_done: where the data's done flag is kept under ``"next"``.
            terminated: the terminated flag under ``"next"``.
            true_terminated: where the data's terminated flag is kept under ``"next"``.
            observation: the observation the decoder reconstructs.
            reconstructed_observation: the decoder's output.
            predicted_latent: the dynamics' predicted latent.
            target_latent: the latent it is regressed on.
        """

        reward: NestedKey = "reward"
        true_reward: NestedKey = "true_reward"
        done: NestedKey = "done"
        true_done: NestedKey = "true_done"
        terminated: NestedKey = "terminated"
        true_terminated: NestedKey = "true_terminated"
        observation: NestedKey = "observation"
        reconstructed_observation: NestedKey = "reconstructed_observation"
        predicted_latent: NestedKey = "predicted_latent"
        target_latent: NestedKey = "target_latent"

    default_keys = _AcceptedKeys

    def __init__(
        self,
        world_model: nn.Module,
        *,
        losses: list[Literal["reward", "done", "reconstruction", "latent"]] | None = None,
        reward_loss: str = "l2",
        done_loss: str = "l2",
        reconstruction_loss: str = "l2",
        latent_loss: str = "l2",
        reward_weight: float = 1.0,
        done_weight: float = 1.0,
        reconstruction_weight: float = 1.0,
        latent_weight: float = 1.0,
    ) -> None:
        super().__init__()
        losses = ["reward"] if losses is None else list(losses)
        unknown = sorted(set(losses) - set(_LOSSES))
        if unknown:
            raise ValueError(f"unknown loss term(s) {unknown}; valid ones are {list(_LOSSES)}")
        for name, value in [
            ("reward_loss", reward_loss),
            ("done_loss", done_loss),
            ("reconstruction_loss", reconstruction_loss),
            ("latent_loss", latent_loss),
        ]:
            _check_loss_function(value, name)
        self.world_model = world_model
        self.losses = losses
        self.reward_loss = reward_loss
        self.done_loss = done_loss
        self.reconstruction_loss = reconstruction_loss
        self.latent_loss = latent_loss
        self.reward_weight = reward_weight
        self.done_weight = done_weight
        self.reconstruction_weight = reconstruction_weight
        self.latent_weight = latent_weight

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        pass

    def _next(self, name: str) -> tuple:
        key = getattr(self.tensor_keys, name)
        return ("next", *key) if isinstance(key, tuple) else ("next", key)

    def _move(self, td: TensorDictBase, src: str, dst: str, required: bool) -> None:
        value = td.get(self._next(src), None)
        if value is None:
            if required:
                raise self._missing_key_error(td, src, self._next(src))
            return
        td.del_(self._next(src))
        td.set(self._next(dst), value)

    def _pair(self, td: TensorDictBase, pred_key, true_key, name: str) -> tuple:
        pred, true = td.get(pred_key, None), td.get(true_key, None)
        for key, value in ((pred_key, pred), (true_key, true)):
            if value is None:
                raise KeyError(
                    f"WorldModelLoss's {name!r} term needs {key!r}, which is missing after the "
                    f"world model ran; got keys {sorted(map(str, td.keys(True, True)))}"
                )
        return pred, true

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Returns ``loss_<term>`` (a scalar) for each term in ``losses``."""
        td = tensordict.copy()
        if "reward" in self.losses:
            self._move(td, "reward", "true_reward", required=True)
        if "done" in self.losses:
            self._move(td, "done", "true_done", required=True)
            self._move(td, "terminated", "true_terminated", required=False)
        td = self.world_model(td)
        out: dict[str, torch.Tensor] = {}
        if "reward" in self.losses:
            pred, true = self._pair(td, self._next("reward"), self._next("true_reward"), "reward")
            out["loss_reward"] = (
                self.reward_weight * distance_loss(pred, true, self.reward_loss).mean()
            )
        if "done" in self.losses:
            pred, true = self._pair(td, self._next("done"), self._next("true_done"), "done")
            out["loss_done"] = (
                self.done_weight * distance_loss(pred.float(), true.float(), self.done_loss).mean()
            )
        if "reconstruction" in self.losses:
            keys = self.tensor_keys
            pred, true = self._pair(
                td, keys.reconstructed_observation, keys.observation, "reconstruction"
            )
            out["loss_reconstruction"] = (
                self.reconstruction_weight
                * distance_loss(pred, true, self.reconstruction_loss).mean()
            )
        if "latent" in self.losses:
            keys = self.tensor_keys
            pred, true = self._pair(td, keys.predicted_latent, keys.target_latent, "latent")
            out["loss_latent"] = (
                self.latent_weight * distance_loss(pred, true, self.latent_loss).mean()
            )
        return TensorDict(out)
