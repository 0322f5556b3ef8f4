"""Optimizer helpers of the losses: a KL-driven learning-rate schedule, grouped optimizers."""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["KLAdaptiveLR", "group_optimizers"]


def group_optimizers(*optimizers: torch.optim.Optimizer | None) -> torch.optim.Optimizer:
    """One optimizer over the parameter groups of several optimizers of the same class.

    Each group keeps its own hyperparameters (a critic's learning rate beside an actor's),
    so one ``zero_grad()`` / ``step()`` updates everything. ``None`` entries are skipped.
    The new optimizer starts with empty state (Adam's moments, a step count): group the
    optimizers before the first step.

    Args:
        *optimizers: optimizers of one class (or ``None``).

    Returns:
        a new optimizer of that class holding all their parameter groups.

    Raises:
        ValueError: the optimizers are of different classes, or none is given.

    Examples:
        >>> import torch
        >>> from rl.objectives import group_optimizers
        >>> actor, critic = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
        >>> optim = group_optimizers(
        ...     torch.optim.Adam(actor.parameters(), lr=3e-4),
        ...     torch.optim.Adam(critic.parameters(), lr=1e-3),
        ... )
        >>> [group["lr"] for group in optim.param_groups]
        [0.0003, 0.001]
    """
    cls = None
    groups = []
    for optimizer in optimizers:
        if optimizer is None:
            continue
        if cls is None:
            cls = type(optimizer)
        elif type(optimizer) is not cls:
            raise ValueError(
                "group_optimizers needs optimizers of one class, got "
                f"{cls.__name__} and {type(optimizer).__name__}"
            )
        groups.extend(optimizer.param_groups)
    if cls is None:
        raise ValueError("group_optimizers needs at least one optimizer, got none")
    return cls(groups)


def _positive_finite(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"KLAdaptiveLR {name} must be finite and positive, got {value!r}")
    return value


class KLAdaptiveLR:
    """Scales a learning rate after each update so that the policy's KL stays near a target.

    After an update, :meth:`step` is given the mean KL divergence between the policy
    before and after it: above ``2 * target_kl`` every group's learning rate is divided by
    ``factor``; above 0 but below ``target_kl / 2`` it is multiplied by ``factor``;
    otherwise (and for a KL of exactly 0: a policy that did not move) it is kept. The
    result is clamped to ``[min_lr, max_lr]``. This is the adaptive schedule of rsl_rl's
    PPO (Rudin et al. 2021, "Learning to Walk in Minutes Using Massively Parallel Deep
    Reinforcement Learning", https://arxiv.org/abs/2109.11978); ``ClipPPOLoss``'s
    ``kl_approx`` output can be passed to :meth:`step` as it is. A learning rate held as a
    tensor stays a tensor (updated in place).

    Args:
        optimizer: the optimizer whose groups' ``"lr"`` is rescaled.
        target_kl: the KL divergence aimed at per update (finite, > 0).

    Keyword Args:
        factor: the multiplicative change (finite, > 1; default 1.5).
        min_lr: lower bound of the learning rate (default 1e-5).
        max_lr: upper bound of the learning rate (default 1e-2); ``0 < min_lr <= max_lr``.

    Raises:
        TypeError: ``optimizer`` has no ``param_groups``.
        ValueError: a bad ``target_kl``, ``factor``, ``min_lr`` or ``max_lr``.

    Examples:
        >>> import torch
        >>> from rl.objectives import KLAdaptiveLR
        >>> optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
        >>> scheduler = KLAdaptiveLR(optimizer, target_kl=0.01, factor=2.0)
        >>> scheduler.step(kl=0.05)  # moved too far: halve the learning rate
        >>> scheduler.get_last_lr()
        [0.0005]
        >>> scheduler.step(kl=0.001)  # barely moved: double it
        >>> scheduler.get_last_lr()
        [0.001]
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        target_kl: float,
        *,
        factor: float = 1.5,
        min_lr: float = 1e-5,
        max_lr: float = 1e-2,
    ) -> None:
        if not isinstance(getattr(optimizer, "param_groups", None), list):
            raise TypeError(
                "KLAdaptiveLR needs an optimizer (with param_groups), got "
                f"{type(optimizer).__name__}"
            )
        target_kl = _positive_finite("target_kl", target_kl)
        factor = float(factor)
        if not math.isfinite(factor) or factor <= 1.0:
            raise ValueError(f"KLAdaptiveLR factor must be finite and > 1, got {factor!r}")
        min_lr, max_lr = float(min_lr), float(max_lr)
        if not (0 < min_lr <= max_lr < math.inf):
            raise ValueError(
                f"KLAdaptiveLR needs 0 < min_lr <= max_lr < inf, got min_lr={min_lr!r} "
                f"and max_lr={max_lr!r}"
            )
        self.optimizer = optimizer
        self.target_kl = target_kl
        self.factor = factor
        self.min_lr = min_lr
        self.max_lr = max_lr
        self.last_kl: float | None = None

    def step(self, kl: float | torch.Tensor) -> None:
        """Rescales the learning rates from the KL divergence of the last update.

        Args:
            kl: the mean KL divergence (a float or a one-element tensor).

        Raises:
            ValueError: ``kl`` has more than one element or is not finite.
        """
        if isinstance(kl, torch.Tensor):
            if kl.numel() != 1:
                raise ValueError(
                    f"KLAdaptiveLR.step needs one KL value, got a tensor of shape {tuple(kl.shape)}"
                )
            kl = kl.item()
        kl = float(kl)
        if not math.isfinite(kl):
            raise ValueError(f"KLAdaptiveLR.step needs a finite KL divergence, got {kl!r}")
        if kl > 2.0 * self.target_kl:
            scale = 1.0 / self.factor
        elif 0.0 < kl < 0.5 * self.target_kl:
            scale = self.factor
        else:
            scale = 1.0
        for group in self.optimizer.param_groups:
            lr = group["lr"]
            new = min(self.max_lr, max(self.min_lr, float(lr) * scale))
            if isinstance(lr, torch.Tensor):
                lr.fill_(new)
            else:
                group["lr"] = new
        self.last_kl = kl

    def get_last_lr(self) -> list[float]:
        """The learning rate of each parameter group."""
        return [float(group["lr"]) for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        """The schedule's settings and last KL (the optimizer is saved on its own)."""
        return {
            "target_kl": self.target_kl,
            "factor": self.factor,
            "min_lr": self.min_lr,
            "max_lr": self.max_lr,
            "last_kl": self.last_kl,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned.

        Raises:
            KeyError: a setting is missing from ``state_dict``.
        """
        missing = [k for k in ("target_kl", "factor", "min_lr", "max_lr") if k not in state_dict]
        if missing:
            raise KeyError(
                f"KLAdaptiveLR.load_state_dict is missing {missing}; it has {sorted(state_dict)}"
            )
        self.target_kl = float(state_dict["target_kl"])
        self.factor = float(state_dict["factor"])
        self.min_lr = float(state_dict["min_lr"])
        self.max_lr = float(state_dict["max_lr"])
        self.last_kl = state_dict.get("last_kl")
