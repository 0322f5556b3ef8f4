"""Behaviour cloning of a diffusion policy: the DDPM noise-prediction loss."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from ._loss import LossModule
from ._reduction import _check_reduction

__all__ = ["DiffusionBCLoss"]


class DiffusionBCLoss(LossModule):
    """Behaviour cloning for :class:`~rl.modules.DiffusionActor` (epsilon prediction).

    For each (observation, clean action) pair, a timestep ``t`` is drawn uniformly in
    ``[0, num_steps)``, the action is noised with the actor's DDPM schedule
    (``a_t = sqrt(abar_t) a + sqrt(1 - abar_t) eps``) and the score network is asked
    for ``eps`` from ``cat([a_t, observation, t])``; the loss is the squared error of
    that prediction. Paper: Chi et al. 2023, https://arxiv.org/abs/2303.04137.

    Args:
        actor_network (TensorDictModule): a :class:`~rl.modules.DiffusionActor`, or any
            TensorDict module whose ``.module`` has ``add_noise(action, t)``,
            ``num_steps`` and ``score_network``.

    Keyword Args:
        reduction (str, optional): ``"mean"`` (default), ``"sum"`` or ``"none"`` (the
            element-wise error, ``[*B, action_dim]``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import DiffusionActor
        >>> from rl.objectives import DiffusionBCLoss
        >>> actor = DiffusionActor(action_dim=2, obs_dim=4, num_steps=10)
        >>> loss = DiffusionBCLoss(actor)
        >>> data = TensorDict(
        ...     observation=torch.randn(8, 4), action=torch.randn(8, 2), batch_size=[8]
        ... )
        >>> loss(data)["loss_diffusion_bc"].shape
        torch.Size([])
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read by DiffusionBCLoss.

        Attributes:
            action: the clean (demonstration) action (``"action"``).
            observation: the conditioning observation (``"observation"``).
        """

        action: NestedKey = "action"
        observation: NestedKey = "observation"

    def __init__(
        self,
        actor_network: nn.Module,
        *,
        reduction: Literal["mean", "sum", "none"] = "mean",
    ) -> None:
        super().__init__()
        ddpm = getattr(actor_network, "module", None)
        if not all(hasattr(ddpm, name) for name in ("add_noise", "num_steps", "score_network")):
            raise TypeError(
                "DiffusionBCLoss needs a DiffusionActor (a module whose .module has "
                f"add_noise, num_steps and score_network), got {type(actor_network).__name__}"
            )
        self.reduction = _check_reduction(reduction)
        self.convert_to_functional(actor_network, "actor_network")
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        self.in_keys = [self.tensor_keys.observation, self.tensor_keys.action]
        self.out_keys = ["loss_diffusion_bc"]

    def _required_key_names(self):
        return ("action", "observation")

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the noise-prediction loss.

        Returns:
            a TensorDict with ``loss_diffusion_bc``.
        """
        action = self._get(tensordict, "action")
        observation = self._get(tensordict, "observation")
        ddpm = self.actor_network.module
        batch = action.shape[:-1]
        t = torch.randint(0, ddpm.num_steps, batch, device=action.device)
        noisy, noise = ddpm.add_noise(action, t)
        t_column = t.to(noisy.dtype).unsqueeze(-1)
        predicted = ddpm.score_network(torch.cat([noisy, observation, t_column], dim=-1))
        loss = F.mse_loss(predicted, noise, reduction=self.reduction)
        return TensorDict(loss_diffusion_bc=loss)
