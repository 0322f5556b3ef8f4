"""Actions as the losses read them: discrete action spaces, continuous bounds and sizes,
reparameterised samples from the policy.

Discrete actions are one-hot (``[*B, n]``) or indices (``[*B]`` or ``[*B, 1]``); the
space is declared (a name or a spec), read from the network, or, as a last resort, told
apart by shape. Continuous actions are sized and bounded by their spec.
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, set_interaction_type
from tensordict.utils import NestedKey
from torch import nn

from rl.core import Bounded, Categorical, Composite, OneHot, TensorSpec

from ._networks import _network_dist

__all__: list[str] = []

_SPACES = ("one-hot", "categorical")


# ---------------------------------------------------------------- discrete
def _find_action_space(
    action_space, network: nn.Module | None, action_key: NestedKey = "action"
) -> str | None:
    """``"one-hot"``, ``"categorical"`` or ``None`` (undeclared) from ``action_space``.

    ``action_space`` is a name or a spec (a ``Composite`` is read at ``action_key``);
    when ``None``, the network's ``action_space`` or ``spec`` attribute is read instead.
    """
    if action_space is None and network is not None:
        action_space = getattr(network, "action_space", None)
        if action_space is None:
            action_space = getattr(network, "spec", None)
    if isinstance(action_space, Composite):
        action_space = action_space.get(action_key, None)
    if action_space is None:
        return None
    if isinstance(action_space, TensorSpec):
        if isinstance(action_space, OneHot):
            return "one-hot"
        if isinstance(action_space, Categorical):
            return "categorical"
        raise ValueError(
            "discrete-action losses support OneHot and Categorical action specs, got "
            f"{type(action_space).__name__}"
        )
    name = str(action_space).replace("_", "-").lower()
    if name not in _SPACES:
        raise ValueError(f"unknown action_space {action_space!r}; valid ones are {list(_SPACES)}")
    return name


def _resolve_space(space: str | None, action: torch.Tensor, values: torch.Tensor) -> str:
    """The declared ``space``, else ``"one-hot"`` when ``action`` has the shape of ``values``."""
    if space is not None:
        return space
    return "one-hot" if action.shape == values.shape else "categorical"


def _check_action(key, action: torch.Tensor, values: torch.Tensor, space: str) -> None:
    """Rejects an action whose shape does not fit ``space`` next to ``values`` ``[*B, n]``.

    As TorchRL 0.14.1's DQNLoss: one-hot actions are ``[*B, n]``, categorical ones
    ``[*B]`` or ``[*B, 1]`` indices. Shapes only, no data is read (no device sync).
    """
    batch, n = tuple(values.shape[:-1]), values.shape[-1]
    shape = tuple(action.shape)
    if space == "one-hot":
        if shape == (*batch, n):
            return
        hint = ""
        if shape in (batch, (*batch, 1)) and not action.is_floating_point():
            hint = "; it holds action indices: pass action_space='categorical' to the loss"
        raise ValueError(
            f"action {key!r} has shape {shape}, expected {(*batch, n)} (one-hot over the {n} "
            f"actions of action_value) for action_space='one-hot'{hint}"
        )
    if shape in (batch, (*batch, 1)):
        return
    hint = ""
    if shape == (*batch, n):
        hint = "; it looks one-hot: pass action_space='one-hot' to the loss"
    raise ValueError(
        f"action {key!r} has shape {shape}, expected {batch} or {(*batch, 1)} (indices "
        f"into the {n} actions of action_value) for action_space='categorical'{hint}"
    )


def _select(values: torch.Tensor, action: torch.Tensor, space: str) -> torch.Tensor:
    """Values of the taken actions, ``[*B]``, from ``values`` ``[*B, n]``."""
    if space == "categorical":
        if action.ndim == values.ndim - 1:
            action = action.unsqueeze(-1)
        return values.gather(-1, action.long()).squeeze(-1)
    return (values * action.to(values.dtype)).sum(-1)


def _mask(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``values`` with the actions ``mask`` disallows set to the dtype's lowest value."""
    if mask is None:
        return values
    return values.masked_fill(~mask.bool(), torch.finfo(values.dtype).min)


