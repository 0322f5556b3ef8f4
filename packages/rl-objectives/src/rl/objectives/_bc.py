"""Behaviour cloning loss."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
from tensordict.utils import NestedKey
from torch import nn

from ._loss import LossModule
from ._reduction import _check_reduction

__all__ = ["BCLoss"]

_NAMED = ("l1", "l2", "mse", "smooth_l1", "cross_entropy")


def _cross_entropy(pred: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
    target = expert.squeeze(-1) if expert.ndim > 1 else expert
    return F.cross_entropy(pred, target.long(), reduction="none")


_FUNCTIONS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "l1": lambda p, e: F.l1_loss(p, e, reduction="none"),
    "l2": lambda p, e: F.mse_loss(p, e, reduction="none"),
    "mse": lambda p, e: F.mse_loss(p, e, reduction="none"),
    "smooth_l1": lambda p, e: F.smooth_l1_loss(p, e, reduction="none"),
    "cross_entropy": _cross_entropy,
}


def _is_stochastic(actor: nn.Module) -> bool:
    return isinstance(actor, ProbabilisticTensorDictSequential | ProbabilisticTensorDictModule)


class BCLoss(LossModule):
    """Behaviour cloning: fit the actor to the dataset (expert) actions.

    What is minimised depends on the actor and the data, as in TorchRL:

    - ``loss_function`` given: that distance between the actor's prediction (written at
      the ``action`` key) and the expert action;
    - otherwise, a stochastic actor (with ``get_dist``): the negative log-likelihood
      ``-log pi(a_expert | s)`` (for a categorical policy and index actions, the
      cross-entropy of its logits);
    - otherwise, integer expert actions: cross-entropy of the actor's output (logits
      written at the ``action`` key) against them;
    - otherwise (a deterministic actor): the squared error.

    A ``pad_mask`` entry (``True`` = padded), when its key is set, drops padded elements
    of an element-wise loss (action chunks of VLA-style cloning). Paper:
    https://arxiv.org/abs/1910.04281.

    Args:
        actor_network (TensorDictModule): the policy to train.

    Keyword Args:
        loss_function (str or callable, optional): ``"l1"``, ``"l2"``/``"mse"``,
            ``"smooth_l1"``, ``"cross_entropy"`` or ``f(pred, expert) -> loss``
            (element-wise). Defaults to ``None`` (chosen as above).
        reduction (str, optional): ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Bounded
        >>> from rl.modules import Actor
        >>> from rl.objectives import BCLoss
        >>> spec = Bounded(-1.0, 1.0, (4,))
        >>> actor = Actor(torch.nn.Linear(3, 4), spec=spec)
        >>> loss = BCLoss(actor)
        >>> data = TensorDict(observation=torch.randn(2, 3), action=spec.rand((2,)), batch_size=[2])
        >>> loss(data)["loss_bc"].shape
        torch.Size([])
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read by BCLoss.

        Attributes:
            action: the expert action, and where the actor writes its prediction
                (``"action"``).
            pad_mask: optional boolean entry marking padded action elements
                (``None``: no masking).
        """

        action: NestedKey = "action"
        pad_mask: NestedKey | None = None

    def __init__(
        self,
        actor_network: nn.Module,
        *,
        loss_function: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
        | Literal["l1", "l2", "mse", "smooth_l1", "cross_entropy"]
        | None = None,
        reduction: Literal["mean", "sum", "none"] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(loss_function, str) and loss_function not in _NAMED:
            raise ValueError(
                f"unknown loss_function {loss_function!r}; valid ones are {list(_NAMED)} "
                "or a callable"
            )
        self.loss_function = loss_function
        self.reduction = _check_reduction("mean" if reduction is None else reduction)
        self.convert_to_functional(actor_network, "actor_network")
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        keys = [self.tensor_keys.action, *getattr(self.actor_network, "in_keys", [])]
        if self.tensor_keys.pad_mask is not None:
            keys.append(self.tensor_keys.pad_mask)
        self.in_keys = list(dict.fromkeys(keys))
        self.out_keys = ["loss_bc"]
        self._in_keys_extra = list(getattr(self.actor_network, "in_keys", []))

    def _required_key_names(self):
        return ("action",)

    def _prediction(self, td: TensorDictBase, expert: torch.Tensor) -> torch.Tensor:
        pred = td.get(self.tensor_keys.action)
        if pred is not expert:
            return pred
        legacy = td.get("action", None)
        if legacy is not None and legacy is not expert:
            # TorchRL's released behaviour, deprecated there until v0.16
            warnings.warn(
                f"{type(self).__name__}: the actor wrote its prediction at 'action' while the "
                f"loss's action key is {self.tensor_keys.action!r}; reading the prediction from "
                "the hardcoded 'action' key is deprecated (as in TorchRL, until its v0.16): make "
                "the actor's out_keys match the loss's action key",
                FutureWarning,
                stacklevel=3,
            )
            return legacy
        raise RuntimeError(
            f"{type(self).__name__}: the actor did not write a prediction at "
            f"{self.tensor_keys.action!r}; make its out_keys match the loss's action key "
            "(loss.set_keys(action=...))"
        )

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the behaviour-cloning loss.

        Returns:
            a TensorDict with ``loss_bc``.
        """
        expert = self._get(tensordict, "action")
        td = tensordict.copy()
        fn = self.loss_function
        if fn is None and _is_stochastic(self.actor_network):
            loss = -self.actor_network.get_dist(td).log_prob(expert)
        else:
            td = self.actor_network(td)
            pred = self._prediction(td, expert)
            if fn is None:
                fn = "l2" if expert.is_floating_point() else "cross_entropy"
            loss = _FUNCTIONS[fn](pred, expert) if isinstance(fn, str) else fn(pred, expert)
        keep = None
        if self.tensor_keys.pad_mask is not None:
            pad = tensordict.get(self.tensor_keys.pad_mask, None)
            if pad is not None:
                keep = ~pad.bool()
                if keep.ndim > loss.ndim:
                    raise RuntimeError(
                        f"pad_mask {self.tensor_keys.pad_mask!r} has more dimensions "
                        f"({keep.ndim}) than the loss ({loss.ndim}): masking needs an "
                        "element-wise loss (e.g. loss_function='l1')"
                    )
        # the pad mask and the input's validity masks (loss_mask_key, e.g. the
        # ("collector", "mask") of padded slices)
        return TensorDict(loss_bc=self._reduce_loss(loss, tensordict, mask=keep))
