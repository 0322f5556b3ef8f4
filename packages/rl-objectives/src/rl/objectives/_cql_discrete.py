"""The Conservative Q-learning loss for discrete actions: DiscreteCQLLoss (DQN + the CQL penalty)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from rl.core import TensorSpec

from ._actions import _find_action_space, _resolve_space, _select
from ._loss import _TD_ESTIMATORS, LossModule
from ._networks import _network_output, _next_keys
from ._reduction import _check_loss_function, _check_reduction, _reduce, distance_loss

__all__ = ["DiscreteCQLLoss"]


class DiscreteCQLLoss(LossModule):
    r"""The Conservative Q-Learning loss for discrete actions (on top of DQN).

    - ``loss_qvalue``: ``0.5 * distance(Q(s, a), r + gamma (1 - terminated) max_a'
      Q_target(s', a'))`` (the value estimator, TD(0) by default);
    - ``loss_cql``: ``logsumexp_a Q(s, a) - Q(s, a_data)``.

    The squared TD error is written to the input under ``"td_error"``, the action
    values under ``"pred_val"``. Paper: https://arxiv.org/abs/2006.04779.

    Args:
        value_network (nn.Module): a TensorDict module writing ``action_value``
            ``[*B, n]``, e.g. :class:`~rl.modules.QValueActor`.

    Keyword Args:
        loss_function (str): ``"l2"`` (default), ``"l1"`` or ``"smooth_l1"``.
        delay_value (bool): keep a target network. Defaults to ``True``.
        gamma (float, optional): discount for the value estimator.
        action_space (str or TensorSpec, optional): ``"one-hot"`` or ``"categorical"``
            or a spec; read from the network, then from the shapes of the data.
        reduction (str, optional): ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.objectives import DiscreteCQLLoss
        >>> qnet = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action_value"])
        >>> loss = DiscreteCQLLoss(qnet, action_space="categorical", gamma=0.99)
        >>> data = TensorDict(
        ...     observation=torch.randn(4, 3),
        ...     action=torch.randint(2, (4,)),
        ...     next=TensorDict(
        ...         observation=torch.randn(4, 3),
        ...         reward=torch.randn(4, 1),
        ...         done=torch.zeros(4, 1, dtype=torch.bool),
        ...         terminated=torch.zeros(4, 1, dtype=torch.bool),
        ...         batch_size=[4],
        ...     ),
        ...     batch_size=[4],
        ... )
        >>> sorted(loss(data).keys())
        ['loss_cql', 'loss_qvalue', 'pred_value', 'target_value', 'td_error']
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by DiscreteCQLLoss.

        Attributes:
            value_target: forwarded to the value estimator (``"value_target"``).
            value: the chosen action's value (``"chosen_action_value"``).
            action_value: the network's output (``"action_value"``).
            action: the dataset action (``"action"``).
            priority: where the TD error is written (``"td_error"``).
            reward, done, terminated: read under ``"next"``.
            pred_val: where the action values are written (``"pred_val"``).
        """

        value_target: NestedKey = "value_target"
        value: NestedKey = "chosen_action_value"
        action_value: NestedKey = "action_value"
        action: NestedKey = "action"
        priority: NestedKey = "td_error"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        pred_val: NestedKey = "pred_val"

    default_value_estimator = "TD0"
    SUPPORTED_VALUE_ESTIMATORS = _TD_ESTIMATORS

    def __init__(
        self,
        value_network: nn.Module,
        *,
        loss_function: Literal["l2", "l1", "smooth_l1"] | None = "l2",
        delay_value: bool = True,
        gamma: float | None = None,
        action_space: str | TensorSpec | None = None,
        reduction: Literal["mean", "sum", "none"] | None = None,
    ) -> None:
        super().__init__()
        self.loss_function = _check_loss_function(loss_function or "l2")
        self.reduction = _check_reduction("mean" if reduction is None else reduction)
        self.delay_value = delay_value
        self.gamma = gamma
        self.action_space = _find_action_space(action_space, value_network)
        self.convert_to_functional(value_network, "value_network", create_target_params=delay_value)
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        tk = self.tensor_keys
        net_keys = list(getattr(self.value_network, "in_keys", []))
        keys = [tk.action, *_next_keys([tk.reward, tk.done, tk.terminated])]
        keys += [*net_keys, *_next_keys(net_keys)]
        self.in_keys = list(dict.fromkeys(keys))
        self.out_keys = ["loss_qvalue", "loss_cql"]
        self._in_keys_extra = net_keys + _next_keys(net_keys)

    def _required_key_names(self):
        return ("action",)

    def value_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """The DQN regression; writes ``td_error`` and ``pred_val`` into the input."""
        action = self._get(tensordict, "action")
        pred_val = _network_output(self.value_network, tensordict, self.tensor_keys.action_value)
        space = _resolve_space(self.action_space, action, pred_val)
        pred = _select(pred_val, action, space)
        with torch.no_grad():
            next_values = _network_output(
                self._target_network("value_network"),
                tensordict.get("next"),
                self.tensor_keys.action_value,
            )
            next_value = next_values.max(-1, keepdim=True)
            target = self._value_target(tensordict, next_value.values).squeeze(-1)
        td_error = (pred.detach() - target).pow(2).unsqueeze(-1)
        tensordict.set(self.tensor_keys.priority, td_error, inplace=True)
        tensordict.set(self.tensor_keys.pred_val, pred_val, inplace=True)
        loss = 0.5 * distance_loss(pred, target, self.loss_function)
        metadata = {
            "td_error": td_error.mean(0),
            "pred_value": pred_val.detach().mean(),
            "target_value": target.mean(),
        }
        return _reduce(loss, self.reduction, None), metadata

    def cql_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """``logsumexp_a Q(s, a) - Q(s, a_data)``; needs ``pred_val`` from :meth:`value_loss`."""
        qvalues = tensordict.get(self.tensor_keys.pred_val, None)
        if qvalues is None:
            raise KeyError(
                f"{type(self).__name__}.cql_loss needs {self.tensor_keys.pred_val!r} in the "
                "input: call value_loss first"
            )
        action = self._get(tensordict, "action")
        space = _resolve_space(self.action_space, action, qvalues)
        loss = torch.logsumexp(qvalues, dim=-1) - _select(qvalues, action, space)
        return _reduce(loss, self.reduction, None), {}

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute both losses; writes ``td_error`` and ``pred_val`` into the input.

        Returns:
            a TensorDict with ``loss_qvalue``, ``loss_cql``, ``td_error`` (mean over the
            batch), ``pred_value`` and ``target_value``.
        """
        loss_qvalue, metadata = self.value_loss(tensordict)
        loss_cql, _ = self.cql_loss(tensordict)
        return TensorDict({"loss_qvalue": loss_qvalue, "loss_cql": loss_cql, **metadata})
