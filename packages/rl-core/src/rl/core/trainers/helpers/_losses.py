"""Loss builders of a config-driven script (TorchRL's ``trainers.helpers.losses``).

The losses and target updaters come from rl-objectives (``pip install
"rl-core[helpers]"``), imported when a builder runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._config import field, require

__all__ = [
    "A2CLossConfig",
    "LossConfig",
    "PPOLossConfig",
    "make_dqn_loss",
    "make_target_updater",
]

_LOSS_KINDS = ("single", "double")


def make_target_updater(cfg: Any, loss_module: Any) -> Any | None:
    """The target-network updater ``cfg`` asks for (:class:`LossConfig` fields).

    With ``cfg.loss == "double"`` (target networks), a ``SoftUpdate`` with
    ``eps = 1 - 1 / cfg.value_network_update_interval``, or with ``cfg.hard_update`` a
    ``HardUpdate`` copying the weights every ``value_network_update_interval`` steps;
    with ``"single"`` (no target networks), ``None``.

    Args:
        cfg: the config.
        loss_module: the loss whose target parameters are updated.

    Returns:
        ``SoftUpdate``, ``HardUpdate`` or ``None``.

    Raises:
        ValueError: ``cfg.hard_update`` is set with a single loss (TorchRL raises
            ``RuntimeError``), or ``cfg.loss`` is neither ``"single"`` nor ``"double"``.
    """
    needed = "make_target_updater"
    loss = field(cfg, "loss", needed, "LossConfig")
    hard_update = field(cfg, "hard_update", needed, "LossConfig")
    if loss not in _LOSS_KINDS:
        raise ValueError(f"cfg.loss must be one of {_LOSS_KINDS}, got {loss!r}")
    if loss != "double":
        if hard_update:
            raise ValueError(
                "cfg.hard_update needs target networks: use cfg.loss='double' or drop hard_update"
            )
        return None
    objectives = require("rl.objectives", needed)
    interval = field(cfg, "value_network_update_interval", needed, "LossConfig")
    if hard_update:
        return objectives.HardUpdate(loss_module, value_network_update_interval=interval)
    return objectives.SoftUpdate(loss_module, eps=1 - 1 / interval)


def make_dqn_loss(model: Any, cfg: Any) -> tuple[Any, Any | None]:
    """The DQN loss of ``model`` and its target updater, read from ``cfg``.

    ``DistributionalDQNLoss`` with ``cfg.distributional`` (``model`` a
    ``DistributionalQValueActor``), else ``DQNLoss`` with ``cfg.loss_function``; target
    networks with ``cfg.loss == "double"``; the TD(0) value estimator with ``cfg.gamma``.

    Args:
        model: the Q-value actor.
        cfg: a config with :class:`LossConfig` fields and ``distributional``.

    Returns:
        ``(loss_module, target_net_updater)`` (the updater is None for a single loss).

    Raises:
        ValueError: ``cfg.loss`` is neither ``"single"`` nor ``"double"`` (TorchRL raises
            a bare ``NotImplementedError``).
    """
    needed = "make_dqn_loss"
    loss = field(cfg, "loss", needed, "LossConfig")
    if loss not in _LOSS_KINDS:
        raise ValueError(f"cfg.loss must be one of {_LOSS_KINDS}, got {loss!r}")
    gamma = field(cfg, "gamma", needed, "LossConfig")
    objectives = require("rl.objectives", needed)
    delay_value = loss == "double"
    if field(cfg, "distributional", needed, "DiscreteModelConfig"):
        loss_module = objectives.DistributionalDQNLoss(model, gamma=gamma, delay_value=delay_value)
    else:
        loss_module = objectives.DQNLoss(
            model,
            loss_function=field(cfg, "loss_function", needed, "LossConfig"),
            delay_value=delay_value,
        )
    loss_module.make_value_estimator(gamma=gamma)
    return loss_module, make_target_updater(cfg, loss_module)


@dataclass
class LossConfig:
    """The loss fields of a (DQN, SAC, DDPG, ...) script's config."""

    loss: str = "double"
    """``"double"`` (with target networks) or ``"single"``."""
    hard_update: bool = False
    """Copy the target weights every ``value_network_update_interval`` steps rather than
    averaging them."""
    loss_function: str = "smooth_l1"
    """Value loss: ``"l1"``, ``"l2"`` or ``"smooth_l1"``."""
    value_network_update_interval: int = 1000
    """Steps between hard updates; a soft update uses ``eps = 1 - 1 / interval``."""
    gamma: float = 0.99
    """Discount factor."""
    num_q_values: int = 2
    """Q-value networks (the smallest prediction is used)."""
    target_entropy: Any = None
    """Target entropy of the policy (``None``: minus the action dimension)."""


@dataclass
class A2CLossConfig:
    """The loss fields of an A2C script's config."""

    gamma: float = 0.99
    """Discount factor."""
    entropy_coeff: float = 1e-3
    """Weight of the entropy bonus."""
    critic_coeff: float = 1.0
    """Weight of the critic loss."""
    critic_loss_function: str = "smooth_l1"
    """Critic loss: ``"l1"``, ``"l2"`` or ``"smooth_l1"``."""


@dataclass
class PPOLossConfig:
    """The loss fields of a PPO script's config."""

    loss: str = "clip"
    """``"clip"``, ``"kl"`` or ``"base"``."""
    gamma: float = 0.99
    """Discount factor."""
    lmbda: float = 0.95
    """GAE lambda."""
    entropy_bonus: bool = True
    """Add an entropy bonus."""
    entropy_coeff: float = 1e-3
    """Weight of the entropy bonus."""
    samples_mc_entropy: int = 1
    """Samples of the Monte-Carlo entropy estimate (no closed form)."""
    loss_function: str = "smooth_l1"
    """Critic loss: ``"l1"``, ``"l2"`` or ``"smooth_l1"``."""
    critic_coeff: float = 1.0
    """Weight of the critic loss."""
    clip_epsilon: float = 0.2
    """Clipping of the ratio (clip loss)."""
    dtarg: float = 0.01
    """Target KL divergence (kl loss)."""
    beta: float = 1.0
    """Initial KL weight (kl loss)."""
    increment: float = 2
    """Factor of beta when the KL exceeds the target (>= 1)."""
    decrement: float = 0.5
    """Factor of beta when the KL is below the target (<= 1)."""
    samples_mc_kl: int = 1
    """Samples of the Monte-Carlo KL estimate."""
