"""LossModule: the base class every loss in rl.objectives derives from.

It holds what losses share: the key dataclass and :meth:`LossModule.set_keys`, the value
estimator, and the conversion of networks into trainable parameters plus detached target
copies (:meth:`LossModule.convert_to_functional`).

Networks are kept stateful: the online parameters are the network's own
``nn.Parameter`` objects (so a policy shared with a collector sees every optimizer
step), targets live in a deep copy of the network whose tensors are buffers of the loss.
Calling a network therefore costs what calling it outside the loss costs; nothing is
swapped in and out at every forward. An ensemble (``expand_dim=N``) keeps its parameters
stacked along a leading dimension of size ``N``, as in TorchRL, and runs ``N`` copies of
the network on views of that stack.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictParams, dispatch
from tensordict.nn.probabilistic import InteractionType, set_interaction_type
from tensordict.utils import expand_as_right
from torch import nn

from . import _random_modules
from ._networks import _BatchedMLP, _ensemble_output, _is_plain_tdmodule, _module_inputs
from .value import (
    ValueEstimatorBase,
    ValueEstimators,
)
from .value._enum import default_value_kwargs, get_value_estimator_entry

__all__ = ["AUTO_LOSS_MASK_KEYS", "LossModule"]

#: an ensemble of more members than this runs batched (an MLP: LossModule.
#: _batched_values), or compiled vmapped (another network, _stacked_values); of this
#: many or fewer, member by member, or batched where the products are small
_VMAP_MEMBERS = 2
#: a pair of members runs batched when no layer's product exceeds this many
#: multiply-adds per member (rows x in x out); a CPU measurement, see _batched_values
_BATCHED_MACS = 1 << 21
#: whether ensembles of MLPs may run batched at all (off: the member calls, as before;
#: ``benchmarks/bench_compile.py --batched-ab`` times one against the other)
_BATCHED_ENSEMBLES = True

#: the validity masks ``loss_mask_key="auto"`` reads, ANDed where several are present:
#: ``("collector", "mask")`` (``False`` on the padding a slice sampler adds) and
#: ``"shifted_valid"`` (``False`` where a bootstrapped target crosses an episode end)
AUTO_LOSS_MASK_KEYS: tuple = (("collector", "mask"), "shifted_valid")

#: the estimators of a bootstrapped target that the off-policy losses accept
_TD_ESTIMATORS = (ValueEstimators.TD0, ValueEstimators.TD1, ValueEstimators.TDLambda)


def rl_warnings() -> bool:
    """Whether the library's advisory warnings are on (environment variable ``RL_WARNINGS``).

    Read at each call; any of ``0``, ``false``, ``no``, ``off`` turns them off. Defaults to on,
    as in TorchRL.
    """
    return os.environ.get("RL_WARNINGS", "1").strip().lower() not in (
        "0",
        "false",
        "no",
        "off",
        "n",
        "f",
    )


def _wrap_forward(func):
    """Run a loss's forward in its deterministic sampling mode; name missing keys."""

    @functools.wraps(func)
    def forward(self, tensordict, *args, **kwargs):
        if not all(self._has_update_associated.values()) and rl_warnings():
            self._warn_no_updater()
        with set_interaction_type(self.deterministic_sampling_mode):
            try:
                return func(self, tensordict, *args, **kwargs)
            except KeyError as err:
                missing = self._first_missing_key(tensordict)
                if missing is None:
                    raise
                raise self._missing_key_error(tensordict, *missing) from err

    # ``loss(observation=..., next_reward=...)``: the keywords (nested keys joined by "_")
    # fill a TensorDict of ``in_keys`` and the call returns the ``out_keys`` values, in order
    params = list(inspect.signature(func).parameters)
    if len(params) > 1 and params[1] == "tensordict":
        forward = dispatch(forward)
    forward._rl_wrapped = True
    return forward


def _walk(module: nn.Module, key: tuple[str, ...]) -> tuple[nn.Module, str | tuple[str, ...]]:
    """The submodule holding ``key`` and the name in it.

    A :class:`~tensordict.nn.TensorDictParams` (the parameters of
    :class:`~rl.modules.MultiAgentMLP`, stacked over agents) holds a nested TensorDict:
    the name returned for it is the rest of the key, a tuple.
    """
    for i, name in enumerate(key[:-1]):
        if isinstance(module, TensorDictParams):
            return module, key[i:]
        module = module._modules[name]
    if isinstance(module, TensorDictParams):
        return module, key[-1:]
    return module, key[-1]


def _set_slot(sub: nn.Module, name, tensor: torch.Tensor, is_param: bool) -> None:
    if isinstance(name, tuple):  # inside a TensorDictParams: a new entry sharing storage
        sub.set(name, tensor, inplace=False)
    elif is_param:
        sub._parameters[name] = tensor
    else:
        sub._buffers[name] = tensor


def _slot_tensor(sub: nn.Module, name) -> torch.Tensor:
    """The parameter or buffer that :func:`_walk` located (a tuple name: an entry of a
    :class:`~tensordict.nn.TensorDictParams`)."""
    if isinstance(name, tuple):
        return sub.get(name)
    return sub._parameters[name] if name in sub._parameters else sub._buffers[name]


def _slots(module: nn.Module, keys: list[tuple[str, ...]]) -> list[tuple[nn.Module, str, bool]]:
    out = []
    for key in keys:
        sub, name = _walk(module, key)
        out.append((sub, name, isinstance(name, tuple) or name in sub._parameters))
    return out


def _as_buffers(module: nn.Module, keys, tensors) -> None:
    """Turn the parameters of ``module`` at ``keys`` into buffers holding ``tensors``."""
    for key, tensor in zip(keys, tensors, strict=True):
        sub, name = _walk(module, key)
        if isinstance(name, tuple):
            _set_slot(sub, name, tensor, False)
            continue
        sub._parameters.pop(name, None)
        sub._buffers[name] = tensor


def _reinit(module: nn.Module) -> None:
    """Re-initialise every layer that owns parameters and knows how to reset them (its
    own, or a :class:`~tensordict.nn.TensorDictParams` child's, as
    :class:`~rl.modules.MultiAgentMLP`)."""
    for sub in module.modules():
        reset = getattr(sub, "reset_parameters", None)
        owns = sub._parameters or any(isinstance(c, TensorDictParams) for c in sub.children())
        if callable(reset) and owns:
            reset()


