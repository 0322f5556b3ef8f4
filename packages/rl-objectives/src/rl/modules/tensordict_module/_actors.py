"""Actors and critics: Actor, ProbabilisticActor, ValueOperator, TanhModule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import (
    CompositeDistribution,
    TensorDictModule,
    TensorDictModuleBase,
    dispatch,
)
from tensordict.nn.distributions import Delta
from tensordict.utils import NestedKey
from torch import nn

from rl.core import Composite, TensorSpec

from ._common import SafeModule
from ._probabilistic import (
    SafeProbabilisticModule,
    SafeProbabilisticTensorDictSequential,
    TensorForward,
    _plain_forward,
    _plain_keys,
)

__all__ = ["Actor", "ProbabilisticActor", "ValueOperator", "TanhModule"]


class Actor(SafeModule):
    """A deterministic policy: a network from observations to an action.

    Args:
        module: the network.
        in_keys: keys read (default ``["observation"]``).
        out_keys: keys written (default ``["action"]``).

    Keyword Args:
        spec: the action spec (a :class:`~rl.core.Composite` when there are several
            out_keys).
        safe: project the action into ``spec`` after each call. Defaults to ``False``.
        inplace: see :class:`~rl.modules.SafeModule`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Bounded
        >>> from rl.modules import Actor
        >>> actor = Actor(torch.nn.Linear(3, 2), spec=Bounded(-1.0, 1.0, shape=(2,)))
        >>> td = actor(TensorDict(observation=torch.randn(5, 3), batch_size=[5]))
        >>> td["action"].shape
        torch.Size([5, 2])
    """

    def __init__(
        self,
        module: nn.Module,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        *,
        spec: TensorSpec | None = None,
        **kwargs: Any,
    ):
        if in_keys is None:
            in_keys = ["observation"]
        if out_keys is None:
            out_keys = ["action"]
        if "action" in out_keys and spec is not None and not isinstance(spec, Composite):
            spec = Composite(action=spec)  # a leaf spec describes the action
        super().__init__(module, in_keys=in_keys, out_keys=out_keys, spec=spec, **kwargs)

    def get_dist(self, tensordict: TensorDictBase) -> torch.distributions.Distribution:
        """A :class:`~tensordict.nn.distributions.Delta` at the actor's action."""
        return Delta(self(tensordict).get(self.out_keys[0]))


class ProbabilisticActor(SafeProbabilisticTensorDictSequential):
    """A stochastic policy: a network writing distribution parameters, then a sample.

    ``module`` writes the parameters (e.g. ``"loc"``/``"scale"`` or ``"logits"``) that
    ``in_keys`` names; a :class:`SafeProbabilisticModule` built from the other arguments
    samples the action. Under ``set_exploration_type(ExplorationType.RANDOM)`` the action
    is a random sample, under ``DETERMINISTIC`` the distribution's deterministic sample
    (its mode, or ``tanh(loc)`` rescaled for ``TanhNormal``).

    Args:
        module: a TensorDict module writing the distribution's parameters.
        in_keys: the parameter keys, named after the distribution's keyword arguments
            (``["loc", "scale"]``), or a dict ``{kwarg: key}``.
        out_keys: where the sample goes (default ``["action"]``; for a
            ``CompositeDistribution``, the keys of its ``distribution_map``).

    Keyword Args:
        spec: the action spec.
        safe: project the sample into ``spec``. Defaults to ``False``.
        distribution_class: the distribution. Defaults to ``Delta``.
        distribution_kwargs: extra arguments of the distribution (``low``, ``high``, ...).
        return_log_prob: also write the log-probability of the sample (at
            ``log_prob_key``, default ``"action_log_prob"``). Defaults to ``False``.
        log_prob_key: where the log-probability goes.
        default_interaction_type: how to draw outside of ``set_exploration_type``
            (default ``DETERMINISTIC``).
        cache_dist: keep the last distribution. Defaults to ``False``.
        n_empirical_estimate: samples for an empirical mean. Defaults to ``1000``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import NormalParamExtractor, TensorDictModule
        >>> from rl.core import ExplorationType, set_exploration_type
        >>> from rl.modules import ProbabilisticActor
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), NormalParamExtractor())
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ...     in_keys=["loc", "scale"],
        ...     distribution_class=torch.distributions.Normal,
        ...     return_log_prob=True,
        ... )
        >>> td = TensorDict(observation=torch.randn(5, 3), batch_size=[5])
        >>> with set_exploration_type(ExplorationType.RANDOM):
        ...     td = actor(td)
        >>> td["action"].shape, td["action_log_prob"].shape
        (torch.Size([5, 2]), torch.Size([5, 2]))
    """

    def __init__(
        self,
        module: TensorDictModuleBase,
        in_keys: NestedKey | Sequence[NestedKey] | dict[str, NestedKey],
        out_keys: Sequence[NestedKey] | None = None,
        *,
        spec: TensorSpec | None = None,
        **kwargs: Any,
    ):
        if out_keys is None:
            if kwargs.get("distribution_class") is CompositeDistribution:
                dist_kwargs = kwargs.get("distribution_kwargs") or {}
                if "distribution_map" not in dist_kwargs:
                    raise KeyError(
                        "'distribution_map' must be given in distribution_kwargs when "
                        "distribution_class is CompositeDistribution"
                    )
                name_map = dist_kwargs.get("name_map")
                out_keys = list(
                    name_map.values() if name_map is not None else dist_kwargs["distribution_map"]
                )
            else:
                out_keys = ["action"]
        if len(out_keys) == 1 and spec is not None and not isinstance(spec, Composite):
            spec = Composite({out_keys[0]: spec})
        super().__init__(
            module,
            SafeProbabilisticModule(in_keys=in_keys, out_keys=out_keys, spec=spec, **kwargs),
        )


