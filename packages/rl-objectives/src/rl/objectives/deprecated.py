"""TorchRL's deprecated REDQ losses (``torchrl.objectives.deprecated``).

:class:`REDQLoss_deprecated` is the first REDQ loss TorchRL shipped, kept for code written
against it. It differs from :class:`~rl.objectives.REDQLoss` in what it reports and in its
temperature loss:

- the actor and critic losses keep one term per ensemble member (``[N, *B]`` before the
  reduction);
- ``loss_alpha`` and ``entropy`` use the current policy's log-probability only (REDQLoss
  also counts the next-state draw), and the temperature gets no gradient while it is
  clamped at ``min_alpha`` or ``max_alpha``;
- ``td_error`` is ``max_i |Q_i(s, a) - target|`` (REDQLoss squares it);
- the output holds the five entries of ``out_keys`` and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from ._actor_critic import _default_log_prob_key
from ._redq import REDQLoss
from ._reduction import _reduce, distance_loss

__all__ = ["DoubleREDQLoss_deprecated", "REDQLoss_deprecated"]


class REDQLoss_deprecated(REDQLoss):  # noqa: N801 (TorchRL's name)
    """The deprecated REDQ loss of TorchRL (Chen et al., 2021, https://openreview.net/pdf?id=AY8zfZm0tDd).

    Takes the arguments of :class:`~rl.objectives.REDQLoss` (``scalar_output_mode``
    aside); see the module's docstring for how the two differ.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import NormalParamExtractor, TensorDictModule
        >>> from rl.modules import ProbabilisticActor, TanhNormal
        >>> from rl.objectives import SoftUpdate
        >>> from rl.objectives.deprecated import REDQLoss_deprecated
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 2), NormalParamExtractor())
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"], distribution_class=TanhNormal,
        ... )
        >>> class QNet(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.linear = torch.nn.Linear(4, 1)
        ...     def forward(self, obs, act):
        ...         return self.linear(torch.cat([obs, act], -1))
        >>> qnet = TensorDictModule(QNet(), ["observation", "action"], ["state_action_value"])
        >>> loss = REDQLoss_deprecated(actor, qnet, num_qvalue_nets=4, target_entropy=-1.0)
        >>> _ = SoftUpdate(loss, tau=0.005)
        >>> data = TensorDict(
        ...     observation=torch.randn(8, 3), action=torch.rand(8, 1) * 2 - 1,
        ...     next=TensorDict(observation=torch.randn(8, 3), reward=torch.randn(8, 1),
        ...                     done=torch.zeros(8, 1, dtype=torch.bool),
        ...                     terminated=torch.zeros(8, 1, dtype=torch.bool), batch_size=[8]),
        ...     batch_size=[8],
        ... )
        >>> sorted(loss(data).keys())
        ['alpha', 'entropy', 'loss_actor', 'loss_alpha', 'loss_qvalue']
    """

    @dataclass
    class _AcceptedKeys(REDQLoss._AcceptedKeys):
        """REDQLoss's keys, and ``log_prob`` (TorchRL's name for the policy's
        log-probability in this loss; the loss scores its own draws and never reads it)."""

        log_prob: NestedKey | None = None

        def __post_init__(self):
            if self.log_prob is None:
                self.log_prob = _default_log_prob_key()

    def __init__(self, actor_network, qvalue_network, **kwargs) -> None:
        kwargs.pop("scalar_output_mode", None)
        super().__init__(actor_network, qvalue_network, **kwargs)

    def _set_in_keys(self) -> None:
        super()._set_in_keys()
        self.out_keys = ["loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"]

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """``loss_actor``, ``loss_qvalue``, ``loss_alpha``, ``alpha`` and ``entropy``;
        writes ``td_error`` into ``tensordict``."""
        t = self._terms(tensordict)
        log_prob, pred, target = t["log_prob"], t["pred"], t["target"]
        loss_actor = t["alpha"] * log_prob - t["q_actor"]  # [N, *B]
        loss_qvalue = distance_loss(pred, target.expand_as(pred), self.loss_function)
        tensordict.set(
            self.tensor_keys.priority, (pred.detach() - target).abs().max(0)[0], inplace=True
        )
        # the clamped temperature: no gradient while it sits at a bound
        clamped = self.log_alpha
        if self.min_log_alpha is not None or self.max_log_alpha is not None:
            clamped = clamped.clamp(self.min_log_alpha, self.max_log_alpha)
        loss_alpha = -clamped.exp() * (log_prob.detach() + self.target_entropy)
        return TensorDict(
            {
                "loss_actor": _reduce(loss_actor, self.reduction, None),
                "loss_qvalue": _reduce(loss_qvalue, self.reduction, None),
                "loss_alpha": _reduce(loss_alpha, self.reduction, None),
                "alpha": t["alpha"],
                "entropy": -log_prob.detach().mean(),
            }
        )


class DoubleREDQLoss_deprecated(REDQLoss_deprecated):  # noqa: N801 (TorchRL's name)
    """:class:`REDQLoss_deprecated` with target critics (``delay_qvalue=True``, the default
    of both), kept for TorchRL compatibility."""