class _UnsupportedEstimatorError(ValueError, NotImplementedError):
    """A value estimator the loss cannot use: a bad argument (``ValueError``) that TorchRL
    reports as ``NotImplementedError``; catching either works."""


class _MissingKeyError(KeyError):
    """A KeyError whose message prints as written (KeyError quotes its argument)."""

    def __str__(self) -> str:
        return str(self.args[0])


class _Ensemble:
    """N copies of one network that run on views of stacked parameters."""

    def __init__(self, copies: list[nn.Module], keys: list[tuple[str, ...]]):
        self.copies = copies
        self.keys = keys
        self.slots = [_slots(c, keys) for c in copies]

    def bind(self, stacked: list[torch.Tensor], positions: Iterable[int] | None = None) -> None:
        """Member ``i`` holds ``stacked[k][i]`` in slot ``k``, for each ``k`` of
        ``positions`` (every slot by default)."""
        positions = range(len(stacked)) if positions is None else positions
        # one unbind per tensor: its backward stacks the members' gradients in one copy
        # (indexing member by member would zero-fill and add a full stack per member)
        self.bind_views({k: stacked[k].unbind(0) for k in positions})

    def bind_views(self, views: dict[int, Sequence[torch.Tensor]]) -> None:
        """Member ``i`` holds ``views[k][i]`` in slot ``k``."""
        for i, slots in enumerate(self.slots):
            for k, member_views in views.items():
                sub, name, is_param = slots[k]
                _set_slot(sub, name, member_views[i], is_param)


