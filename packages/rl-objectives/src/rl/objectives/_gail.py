"""Generative adversarial imitation learning: the discriminator's loss."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from ._loss import LossModule
from ._reduction import _check_reduction, _reduce

__all__ = ["GAILLoss"]


class GAILLoss(LossModule):
    """Trains the GAIL discriminator to tell expert transitions from collected ones.

    Ho & Ermon 2016, "Generative Adversarial Imitation Learning",
    https://arxiv.org/abs/1606.03476. The discriminator reads an observation and an
    action (at the ``expert_observation`` / ``expert_action`` keys) and writes the
    probability that the pair comes from the expert at ``discriminator_pred`` (a
    probability in ``[0, 1]``, e.g. a sigmoid output, as in TorchRL). For a batch
    ``[B]`` (or ``[B, T]``) holding both expert and collected pairs, the per-sample loss
    ``[B, (T,) 1]`` is::

        -log D(s_e, a_e) - log(1 - D(s_c, a_c))

    both halves going through the discriminator in one call. With
    ``use_grad_penalty=True`` the WGAN-GP penalty
    ``gp_lambda * mean((||grad D(s~, a~)||_2 - 1) ** 2)`` is added, the gradient taken at
    a random element-wise interpolation ``u * collected + (1 - u) * expert``,
    ``u ~ U(0, 1)``, of observations and actions (Gulrajani et al. 2017,
    https://arxiv.org/abs/1704.00028); its detached value is returned as ``gp_loss``.

    Args:
        discriminator_network (TensorDictModule): reads the expert observation and
            action keys, writes ``discriminator_pred``.

    Keyword Args:
        use_grad_penalty (bool): add the gradient penalty. Defaults to ``False``.
        gp_lambda (float): weight of the gradient penalty. Defaults to ``10``.
        reduction (str, optional): ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Raises:
        TypeError: ``discriminator_network`` is not an ``nn.Module``.
        ValueError: an unknown ``reduction``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.modules import MLP
        >>> from rl.objectives import GAILLoss
        >>> class Discriminator(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.mlp = MLP(in_features=4, out_features=1, num_cells=[32])
        ...     def forward(self, obs, act):
        ...         return torch.sigmoid(self.mlp(torch.cat([obs, act], -1)))
        >>> disc = TensorDictModule(Discriminator(), ["observation", "action"], ["d_logits"])
        >>> loss_fn = GAILLoss(disc, use_grad_penalty=True)
        >>> batch = TensorDict(
        ...     observation=torch.randn(8, 3),
        ...     action=torch.randn(8, 1),
        ...     collector_observation=torch.randn(8, 3),
        ...     collector_action=torch.randn(8, 1),
        ...     batch_size=[8],
        ... )
        >>> out = loss_fn(batch)
        >>> sorted(out.keys())
        ['gp_loss', 'loss']
        >>> out["loss"].backward()
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by GAILLoss.

        Attributes:
            expert_action: the expert's action, and the action key the discriminator
                reads (``"action"``).
            expert_observation: the expert's observation, and the observation key the
                discriminator reads (``"observation"``).
            collector_action: the collected action (``"collector_action"``).
            collector_observation: the collected observation
                (``"collector_observation"``).
            discriminator_pred: where the discriminator writes its probability
                (``"d_logits"``).
        """

        expert_action: NestedKey = "action"
        expert_observation: NestedKey = "observation"
        collector_action: NestedKey = "collector_action"
        collector_observation: NestedKey = "collector_observation"
        discriminator_pred: NestedKey = "d_logits"

    def __init__(
        self,
        discriminator_network: nn.Module,
        *,
        use_grad_penalty: bool = False,
        gp_lambda: float = 10,
        reduction: Literal["mean", "sum", "none"] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(discriminator_network, nn.Module):
            raise TypeError(
                "GAILLoss discriminator_network must be an nn.Module, got "
                f"{type(discriminator_network).__name__}"
            )
        self.reduction = _check_reduction("mean" if reduction is None else reduction)
        self.use_grad_penalty = use_grad_penalty
        self.gp_lambda = gp_lambda
        self.convert_to_functional(discriminator_network, "discriminator_network")
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        keys = set(getattr(self.discriminator_network, "in_keys", []))
        keys.update(
            (
                self.tensor_keys.expert_observation,
                self.tensor_keys.expert_action,
                self.tensor_keys.collector_observation,
                self.tensor_keys.collector_action,
            )
        )
        self.in_keys = sorted(keys, key=str)
        self.out_keys = ["loss", "gp_loss"] if self.use_grad_penalty else ["loss"]

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        self._set_in_keys()

    def _required_key_names(self) -> tuple[str, ...]:
        return ("expert_action", "expert_observation", "collector_action", "collector_observation")

    def _discriminate(self, obs: torch.Tensor, act: torch.Tensor, batch_size) -> torch.Tensor:
        keys = self.tensor_keys
        td = TensorDict(
            {keys.expert_observation: obs, keys.expert_action: act}, batch_size=batch_size
        )
        pred = self.discriminator_network(td).get(keys.discriminator_pred, None)
        if pred is None:
            raise KeyError(
                f"GAILLoss: the discriminator did not write {keys.discriminator_pred!r}; make "
                "its out_keys match the loss's key (loss.set_keys(discriminator_pred=...))"
            )
        return pred

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the discriminator loss (and the gradient penalty).

        Returns:
            a TensorDict with ``loss`` (and ``gp_loss``, detached, with the penalty).
        """
        expert_obs = self._get(tensordict, "expert_observation")
        expert_act = self._get(tensordict, "expert_action")
        collector_obs = self._get(tensordict, "collector_observation")
        collector_act = self._get(tensordict, "collector_action")
        if tensordict.batch_dims == 0:
            raise ValueError(
                "GAILLoss needs a batch with at least one batch dimension, got batch_size "
                f"{tuple(tensordict.batch_size)}"
            )
        shape = tensordict.batch_size[:2]
        n = shape[0]
        pred = self._discriminate(
            torch.cat([expert_obs, collector_obs], 0),
            torch.cat([expert_act, collector_act], 0),
            [2 * n],
        )
        # labels: 1 for the expert half, 0 for the collected one
        labels = torch.zeros_like(pred)
        labels[:n] = 1.0
        bce = F.binary_cross_entropy(pred, labels, reduction="none")
        loss = bce[:n] + bce[n:]
        out = {}
        if self.use_grad_penalty:
            gp = self._gradient_penalty(expert_obs, expert_act, collector_obs, collector_act)
            loss = loss + gp
            out["gp_loss"] = gp.detach()
        out["loss"] = _reduce(loss, self.reduction)
        return TensorDict(out)

    def _gradient_penalty(self, expert_obs, expert_act, collector_obs, collector_act):
        u_obs = torch.rand_like(expert_obs)
        u_act = torch.rand_like(expert_act)
        obs = (u_obs * collector_obs + (1 - u_obs) * expert_obs).detach().requires_grad_(True)
        act = (u_act * collector_act + (1 - u_act) * expert_act).detach().requires_grad_(True)
        pred = self._discriminate(obs, act, [])
        grads = torch.autograd.grad(
            pred, (obs, act), grad_outputs=torch.ones_like(pred), create_graph=True
        )
        norm = torch.linalg.vector_norm(torch.cat(grads, -1), dim=-1)
        return self.gp_lambda * (norm - 1).pow(2).mean()
