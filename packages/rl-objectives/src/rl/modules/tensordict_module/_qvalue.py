"""Greedy actors over action values: QValueModule/QValueActor and their distributional forms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from tensordict import TensorDictBase, unravel_key
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential, dispatch
from tensordict.utils import NestedKey
from torch import nn
from torch.nn import functional as F

from rl.core import Composite, TensorSpec

from ._common import _process_action_space_spec, _register_spec, _SpecMixin
from ._probabilistic import (
    TensorForward,
    _has_hooks,
    _missing_key_error,
    _plain_keys,
    _same_methods,
    _tensor_chain,
)
from ._sequence import SafeSequential

__all__ = [
    "QValueModule",
    "QValueActor",
    "DistributionalQValueModule",
    "DistributionalQValueActor",
    "DistributionalDQNnet",
]


def _get_or_raise(
    tensordict: TensorDictBase, key: NestedKey, owner: str, label: str | None = None
) -> torch.Tensor:
    value = tensordict.get(key, None)
    if value is None:
        raise _missing_key_error(tensordict, key, owner, label)
    return value


def _one_hot_argmax(values: torch.Tensor) -> torch.Tensor:
    # argmax, not ``values == max``: ties give exactly one 1
    return F.one_hot(values.argmax(-1), values.shape[-1]).to(torch.long)


class QValueModule(_SpecMixin, TensorDictModuleBase):
    """Picks the greedy action from action values written by another module.

    Reads ``action_value_key`` (``[*B, n]``) and writes the action (one-hot, index or
    multi-one-hot depending on ``action_space``), the action values, and the value of the
    chosen action (``[*B, 1]``). With ``action_mask_key``, actions whose mask is ``False``
    are never chosen.

    Args:
        action_space: ``"one_hot"``, ``"categorical"``, ``"mult_one_hot"`` (``"binary"``
            is not supported); inferred from ``spec`` when ``None``.
        action_value_key: where the action values are read (default ``"action_value"``).
        action_mask_key: optional key of a boolean mask of the allowed actions.
        out_keys: ``[action, action_value, chosen_action_value]`` keys (default
            ``["action", "action_value", "chosen_action_value"]``).
        var_nums: the sizes of the one-hot groups of a ``"mult_one_hot"`` space (read from
            the spec's ``nvec`` when not given).
        spec: the action spec (:class:`~rl.core.OneHot`, :class:`~rl.core.Categorical`,
            :class:`~rl.core.MultiOneHot`).
        safe: project the action into ``spec``. Defaults to ``False``.
        strict_shape: ``True`` raises when the action's shape does not match the spec,
            ``"auto"`` reshapes it, ``False`` skips the check. Defaults to ``True``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import OneHot
        >>> from rl.modules import QValueModule
        >>> module = QValueModule(spec=OneHot(3), action_mask_key="action_mask")
        >>> td = TensorDict(
        ...     action_value=torch.tensor([[1.0, 5.0, 2.0]]),
        ...     action_mask=torch.tensor([[True, False, True]]),
        ...     batch_size=[1],
        ... )
        >>> td = module(td)
        >>> td["action"], td["chosen_action_value"]
        (tensor([[0, 0, 1]]), tensor([[2.]]))
    """

    def __init__(
        self,
        action_space: str | None = None,
        action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        var_nums: int | Sequence[int] | None = None,
        spec: TensorSpec | None = None,
        safe: bool = False,
        strict_shape: bool | Literal["auto"] | None = True,
    ):
        if isinstance(action_space, TensorSpec):
            raise TypeError("action_space must be a string; pass the action spec as spec= instead")
        action_space, spec = _process_action_space_spec(action_space, spec)
        if action_space not in ("one_hot", "categorical", "mult_one_hot", "binary"):
            raise ValueError(
                f"{type(self).__name__} supports the action spaces 'one_hot', 'categorical' and "
                f"'mult_one_hot', got {action_space!r}"
            )
        super().__init__()
        self.action_space = action_space
        self.strict_shape = strict_shape
        if action_value_key is None:
            action_value_key = "action_value"
        self.action_mask_key = action_mask_key
        in_keys = [action_value_key]
        if action_mask_key is not None:
            in_keys.append(action_mask_key)
        self.in_keys = in_keys
        if out_keys is None:
            out_keys = ["action", action_value_key, "chosen_action_value"]
        elif action_value_key not in out_keys:
            raise RuntimeError(
                f"out_keys must hold the action-value key {action_value_key!r}, got {out_keys}"
            )
        self.out_keys = list(out_keys)
        action_key = self.out_keys[0]
        if var_nums is None and action_space == "mult_one_hot":
            leaf = spec[action_key] if isinstance(spec, Composite) else spec
            var_nums = list(getattr(leaf, "nvec", [])) or None
        self.var_nums = var_nums
        if spec is not None and not isinstance(spec, Composite):
            spec = Composite({action_key: spec})
        _register_spec(self, self.out_keys, spec, safe)

    @property
    def action_value_key(self) -> NestedKey:
        return self.in_keys[0]

    def _masked_values(self, tensordict: TensorDictBase) -> torch.Tensor:
        name = type(self).__name__
        values = _get_or_raise(tensordict, self.action_value_key, name)
        if self.action_mask_key is not None:
            mask = _get_or_raise(tensordict, self.action_mask_key, name, "Action mask key")
            values = torch.where(mask, values, torch.finfo(values.dtype).min)
        return values

    def _action(self, values: torch.Tensor) -> torch.Tensor:
        if self.action_space == "one_hot":
            return _one_hot_argmax(values)
        if self.action_space == "categorical":
            return values.argmax(-1)
        if self.action_space == "mult_one_hot":
            if self.var_nums is None:
                raise ValueError(
                    "var_nums (the sizes of the one-hot groups) must be given for a "
                    "'mult_one_hot' action space without a MultiOneHot spec"
                )
            return torch.cat([_one_hot_argmax(v) for v in values.split(self.var_nums, -1)], -1)
        raise NotImplementedError(f"{type(self).__name__} does not support 'binary' actions")

    def _check_shape(self, action: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        key = unravel_key(self.out_keys[0])
        leaf = self._spec.get(key, None)
        if leaf is None or self.strict_shape is False:
            return action
        parent = self._spec[key[:-1]] if isinstance(key, tuple) else self._spec
        target = values.shape[:-1] + leaf.shape[len(parent.shape) :]
        if action.shape == target:
            return action
        if self.strict_shape == "auto":
            return action.reshape(target)
        raise RuntimeError(
            f"action shape {tuple(action.shape)} does not match expected shape {tuple(target)} "
            f"(from the spec {leaf!r}); pass strict_shape='auto' to reshape it"
        )

    def _greedy(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(action, values, chosen_action_value)`` from the (masked) action values."""
        action = self._action(values)
        # the chosen value is read before the action is reshaped to the spec (as TorchRL)
        if self.action_space == "categorical":
            chosen = values.gather(-1, action.unsqueeze(-1))
        else:
            chosen = (action * values).sum(-1, True)
        return self._check_shape(action, values), values, chosen

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for key, value in zip(self.out_keys, self._greedy(self._masked_values(tensordict))):
            tensordict.set(key, value)
        return tensordict

    def tensor_forward(self) -> TensorForward | None:
        """The tensor-level twin of :meth:`forward`, for collectors:
        ``fn(action_value[, action_mask]) -> (action, action_value, chosen_action_value)``;
        ``None`` with hooks, ``safe=True``, nested keys or a subclass's forward (see
        :func:`~rl.modules.tensordict_module._probabilistic._tensor_stage`)."""
        if _has_hooks(self) or not _same_methods(type(self), _QVALUE_METHODS):
            return None
        in_keys, out_keys = list(self.in_keys), list(self.out_keys)
        if not _plain_keys(in_keys + out_keys) or len(set(out_keys)) != len(out_keys):
            return None
        greedy = self._greedy

        def forward(values: torch.Tensor, mask: torch.Tensor | None = None) -> tuple:
            if mask is not None:
                values = torch.where(mask, values, torch.finfo(values.dtype).min)
            return greedy(values)

        return in_keys, out_keys, forward


class DistributionalDQNnet(TensorDictModuleBase):
    """Log-softmax over the atoms (dim ``-2``) of distributional action values.

    Args:
        in_keys: keys of the ``[*B, atoms, actions]`` scores (default ``["action_value"]``).
        out_keys: where the log-probabilities go (default: the in_keys).
    """

    def __init__(
        self,
        *,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ):
        super().__init__()
        self.in_keys = list(in_keys) if in_keys is not None else ["action_value"]
        self.out_keys = list(out_keys) if out_keys is not None else list(self.in_keys)

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            scores = tensordict.get(in_key)
            if scores.ndim < 2:
                raise RuntimeError(
                    "DistributionalDQNnet expects scores of shape [*batch, atoms, actions], got "
                    f"shape {tuple(scores.shape)}"
                )
            tensordict.set(out_key, F.log_softmax(scores, dim=-2))
        return tensordict


class DistributionalQValueModule(QValueModule):
    """Greedy actions from distributional action values (C51).

    Reads log-probabilities over ``support`` atoms, ``[*B, atoms, n]``, and acts greedily
    on the expected value ``sum(exp(logp) * support)``. Writes the action and the action
    values (the log-probabilities).

    Args:
        action_space: as in :class:`QValueModule`.
        support: the atoms' values, ``[atoms]``.
        action_value_key, action_mask_key, out_keys, var_nums, spec, safe: as in
            :class:`QValueModule` (``out_keys`` defaults to ``["action", action_value_key]``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import DistributionalQValueModule
        >>> module = DistributionalQValueModule("categorical", support=torch.tensor([0.0, 1.0]))
        >>> logp = torch.tensor([[[0.9, 0.1], [0.1, 0.9]]]).log()  # atoms x actions
        >>> module(TensorDict(action_value=logp, batch_size=[1]))["action"]
        tensor([1])
    """

    def __init__(
        self,
        action_space: str | None,
        support: torch.Tensor,
        action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        var_nums: int | None = None,
        spec: TensorSpec | None = None,
        safe: bool = False,
    ):
        if action_value_key is None:
            action_value_key = "action_value"
        if out_keys is None:
            out_keys = ["action", action_value_key]
        super().__init__(
            action_space=action_space,
            action_value_key=action_value_key,
            action_mask_key=action_mask_key,
            out_keys=out_keys,
            var_nums=var_nums,
            spec=spec,
            safe=safe,
            strict_shape=False,
        )
        self.register_buffer("support", support)

    def _expected(self, log_probs: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
        if log_probs.shape[-2] != support.shape[-1]:
            raise RuntimeError(
                f"the support has {support.shape[-1]} atoms but the action values have "
                f"{log_probs.shape[-2]} (shape {tuple(log_probs.shape)}, atoms at dim -2)"
            )
        return (log_probs.exp() * support.unsqueeze(-1)).sum(-2)

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        log_probs = _get_or_raise(tensordict, self.action_value_key, type(self).__name__)
        expected = self._expected(log_probs, self.support)
        if self.action_mask_key is not None:
            mask = _get_or_raise(
                tensordict, self.action_mask_key, type(self).__name__, "Action mask key"
            )
            expected = torch.where(mask, expected, torch.finfo(expected.dtype).min)
        action = self._action(expected)
        for key, value in zip(self.out_keys, (action, log_probs)):
            tensordict.set(key, value)
        return tensordict


def _wrap_value_net(
    module: nn.Module, in_keys: Sequence[NestedKey] | None, action_value_key: NestedKey
) -> TensorDictModuleBase:
    if isinstance(module, TensorDictModuleBase):
        if action_value_key not in module.out_keys:
            raise KeyError(
                f"the module writes {module.out_keys}, not the action-value key "
                f"{action_value_key!r}"
            )
        return module
    return TensorDictModule(
        module, in_keys=in_keys or ["observation"], out_keys=[action_value_key], strict=True
    )


class QValueActor(SafeSequential):
    """A value network followed by a :class:`QValueModule`: a greedy DQN policy.

    Args:
        module: a network from observations to action values ``[*B, n]`` (wrapped in a
            TensorDictModule reading ``in_keys``), or a TensorDict module writing
            ``action_value_key``.

    Keyword Args:
        in_keys: what the network reads (default ``["observation"]``).
        spec: the action spec (one-hot, categorical or multi-one-hot).
        safe: project the action into ``spec``. Defaults to ``False``.
        action_space: the action-space name, when no spec is given.
        action_value_key: default ``"action_value"``.
        action_key: default ``"action"``.
        chosen_action_value_key: default ``"chosen_action_value"``.
        action_mask_key: optional key of a boolean mask of the allowed actions.
        strict_shape: as in :class:`QValueModule`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Categorical
        >>> from rl.modules import QValueActor
        >>> actor = QValueActor(torch.nn.Linear(4, 3), spec=Categorical(3))
        >>> td = actor(TensorDict(observation=torch.randn(5, 4), batch_size=[5]))
        >>> td["action"].shape, td["chosen_action_value"].shape
        (torch.Size([5]), torch.Size([5, 1]))
    """

    def __init__(
        self,
        module: nn.Module,
        *,
        in_keys: Sequence[NestedKey] | None = None,
        spec: TensorSpec | None = None,
        safe: bool = False,
        action_space: str | None = None,
        action_value_key: NestedKey | None = None,
        action_key: NestedKey | None = None,
        chosen_action_value_key: NestedKey | None = None,
        action_mask_key: NestedKey | None = None,
        strict_shape: bool | Literal["auto"] | None = True,
    ):
        if isinstance(action_space, TensorSpec):
            raise TypeError("action_space must be a string; pass the action spec as spec= instead")
        action_space, spec = _process_action_space_spec(action_space, spec)
        self.action_space = action_space
        action_value_key = action_value_key or "action_value"
        action_key = action_key or "action"
        chosen_action_value_key = chosen_action_value_key or "chosen_action_value"
        module = _wrap_value_net(module, in_keys, action_value_key)
        if isinstance(spec, Composite):
            spec = spec.clone()
            if action_key not in spec.keys(True, True):
                spec[action_key] = None
        else:
            spec = Composite({action_key: spec}, shape=spec.shape[:-1] if spec is not None else ())
        spec[action_value_key] = None
        spec[chosen_action_value_key] = None
        qvalue = QValueModule(
            action_space=action_space,
            action_value_key=action_value_key,
            action_mask_key=action_mask_key,
            out_keys=[action_key, action_value_key, chosen_action_value_key],
            spec=spec,
            safe=safe,
            strict_shape=strict_shape,
        )
        super().__init__(module, qvalue)
        self.action_value_key = action_value_key

    def tensor_forward(self) -> TensorForward | None:
        """The tensor-level twin of this actor's forward, for collectors: the value
        network, then the greedy choice of :class:`QValueModule`; ``None`` where a module
        has no twin (hooks, ``safe=True``, a distributional head, nested keys)."""
        if _has_hooks(self) or not _same_methods(type(self), _QVALUE_ACTOR_METHODS):
            return None
        if self.partial_tolerant or self.inplace not in (True, None):
            return None
        if getattr(self, "_select_before_return", False):
            return None
        return _tensor_chain(list(self.module))


_QVALUE_METHODS = tuple(
    (QValueModule, name)
    for name in ("__call__", "forward", "_greedy", "_action", "_check_shape", "_masked_values")
)
_QVALUE_ACTOR_METHODS = tuple(
    (TensorDictSequential, name) for name in ("__call__", "forward", "_run_module")
)


class DistributionalQValueActor(QValueActor):
    """A distributional value network followed by a :class:`DistributionalQValueModule`.

    Args:
        module: a network from observations to scores ``[*B, atoms, n]``.
        support: the atoms' values, ``[atoms]``.
        in_keys, spec, safe, var_nums, action_space, action_value_key, action_mask_key:
            as in :class:`QValueActor`.
        make_log_softmax: insert a log-softmax over the atoms after ``module``. Defaults to
            ``True``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import OneHot
        >>> from rl.modules import DistributionalQValueActor
        >>> net = torch.nn.Sequential(torch.nn.Linear(4, 5 * 3), torch.nn.Unflatten(-1, (5, 3)))
        >>> actor = DistributionalQValueActor(net, support=torch.linspace(-1, 1, 5), spec=OneHot(3))
        >>> actor(TensorDict(observation=torch.randn(2, 4), batch_size=[2]))["action"].shape
        torch.Size([2, 3])
    """

    def __init__(
        self,
        module: nn.Module,
        support: torch.Tensor,
        in_keys: Sequence[NestedKey] | None = None,
        spec: TensorSpec | None = None,
        safe: bool = False,
        var_nums: int | None = None,
        action_space: str | None = None,
        action_value_key: NestedKey = "action_value",
        action_mask_key: NestedKey | None = None,
        make_log_softmax: bool = True,
    ):
        if isinstance(action_space, TensorSpec):
            raise TypeError("action_space must be a string; pass the action spec as spec= instead")
        action_space, spec = _process_action_space_spec(action_space, spec)
        self.action_space = action_space
        module = _wrap_value_net(module, in_keys, action_value_key)
        if isinstance(spec, Composite):
            spec = spec.clone()
            if "action" not in spec.keys():
                spec["action"] = None
        else:
            spec = Composite(action=spec, shape=spec.shape[:-1] if spec is not None else ())
        spec[action_value_key] = None
        qvalue = DistributionalQValueModule(
            action_space=action_space,
            support=support,
            action_value_key=action_value_key,
            action_mask_key=action_mask_key,
            out_keys=["action", action_value_key],
            var_nums=var_nums,
            spec=spec,
            safe=safe,
        )
        self.make_log_softmax = make_log_softmax
        modules = [module]
        if make_log_softmax and not isinstance(module, DistributionalDQNnet):
            modules.append(DistributionalDQNnet(in_keys=[action_value_key]))
        SafeSequential.__init__(self, *modules, qvalue)
        self.action_value_key = action_value_key
        self.register_buffer("support", support)