class LossModule(TensorDictModuleBase):
    """Base class of the losses: reads a TensorDict, returns a TensorDict of ``loss_*`` entries.

    Subclasses declare the entries they read in a nested ``_AcceptedKeys`` dataclass whose
    defaults are TorchRL's key names; :meth:`set_keys` remaps them. Networks given to a
    loss are registered with :meth:`convert_to_functional`, which exposes
    ``loss.<name>_params`` (trainable, in ``loss.parameters()``) and, when asked,
    ``loss.target_<name>_params`` (detached copies stored as buffers: in the state_dict,
    never in ``loss.parameters()``), updated by :class:`~rl.objectives.SoftUpdate` or
    :class:`~rl.objectives.HardUpdate`.

    The forward of every subclass runs under ``deterministic_sampling_mode``
    (``InteractionType.DETERMINISTIC`` by default), and a ``KeyError`` raised because the
    input lacks an entry the loss reads is re-raised naming the entry, the loss and the
    ``set_keys`` call that remaps it.

    Examples:
        >>> from dataclasses import dataclass
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.objectives import LossModule
        >>> class SquareLoss(LossModule):
        ...     @dataclass
        ...     class _AcceptedKeys:
        ...         value: str = "value"
        ...
        ...     def forward(self, tensordict):
        ...         value = tensordict.get(self.tensor_keys.value)
        ...         return TensorDict(loss_square=value.pow(2).mean())
        >>> loss = SquareLoss()
        >>> loss.set_keys(value="my_value")
        >>> loss(TensorDict(my_value=torch.tensor([1.0, 3.0])))["loss_square"]
        tensor(5.)
    """

    @dataclass
    class _AcceptedKeys:
        """The TensorDict keys a loss reads and writes, with their defaults."""

    default_value_estimator = None
    #: the estimators :meth:`make_value_estimator` accepts (all of them unless a loss narrows it)
    SUPPORTED_VALUE_ESTIMATORS: tuple[ValueEstimators, ...] = tuple(ValueEstimators)
    deterministic_sampling_mode = InteractionType.DETERMINISTIC
    SEP = "."
    #: warned (``UserWarning``) at each forward, and at each read of ``target_*_params``, while
    #: a network with a target copy has no updater (``SoftUpdate``/``HardUpdate``) bound to it
    TARGET_NET_WARNING = (
        "No target network updater has been associated with this loss module, but it holds "
        "target parameters: they change only if you update them yourself. Bind a SoftUpdate "
        "or HardUpdate to the loss, or set the RL_WARNINGS environment variable to 0 to "
        "silence this warning."
    )

    #: buffers a plain number may be assigned to (``loss.entropy_coeff = 0.003``): the number
    #: is copied into the buffer, which keeps its device and dtype (for schedulers); each
    #: class names its own, :attr:`_all_schedulable_buffers` merges those of its bases
    _schedulable_buffers: frozenset[str] = frozenset()
    _all_schedulable_buffers: frozenset[str] = frozenset()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        fwd = cls.__dict__.get("forward")
        if fwd is not None and not getattr(fwd, "_rl_wrapped", False):
            cls.forward = _wrap_forward(fwd)
        cls._all_schedulable_buffers = frozenset().union(
            *(getattr(base, "_schedulable_buffers", frozenset()) for base in cls.__mro__)
        )

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            isinstance(value, (int, float))
            and name in type(self)._all_schedulable_buffers
            and self.__dict__.get("_buffers", {}).get(name) is not None
        ):
            buffer = self._buffers[name]
            with torch.no_grad():
                buffer.copy_(torch.as_tensor(value, dtype=buffer.dtype, device=buffer.device))
            return
        super().__setattr__(name, value)

    def __init__(self) -> None:
        super().__init__()
        self.in_keys = []
        self.out_keys = []
        self._tensor_keys = self._AcceptedKeys()
        self._value_estimator = None
        self.value_type = self.default_value_estimator
        self._has_update_associated: dict[str, bool] = {}
        self._functional: dict[str, dict[str, Any]] = {}
        self._cast_version = 0

    # ------------------------------------------------------------------ keys
    @property
    def tensor_keys(self) -> _AcceptedKeys:
        """The keys this loss reads and writes (an ``_AcceptedKeys`` instance)."""
        return self._tensor_keys

    @classmethod
    def default_keys(cls) -> _AcceptedKeys:
        """The keys with their default names."""
        return cls._AcceptedKeys()

    def set_keys(self, **kwargs) -> None:
        """Remap the TensorDict keys this loss reads or writes.

        Args:
            **kwargs: ``name=key`` pairs; ``name`` is a field of ``tensor_keys`` and
                ``key`` a (nested) key, or ``None`` to restore the default.

        Raises:
            ValueError: if a name is not one of this loss's keys.
        """
        valid = [f.name for f in fields(self._AcceptedKeys)]
        for name, value in kwargs.items():
            if name not in valid:
                raise ValueError(
                    f"{type(self).__name__}.set_keys got unknown key name {name!r}; "
                    f"valid names are {valid}"
                )
            if value is None:
                value = getattr(self.default_keys(), name)
            setattr(self._tensor_keys, name, value)
        self._forward_value_estimator_keys(**kwargs)
        set_in_keys = getattr(self, "_set_in_keys", None)
        if callable(set_in_keys):
            set_in_keys()

    #: names of ``tensor_keys`` forwarded to the value estimator under the same name
    _value_estimator_default_keys = (
        "advantage",
        "value_target",
        "value",
        "reward",
        "done",
        "terminated",
    )

    #: estimator key names this loss calls otherwise, e.g. ``{"value": "state_action_value"}``
    _value_estimator_key_names: dict[str, str] = {}

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        """Forward this loss's keys to its value estimator (override to rename), then
        refresh the loss's input keys with its ``_set_in_keys`` when it has one (as
        TorchRL)."""
        estimator = self._value_estimator
        if estimator is not None:
            renamed = self._value_estimator_key_names
            keys = {
                name: getattr(self.tensor_keys, renamed.get(name, name))
                for name in self._value_estimator_default_keys
                if hasattr(self.tensor_keys, renamed.get(name, name))
            }
            if keys:
                estimator.set_keys(**keys)
        set_in_keys = getattr(self, "_set_in_keys", None)
        if callable(set_in_keys):
            set_in_keys()

    def _priority_weight(self, tensordict: TensorDictBase) -> torch.Tensor | None:
        """The importance weights of a prioritized buffer, when the loss uses them.

        ``None`` unless ``use_prioritized_weights`` is ``True`` or ``"auto"`` and the
        input holds ``tensor_keys.priority_weight``.
        """
        if getattr(self, "use_prioritized_weights", False) in (True, "auto"):
            return tensordict.get(self.tensor_keys.priority_weight, None)
        return None

    def _first_missing_key(self, tensordict) -> tuple[str | None, Any] | None:
        """The first key this loss reads that ``tensordict`` lacks, as ``(name, key)``."""
        if not isinstance(tensordict, TensorDictBase):
            return None
        for f in fields(self._AcceptedKeys):
            if f.name not in self._required_key_names():
                continue
            key = getattr(self.tensor_keys, f.name)
            if tensordict.get(key, None) is None:
                return f.name, key
        for key in getattr(self, "_in_keys_extra", ()):
            if tensordict.get(key, None) is None:
                return None, key
        # then the networks' inputs under "next" that the loss declares (the next state);
        # other in_keys can be optional (rewards when an advantage is given), not named here
        if self._next_state_optional:
            return None
        extra = getattr(self, "_in_keys_extra", ())
        under_next = {("next", *k) if isinstance(k, tuple) else ("next", k) for k in extra}
        for key in self.in_keys:
            if key in under_next and tensordict.get(key, None) is None:
                return None, key
        return None

    #: whether the next state in ``in_keys`` may be absent (an advantage given instead)
    _next_state_optional = False

    def _required_key_names(self) -> tuple[str, ...]:
        """Names of ``tensor_keys`` that must be present in the input (override)."""
        return ()

    def _missing_key_error(self, tensordict, name: str | None, key) -> KeyError:
        present = ", ".join(sorted((repr(k) for k in tensordict.keys(True, True)), key=len))
        expected = ", ".join(repr(k) for k in self.in_keys)
        if name is None:
            how = "it is read by one of the loss's networks (check their in_keys"
            networks = getattr(self, "_in_keys_extra", ())
            if isinstance(key, tuple) and key[0] == "next" and networks:
                shown = ", ".join(repr(k) for k in networks)
                how += f": [{shown}], read under 'next' for the next state"
            how += ")"
        else:
            how = f"remap it with loss.set_keys({name}=...)"
        return _MissingKeyError(
            f"loss {type(self).__name__} needs key {key!r} which is missing from the input "
            f"(keys present: [{present}]; the loss reads in_keys [{expected}]); {how}"
        )

    def register_coeff_buffer(
        self,
        name: str,
        value: float | int | torch.Tensor | None,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        """Stores a scalar coefficient as a buffer (``None``: a plain ``None`` attribute).

        Args:
            name: the attribute.
            value: a float, an int or a one-element tensor, or ``None``.
            device, dtype: of the buffer.

        Raises:
            ValueError: a bool, a non-number or a tensor of more than one element.
        """
        if value is None:
            setattr(self, name, None)
            return
        if isinstance(value, bool) or not isinstance(value, (float, int, torch.Tensor)):
            raise ValueError(f"{name} must be a float or a scalar tensor, got {value!r}.")
        value = torch.as_tensor(value, device=device, dtype=dtype)
        if value.numel() != 1:
            raise ValueError(
                f"{name} must be a float or a scalar tensor, got a tensor of shape "
                f"{tuple(value.shape)}."
            )
        self.register_buffer(name, value)

    @property
    def vmap_randomness(self) -> str:
        """What ``torch.vmap`` does with random ops in the loss's ensembles: ``"different"``
        when one of its networks holds a random module (see
        :func:`~rl.objectives.add_random_module`), else ``"error"``; or what
        :meth:`set_vmap_randomness` set."""
        value = self.__dict__.get("_vmap_randomness_value")
        if value is None:
            modules = [
                m for m in (*self.__dict__.values(), *self.children()) if isinstance(m, nn.Module)
            ]
            value = _random_modules.vmap_randomness(*modules)
            self.__dict__["_vmap_randomness_value"] = value
        return value

    def set_vmap_randomness(self, value: str) -> None:
        """Sets :attr:`vmap_randomness` (``"error"``, ``"same"`` or ``"different"``)."""
        if value not in ("error", "same", "different"):
            raise ValueError(
                "Wrong vmap randomness, should be one of 'error', 'same' or 'different'; "
                f"got {value!r}"
            )
        self.__dict__["_vmap_randomness_value"] = value

    def _get(self, tensordict: TensorDictBase, name: str, under: str | None = None) -> torch.Tensor:
        """Read ``tensor_keys.<name>`` (below ``under``, e.g. ``"next"``) with a clear error."""
        key = getattr(self.tensor_keys, name)
        if under is not None:
            key = (under, *key) if isinstance(key, tuple) else (under, key)
        value = tensordict.get(key, None)
        if value is None:
            raise self._missing_key_error(tensordict, name, key)
        return value

    # -------------------------------------------------------- value estimator
    @property
    def value_estimator(self):
        """The value estimator that builds targets; built with the defaults on first use."""
        if self._value_estimator is None:
            self.make_value_estimator(self.default_value_estimator)
        return self._value_estimator

    @value_estimator.setter
    def value_estimator(self, value) -> None:
        self._value_estimator = value

    def make_value_estimator(self, value_type=None, **hyperparams):
        """Build the value estimator this loss uses for its targets.

        Args:
            value_type (ValueEstimators, ValueEstimatorBase instance or subclass, optional):
                which estimator; defaults to ``default_value_estimator``.
            **hyperparams: estimator arguments (``gamma``, ``lmbda``, ...); when absent
                they default to ``default_value_kwargs(value_type)``, and ``gamma`` to the
                ``gamma`` given to the loss's constructor.

        Returns:
            the loss itself, for chaining.

        Raises:
            ValueError: if ``value_type`` is not a ``ValueEstimators`` member (the
                message lists them) or this loss does not support it (that error is
                also a ``NotImplementedError``, what TorchRL raises).
        """
        value_type, hp = self._prepare_value_estimator_kwargs(value_type, **hyperparams)
        if value_type is None:  # an estimator (or its class) given: already set
            return self
        supported = self._supported_value_estimators()
        if value_type not in supported:
            raise _UnsupportedEstimatorError(
                f"{type(self).__name__} does not support the {value_type.name} value "
                f"estimator; supported: {[m.name for m in supported]}"
            )
        self._value_estimator = self._build_value_estimator(value_type, hp)
        self._forward_value_estimator_keys()
        return self

    def _prepare_value_estimator_kwargs(self, value_type=None, **hyperparams):
        """What :meth:`make_value_estimator` does before building a ``ValueEstimators`` one.

        An estimator instance or class is set on the loss right away; a member (or its
        name) is resolved, written to ``value_type``, and its hyperparameters gathered:
        ``default_value_kwargs(value_type)``, then the loss's ``gamma`` if it has one,
        then ``hyperparams``.

        Returns:
            ``(None, None)`` when the estimator was set, else ``(value_type, hp)``.

        Raises:
            ValueError: ``value_type`` is not a ``ValueEstimators`` member (or name).
        """
        if value_type is None:
            value_type = self.default_value_estimator
        if isinstance(value_type, ValueEstimatorBase):
            self._value_estimator = value_type
            self.value_type = type(value_type)
            self._forward_value_estimator_keys()
            return None, None
        if isinstance(value_type, type) and issubclass(value_type, ValueEstimatorBase):
            self._value_estimator = value_type(**hyperparams)
            self.value_type = value_type
            self._forward_value_estimator_keys()
            return None, None
        if isinstance(value_type, str) and value_type in ValueEstimators.__members__:
            value_type = ValueEstimators[value_type]
        if not isinstance(value_type, ValueEstimators):
            raise ValueError(
                f"unknown value estimator {value_type!r} for {type(self).__name__}; valid "
                f"ones are {[m.name for m in ValueEstimators]}"
            )
        self.value_type = value_type
        hp = dict(default_value_kwargs(value_type))
        gamma = getattr(self, "gamma", None)
        if gamma is not None:
            hp["gamma"] = gamma
        hp.update(hyperparams)
        return value_type, hp

    def _value_target(self, tensordict: TensorDictBase, next_value: torch.Tensor) -> torch.Tensor:
        """The bootstrapped target ``[*B, 1]`` from ``next_value`` (``[*B, 1]``).

        Until :meth:`make_value_estimator` is called, the default TD(0) target
        ``r + gamma * (1 - terminated) * next_value`` is computed here directly (the
        estimator it would build gives the same numbers, with more dispatch per call);
        otherwise the estimator's ``value_estimate(tensordict, next_value=...)`` is used.
        """
        if self._value_estimator is None and self.default_value_estimator in ("TD0", None):
            reward = self._get(tensordict, "reward", "next")
            terminated = tensordict.get(("next", self.tensor_keys.terminated), None)
            if terminated is None:
                terminated = self._get(tensordict, "done", "next")
            gamma = getattr(self, "gamma", None)
            gamma = 0.99 if gamma is None else gamma
            not_terminated = (~terminated.bool()).to(next_value.dtype)
            if next_value.dtype != reward.dtype:  # a same-dtype .to() still costs a dispatch
                next_value = next_value.to(reward.dtype)
            return reward + gamma * not_terminated * next_value
        return self.value_estimator.value_estimate(tensordict.copy(), next_value=next_value)

    def _on_nonterminal(self, tensordict: TensorDictBase, fn) -> torch.Tensor:
        """``fn(next_td)`` on the next states, skipping terminal ones with ``skip_done_states``.

        ``fn`` maps a ``"next"`` TensorDict of batch ``[*b]`` to a tensor ``[*b, *F]``.
        Without ``self.skip_done_states`` it runs on the whole ``"next"`` entry. With it,
        it runs only where ``("next", done)`` (and ``terminated``) is false, as TorchRL's, and the result
        ``[*B, *F]`` holds zeros at done states: their observation never reaches the
        networks (it may be garbage, e.g. NaN). At a terminated state the target multiplies
        the value by ``1 - terminated`` anyway; at a truncated one the next value is taken
        as 0 (TorchRL's choice), so leave ``skip_done_states`` off when truncated next
        observations are valid and must be bootstrapped from.
        """
        next_td = tensordict.get("next")
        if not getattr(self, "skip_done_states", False):
            return fn(next_td)
        done = next_td.get(self.tensor_keys.done, None)
        terminated = next_td.get(self.tensor_keys.terminated, None)
        if done is None and terminated is None:
            done = self._get(tensordict, "done", "next")  # the missing-key error
        ended = [x.bool().reshape(next_td.batch_size) for x in (done, terminated) if x is not None]
        live = ~(ended[0] | ended[1]) if len(ended) == 2 else ~ended[0]
        if live.all():
            return fn(next_td)
        value = fn(next_td[live])
        out = value.new_zeros(*next_td.batch_size, *value.shape[1:])
        out[live] = value
        return out

    def _supported_value_estimators(self) -> tuple:
        """Estimators :meth:`make_value_estimator` accepts (``SUPPORTED_VALUE_ESTIMATORS``)."""
        return self.SUPPORTED_VALUE_ESTIMATORS

    def _build_value_estimator(self, value_type, hyperparams: dict):
        """Instantiate the estimator for ``value_type``: the class registered for it
        (:func:`~rl.objectives.value.register_value_estimator`; override to pass a
        network)."""
        cls = get_value_estimator_entry(value_type).cls
        hyperparams.setdefault("value_network", None)
        return cls(**hyperparams)

    # ------------------------------------------------------ networks, targets
    @property
    def functional(self) -> bool:
        """Whether parameters are held by the loss (``True`` for every loss here)."""
        return True

    def convert_to_functional(
        self,
        module: nn.Module | Sequence[nn.Module],
        module_name: str,
        expand_dim: int | None = None,
        create_target_params: bool = False,
        compare_against: Iterable[torch.Tensor] | None = None,
    ) -> None:
        """Register ``module`` as ``loss.<module_name>`` with its parameters and targets.

        After the call:

        - ``loss.<module_name>_params`` is a :class:`~tensordict.nn.TensorDictParams`
          of the trainable parameters (the network's own ``nn.Parameter`` objects unless
          ``expand_dim`` is given);
        - ``loss.target_<module_name>_params`` is a detached copy kept as buffers when
          ``create_target_params=True``, and the detached online parameters otherwise.

        Args:
            module (nn.Module): the network (a TensorDict module).
            module_name (str): the attribute name, e.g. ``"actor_network"``.
            expand_dim (int, optional): make an ensemble of ``expand_dim`` networks whose
                parameters are stacked along a new leading dimension. The first member
                keeps ``module``'s weights; the others are re-initialised with their
                layers' ``reset_parameters``. ``module`` may also be a list of
                ``expand_dim`` networks of one structure: their own weights are stacked
                (a tensor they all share is expanded, not trained here).
            create_target_params (bool): keep a separate target copy. Defaults to
                ``False``.
            compare_against (iterable of tensors, optional): parameters owned by another
                network of the loss (e.g. a trunk shared with the actor); they are held
                detached here so this network's loss does not train them twice.
        """
        members = None
        if isinstance(module, (list, tuple)):
            if len(module) != expand_dim:
                raise RuntimeError(
                    "The ``expand_dim`` value must match the length of the module list/tuple "
                    f"if a single module isn't provided: {module_name} got {len(module)} "
                    f"modules and expand_dim={expand_dim}"
                )
            members, module = list(module), module[0]
        shared = {id(p) for p in compare_against} if compare_against is not None else set()
        base = TensorDict.from_module(module)
        keys = [k if isinstance(k, tuple) else (k,) for k in base.keys(True, True)]
        for key in keys:
            if any(self.SEP in part for part in key):
                raise KeyError(f"parameter name {key} of {module_name} contains {self.SEP!r}")
        info: dict[str, Any] = {"keys": keys, "expand_dim": expand_dim}
        if expand_dim is None:
            params = TensorDict.from_module(module, as_module=True)
            if not isinstance(params, TensorDictParams):  # a module without parameters (VDN)
                params = TensorDictParams(params, no_convert=True)
            if any(id(params.get(key)) in shared for key in keys):
                # Parameters owned by another network run detached here. The network is
                # copied so that the other network (e.g. an actor sharing a trunk) keeps
                # training them through its own, untouched module.
                td = TensorDict()
                for key in keys:
                    value = params.get(key)
                    td.set(key, value.detach() if id(value) in shared else value)
                params = TensorDictParams(td, no_convert=True)
                module = copy.deepcopy(module)
            self.__dict__[module_name] = module
            info["detached_module"] = copy.deepcopy(module)
        else:
            if members is not None:
                # given networks: their own (distinct) weights are stacked as they are; the
                # loss runs copies, the user's networks are never rebound
                copies = [copy.deepcopy(m) for m in members]
                for i, member in enumerate(members[1:], 1):
                    member_keys = {
                        k if isinstance(k, tuple) else (k,)
                        for k in TensorDict.from_module(member).keys(True, True)
                    }
                    if member_keys != set(keys):
                        raise ValueError(
                            f"the networks given as {module_name} must share one structure: "
                            f"network {i} has parameters {sorted(member_keys)}, network 0 "
                            f"has {sorted(keys)}"
                        )
            else:
                copies = [module] + [copy.deepcopy(module) for _ in range(expand_dim - 1)]
                for c in copies[1:]:
                    _reinit(c)
            stacked = {}
            for key in keys:
                values = [_slot_tensor(*_walk(c, key)) for c in members or copies]
                original = _slot_tensor(*_walk(module, key))
                if not isinstance(original, nn.Parameter):  # a buffer: each member keeps its own
                    stacked[key] = torch.stack([_slot_tensor(*_walk(c, key)) for c in copies])
                elif id(original) in shared or (
                    members is not None and all(v is original for v in values)
                ):
                    # held by another network, or one tensor every given network shares
                    stacked[key] = original.data.expand(expand_dim, *original.shape)
                else:
                    stacked[key] = nn.Parameter(torch.stack([v.data for v in values]))
            td = TensorDict(batch_size=[expand_dim])
            for key, value in stacked.items():
                td.set(key, value)
            params = TensorDictParams(td, no_convert=True)
            copies[0] = copy.deepcopy(module)  # never rebind the user's own module
            info["ensemble"] = _Ensemble(copies, keys)
            info["detached"] = _Ensemble([copy.deepcopy(module) for _ in copies], keys)
            # the network a compiled loss calls on the stacks' rows (functional_call gives
            # it every tensor: its own stay on the meta device, holding no memory)
            info["template"] = copy.deepcopy(module).to("meta")
            self.__dict__[module_name] = copies[0]
            info["batched"] = _BatchedMLP.of(copies[0], keys, members)
        setattr(self, module_name + "_params", params)
        if create_target_params:
            target = TensorDictParams(params.data.clone(), no_convert=True)
            setattr(self, "target_" + module_name + "_params", target)
            if expand_dim is None:
                target_module = copy.deepcopy(module)
                info["target"] = target_module
            else:
                members = [copy.deepcopy(module) for _ in range(expand_dim)]
                for c in members:
                    _as_buffers(c, keys, [t[0] for t in (target.get(k) for k in keys)])
                info["target_ensemble"] = _Ensemble(members, keys)
        self._functional[module_name] = info
        self._has_update_associated[module_name] = not create_target_params
        self._bind_functional(module_name)

    def _bind_functional(self, module_name: str) -> None:
        """(Re)attach the tensors of the loss to the copies it runs (after ``.to()``...)."""
        info = self._functional[module_name]
        keys = info["keys"]
        params = self._modules[module_name + "_params"]
        if info["expand_dim"] is None:
            if not isinstance(self.__dict__[module_name], nn.Module):
                return
            module = self.__dict__[module_name]
            for key, slot in zip(keys, _slots(module, keys), strict=True):
                sub, name, is_param = slot
                value = params.get(key)
                if isinstance(name, tuple):
                    if sub.get(name) is not value:
                        _set_slot(sub, name, value, is_param)
                elif is_param:
                    if sub._parameters[name] is not value:
                        sub._parameters[name] = value
                else:
                    sub._buffers[name] = value
            _as_buffers(info["detached_module"], keys, [params.get(k).detach() for k in keys])
        else:
            stacked = info["stacked"] = [params.get(k) for k in keys]
            info["stacked_detached"] = [t.detach() for t in stacked]
            # Parameters are sliced again at each forward (fresh views for each autograd
            # graph); the buffers (running statistics, counters) once, into views that the
            # online and the detached members hold together: a statistic the online
            # critics update in place is read by the detached ones through the same
            # tensor, never through a second alias of its storage (which torch.compile's
            # AOTAutograd refuses as a mutated input)
            grad = info["grad_positions"] = [
                k for k, t in enumerate(stacked) if isinstance(t, nn.Parameter)
            ]
            views = {k: t.unbind(0) for k, t in enumerate(stacked) if k not in grad}
            # once built (or moved), the online members hold views of the detached stacks,
            # as the detached members do: a view of a parameter keeps its gradient
            # accumulator (an autograd node) alive, bound to the CUDA stream it was made
            # on, and a CUDA graph captured on another stream then fails. After a
            # forward they keep its views until the next one lets them go (_ensemble)
            # the rows of the detached stacks, unbound once: the detached members hold
            # them, and the member products of the detached kind read them at every call
            # (_batched_values); no autograd graph passes through them
            rows = info["detached_rows"] = [t.unbind(0) for t in info["stacked_detached"]]
            rest = info["rest_views"] = {k: rows[k] for k in grad}
            info["ensemble"].bind_views(rest)
            info["ensemble"].bind_views(views)
            info["detached"].bind_views(rest)
            info["detached"].bind_views(views)
        target_params = self._modules.get("target_" + module_name + "_params")
        if target_params is not None:
            tensors = [target_params.get(k) for k in keys]
            if "target" in info:
                _as_buffers(info["target"], keys, tensors)
            else:
                info["target_stacked"] = tensors
                rows = info["target_rows"] = [t.unbind(0) for t in tensors]
                info["target_ensemble"].bind_views(dict(enumerate(rows)))

    def __deepcopy__(self, memo):
        # An ensemble's members hold views of the stacked parameters, which torch refuses
        # to deep-copy (they are not graph leaves): copy them bound to detached values, then
        # bind the copy's members to the copy's own parameters.
        functional = self.__dict__.get("_functional", {})
        for info in functional.values():
            if "ensemble" in info:
                info["ensemble"].bind(info["stacked_detached"], info["grad_positions"])
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = copy.deepcopy(value, memo)
        for name in functional:
            new._bind_functional(name)
        return new

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        self._cast_version = getattr(self, "_cast_version", 0) + 1
        for name in getattr(self, "_functional", {}):
            self._bind_functional(name)
        return out

    def _network(self, module_name: str) -> nn.Module:
        """The online network (one module; the first member of an ensemble)."""
        return self.__dict__[module_name]

    def _target_network(self, module_name: str) -> nn.Module:
        """The target network (the online one when no target copy was made)."""
        info = self._functional[module_name]
        return info.get("target", self.__dict__[module_name])

    def _detached_network(self, module_name: str) -> nn.Module:
        """A copy of the online network running on its values with no gradient to them.

        Gradients still flow through its inputs (e.g. an actor's action in DDPG).
        """
        return self._functional[module_name]["detached_module"]

    def _ensemble(self, module_name: str, kind: str = "online") -> list[nn.Module]:
        """The members of an ensemble.

        Args:
            module_name (str): the ensemble's name.
            kind (str): ``"online"`` (trainable, bound to fresh views of the stacked
                parameters), ``"detached"`` (online values, no gradient to them) or
                ``"target"`` (the target copies, or the detached online ones when the
                loss has no target copy).
        """
        info = self._functional[module_name]
        if kind == "online":
            ens = info["ensemble"]
            # the last forward's views are let go before the new ones are made, so that
            # the parameters' gradient accumulators are made anew, on this call's CUDA
            # stream (a graph captured on a side stream after eager warm-up calls)
            ens.bind_views(info["rest_views"])
            ens.bind(info["stacked"], info["grad_positions"])
            return ens.copies
        if kind == "target" and "target_ensemble" in info:
            return info["target_ensemble"].copies
        return info["detached"].copies

    def _ensemble_values(
        self,
        module_name: str,
        kind: str,
        tensordict: TensorDictBase,
        out_key,
        overrides=None,
        index: torch.Tensor | None = None,
        *,
        reduce: Literal["min"] | None = None,
    ) -> torch.Tensor:
        """Entry ``out_key`` of every member of an ensemble (:meth:`_ensemble`'s ``kind``)
        on ``tensordict``, stacked: ``[N, *B, ...]``; only the members ``index`` (a 1-D
        integer tensor) when given, in its order. With ``reduce="min"``, the elementwise
        minimum over the members ``[*B, ...]`` (the values of ``.amin(0)`` of the stack;
        for values that take no gradient, e.g. a target: the member products fold it with
        ``torch.minimum``, without stacking the members).

        An MLP of linear layers and activations runs as batched products on the stacks
        where that is faster (:meth:`_batched_values`: small products, or many members),
        and eagerly otherwise as each member's own products on its rows of the stacks.
        Any other network runs its members eagerly (their modules bound to views of the
        stacks), only the drawn ones with ``index``. Compiled, a network that is one plain
        module of its parameters is one template called on each row of the stacked
        tensors (``torch.func.functional_call``): dynamo traces and guards one module and
        the stacks instead of N module trees (a guard check of every member's attributes
        at each call), and ``index`` gathers the drawn rows inside the graph. The template
        is a copy of the network made when the loss was built: a hook or a mode set later
        on a member (``loss.<name>``, member 0) reaches the eager calls only.
        """
        compiling = torch.compiler.is_compiling()
        values = self._batched_values(
            module_name, kind, tensordict, out_key, overrides, index, compiling, reduce
        )
        if values is not None:
            return values
        if compiling:
            values = self._stacked_values(module_name, kind, tensordict, out_key, overrides, index)
            if values is not None:
                return values if reduce is None else values.amin(0)
        members = self._ensemble(module_name, kind)
        if index is not None and not compiling:  # eagerly only the drawn members run
            members, index = [members[j] for j in index.tolist()], None
        values = _ensemble_output(members, tensordict, out_key, overrides)
        # compiled, a graph cannot pick list items by a drawn index: all run, then the rows
        values = values if index is None else values[index]
        return values if reduce is None else values.amin(0)

    def _rows(self, info: dict, network, kind, tensordict, overrides, index):
        """``(inputs, tensors)`` of a batched or template call: ``network``'s inputs
        (None when one is absent) and the stacked tensors of ``kind``
        (:meth:`_ensemble`), only the rows ``index`` when given."""
        inputs = _module_inputs(network, tensordict, overrides)
        for x in inputs:
            if x is None:
                return None
        if kind == "online":
            tensors = info["stacked"]
        elif kind == "target" and "target_stacked" in info:
            tensors = info["target_stacked"]
        else:
            tensors = info["stacked_detached"]
        if index is not None:
            tensors = [t[index] for t in tensors]
        return inputs, tensors

    def _batched_values(
        self, module_name, kind, tensordict, out_key, overrides, index, compiling, reduce=None
    ):
        """:meth:`_ensemble_values` as batched products on the stacks when the network is
        an MLP of linear layers and activations (:class:`_BatchedMLP`); else None.

        Where the products are small (at most :data:`_BATCHED_MACS` multiply-adds per
        member and layer) or the members many: one ``baddbmm`` per layer instead of a
        product per member, and no gradient stack in the backward. On a 2-core CPU,
        interleaved: eagerly, REDQ's update at the examples' 64x64 and 10 critics
        1.08-1.29x faster, SAC's 64x64 pair 1.05-1.11x; compiled, SAC's pair 1.12x,
        REDQ's ten 1.02x against the vmapped members. Larger pairs keep the member
        calls: batched, CQL's 7,680 rows of 128x128 read 0.89-1.16x eagerly from run to
        run and 19% slower compiled, IQL's 256x256 even eagerly and 3% slower compiled
        (batched products of that size run no faster than the per-member ones, and the
        activations of both members no longer fit the cache together). The decision is
        static under compile (a graph per side of the bound when the rows are dynamic).
        ``index`` gathers the drawn rows. Eagerly, a pair past the bound and the drawn
        members of an online stack (gathering its rows would scatter every gradient back
        into a zero stack) run each member's own products on its rows of the stacks
        (:meth:`_BatchedMLP.members`): the member calls' arithmetic without binding and
        calling the member modules (SAC's 256x256 critic pair, forward and backward,
        3.06 -> 2.96 ms against 2.88 ms for two plain ``nn.Sequential`` critics)."""
        if not _BATCHED_ENSEMBLES:
            return None
        info = self._functional[module_name]
        network = self._network(module_name)
        plan = info.get("batched")
        if plan is None or network.out_keys[0] != out_key or not plan.usable(network, compiling):
            return None
        drawn = index is not None and kind == "online" and not compiling
        rows = self._rows(info, network, kind, tensordict, overrides, None if drawn else index)
        if rows is None:
            return None
        inputs, tensors = rows
        if drawn or (
            tensors[0].shape[0] <= _VMAP_MEMBERS and plan.macs(tensors, inputs) > _BATCHED_MACS
        ):
            # the member calls' products; compiled, the template on each row instead
            # (_stacked_values: the same products, one module traced)
            if compiling:
                return None
            if index is None and kind != "online":
                # rows that take no gradient, unbound once (_bind_functional)
                rows = info[
                    "target_rows" if "target_rows" in info and kind == "target" else "detached_rows"
                ]
            else:  # fresh views of the online stacks: each call's graph its own
                rows = [t.unbind(0) for t in tensors]
            rows_drawn = index.tolist() if drawn else None
            if reduce is None:
                return plan.members(rows, inputs, rows_drawn)
            return plan.members(rows, inputs, rows_drawn, reduce=reduce)
        values = plan(tensors, inputs)
        return values if reduce is None else values.amin(0)

    def _stacked_values(self, module_name, kind, tensordict, out_key, overrides, index):
        """:meth:`_ensemble_values` by the template network on each row of the stacked
        tensors of ``kind``, when it is a plain one-output TensorDictModule of parameters
        only (buffers, e.g. running statistics, stay with the members that update them),
        none held in a TensorDictParams, whose inputs are all present; else None."""
        info = self._functional[module_name]
        template, keys = info["template"], info["keys"]
        if not (
            _is_plain_tdmodule(template)
            and template.out_keys == [out_key]
            and len(info["grad_positions"]) == len(keys)
            and all(isinstance(k, tuple) and k[0] == "module" for k in keys)
            # functional_call cannot swap the tensors of a TensorDictParams under dynamo
            # (MultiAgentMLP keeps its weights in one)
            and not any(isinstance(m, TensorDictParams) for m in template.module.modules())
        ):
            return None
        rows = self._rows(info, template, kind, tensordict, overrides, index)
        if rows is None:
            return None
        inputs, tensors = rows
        names = [".".join(k[1:]) for k in keys]

        def member(*params):
            return torch.func.functional_call(
                template.module, dict(zip(names, params)), tuple(inputs)
            )

        if tensors[0].shape[0] > _VMAP_MEMBERS:
            # many members (REDQ's 10 critics): one batched product per layer instead of
            # N small ones, whose per-call cost dominates (REDQ's compiled update 3.1 ->
            # 2.6 ms on CPU, interleaved); random ops as :attr:`vmap_randomness` says
            # ("different" where the network holds dropout: each member its own mask, as
            # the members called one by one draw)
            # (read without caching it on the loss: a first read inside the graph would
            # grow the module's __dict__, which dynamo guards)
            randomness = self.__dict__.get("_vmap_randomness_value")
            if randomness is None:
                randomness = _random_modules.vmap_randomness(template)
            return torch.func.vmap(member, randomness=randomness)(*tensors)
        # few members: one unbind per tensor (its backward stacks the members' gradients
        # in one copy); vmapped, inductor wrote slow CPU kernels for the backward's
        # reductions of CQL's pair of critics (its update: 2x slower). The threshold is a
        # CPU measurement (CQL's 2 critics, REDQ's 10), not tuned for CUDA
        rows = [t.unbind(0) for t in tensors]
        return torch.stack([member(*params) for params in zip(*rows, strict=True)])

    # ------------------------------------------------------------------ reduction
    _loss_mask_key: Any = "auto"

    @property
    def loss_mask_key(self):
        """The input entry marking the positions that count in :meth:`_reduce_loss`.

        ``"auto"`` (the default) ANDs every entry of :data:`AUTO_LOSS_MASK_KEYS` found in the
        input; a (nested) key reads that entry only (``("auto",)`` reaches an entry named
        ``"auto"``); ``None`` turns masking off. A key absent from the input masks nothing.
        """
        return self._loss_mask_key

    @loss_mask_key.setter
    def loss_mask_key(self, value) -> None:
        valid = value is None or isinstance(value, str)
        if isinstance(value, tuple):
            valid = len(value) > 0 and all(isinstance(part, str) for part in value)
        if not valid:
            raise ValueError(
                f"loss_mask_key must be 'auto', None or a (nested) key of strings, got {value!r}"
            )
        self._loss_mask_key = value

    def _loss_mask_keys(self) -> tuple:
        key = self._loss_mask_key
        if key is None:
            return ()
        if isinstance(key, str) and key == "auto":
            return AUTO_LOSS_MASK_KEYS
        return (key,)

    @staticmethod
    def _expand_loss_mask(mask: torch.Tensor, loss: torch.Tensor) -> torch.Tensor:
        # masks carry the trailing singleton of the [..., 1] rewards they go with
        while mask.ndim > loss.ndim and mask.shape[-1] == 1:
            mask = mask.squeeze(-1)
        if mask.ndim > loss.ndim:
            raise ValueError(
                f"a mask of shape {tuple(mask.shape)} has more non-singleton dimensions than "
                f"the loss of shape {tuple(loss.shape)} it masks; mask an element-wise loss "
                "before its event dimensions are reduced"
            )
        return expand_as_right(mask, loss)

    def _reduce_loss(
        self,
        loss: torch.Tensor,
        tensordict: TensorDictBase | None = None,
        *,
        mask: torch.Tensor | None = None,
        reduction: str | None = None,
        weights: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Reduce a per-position ``loss`` over the valid positions.

        Args:
            loss (Tensor): the element-wise loss, ``[*B, *F]``.
            tensordict (TensorDictBase, optional): the input, read for the masks named by
                :attr:`loss_mask_key`.

        Keyword Args:
            mask (Tensor, optional): a mask given by the caller (``True`` counts), ANDed with
                the input's. With ``reduction="none"`` it drops the masked elements (the
                result is 1-dimensional); masks read from the input zero them instead, so the
                result keeps ``loss``'s shape.
            reduction (str, optional): ``"mean"``, ``"sum"`` or ``"none"``; defaults to
                ``self.reduction``.
            weights (Tensor, optional): importance weights; ``"mean"`` is then
                ``sum(w * loss) / sum(w)`` over the valid positions.

        Masked positions are selected out (``torch.where``), never multiplied by zero, so a
        non-finite value there reaches neither the loss nor its gradient.
        """
        if reduction is None:
            reduction = getattr(self, "reduction", "mean")
        caller_mask = mask is not None
        if mask is not None:
            mask = self._expand_loss_mask(mask, loss).bool()
        if tensordict is not None:
            for key in self._loss_mask_keys():
                found = tensordict.get(key, None)
                if found is not None:
                    found = self._expand_loss_mask(found, loss).bool()
                    mask = found if mask is None else mask & found
        if weights is not None and weights.shape != loss.shape:
            weights = self._expand_loss_mask(weights, loss)
        if mask is None:
            if weights is not None:
                if reduction == "mean":
                    return (loss * weights).sum() / weights.sum()
                loss = loss * weights
            if reduction == "mean":
                return loss.mean()
            return loss.sum() if reduction == "sum" else loss
        loss = torch.where(mask, loss, torch.zeros_like(loss))
        if weights is not None:
            weights = torch.where(mask, weights, torch.zeros_like(weights))
        if reduction == "none":
            if weights is not None:
                loss = loss * weights
            return loss[mask] if caller_mask else loss
        if reduction == "sum":
            return (loss if weights is None else loss * weights).sum()
        if weights is None:
            return loss.sum() / mask.sum().clamp_min(1)
        return (loss * weights).sum() / weights.sum()

    def _warn_no_updater(self) -> None:
        if not torch.compiler.is_compiling():
            warnings.warn(self.TARGET_NET_WARNING, category=UserWarning, stacklevel=3)

    def __getattr__(self, item: str):
        if item.startswith("target_") and item.endswith("_params"):
            modules = self.__dict__.get("_modules", {})
            if item in modules:
                name = item[len("target_") : -len("_params")]
                if (
                    not self.__dict__.get("_has_update_associated", {}).get(name, True)
                    and rl_warnings()
                ):
                    self._warn_no_updater()
                return modules[item]
            online = item[len("target_") :]
            if online in modules:
                return modules[online].data
        return super().__getattr__(item)

    def _target_param_names(self) -> Iterator[str]:
        for name in self._functional:
            if "target_" + name + "_params" in self._modules:
                yield name

    def reset_parameters_recursive(self) -> None:
        """Re-initialise every network of the loss and copy the result to its targets."""
        for name, info in self._functional.items():
            if info["expand_dim"] is None:
                _reinit(self.__dict__[name])
            else:
                params = self._modules[name + "_params"]
                # a member bound to fresh detached views: views of the stacked parameters
                # taken before an in-place change of them can no longer be copied
                detached = info["detached"]
                detached.bind(info["stacked_detached"], info["grad_positions"])
                scratch = copy.deepcopy(detached.copies[0])
                for i in range(info["expand_dim"]):
                    _reinit(scratch)
                    with torch.no_grad():
                        for key, t in zip(info["keys"], info["stacked"], strict=True):
                            if isinstance(t, nn.Parameter):
                                t[i].copy_(_walk(scratch, key)[0]._parameters[key[-1]])
                del params
            target = self._modules.get("target_" + name + "_params")
            if target is not None:
                target.data.update_(self._modules[name + "_params"].data)

    def reset(self) -> None:
        """Reset any internal schedule (a no-op unless a loss keeps one)."""
