"""Probabilistic modules with a spec: SafeProbabilisticModule and its sequence."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import (
    CompositeDistribution,
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictModuleBase,
    dispatch,
    skip_existing,
)
from tensordict.nn.distributions import Delta
from tensordict.nn.probabilistic import interaction_type
from tensordict.utils import NestedKey
from torch import distributions as D
from torch import nn
from torch.nn.modules import module as _module_mod

from rl.core import Composite, TensorSpec, tensor_policy

from ..distributions._discrete import _draw_index
from ._common import SafeModule, _register_spec, _SpecMixin
from ._sequence import _merged_spec

__all__ = ["SafeProbabilisticModule", "SafeProbabilisticTensorDictSequential"]

_RANDOM = InteractionType.RANDOM
_LEAN_ATTRS = frozenset(
    {
        "return_log_prob",
        "num_samples",
        "cache_dist",
        "distribution_class",
        "_generator",
        "_generator_key",
        "_log_prob_key",
        "_log_prob_keys",
        "_out_keys",
        "in_keys",
        "out_keys",
    }
)


def _missing_key_error(
    tensordict: TensorDictBase, key: NestedKey, owner: str, label: str | None = None
) -> KeyError:
    """The error of a key ``owner`` reads and ``tensordict`` lacks; ``label`` names its
    role (``"Action mask key"``: TorchRL's wording for that key)."""
    present = [str(k) for k in tensordict.keys(True, True)]
    if label is not None:
        return KeyError(
            f"{label} {key} not found in TensorDict: {owner} reads it. Keys present: {present}"
        )
    return KeyError(
        f"{owner} reads the key {key!r}, which is not in the input tensordict. Keys present: "
        f"{present}"
    )


def _takes_validate_args(distribution_class: type) -> bool:
    """Whether ``distribution_class(..., validate_args=...)`` is a torch distribution's."""
    if not (
        isinstance(distribution_class, type) and issubclass(distribution_class, D.Distribution)
    ):
        return False
    try:
        return "validate_args" in inspect.signature(distribution_class.__init__).parameters
    except (TypeError, ValueError):
        return False


class SafeProbabilisticModule(_SpecMixin, ProbabilisticTensorDictModule):
    """A :class:`~tensordict.nn.ProbabilisticTensorDictModule` with the spec of its sample.

    Builds ``distribution_class(**params, **distribution_kwargs)`` from the entries at
    ``in_keys`` and writes a value from it at ``out_keys``: a random sample under
    ``ExplorationType.RANDOM``, the distribution's deterministic sample (``mode``, or
    ``deterministic_sample`` when it has one) under ``DETERMINISTIC``, and so on; outside
    of :func:`~rl.core.set_exploration_type`, ``default_interaction_type`` decides.

    Args:
        in_keys: the distribution's parameters: a list of keys named after the
            distribution's keyword arguments, or a dict ``{kwarg: key}``.
        out_keys: where the sample is written (default ``["_"]`` as in tensordict).
        spec: spec of the sample.
        safe: if ``True``, project the sample into ``spec``. Defaults to ``False``.
        default_interaction_type: how to draw outside of ``set_exploration_type``.
            Defaults to ``InteractionType.DETERMINISTIC``.
        distribution_class: the distribution. Defaults to :class:`tensordict.nn.distributions.Delta`.
        distribution_kwargs: extra keyword arguments of the distribution (``low``, ...).
        return_log_prob: also write the sample's log-probability. Defaults to ``False``.
        log_prob_keys, log_prob_key: where the log-probability goes (default
            ``"<sample key>_log_prob"``, e.g. ``"action_log_prob"``).
        cache_dist: keep the last distribution (``_dist``). Defaults to ``False``.
        n_empirical_estimate: samples used to estimate the mean when the
            distribution has no closed form. Defaults to ``1000``.
        num_samples: draw this many samples (new leading dims).
        generator: a ``torch.Generator``, a seed, or a key holding one.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import ExplorationType, set_exploration_type
        >>> from rl.modules import SafeProbabilisticModule
        >>> module = SafeProbabilisticModule(
        ...     in_keys=["logits"],
        ...     out_keys=["action"],
        ...     distribution_class=torch.distributions.Categorical,
        ...     return_log_prob=True,
        ... )
        >>> td = TensorDict(logits=torch.tensor([[0.0, 5.0, 0.0]]), batch_size=[1])
        >>> with set_exploration_type(ExplorationType.DETERMINISTIC):
        ...     module(td)["action"]
        tensor([1])
        >>> sorted(td.keys())
        ['action', 'action_log_prob', 'logits']
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey] | dict[str, NestedKey],
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        spec: TensorSpec | None = None,
        *,
        safe: bool = False,
        default_interaction_type: InteractionType = InteractionType.DETERMINISTIC,
        distribution_class: type = Delta,
        distribution_kwargs: dict | None = None,
        return_log_prob: bool = False,
        log_prob_keys: Sequence[NestedKey] | None = None,
        log_prob_key: NestedKey | None = None,
        cache_dist: bool = False,
        n_empirical_estimate: int = 1000,
        num_samples: int | torch.Size | None = None,
        generator: torch.Generator | int | NestedKey | None = None,
    ):
        super().__init__(
            in_keys=in_keys,
            out_keys=out_keys,
            default_interaction_type=default_interaction_type,
            distribution_class=distribution_class,
            distribution_kwargs=distribution_kwargs,
            return_log_prob=return_log_prob,
            log_prob_keys=log_prob_keys,
            log_prob_key=log_prob_key,
            cache_dist=cache_dist,
            n_empirical_estimate=n_empirical_estimate,
            num_samples=num_samples,
            generator=generator,
        )
        if "validate_args" not in self.distribution_kwargs and _takes_validate_args(
            distribution_class
        ):
            # as TorchRL, which turns torch.distributions' argument checks off globally:
            # here only for the distributions this module builds (they cost about as
            # much as a small policy's forward pass)
            self.distribution_kwargs = {**self.distribution_kwargs, "validate_args": False}
        sample_keys = list(self.dist_sample_keys)
        if spec is not None and not isinstance(spec, Composite) and len(sample_keys) > 1:
            raise RuntimeError(
                f"got one spec for several sampled keys {sample_keys}: pass a Composite"
            )
        _register_spec(self, self._out_keys_for_spec(), spec, safe)
        self._refresh_lean()

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        # the lean path caches what these attributes decide: recompute it when they change
        if name in _LEAN_ATTRS and "_lean_params" in self.__dict__:
            self._refresh_lean()

    def _apply(self, fn, recurse: bool = True):
        # The distribution's tensor arguments (a TanhNormal's bounds) follow the module
        # through .to(), .cuda(), .double() as buffers do; tensordict's module leaves
        # them where they were made. A new dict, so one shared with another module stays.
        super()._apply(fn, recurse)
        kwargs = self.distribution_kwargs
        for value in kwargs.values():
            if isinstance(value, torch.Tensor):
                self.distribution_kwargs = {
                    k: fn(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()
                }
                break
        return self

    def _out_keys_for_spec(self) -> list[NestedKey]:
        keys = list(self.dist_sample_keys)
        if self.return_log_prob:
            keys += [k for k in self.out_keys if k not in keys]
        return keys

    def _refresh_lean(self) -> None:
        # The lean path covers the common case (one sampled tensor, no num_samples, no
        # generator, a torch distribution); anything else goes through tensordict's path.
        keys = list(self.dist_sample_keys)
        self._lean_sample_key = keys[0] if len(keys) == 1 else None
        self._lean = (
            self._lean_sample_key is not None
            and self.num_samples is None
            and self._generator is None
            and getattr(self, "_generator_key", None) is None
            and not self.cache_dist
            # a class (not a factory such as functools.partial), and not a composite one
            and isinstance(self.distribution_class, type)
            and not issubclass(self.distribution_class, CompositeDistribution)
        )
        self._lean_params = [
            (dk[-1] if isinstance(dk, tuple) else dk, key)
            for dk, key in zip(self.dist_keys, self.in_keys, strict=True)
        ]
        # the property reads the composite aggregation mode at every access; for a
        # non-composite distribution the key is fixed
        self._lean_log_prob_key = self.log_prob_key if self.return_log_prob else None

    def get_dist(self, tensordict: TensorDictBase) -> torch.distributions.Distribution:
        """Builds the distribution from the parameters in ``tensordict``.

        Raises:
            KeyError: when a parameter is missing (naming it and the keys present).
        """
        params = {}
        for name, key in self._lean_params:
            value = tensordict.get(key, None)
            if value is None:
                raise _missing_key_error(tensordict, key, type(self).__name__)
            params[name] = value
        return self.distribution_class(**params, **self.distribution_kwargs)

    @dispatch(auto_batch_size=False)
    def forward(
        self,
        tensordict: TensorDictBase,
        tensordict_out: TensorDictBase | None = None,
        _requires_sample: bool = True,
    ) -> TensorDictBase:
        if not (self._lean and _requires_sample and tensordict_out is None):
            return super().forward(tensordict, tensordict_out, _requires_sample=_requires_sample)
        return self._lean_forward(tensordict)

    def _lean_forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        sample, log_prob = self._lean_draw(self.get_dist(tensordict))
        tensordict.set(self._lean_sample_key, sample)
        if log_prob is not None:
            tensordict.set(self._lean_log_prob_key, log_prob)
        return tensordict

    def _lean_draw(
        self, dist: torch.distributions.Distribution
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The sample (and its log-probability when ``return_log_prob``) the module writes."""
        itype = interaction_type() or self.default_interaction_type
        log_prob = self._lean_log_prob_key is not None
        if itype is _RANDOM:
            if log_prob:
                # score the draw itself (a tanh-squashed sample cannot be inverted exactly)
                name = "rsample_and_log_prob" if dist.has_rsample else "sample_and_log_prob"
                joint = getattr(type(dist), name, None)
                if joint is not None:
                    return joint(dist, torch.Size())
            if type(dist) is D.Categorical:  # torch's own: drawn as rl's categoricals draw
                sample = _draw_index(dist, torch.Size())
            else:
                sample = dist.rsample() if dist.has_rsample else dist.sample()
        else:
            sample = self._dist_sample(dist, interaction_type=itype)
        return sample, (dist.log_prob(sample) if log_prob else None)

    def tensor_forward(self) -> TensorForward | None:
        """The tensor-level twin of this module's forward, for collectors (see
        :func:`_tensor_stage`): ``fn(*params) -> (sample[, log_prob])``, or ``None``
        where the lean path does not apply (hooks, ``safe=True``, a composite
        distribution, ``num_samples``, a generator, nested keys, a subclass's forward)."""
        cls = type(self)
        if not self._lean or _has_hooks(self) or not _same_methods(cls, _PROB_METHODS):
            return None
        names = [name for name, _ in self._lean_params]
        in_keys = [key for _, key in self._lean_params]
        out_keys = [self._lean_sample_key]
        if self._lean_log_prob_key is not None:
            out_keys.append(self._lean_log_prob_key)
        if not _plain_keys(in_keys + out_keys) or len(set(out_keys)) != len(out_keys):
            return None
        draw = self._lean_draw

        def forward(*params: torch.Tensor) -> tuple[torch.Tensor, ...]:
            dist = self.distribution_class(**dict(zip(names, params)), **self.distribution_kwargs)
            sample, log_prob = draw(dist)
            return (sample,) if log_prob is None else (sample, log_prob)

        return in_keys, out_keys, forward


def _has_hooks(module: nn.Module) -> bool:
    return bool(
        module._forward_hooks
        or module._forward_pre_hooks
        or _module_mod._global_forward_hooks
        or _module_mod._global_forward_pre_hooks
    )


TensorForward = tuple[list[str], list[str], Callable[..., tuple[torch.Tensor, ...]]]
"""``(in_keys, out_keys, fn)``: ``fn(*tensors at in_keys)`` returns the tensors written at
``out_keys`` (each key once, in the order first written), as the module's forward would."""


def _plain_keys(keys: Sequence[Any]) -> bool:
    return all(type(key) is str and key != "_" for key in keys)


def _same_methods(cls: type, methods: tuple[tuple[type, str], ...]) -> bool:
    """Whether ``cls`` still uses the methods the tensor path copies (no subclass override)."""
    return all(getattr(cls, name) is getattr(base, name) for base, name in methods)


def _plain_forward(module: nn.Module, base: type) -> bool:
    """Whether ``module`` runs ``base``'s own ``__call__`` and ``forward`` with no hook
    (its own or global ones): what a module's tensor twin, written from ``base``'s
    forward, stands for."""
    return not _has_hooks(module) and _same_methods(
        type(module), ((base, "__call__"), (base, "forward"))
    )


def _tensor_stage(module: nn.Module) -> TensorForward | None:
    """The tensor twin of one module of an actor, or ``None``.

    A module opts in with a ``tensor_forward()`` method returning a
    :data:`TensorForward` (or ``None`` when unsafe), the protocol of
    :func:`rl.core.tensor_policy`; a plain ``TensorDictModule`` (keys to keys, no hooks,
    not ``safe``) gets the twin :func:`rl.core.tensor_policy` builds from its network.
    Collectors ask an actor for its twin through :func:`rl.core.tensor_policy` and call
    ``fn`` on tensors instead of the actor on a TensorDict; ``fn`` makes the same tensor
    calls in the same order, so values and random draws are identical. The twin's keys
    are fixed when it is built (the
    collector rebuilds it at each batch, following attributes changed since).
    """
    if _has_hooks(module):
        return None
    own = getattr(module, "tensor_forward", None)
    if own is not None:
        return own()
    if not isinstance(module, TensorDictModule) or getattr(module, "safe", False):
        return None
    twin = tensor_policy(module)  # rl.core's recognition of a plain TensorDictModule
    return None if twin is None else (twin.in_keys, twin.out_keys, twin.forward)


def _tensor_chain(modules: Sequence[nn.Module]) -> TensorForward | None:
    """The tensor twin of ``modules`` run in order, each reading what the ones before it
    wrote, or ``None`` when one of them has none."""
    stages = [_tensor_stage(module) for module in modules]
    if not stages or any(stage is None for stage in stages):
        return None
    if len(stages) == 1:
        return stages[0]
    in_keys: list[str] = []
    out_keys: list[str] = []
    for stage_in, stage_out, _ in stages:
        in_keys += [k for k in stage_in if k not in out_keys and k not in in_keys]
        out_keys += [k for k in stage_out if k not in out_keys]

    def forward(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values = dict(zip(in_keys, tensors))
        for stage_in, stage_out, fn in stages:
            values.update(zip(stage_out, fn(*[values[k] for k in stage_in])))
        return tuple(values[k] for k in out_keys)

    return in_keys, out_keys, forward


def _plain_step(module: nn.Module) -> tuple[nn.Module, list, list] | None:
    """``(network, in_keys, out_keys)`` of a TensorDictModule that only maps keys to keys.

    Such a module can be run without its wrappers (dispatch, skip-existing, error
    decoration): read the in_keys, call the network, write the out_keys.
    """
    if type(module) not in (TensorDictModule, SafeModule) or getattr(module, "safe", False):
        return None
    if (
        module._kwargs is not None
        or module.method is not None
        or module.method_kwargs
        or module.inplace is not True
        or "_" in module.out_keys
    ):
        return None
    return module.module, list(module.in_keys), list(module.out_keys)


_PROB_METHODS = tuple(
    (SafeProbabilisticModule, name)
    for name in ("__call__", "forward", "get_dist", "_lean_forward", "_lean_draw")
) + ((ProbabilisticTensorDictModule, "_dist_sample"),)


class SafeProbabilisticTensorDictSequential(_SpecMixin, ProbabilisticTensorDictSequential):
    """A :class:`~tensordict.nn.ProbabilisticTensorDictSequential` with a ``spec``.

    The last module is usually a :class:`SafeProbabilisticModule`; the ones before it
    compute the distribution's parameters. ``get_dist(td)`` runs them and returns the
    distribution; calling the sequence writes the sample (and its log-probability).

    Args:
        *modules: the modules, the last one probabilistic.
        partial_tolerant: as in :class:`~tensordict.nn.TensorDictSequential`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.modules import SafeProbabilisticModule, SafeProbabilisticTensorDictSequential
        >>> seq = SafeProbabilisticTensorDictSequential(
        ...     TensorDictModule(torch.nn.Linear(3, 4), ["observation"], ["logits"]),
        ...     SafeProbabilisticModule(
        ...         ["logits"], ["action"], distribution_class=torch.distributions.Categorical
        ...     ),
        ... )
        >>> seq.get_dist(TensorDict(observation=torch.randn(2, 3), batch_size=[2])).batch_shape
        torch.Size([2])
    """

    def __init__(
        self,
        *modules: TensorDictModuleBase | ProbabilisticTensorDictModule,
        partial_tolerant: bool = False,
    ):
        super().__init__(*modules, partial_tolerant=partial_tolerant)
        self._spec = _merged_spec(self.module)
        self._refresh_lean()

    def _refresh_lean(self) -> None:
        last = self.module[-1]
        self._lean = (
            isinstance(last, SafeProbabilisticModule)
            and not self.return_composite
            and self._requires_sample
            and not self._select_before_return
            and self.inplace is not False
            and self.inplace != "empty"
            and not self.partial_tolerant
        )
        # a plain (unregistered) tuple: indexing the ModuleList at every call would build
        # a new ModuleList each time
        modules = list(self.module)
        self._lean_plan = (tuple((m, _plain_step(m)) for m in modules[:-1]), modules[-1])

    def _run_lean(self, tensordict: TensorDictBase) -> TensorDictBase:
        plan, last = self._lean_plan
        if skip_existing():
            for module, _ in plan:
                tensordict = module(tensordict)
            return last(tensordict)
        for module, step in plan:
            if step is None or _has_hooks(module):
                tensordict = module(tensordict)
                continue
            net, in_keys, out_keys = step
            inputs = []
            for key in in_keys:
                value = tensordict.get(key, None)
                if value is None:
                    raise _missing_key_error(tensordict, key, type(module).__name__)
                inputs.append(value)
            out = net(*inputs)
            if isinstance(out, torch.Tensor):
                out = (out,)
            if len(out) != len(out_keys):
                raise RuntimeError(
                    f"the network of the module writing {out_keys} returned {len(out)} "
                    f"values for {len(out_keys)} out_keys"
                )
            for key, value in zip(out_keys, out):
                tensordict.set(key, value)
        if not last._lean or _has_hooks(last):
            return last(tensordict)
        return last._lean_forward(tensordict)

    def tensor_forward(self) -> TensorForward | None:
        """The tensor-level twin of this sequence's forward, for collectors (see
        :func:`_tensor_stage`): its plain modules' networks, then the sample (and
        log-probability) drawn as :class:`SafeProbabilisticModule` draws it; ``None``
        where the sequence does not take its lean path or a module has no twin."""
        if not self._lean or _has_hooks(self) or not _same_methods(type(self), _SEQ_METHODS):
            return None
        plan, last = self._lean_plan
        return _tensor_chain([module for module, _ in plan] + [last])

    @dispatch(auto_batch_size=False)
    def forward(
        self,
        tensordict: TensorDictBase,
        tensordict_out: TensorDictBase | None = None,
        _requires_sample: bool | None = None,
        **kwargs: Any,
    ) -> TensorDictBase:
        # Acting is the hot path of every collector: plain TensorDictModules run without
        # their wrappers, and a missing key surfaces as the KeyError of the module reading it
        if self._lean and tensordict_out is None and _requires_sample is None and not kwargs:
            try:
                return self._run_lean(tensordict)
            except KeyError as err:
                if "Keys present" in str(err) or "with keys" in str(err):
                    raise
                present = [str(k) for k in tensordict.keys(True, True)]
                raise KeyError(f"{err.args[0]} Keys present: {present}") from err
        return super().forward(
            tensordict, tensordict_out, _requires_sample=_requires_sample, **kwargs
        )


_SEQ_METHODS = tuple(
    (SafeProbabilisticTensorDictSequential, name) for name in ("__call__", "forward", "_run_lean")
)
