"""KL-coefficient controllers for RLHF rewards (``reward - kl_coef * KL``).

:class:`ConstantKLController` keeps the coefficient fixed; :class:`AdaptiveKLController`
moves it towards a target KL as in Ziegler et al., "Fine-Tuning Language Models from Human
Preferences" (https://arxiv.org/abs/1909.08593, section 2.2).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["AdaptiveKLController", "ConstantKLController", "KLControllerBase"]


class KLControllerBase(abc.ABC):
    """A KL controller: :meth:`update` takes the latest KL terms and returns the coefficient.

    When a ``model`` is given, its ``kl_coef`` attribute follows the coefficient.
    """

    coef: float
    model: nn.Module | None

    @abc.abstractmethod
    def update(self, kl_values: Sequence[float]) -> float:
        """Updates the coefficient from ``kl_values`` and returns it."""

    def _sync_model(self) -> None:
        if self.model is not None:
            self.model.kl_coef = self.coef


class ConstantKLController(KLControllerBase):
    """A KL coefficient that never changes, whatever :meth:`update` is given.

    Keyword Args:
        kl_coef: the coefficient the KL is multiplied by in the reward.
        model: a module with a ``kl_coef`` attribute, set to ``kl_coef`` (optional).

    Raises:
        AttributeError: ``model`` has no ``kl_coef`` attribute.

    Examples:
        >>> from rl.data.llm import ConstantKLController
        >>> ConstantKLController(kl_coef=0.1).update([0.5, 2.0])
        0.1
    """

    def __init__(self, *, kl_coef: float | None = None, model: nn.Module | None = None):
        if model is not None and not hasattr(model, "kl_coef"):
            raise AttributeError(
                f"ConstantKLController needs a model with a 'kl_coef' attribute, got "
                f"{type(model).__name__} without one"
            )
        self.model = model
        self.coef = kl_coef
        self._sync_model()

    def update(self, kl_values: Sequence[float] | None = None) -> float:
        """Returns the constant coefficient (``kl_values`` are ignored)."""
        self._sync_model()
        return self.coef


class AdaptiveKLController(KLControllerBase):
    """A KL coefficient driven towards a target KL (Ziegler et al. 2019, section 2.2).

    ``kl_values`` are the KL terms of the reward, ``-coef * KL`` (as
    :class:`RolloutFromModel` stores them). With ``KL = -mean(kl_values) / coef`` and
    ``e = clip(KL / target - 1, -0.2, 0.2)``, one update multiplies the coefficient by
    ``1 + e * len(kl_values) / horizon``: it grows when the policy strays further than
    ``target`` from the reference model, and shrinks when it stays closer.

    Keyword Args:
        init_kl_coef: the starting coefficient.
        target: the KL aimed at.
        horizon: how many steps a full correction is spread over (larger: gentler).
        model: a module whose ``kl_coef`` attribute follows the coefficient (optional).

    Examples:
        >>> from rl.data.llm import AdaptiveKLController
        >>> ctl = AdaptiveKLController(init_kl_coef=0.1, target=1.0, horizon=10)
        >>> round(ctl.update([-0.2, -0.2]), 4)  # KL = 2 > target: e = 0.2, x (1 + 0.2 * 2 / 10)
        0.104
    """

    def __init__(
        self,
        *,
        init_kl_coef: float,
        target: float,
        horizon: int,
        model: nn.Module | None = None,
    ):
        self.model = model
        self.coef = init_kl_coef
        self.target = target
        self.horizon = horizon
        self._sync_model()

    def update(self, kl_values: Sequence[float]) -> float:
        """Moves the coefficient from the KL terms of the last ``len(kl_values)`` steps.

        Args:
            kl_values: the reward's KL terms (``-coef * KL``) since the last update.

        Returns:
            The new coefficient (also in ``self.coef`` and the model's ``kl_coef``).

        Raises:
            ValueError: ``kl_values`` is ``None`` or empty.
        """
        if kl_values is None or len(kl_values) == 0:
            raise ValueError(
                f"AdaptiveKLController.update needs the KL values of the last steps, got "
                f"{kl_values!r}"
            )
        n_steps = len(kl_values)
        kl = -float(torch.as_tensor([float(v) for v in kl_values]).mean()) / self.coef
        error = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.coef = self.coef * (1.0 + error * n_steps / self.horizon)
        self._sync_model()
        return self.coef