# -------------------------------------------------------------- continuous
def _action_leaf(spec, action_key: NestedKey) -> tuple[TensorSpec | None, tuple[int, ...]]:
    """The spec of the action and the shape of the ``Composite`` holding it (``()`` if none)."""
    if not isinstance(spec, Composite):
        return spec, ()
    leaf = spec.get(action_key, None) if action_key in spec.keys(True, True) else None
    container = spec.shape
    if leaf is not None and isinstance(action_key, tuple) and len(action_key) > 1:
        container = spec[action_key[:-1]].shape
    return leaf, tuple(container)


def _action_dims(spec, action_key: NestedKey) -> int | None:
    """The number of action dimensions (per batch element) given by ``spec``, if any.

    A ``Composite``'s own batch dimensions (those of the entry holding the action) are
    not action dimensions.
    """
    leaf, container = _action_leaf(spec, action_key)
    shape = getattr(leaf, "shape", None)
    if shape is None:
        return None
    return math.prod(shape[len(container) :])


def _bounds(
    action_spec: TensorSpec | None, bounds, action_key: NestedKey
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(low, high)`` from exactly one of a ``Bounded`` spec or a ``(low, high)`` pair."""
    if (action_spec is None) == (bounds is None):
        raise ValueError(
            "One of 'bounds' and 'action_spec' must be provided, but not both or none; "
            f"got bounds={bounds} and action_spec={action_spec}"
        )
    if action_spec is not None:
        leaf, container = _action_leaf(action_spec, action_key)
        if isinstance(action_spec, Composite):
            leaf = action_spec[action_key][(0,) * len(container)]
        if not isinstance(leaf, Bounded):
            raise ValueError(f"action_spec must be a Bounded spec, got {type(leaf).__name__}")
        low, high = leaf.space.low, leaf.space.high
    else:
        low, high = bounds
    # checked where the bounds are given (the CPU for numbers), then placed as
    # ``torch.as_tensor`` places them: on the default device where one is set (a loss
    # built under ``with torch.device(...)``), else where they were
    low, high = _given(low, torch.get_default_dtype()), _given(high, torch.get_default_dtype())
    if (low > high).any():
        raise ValueError(f"Got a low bound higher than a high bound: low={low}, high={high}")
    return torch.as_tensor(low).clone(), torch.as_tensor(high).clone()


def _given(bound, dtype: torch.dtype) -> torch.Tensor:
    """``bound`` as a ``dtype`` tensor on its own device (a number or array: the CPU)."""
    if isinstance(bound, torch.Tensor):
        return bound.to(dtype)
    return torch.as_tensor(bound, dtype=dtype, device="cpu")


# ---------------------------------------------------------------- samples
def _sum_heads(log_prob: TensorDictBase, batch_dims: int) -> torch.Tensor:
    """One log-probability per sample ``[*B]`` from a composite distribution's per-head
    entries, each summed over its dims past the ``batch_dims`` first."""
    return sum(v.reshape(*v.shape[:batch_dims], -1).sum(-1) for v in log_prob.values(True, True))


def _sum_action_dims(log_prob: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """The log-probability of the whole action: summed when the distribution scored
    each action dimension apart (a factorised distribution without an event dim), and
    over the heads of a composite action (one log-probability per head), as TorchRL."""
    # a tensor first: the usual case skips the ABC check of TensorDictBase
    if not isinstance(log_prob, torch.Tensor) and isinstance(log_prob, TensorDictBase):
        batch = action.batch_dims if isinstance(action, TensorDictBase) else log_prob.batch_dims
        return _sum_heads(log_prob, batch)
    if log_prob.shape == action.shape and action.ndim > 0:
        return log_prob.sum(-1)
    return log_prob


def _rsample_log_prob(dist) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterised sample and its log-probability summed over the action dims.

    A distribution with ``rsample_and_log_prob`` (``TanhNormal``) scores the pre-squash
    value of the same draw: cheaper, and exact near the bounds.
    """
    joint = getattr(dist, "rsample_and_log_prob", None)
    if joint is not None:
        action, log_prob = joint()
    else:
        action = dist.rsample()
        log_prob = dist.log_prob(action)
    return action, _sum_action_dims(log_prob, action)


def _policy_rsample(
    actor: nn.Module, tensordict: TensorDictBase
) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterised action of ``actor`` at ``tensordict`` and its log-probability.

    The policy is sampled (``InteractionType.RANDOM``) whatever the loss's
    deterministic sampling mode; ``tensordict`` is not written.
    """
    with set_interaction_type(InteractionType.RANDOM):
        return _rsample_log_prob(_network_dist(actor, tensordict))
