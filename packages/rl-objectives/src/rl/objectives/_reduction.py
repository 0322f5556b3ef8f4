"""From per-sample errors to a loss value: distances, importance weights and reduction.

Every loss measures its terms with :func:`distance_loss`, reduces them with
:func:`_reduce` and, where TorchRL offers ``scalar_output_mode``, packs them with
:func:`_loss_output`; the argument checks of ``loss_function`` and ``reduction`` live
here so that every loss words its errors the same way.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from tensordict import TensorDict

__all__ = ["distance_loss"]

_LOSS_FUNCTIONS = ("l1", "l2", "smooth_l1")
_REDUCTIONS = ("mean", "sum", "none")
_DISTANCES = {"l1": F.l1_loss, "l2": F.mse_loss, "smooth_l1": F.smooth_l1_loss}


def _check_choice(name: str, value, valid: tuple[str, ...]):
    """``value`` when it is one of ``valid``, else a ``ValueError`` naming ``name``."""
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid ones are {list(valid)}")
    return value


def _check_reduction(reduction: str | None) -> str:
    """``reduction`` checked; ``None`` is ``"mean"``, as in TorchRL."""
    return _check_choice("reduction", "mean" if reduction is None else reduction, _REDUCTIONS)


def _check_scalar_output_mode(mode: str | None) -> str:
    """``scalar_output_mode`` checked; ``None`` is ``"exclude"``."""
    return _check_choice(
        "scalar_output_mode", "exclude" if mode is None else mode, ("exclude", "non_tensor")
    )


def _check_loss_function(loss_function: str, name: str = "loss_function") -> str:
    return _check_choice(name, loss_function, _LOSS_FUNCTIONS)


def distance_loss(
    v1: torch.Tensor,
    v2: torch.Tensor,
    loss_function: Literal["l2", "l1", "smooth_l1"],
    strict_shape: bool = True,
) -> torch.Tensor:
    """Element-wise distance between two tensors (no reduction).

    Args:
        v1 (Tensor): predictions, any shape.
        v2 (Tensor): targets, the shape of ``v1`` unless ``strict_shape=False``.
        loss_function (str): ``"l2"`` (squared error), ``"l1"`` or ``"smooth_l1"``
            (Huber with delta 1).
        strict_shape (bool): raise when the shapes differ. Defaults to ``True``.

    Returns:
        a tensor of the broadcast shape of ``v1`` and ``v2``.

    Raises:
        ValueError: on an unknown ``loss_function`` or mismatched shapes.

    Examples:
        >>> import torch
        >>> from rl.objectives import distance_loss
        >>> distance_loss(torch.tensor([1.0, 3.0]), torch.tensor([0.0, 0.0]), "l2")
        tensor([1., 9.])
    """
    if strict_shape and v1.shape != v2.shape:
        raise ValueError(
            f"distance_loss got tensors of shapes {tuple(v1.shape)} and {tuple(v2.shape)}; "
            "they must match (or pass strict_shape=False)"
        )
    distance = _DISTANCES.get(loss_function)
    if distance is None:
        _check_loss_function(loss_function)
    return distance(v1, v2, reduction="none")


def _reduce(
    loss: torch.Tensor, reduction: str, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """``loss`` (``[*B]``) weighted by ``weights`` (any shape with ``*B``'s elements),
    then averaged, summed or returned as is (``reduction="none"``)."""
    if weights is not None:
        loss = loss * weights.reshape(loss.shape)
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _loss_output(
    losses: dict,
    scalars: dict,
    *,
    reduction: str,
    scalar_output_mode: str,
    batch_size,
    kept: tuple[str, ...] = (),
) -> TensorDict:
    """The TensorDict a loss returns: its ``losses`` followed by its ``scalars``.

    With ``reduction="none"`` the losses are per sample (a TensorDict of ``batch_size``)
    and scalars do not fit it: ``scalar_output_mode="exclude"`` leaves them out (but for
    those named in ``kept``), ``"non_tensor"`` stores them as non-tensor data.
    """
    if reduction != "none":
        return TensorDict({**losses, **scalars})
    out = TensorDict(losses, batch_size=batch_size)
    for key, value in scalars.items():
        if key in kept or scalar_output_mode == "non_tensor":
            out.set_non_tensor(key, value)
    return out


def _clip_epsilon(clip_epsilon: float | tuple[float, float]) -> tuple[float, float]:
    """``(eps_low, eps_high)`` of a symmetric ``eps`` or an ``(eps_low, eps_high)`` pair.

    Raises:
        ValueError: on a pair of another length, a negative value, or ``eps_low >= 1``.
    """
    if isinstance(clip_epsilon, (tuple, list)):
        if len(clip_epsilon) != 2:
            raise ValueError(f"clip_epsilon tuple must have length 2, got {clip_epsilon}")
        low, high = float(clip_epsilon[0]), float(clip_epsilon[1])
    else:
        low = high = float(clip_epsilon)
    if low < 0 or high < 0:
        raise ValueError(f"clip_epsilon values must be non-negative, got ({low}, {high})")
    if low >= 1:
        raise ValueError(f"clip_epsilon low must be < 1 (so that 1 - low > 0), got {low}")
    return low, high