class ValueOperator(TensorDictModule):
    """A critic: a network from observations (and actions) to a value.

    Args:
        module: the network.
        in_keys: keys read (default ``["observation"]``).
        out_keys: keys written (default ``["state_value"]``, or ``["state_action_value"]``
            when ``"action"`` is among the in_keys).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import ValueOperator
        >>> qvalue = ValueOperator(torch.nn.LazyLinear(1), in_keys=["observation", "action"])
        >>> qvalue.out_keys
        ['state_action_value']
        >>> class Cat(torch.nn.Module):
        ...     def forward(self, obs, act):
        ...         return obs.sum(-1, keepdim=True) + act.sum(-1, keepdim=True)
        >>> qvalue = ValueOperator(Cat(), in_keys=["observation", "action"])
        >>> td = TensorDict(observation=torch.ones(2, 3), action=torch.ones(2, 1), batch_size=[2])
        >>> qvalue(td)["state_action_value"]
        tensor([[4.],
                [4.]])
    """

    def __init__(
        self,
        module: nn.Module,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
    ):
        if in_keys is None:
            in_keys = ["observation"]
        if out_keys is None:
            out_keys = ["state_action_value"] if "action" in in_keys else ["state_value"]
        super().__init__(module=module, in_keys=in_keys, out_keys=out_keys, strict=True)


def _buffer_name(key: NestedKey) -> str:
    return key if isinstance(key, str) else "_".join(key)


