"""ACT loss: L1 chunk reconstruction plus a KL penalty on the CVAE latent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from rl.core import ACTION_CHUNK_KEY

from ._loss import LossModule
from ._reduction import _check_reduction, _reduce

__all__ = ["ACTLoss"]


class ACTLoss(LossModule):
    r"""The Action Chunking with Transformers loss: ``L1(chunk) + kl_weight * KL``.

    .. math::

        \mathcal{L} = \frac{1}{T\,|a|}\|a_{pred} - a_{chunk}\|_1
        + \beta\, D_{KL}\big(\mathcal{N}(\mu, e^{\log\sigma^2}) \,\|\, \mathcal{N}(0, I)\big)

    The reconstruction error is averaged over the chunk and action dims, the KL summed
    over the latent dims; both are then reduced over the batch. The actor reads
    ``"observation"`` and ``"action_chunk"`` and writes ``"action_pred"``, ``"mu"`` and
    ``"log_var"`` (an :class:`~rl.modules.ACTModel` in a
    :class:`~tensordict.nn.TensorDictModule`); the data holds the expert chunk at
    ``("vla_action", "chunk")`` (what :class:`~rl.envs.ActionChunkTransform` writes).
    Paper: https://arxiv.org/abs/2304.13705.

    Args:
        actor_network (TensorDictModule): the ACT policy.

    Keyword Args:
        kl_weight (float): ``beta``, the weight of the KL term. Defaults to ``10.0`` (the
            paper's).
        reduction (str, optional): ``"mean"`` (default), ``"sum"`` or ``"none"`` (per
            batch element).

    Returns (from forward):
        a TensorDict with ``loss_act`` (differentiable) and the detached terms
        ``loss_reconstruction`` and ``loss_kl``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.modules import ACTModel
        >>> from rl.objectives import ACTLoss
        >>> model = ACTModel(obs_dim=14, action_dim=7, chunk_size=10, hidden_dim=32, nheads=4)
        >>> actor = TensorDictModule(
        ...     model, in_keys=["observation", "action_chunk"], out_keys=["action_pred", "mu", "log_var"]
        ... )
        >>> loss = ACTLoss(actor)
        >>> data = TensorDict(
        ...     {"observation": torch.randn(4, 14), ("vla_action", "chunk"): torch.randn(4, 10, 7)},
        ...     batch_size=[4],
        ... )
        >>> sorted(loss(data).keys())
        ['loss_act', 'loss_kl', 'loss_reconstruction']
    """

    @dataclass
    class _AcceptedKeys:
        """Keys of ACTLoss.

        Attributes:
            observation: the observation in the data (``"observation"``).
            action_chunk: the expert chunk ``[*B, T, action_dim]`` in the data
                (``("vla_action", "chunk")``).
            action_pred: the predicted chunk the actor writes (``"action_pred"``).
            mu: the latent mean the actor writes (``"mu"``).
            log_var: the latent log-variance the actor writes (``"log_var"``).
        """

        observation: NestedKey = "observation"
        action_chunk: NestedKey = ACTION_CHUNK_KEY
        action_pred: NestedKey = "action_pred"
        mu: NestedKey = "mu"
        log_var: NestedKey = "log_var"

    def __init__(
        self,
        actor_network: nn.Module,
        *,
        kl_weight: float = 10.0,
        reduction: Literal["mean", "sum", "none"] = "mean",
    ) -> None:
        super().__init__()
        self.kl_weight = kl_weight
        self.reduction = _check_reduction(reduction)
        self.convert_to_functional(actor_network, "actor_network")
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        self.in_keys = [self.tensor_keys.observation, self.tensor_keys.action_chunk]
        self.out_keys = ["loss_act", "loss_reconstruction", "loss_kl"]

    def _required_key_names(self):
        return ("observation", "action_chunk")

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the ACT loss.

        Returns:
            a TensorDict with ``loss_act``, ``loss_reconstruction`` and ``loss_kl``.
        """
        chunk = self._get(tensordict, "action_chunk")
        actor_input = TensorDict(
            observation=self._get(tensordict, "observation"),
            action_chunk=chunk,
            batch_size=tensordict.batch_size,
            device=tensordict.device,
        )
        out = self.actor_network(actor_input)
        keys = self.tensor_keys
        pred, mu, log_var = out.get(keys.action_pred), out.get(keys.mu), out.get(keys.log_var)
        reconstruction = _reduce((pred - chunk).abs().mean(dim=(-2, -1)), self.reduction)
        kl = -0.5 * (1.0 + log_var - mu.pow(2) - log_var.exp()).sum(-1)
        kl = _reduce(kl, self.reduction)
        return TensorDict(
            loss_act=reconstruction + self.kl_weight * kl,
            loss_reconstruction=reconstruction.detach(),
            loss_kl=kl.detach(),
        )
