"""Discrete distributions: one-hot, masked and ordinal categoricals."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import torch
import torch.nn.functional as F
from torch import distributions as D

__all__ = [
    "MaskedCategorical",
    "MaskedOneHotCategorical",
    "OneHotCategorical",
    "OneHotOrdinal",
    "Ordinal",
    "ReparamGradientStrategy",
]


class ReparamGradientStrategy(Enum):
    """How a one-hot distribution's :meth:`rsample` passes gradients.

    ``PassThrough``: the one-hot sample plus ``probs - probs.detach()`` (the gradient of the
    probabilities). ``RelaxedOneHot``: a straight-through sample of a
    :class:`~torch.distributions.RelaxedOneHotCategorical` with temperature 1.
    """

    PassThrough = 1
    RelaxedOneHot = 2


def _squeeze_singleton(name: str, params: torch.Tensor | None) -> torch.Tensor | None:
    if params is None:
        return None
    if params.ndim == 0:
        raise ValueError(
            f"{name} needs logits or probs with the categories along the last "
            f"dimension, got a tensor of shape {tuple(params.shape)}"
        )
    # TorchRL drops a trailing singleton dimension (a [B, 1] output of size-1 features).
    if params.shape[-1] == 1 and params.ndim > 1:
        params = params[..., 0]
    return params


def _check_one(name: str, logits, probs) -> None:
    if (logits is None) == (probs is None):
        given = "both" if logits is not None else "neither"
        raise ValueError(
            f"Either `probs` or `logits` must be specified, but not both: {name} got {given}"
        )


def _straight_through(
    one_hot: torch.Tensor,
    logits: torch.Tensor,
    grad_method: ReparamGradientStrategy,
    sample_shape: torch.Size,
) -> torch.Tensor:
    if grad_method == ReparamGradientStrategy.PassThrough:
        probs = logits.softmax(-1)
        return one_hot.to(probs.dtype) + (probs - probs.detach())
    if grad_method == ReparamGradientStrategy.RelaxedOneHot:
        relaxed = D.RelaxedOneHotCategorical(
            torch.ones((), dtype=logits.dtype, device=logits.device), logits=logits
        ).rsample(sample_shape)
        hard = F.one_hot(relaxed.argmax(-1), relaxed.shape[-1]).to(relaxed.dtype)
        return hard + (relaxed - relaxed.detach())
    raise ValueError(f"Unknown grad_method {grad_method!r}")


def _gumbel_max_index(logits: torch.Tensor, sample_shape: Sequence[int] = ()) -> torch.Tensor:
    """Category indices drawn from ``softmax(logits)`` (shape ``[*sample_shape, *batch]``)
    by the Gumbel-max trick: ``argmax(logits + G)``, ``G = -log(-log(U))``, ``U`` uniform.

    The law of ``torch.multinomial``'s draw, written as elementwise ops and one reduction,
    which a compiled graph fuses into one kernel; inductor leaves ``torch.multinomial`` an
    opaque call (on CPU, 40% of a compiled CartPole policy's step). rl's categoricals
    (``OneHotCategorical``, ``MaskedCategorical`` and its one-hot form) and torch's
    ``Categorical`` drawn by a ProbabilisticActor draw this way under ``torch.compile``
    only: an eager draw keeps torch's ``multinomial`` and its random stream (as TorchRL's);
    a compiled run's draws follow another stream, the same law. A row with no finite
    logit (NaN, or every category masked) raises, as ``multinomial`` does (on CUDA, a
    device-side assert, which leaves the CUDA context unusable).
    """
    logits = logits.detach()
    torch._assert_async(
        (logits.isfinite().any(-1) & ~logits.isnan().any(-1)).all(),
        "categorical draw: a row of logits is NaN or has no finite entry (every category masked)",
    )
    dtype = torch.promote_types(logits.dtype, torch.float32)
    shape = (*sample_shape, *logits.shape)
    # U > 0: a finite G for every category (U = 0 would rule out a row's only one)
    uniform = torch.rand(shape, dtype=dtype, device=logits.device).clamp_min_(
        torch.finfo(dtype).tiny
    )
    return (logits.to(dtype) - torch.log(-torch.log(uniform))).argmax(-1)


def _draw_index(dist: D.Categorical, sample_shape: torch.Size) -> torch.Tensor:
    """``dist``'s category indices: Gumbel-max under ``torch.compile``, else torch's draw.

    Compiled, the draw reads the log of ``dist.probs``, as ``multinomial`` reads the
    probabilities: a zero probability is never drawn (torch's ``logits`` of a
    distribution built from ``probs`` clamp it to ``log(eps)``)."""
    if torch.compiler.is_compiling():
        dtype = torch.promote_types(dist.probs.dtype, torch.float32)
        return _gumbel_max_index(dist.probs.to(dtype).log(), sample_shape)
    return D.Categorical.sample(dist, sample_shape)


class OneHotCategorical(D.Categorical):
    """A categorical distribution over one-hot encoded values.

    As :class:`torch.distributions.Categorical`, but :meth:`sample`, :attr:`mode` and
    :attr:`deterministic_sample` return ``torch.long`` one-hot tensors and
    :meth:`log_prob` reads one. :meth:`rsample` returns a one-hot sample that carries a
    gradient, chosen by ``grad_method``.

    Args:
        logits (torch.Tensor, optional): unnormalized log-probabilities, shape
            ``[*batch, n]`` (a trailing dimension of size 1 is dropped, as in TorchRL).
        probs (torch.Tensor, optional): probabilities, same shape. Exactly one of
            ``logits`` and ``probs``.
        grad_method (ReparamGradientStrategy, optional): how :meth:`rsample` passes
            gradients. Defaults to ``ReparamGradientStrategy.PassThrough``.
        **kwargs: passed to :class:`torch.distributions.Categorical`.

    Raises:
        ValueError: if neither or both of ``logits``/``probs`` are given, or they are 0-d.

    Examples:
        >>> import torch
        >>> from rl.modules import OneHotCategorical
        >>> dist = OneHotCategorical(logits=torch.tensor([0.0, 2.0, 1.0]))
        >>> dist.mode
        tensor([0, 1, 0])
        >>> dist.log_prob(torch.tensor([0, 1, 0]))
        tensor(-0.4076)
    """

    num_params: int = 1

    def __init__(
        self,
        logits: torch.Tensor | None = None,
        probs: torch.Tensor | None = None,
        grad_method: ReparamGradientStrategy = ReparamGradientStrategy.PassThrough,
        **kwargs,
    ) -> None:
        name = type(self).__name__
        _check_one(name, logits, probs)
        logits = _squeeze_singleton(name, logits)
        probs = _squeeze_singleton(name, probs)
        self.grad_method = grad_method
        # torch's per-call argument checks cost more than the sampling here; TorchRL turns
        # them off for every distribution (the value checks below stay)
        kwargs.setdefault("validate_args", False)
        super().__init__(probs=probs, logits=logits, **kwargs)
        self.num_samples = self._num_events

    def _check_value(self, value: torch.Tensor) -> None:
        if value.ndim == 0 or value.shape[-1] != self._num_events:
            raise ValueError(
                f"{type(self).__name__}.log_prob expects one-hot values with "
                f"{self._num_events} categories along the last dimension, got shape "
                f"{tuple(value.shape)}"
            )

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """Log-probability of one-hot ``value`` (shape ``[*sample, *batch, n]``)."""
        self._check_value(value)
        return super().log_prob(value.argmax(dim=-1))

    @property
    def mode(self) -> torch.Tensor:
        """One-hot encoding of the most likely category (the first of ties)."""
        return F.one_hot(self.logits.argmax(-1), self._num_events)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode

    def sample(self, sample_shape: torch.Size | Sequence[int] = ()) -> torch.Tensor:
        return F.one_hot(_draw_index(self, torch.Size(sample_shape)), self._num_events)

    def rsample(self, sample_shape: torch.Size | Sequence[int] = ()) -> torch.Tensor:
        """A one-hot sample that carries a gradient (see ``grad_method``)."""
        sample_shape = torch.Size(sample_shape)
        if self.grad_method == ReparamGradientStrategy.RelaxedOneHot:
            return _straight_through(None, self.logits, self.grad_method, sample_shape)
        return _straight_through(
            self.sample(sample_shape), self.logits, self.grad_method, sample_shape
        )


class MaskedCategorical(D.Categorical):
    """A categorical distribution restricted to the allowed actions.

    Disallowed categories get logit ``neg_inf``, so they are never sampled and their
    log-probability is ``neg_inf``; the others are renormalized. The allowed set is a
    boolean ``mask`` of the logits' shape (``True`` = allowed) or, sparse, ``indices``:
    a ``long`` tensor ``[*batch, k]`` listing allowed categories (then ``logits`` hold the
    scores of all ``n`` categories, and entries equal to ``padding_value`` are padding).

    Args:
        logits (torch.Tensor, optional): unnormalized log-probabilities ``[*batch, n]``.
        probs (torch.Tensor, optional): probabilities ``[*batch, n]``; masked entries are
            zeroed and the rest renormalized. Exactly one of ``logits`` and ``probs``.

    Keyword Args:
        mask (torch.Tensor, optional): boolean, broadcastable to the logits. Exclusive
            with ``indices``.
        indices (torch.Tensor, optional): allowed categories, ``[*batch, k]``.
        neg_inf (float, optional): log-probability of disallowed categories. Defaults to
            ``-inf``.
        padding_value (int, optional): value that marks padding in ``indices``.
        use_cross_entropy (bool, optional): kept for TorchRL compatibility; the
            log-probability is always a gather of normalized logits. Defaults to ``True``.
        padding_side (str, optional): kept for TorchRL compatibility. Defaults to
            ``"left"``.

    Raises:
        ValueError: without exactly one of ``mask``/``indices`` or of ``logits``/``probs``,
            or if the mask does not broadcast to the logits.
        TypeError: if ``mask`` is not boolean or ``indices`` not integer.

    Examples:
        >>> import torch
        >>> from rl.modules import MaskedCategorical
        >>> logits = torch.zeros(4)
        >>> dist = MaskedCategorical(logits=logits, mask=torch.tensor([True, True, False, True]))
        >>> dist.log_prob(torch.tensor([0, 2]))
        tensor([-1.0986,    -inf])
        >>> dist = MaskedCategorical(logits=logits, indices=torch.tensor([1, 3]))
        >>> dist.log_prob(torch.tensor([3, 0]))
        tensor([-0.6931,    -inf])
    """

    def __init__(
        self,
        logits: torch.Tensor | None = None,
        probs: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        indices: torch.Tensor | None = None,
        neg_inf: float = float("-inf"),
        padding_value: int | None = None,
        use_cross_entropy: bool = True,
        padding_side: str = "left",
    ) -> None:
        name = type(self).__name__
        _check_one(name, logits, probs)
        if (mask is None) == (indices is None):
            given = "both" if mask is not None else "neither"
            raise ValueError(
                f"{name}: exactly one of mask or indices must be provided, got {given}"
            )
        if probs is not None:
            logits = probs.log()
        if logits.ndim == 0:
            raise ValueError(
                f"{name} needs logits with the categories along the last dimension, "
                f"got shape {tuple(logits.shape)}"
            )
        self.neg_inf = neg_inf
        self.use_cross_entropy = use_cross_entropy
        self._padding_value = padding_value
        self._padding_side = padding_side
        self.num_samples = logits.shape[-1]
        if mask is not None:
            if mask.dtype != torch.bool:
                raise TypeError(f"{name} mask must be boolean, got dtype {mask.dtype}")
            try:
                shape = torch.broadcast_shapes(mask.shape, logits.shape)
            except RuntimeError:
                shape = None
            if shape is None or shape[-1] != logits.shape[-1]:
                raise ValueError(
                    f"{name} mask of shape {tuple(mask.shape)} does not broadcast to the "
                    f"logits of shape {tuple(logits.shape)}"
                )
            self._sparse_mask = False
            self._mask = mask
            masked = logits.masked_fill(~mask, neg_inf)
        else:
            if indices.dtype.is_floating_point or indices.dtype == torch.bool:
                raise TypeError(
                    f"{name} indices must be an integer tensor, got dtype {indices.dtype}"
                )
            if indices.ndim == 0:
                raise ValueError(
                    f"{name} indices need a last dimension listing the allowed "
                    f"categories, got shape {tuple(indices.shape)}"
                )
            batch = torch.broadcast_shapes(logits.shape[:-1], indices.shape[:-1])
            logits = logits.expand(*batch, logits.shape[-1])
            indices = indices.expand(*batch, indices.shape[-1])
            self._sparse_mask = True
            self._mask = indices
            if padding_value is not None:
                padding = indices == padding_value
                safe = indices.masked_fill(padding, 0)
                masked = logits.gather(-1, safe).masked_fill(padding, neg_inf)
                self._padding = padding
            else:
                masked = logits.gather(-1, indices)
                self._padding = None
        super().__init__(logits=masked, validate_args=False)

    @property
    def padding_value(self) -> int:
        """The padding value of ``indices`` (``0`` when none was given)."""
        return self._padding_value if self._padding_value is not None else 0

    @property
    def padding_side(self) -> str:
        return self._padding_side

    @property
    def mask(self) -> torch.Tensor:
        """The boolean mask (dense masks only)."""
        if self._sparse_mask:
            raise ValueError(f"{type(self).__name__}.mask is not defined for sparse indices")
        return self._mask

    def _to_category(self, position: torch.Tensor) -> torch.Tensor:
        """Maps positions among the allowed ``indices`` to category numbers."""
        idx = self._mask.expand(*position.shape, self._mask.shape[-1])
        return idx.gather(-1, position.unsqueeze(-1)).squeeze(-1)

    def sample(self, sample_shape: torch.Size | Sequence[int] = ()) -> torch.Tensor:
        out = _draw_index(self, torch.Size(sample_shape))
        if self._sparse_mask:
            out = self._to_category(out)
        return out

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """Log-probability of categories ``value`` (shape ``[*sample, *batch]``).

        Disallowed categories get ``neg_inf``.
        """
        if not self._sparse_mask:
            lp = super().log_prob(value)
        else:
            allowed = value.unsqueeze(-1) == self._mask
            if self._padding is not None:
                allowed = allowed & ~self._padding
            position = allowed.int().argmax(-1)
            lp = super().log_prob(position)
            lp = lp.masked_fill(~allowed.any(-1), self.neg_inf)
        return torch.where(lp.isfinite(), lp, self.neg_inf)

    @property
    def mode(self) -> torch.Tensor:
        out = self.logits.argmax(-1)
        if self._sparse_mask:
            out = self._to_category(out)
        return out

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode

    def _full_logits(self) -> torch.Tensor:
        """Normalized logits over all ``num_samples`` categories (``neg_inf`` if disallowed)."""
        if not self._sparse_mask:
            return self.logits
        idx = self._mask
        if self._padding is not None:
            idx = idx.masked_fill(self._padding, 0)
        full = torch.full(
            (*self.logits.shape[:-1], self.num_samples),
            self.neg_inf,
            dtype=self.logits.dtype,
            device=self.logits.device,
        )
        return full.scatter_reduce(-1, idx, self.logits, reduce="amax")


class MaskedOneHotCategorical(MaskedCategorical):
    """The one-hot version of :class:`MaskedCategorical`.

    Samples, :attr:`mode` and :attr:`deterministic_sample` are one-hot over all
    ``num_samples`` categories; :meth:`log_prob` reads one-hot values; :meth:`rsample`
    returns a one-hot sample that carries a gradient (see :class:`ReparamGradientStrategy`).

    Args:
        logits, probs, mask, indices, neg_inf, padding_value: as for
            :class:`MaskedCategorical`.
        grad_method (ReparamGradientStrategy, optional): how :meth:`rsample` passes
            gradients. Defaults to ``ReparamGradientStrategy.PassThrough``.

    Examples:
        >>> import torch
        >>> from rl.modules import MaskedOneHotCategorical
        >>> dist = MaskedOneHotCategorical(
        ...     logits=torch.zeros(3), mask=torch.tensor([False, True, False])
        ... )
        >>> dist.sample()
        tensor([0, 1, 0])
        >>> dist.log_prob(torch.tensor([1, 0, 0]))
        tensor(-inf)
    """

    def __init__(
        self,
        logits: torch.Tensor | None = None,
        probs: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        indices: torch.Tensor | None = None,
        neg_inf: float = float("-inf"),
        padding_value: int | None = None,
        grad_method: ReparamGradientStrategy = ReparamGradientStrategy.PassThrough,
    ) -> None:
        self.grad_method = grad_method
        super().__init__(
            logits=logits,
            probs=probs,
            mask=mask,
            indices=indices,
            neg_inf=neg_inf,
            padding_value=padding_value,
        )

    def sample(self, sample_shape: torch.Size | Sequence[int] = ()) -> torch.Tensor:
        return F.one_hot(super().sample(sample_shape), self.num_samples)

    @property
    def mode(self) -> torch.Tensor:
        return F.one_hot(super().mode, self.num_samples)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """Log-probability of one-hot ``value`` (shape ``[*sample, *batch, n]``)."""
        if value.ndim == 0 or value.shape[-1] != self.num_samples:
            raise ValueError(
                f"{type(self).__name__}.log_prob expects one-hot values with "
                f"{self.num_samples} categories along the last dimension, got shape "
                f"{tuple(value.shape)}"
            )
        return super().log_prob(value.argmax(-1))

    def rsample(self, sample_shape: torch.Size | Sequence[int] = ()) -> torch.Tensor:
        sample_shape = torch.Size(sample_shape)
        logits = self._full_logits()
        if self.grad_method == ReparamGradientStrategy.RelaxedOneHot:
            return _straight_through(None, logits, self.grad_method, sample_shape)
        return _straight_through(self.sample(sample_shape), logits, self.grad_method, sample_shape)


def _ordinal_logits(scores: torch.Tensor) -> torch.Tensor:
    """Logits of the ordinal parametrization (Eq. 4 of Tang & Agrawal, 2020).

    ``logit_k = sum_{j<=k} log sigmoid(s_j) + sum_{j>k} log sigmoid(-s_j)``.

    Args:
        scores: ``[*batch, n]``.

    Returns:
        ``[*batch, n]``.
    """
    up = F.logsigmoid(scores).cumsum(-1)
    down = F.logsigmoid(-scores)
    # sum over j > k of the "not larger" log-probabilities
    after = down.flip(-1).cumsum(-1).flip(-1) - down
    return up + after


class Ordinal(D.Categorical):
    """A categorical over an ordered set, parametrized by scores (Tang & Agrawal, 2020).

    Neighbouring categories share probability mass, which suits actions obtained by
    discretizing a continuous range. See https://arxiv.org/abs/1901.10500, section 5.

    Args:
        scores (torch.Tensor): ``[*batch, n]``, typically a network output.

    Examples:
        >>> import torch
        >>> from rl.modules import Ordinal
        >>> dist = Ordinal(torch.tensor([3.0, 3.0, -3.0, -3.0]))
        >>> int(dist.mode)
        1
    """

    def __init__(self, scores: torch.Tensor) -> None:
        if scores.ndim == 0:
            raise ValueError(
                f"{type(self).__name__} needs scores with the categories along the last "
                f"dimension, got shape {tuple(scores.shape)}"
            )
        super().__init__(logits=_ordinal_logits(scores), validate_args=False)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode


class OneHotOrdinal(OneHotCategorical):
    """The one-hot version of :class:`Ordinal`.

    Args:
        scores (torch.Tensor): ``[*batch, n]``.
    """

    def __init__(self, scores: torch.Tensor) -> None:
        if scores.ndim == 0:
            raise ValueError(
                f"{type(self).__name__} needs scores with the categories along the last "
                f"dimension, got shape {tuple(scores.shape)}"
            )
        super().__init__(logits=_ordinal_logits(scores), validate_args=False)