class TanhModule(TensorDictModuleBase):
    """Squashes entries with ``tanh`` and rescales them into ``[low, high]``.

    The bounds come from ``low``/``high`` or from the (bounded) ``spec``; both default to
    ``-1``/``1``.

    Args:
        in_keys: the keys to squash.
        out_keys: where to write them (default: ``in_keys``, in place).

    Keyword Args:
        spec: a bounded spec (a :class:`~rl.core.Composite` keyed by out_keys for several).
        low, high: the bounds (must agree with ``spec`` when both are given).
        clamp: keep the values strictly inside ``(-1, 1)`` before rescaling, so that the
            bounds are never reached exactly. Defaults to ``False``.

    Raises:
        ValueError: if ``high < low`` somewhere, or ``low``/``high`` disagree with ``spec``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Bounded
        >>> from rl.modules import TanhModule
        >>> mod = TanhModule(["action"], spec=Bounded(0.0, 2.0, shape=(1,)))
        >>> mod(TensorDict(action=torch.tensor([[0.0], [100.0]]), batch_size=[2]))["action"]
        tensor([[1.],
                [2.]])
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey],
        out_keys: Sequence[NestedKey] | None = None,
        *,
        spec: TensorSpec | None = None,
        low: float | torch.Tensor | None = None,
        high: float | torch.Tensor | None = None,
        clamp: bool = False,
    ):
        super().__init__()
        if isinstance(in_keys, str | tuple):
            in_keys = [in_keys]
        if out_keys is None:
            out_keys = in_keys
        elif isinstance(out_keys, str | tuple):
            out_keys = [out_keys]
        if len(in_keys) != len(out_keys):
            raise ValueError(
                f"in_keys and out_keys should have the same length, got in_keys={in_keys} and "
                f"out_keys={out_keys}"
            )
        self.in_keys = list(in_keys)
        self.out_keys = list(out_keys)
        if isinstance(spec, Composite):
            spec = spec.clone()
            for key in self.out_keys:
                if key not in spec.keys(True, True):
                    spec[key] = None
        else:
            spec = Composite({key: spec for key in self.out_keys})
        self.spec = spec
        # out_key -> whether the bounds differ from [-1, 1] (a rescale after the tanh)
        self.non_trivial = {}
        for key in self.out_keys:
            _low, _high = self._make_low_high(low, high, spec[key])
            if bool((_high < _low).any()):
                raise ValueError(f"TanhModule: Got high < low (low={_low}, high={_high})")
            name = _buffer_name(key)
            self.register_buffer(f"{name}_low", _low)
            self.register_buffer(f"{name}_high", _high)
            self.non_trivial[key] = bool((_high != 1).any() or (_low != -1).any())
        self.clamp = clamp

    @staticmethod
    def _make_low_high(
        low: Any, high: Any, leaf: TensorSpec | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        bounds = []
        for name, word, value, default in (
            ("low", "minimum", low, -1.0),
            ("high", "maximum", high, 1.0),
        ):
            from_spec = getattr(leaf, name, None) if leaf is not None else None
            if value is None:
                value = from_spec if from_spec is not None else default
            elif from_spec is not None and bool((torch.as_tensor(value) != from_spec).any()):
                raise ValueError(
                    f"The {word} value ({value}) provided to TanhModule does not match the "
                    f"action spec one ({from_spec})."
                )
            bounds.append(torch.as_tensor(value, dtype=torch.get_default_dtype()).clone())
        return bounds[0], bounds[1]

    def _bounds(self, out_key: NestedKey) -> tuple[str, str] | None:
        """The names of ``out_key``'s bound buffers, or ``None`` for ``[-1, 1]`` (no rescale)."""
        if not self.non_trivial[out_key]:
            return None
        name = _buffer_name(out_key)
        return f"{name}_low", f"{name}_high"

    def _squash(self, feature: torch.Tensor, bounds: tuple[str, str] | None) -> torch.Tensor:
        # one body for forward and its tensor twin, so that both compute the same bits;
        # the buffers are read here, at each call, to follow .to() and load_state_dict
        feature = feature.tanh()
        if self.clamp:
            eps = torch.finfo(feature.dtype).resolution
            feature = feature.clamp(-1 + eps, 1 - eps)
        if bounds is not None:
            low, high = getattr(self, bounds[0]), getattr(self, bounds[1])
            feature = low + (high - low) * (feature + 1) / 2
        return feature

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            tensordict.set(out_key, self._squash(tensordict.get(in_key), self._bounds(out_key)))
        return tensordict

    def tensor_forward(self) -> TensorForward | None:
        """The tensor-level twin of :meth:`forward` (the protocol of
        :func:`rl.core.tensor_policy`): ``fn(*features) -> squashed features``, one per
        key pair, so that a deterministic actor ending in this module (DDPG's, TD3's) is
        run by collectors on tensors.

        The buffer names are resolved here, once, and the buffers read at each call.
        ``None`` with hooks (the module's or global ones), a subclass's ``forward``,
        nested keys, an out_key written twice, or a pair reading what an earlier pair
        wrote (the twin maps each input to its output independently)."""
        if not _plain_forward(self, TanhModule):
            return None
        in_keys, out_keys = list(self.in_keys), list(self.out_keys)
        if not _plain_keys(in_keys + out_keys) or len(set(out_keys)) != len(out_keys):
            return None
        if any(key in out_keys[:i] for i, key in enumerate(in_keys)):
            return None
        bounds = [self._bounds(key) for key in out_keys]
        squash = self._squash

        def forward(*features: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(squash(f, b) for f, b in zip(features, bounds, strict=True))

        return in_keys, out_keys, forward
