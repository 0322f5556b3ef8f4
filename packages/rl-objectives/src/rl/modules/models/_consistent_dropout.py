"""Consistent dropout: the dropout mask drawn during the rollout is reused in the update.

Hausknecht & Wagener 2022, "Consistent Dropout for Policy Gradient Reinforcement
Learning", https://arxiv.org/abs/2202.11818. A policy with ordinary dropout draws a new
mask for each call, so the log-probabilities of the update are those of another network
than the one that acted; keeping the rollout's mask in the transition makes them agree.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from rl.core import Unbounded

from ..tensordict_module._rnn import _import_envs_transforms

__all__ = ["ConsistentDropout", "ConsistentDropoutModule"]


def _check_p(p: float) -> float:
    if not 0 <= p < 1:
        raise ValueError(f"dropout probability p must be in [0, 1), got {p!r}")
    return p


class ConsistentDropout(nn.Module):
    """Dropout that returns its mask and applies a given one.

    In training mode ``forward(x)`` draws a mask (entries ``0`` with probability ``p``,
    ``1 / (1 - p)`` otherwise, as ``nn.Dropout``) and returns ``(x * mask, mask)``;
    ``forward(x, mask)`` applies the given mask instead. In eval mode it returns ``x``
    unchanged (one tensor). The exploration type has no effect: like ``nn.Dropout``, it
    follows ``train()`` / ``eval()``.

    Args:
        p (float): probability of zeroing an entry, in ``[0, 1)``. Defaults to ``0.5``.

    Raises:
        ValueError: ``p`` outside ``[0, 1)``.

    Examples:
        >>> import torch
        >>> from rl.modules import ConsistentDropout
        >>> dropout = ConsistentDropout(p=0.5)
        >>> x = torch.ones(2, 4)
        >>> y, mask = dropout(x)
        >>> sorted(set(mask.flatten().tolist())) in ([0.0, 2.0], [0.0], [2.0])
        True
        >>> torch.equal(dropout(x, mask)[0], y)  # the same mask, the same output
        True
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = _check_p(p)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``(x * mask, mask)`` in training mode (a new mask when none is given), else ``x``."""
        if not self.training:
            return x
        if mask is None:
            mask = self.make_mask(input=x)
        elif mask.shape != x.shape[x.ndim - mask.ndim :] and mask.shape != x.shape:
            raise ValueError(
                f"ConsistentDropout mask has shape {tuple(mask.shape)}, which does not match "
                f"the input's shape {tuple(x.shape)}"
            )
        return x * mask, mask

    def make_mask(
        self,
        *,
        input: torch.Tensor | None = None,
        shape: torch.Size | tuple[int, ...] | None = None,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """A fresh mask like ``input``, or of ``shape`` (values ``0`` or ``1 / (1 - p)``).

        Raises:
            RuntimeError: neither ``input`` nor ``shape`` is given.
        """
        if input is not None:
            ones = torch.ones_like(input)
        elif shape is not None:
            ones = torch.ones(shape, dtype=dtype)
        else:
            raise RuntimeError("ConsistentDropout.make_mask needs input= or shape=")
        return F.dropout(ones, self.p, self.training)


class ConsistentDropoutModule(TensorDictModuleBase):
    """:class:`ConsistentDropout` on a TensorDict entry, keeping its mask in the TensorDict.

    Reads ``in_keys[0]`` and, when present, the mask at ``in_keys[1]``; writes the masked
    value at ``out_keys[0]`` and the mask at ``out_keys[1]`` (training mode). The mask key
    defaults to ``f"mask_{id(self)}"``. In a rollout the mask is drawn at reset by the
    primer of :meth:`make_tensordict_primer` and then carried from step to step, so one
    mask is used for the whole episode and stored with each transition; the update reads
    it back and applies the same dropout.

    Args:
        p (float): dropout probability, in ``[0, 1)``.
        in_keys (NestedKey or list of two NestedKeys): the input, or ``[input, mask]``.
        out_keys (NestedKey or list of two NestedKeys, optional): the output, or
            ``[output, mask]``. Defaults to ``in_keys``.

    Keyword Args:
        input_shape (tuple, optional): shape of the mask the primer draws at reset (the
            env's batch dims included: the primer does not expand it). Needed by
            :meth:`make_tensordict_primer`.
        input_dtype (torch.dtype, optional): dtype of that mask (default
            ``torch.get_default_dtype()``).

    Raises:
        ValueError: ``p`` outside ``[0, 1)``, or key lists that do not have two entries.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import ConsistentDropoutModule
        >>> module = ConsistentDropoutModule(p=0.1, in_keys="x")
        >>> td = module(TensorDict(x=torch.randn(3, 4), batch_size=[3]))
        >>> mask_key = module.in_keys[1]
        >>> td[mask_key].shape
        torch.Size([3, 4])
        >>> again = module(TensorDict({"x": td["x"], mask_key: td[mask_key]}, [3]))
        >>> bool((again[mask_key] == td[mask_key]).all())
        True
    """

    def __init__(
        self,
        p: float,
        in_keys: NestedKey | list[NestedKey],
        out_keys: NestedKey | list[NestedKey] | None = None,
        input_shape: torch.Size | tuple[int, ...] | None = None,
        input_dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        mask_key = f"mask_{id(self)}"
        if isinstance(in_keys, str | tuple):
            in_keys = [in_keys, mask_key]
        if out_keys is None:
            out_keys = list(in_keys)
        elif isinstance(out_keys, str | tuple):
            out_keys = [out_keys, mask_key]
        if len(in_keys) != 2 or len(out_keys) != 2:
            raise ValueError(
                "ConsistentDropoutModule needs two in_keys and two out_keys ([value, mask]), "
                f"got in_keys={list(in_keys)} and out_keys={list(out_keys)}"
            )
        self.in_keys = list(in_keys)
        self.out_keys = list(out_keys)
        self.input_shape = input_shape
        self.input_dtype = input_dtype
        self.consistent_dropout = ConsistentDropout(_check_p(p))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        x = tensordict.get(self.in_keys[0])
        if not self.consistent_dropout.training:
            tensordict.set(self.out_keys[0], x)
            return tensordict
        mask = tensordict.get(self.in_keys[1], None)
        x, mask = self.consistent_dropout(x, mask=mask)
        tensordict.set(self.out_keys[0], x)
        tensordict.set(self.out_keys[1], mask)
        return tensordict

    def make_tensordict_primer(self):
        """A ``TensorDictPrimer`` (rl.envs) that draws a fresh mask at each reset.

        Append it to the env (or use :func:`~rl.modules.get_primers_from_module`): each
        reset writes a new mask of ``input_shape`` for the envs that restart, and the mask
        is carried unchanged through the steps of the episode.

        Raises:
            RuntimeError: no ``input_shape`` was given.
            ImportError: rl-envs is not installed.
        """
        if self.input_shape is None:
            raise RuntimeError(
                "ConsistentDropoutModule.make_tensordict_primer needs the mask's shape: pass "
                "input_shape= to ConsistentDropoutModule"
            )
        shape = torch.Size(self.input_shape)
        dtype = self.input_dtype or torch.get_default_dtype()
        transforms = _import_envs_transforms()
        return transforms.TensorDictPrimer(
            primers={self.in_keys[1]: Unbounded(shape=shape, dtype=dtype)},
            default_value=functools.partial(
                self.consistent_dropout.make_mask, shape=shape, dtype=dtype
            ),
            expand_specs=False,
        )
