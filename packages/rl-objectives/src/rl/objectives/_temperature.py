"""The entropy temperature of the soft actor-critic family, learned or fixed.

SAC, discrete SAC, REDQ, CrossQ, TQC and CQL weigh the policy's entropy by
``alpha = exp(log_alpha)`` and tune it towards a target entropy with
``loss_alpha = -log_alpha * (log pi(a|s) + target_entropy)`` (Haarnoja et al., 2018,
https://arxiv.org/abs/1812.05905). :class:`_EntropyTemperature` is that one mechanism,
mixed into those losses: it registers ``log_alpha`` (a parameter, or a buffer with
``fixed_alpha=True``), ``alpha_init`` and ``_target_entropy`` on the loss itself, so that
``loss.log_alpha`` and the state_dict keys are TorchRL's.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._actions import _action_dims
from ._reduction import _reduce

__all__: list[str] = []


class _EntropyTemperature:
    """Mixin of a ``LossModule`` with a temperature ``alpha`` and a target entropy.

    Call :meth:`_init_temperature` in ``__init__`` (after ``super().__init__()``); read
    the temperature with :attr:`_alpha` (no gradient), train it with
    :meth:`_alpha_loss`. ``target_entropy="auto"`` is sized by the loss: minus the number
    of action dimensions (:meth:`_action_entropy_target`) or, for discrete actions, a
    fraction of ``log(num_actions)``; a loss that could not size it at construction can
    size it from the first batch with :meth:`_size_target_entropy`.
    """

    _schedulable_buffers = frozenset({"alpha_init", "log_alpha", "max_log_alpha", "min_log_alpha"})

    #: ``True``: the clamp to ``[min_alpha, max_alpha]`` writes ``log_alpha`` back
    #: (SAC, CQL, ...). ``False``: only the value read is clamped and ``log_alpha`` stays
    #: where the optimizer put it (REDQ, as TorchRL).
    _clamp_log_alpha_in_place = True
    #: how to size ``target_entropy="auto"`` when it is asked for before it is known
    _target_entropy_hint = (
        "give action_spec=..., an actor with a spec, or run a batch through the loss first"
    )

    def _init_temperature(
        self,
        alpha_init: float,
        min_alpha: float | None,
        max_alpha: float | None,
        fixed_alpha: bool,
        target_entropy: str | float,
        auto_target_entropy: float | None,
    ) -> None:
        """Register ``log_alpha``, ``alpha_init`` and ``_target_entropy``.

        Args:
            alpha_init (float): the initial temperature, ``> 0``.
            min_alpha, max_alpha (float, optional): clamp of the temperature; one bound
                alone clamps on that side only. ``0`` or ``None`` means no bound.
            fixed_alpha (bool): keep ``log_alpha`` as a buffer (not trained).
            target_entropy (float or "auto"): the entropy aimed at.
            auto_target_entropy (float, optional): what ``"auto"`` means for this loss,
                ``None`` when it cannot be told yet.

        Raises:
            ValueError: on ``alpha_init <= 0``, ``max_alpha <= 0`` or a string
                ``target_entropy`` other than ``"auto"``.
        """
        if alpha_init <= 0:
            raise ValueError(f"alpha_init must be > 0, got {alpha_init}")
        if (min_alpha is None) != (max_alpha is None):
            min_alpha = 0.0 if min_alpha is None else min_alpha
            max_alpha = 1e9 if max_alpha is None else max_alpha
        if max_alpha is not None and max_alpha <= 0:
            raise ValueError(f"max_alpha must be None or > 0, got {max_alpha}")
        self.min_log_alpha = math.log(min_alpha) if min_alpha else None
        self.max_log_alpha = math.log(max_alpha) if max_alpha else None
        self.fixed_alpha = fixed_alpha
        self.register_buffer("alpha_init", torch.tensor(float(alpha_init)))
        log_alpha = torch.tensor(math.log(alpha_init))
        if fixed_alpha:
            self.register_buffer("log_alpha", log_alpha)
        else:
            self.log_alpha = nn.Parameter(log_alpha)
        if target_entropy == "auto":
            target_entropy = auto_target_entropy
        elif isinstance(target_entropy, str):
            raise ValueError(f"target_entropy must be a number or 'auto', got {target_entropy!r}")
        self.register_buffer(
            "_target_entropy",
            None if target_entropy is None else torch.tensor(float(target_entropy)),
        )

    def _action_entropy_target(self, action_spec, actor: nn.Module) -> float | None:
        """``"auto"`` for continuous actions: minus the number of action dimensions.

        Read from ``action_spec``, else from the actor's ``spec``; ``None`` when neither
        tells.
        """
        key = self.tensor_keys.action
        dims = _action_dims(action_spec, key)
        if dims is None:
            dims = _action_dims(getattr(actor, "spec", None), key)
        return None if dims is None else -float(dims)

    def _size_target_entropy(self, value: float, device: torch.device) -> None:
        """Set ``target_entropy="auto"`` to ``value`` if it was not sized yet."""
        if self._target_entropy is None:
            self._target_entropy = torch.tensor(value, device=device)

    @property
    def target_entropy(self) -> torch.Tensor:
        """The entropy the temperature steers the policy towards.

        Raises:
            RuntimeError: when ``target_entropy="auto"`` has not been sized yet.
        """
        if self._target_entropy is None:
            raise RuntimeError(
                f"target_entropy='auto' could not be sized for {type(self).__name__}: "
                f"{self._target_entropy_hint}"
            )
        return self._target_entropy

    @property
    def _alpha(self) -> torch.Tensor:
        """``exp(log_alpha)`` clamped to ``[min_alpha, max_alpha]``, without gradient."""
        if self.min_log_alpha is None and self.max_log_alpha is None:
            return self.log_alpha.detach().exp()
        if not self._clamp_log_alpha_in_place:
            return self.log_alpha.detach().clamp(self.min_log_alpha, self.max_log_alpha).exp()
        with torch.no_grad():
            self.log_alpha.clamp_(self.min_log_alpha, self.max_log_alpha)
        return self.log_alpha.detach().exp()

    def _alpha_loss(self, log_prob: torch.Tensor) -> torch.Tensor:
        """``-log_alpha * (log_prob + target_entropy)``, element-wise; trains ``log_alpha`` only."""
        return -self.log_alpha * (log_prob.detach() + self.target_entropy)

    def _reduced_alpha_loss(
        self,
        log_prob: torch.Tensor,
        reduction: str,
        weights: torch.Tensor | None,
        mean_log_prob: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """:meth:`_alpha_loss` reduced as ``reduction`` says, weighted by ``weights``.

        An unweighted mean whose ``mean_log_prob`` (of the detached ``log_prob``) the
        caller has already (for the entropy it reports) is ``-log_alpha * (mean_log_prob +
        target_entropy)``: a product of scalars instead of one over the batch, in the
        forward and the backward (the same number up to rounding).
        """
        if reduction == "mean" and weights is None and mean_log_prob is not None:
            return -self.log_alpha * (mean_log_prob + self.target_entropy)
        return _reduce(self._alpha_loss(log_prob), reduction, weights)
