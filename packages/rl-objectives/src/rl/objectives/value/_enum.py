"""The names of the value estimators a loss can be given (``make_value_estimator``), their
default hyperparameters, and the registry that maps each name to its estimator class."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any

from tensordict.utils import NestedKey

__all__ = [
    "ValueEstimators",
    "build_value_estimator",
    "default_value_kwargs",
    "dispatch_value_estimator",
    "get_value_estimator_entry",
    "register_value_estimator",
]


class ValueEstimators(Enum):
    """Value estimators a loss builds with ``loss.make_value_estimator(ValueEstimators.X, ...)``.

    Examples:
        >>> from rl.objectives.value import ValueEstimators
        >>> ValueEstimators.GAE.value
        'Generalized advantage estimate'
        >>> ValueEstimators("TD(lambda)") is ValueEstimators.TDLambda
        True
    """

    TD0 = "Bootstrapped TD (1-step return)"
    TD1 = "TD(1) (infinity-step return)"
    TDLambda = "TD(lambda)"
    GAE = "Generalized advantage estimate"
    MAGAE = "Multi-agent generalized advantage estimate"
    VTrace = "V-trace"

    @classmethod
    def _missing_(cls, value: object) -> ValueEstimators:
        if isinstance(value, str):  # accept the member names too: "GAE", "td0"
            for member in cls:
                if member.name.lower() == value.lower():
                    return member
        valid = ", ".join(f"ValueEstimators.{m.name}" for m in cls)
        raise ValueError(f"{value!r} is not a value estimator; valid ones are {valid}")


_DEFAULT_VALUE_KWARGS: dict[str, dict[str, Any]] = {
    "TD0": {"gamma": 0.99, "differentiable": True},
    "TD1": {"gamma": 0.99, "differentiable": True},
    "TDLambda": {"gamma": 0.99, "lmbda": 0.95, "differentiable": True},
    "GAE": {"gamma": 0.99, "lmbda": 0.95, "differentiable": True},
    "MAGAE": {"gamma": 0.99, "lmbda": 0.95, "differentiable": True},
    "VTrace": {"gamma": 0.99, "differentiable": True},
}


class _ValueEstimatorRegistryEntry:
    """One row of the registry: the estimator class and its default hyperparameters."""

    __slots__ = ("cls", "default_kwargs")

    def __init__(self, cls: type, default_kwargs: dict) -> None:
        self.cls = cls
        self.default_kwargs = dict(default_kwargs)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(cls={self.cls.__name__}, default_kwargs={self.default_kwargs})"
        )


#: ``{value type: entry}``; the built-in estimators register when ``rl.objectives.value``
#: is imported, a user's with :func:`register_value_estimator`.
_VALUE_ESTIMATOR_REGISTRY: dict[Any, _ValueEstimatorRegistryEntry] = {}


def register_value_estimator(value_type: Any, *, default_kwargs: dict | None = None):
    """Class decorator: the estimator built for ``value_type`` (an enum member).

    Args:
        value_type: the key, a :class:`ValueEstimators` member or a member of the user's
            own enum (its lowercase name is an alias: ``"fake"`` for ``MyEnum.FAKE``).
        default_kwargs (dict, optional): the hyperparameters used when a loss asks for
            ``value_type`` without giving them.

    Examples:
        >>> from enum import Enum
        >>> from rl.objectives.value import GAE
        >>> class Mine(Enum):
        ...     HALF_GAE = "half"
        >>> @register_value_estimator(Mine.HALF_GAE, default_kwargs={"gamma": 0.99, "lmbda": 0.5})
        ... class HalfGAE(GAE):
        ...     pass
        >>> get_value_estimator_entry("half_gae").cls is HalfGAE
        True
        >>> _ = _VALUE_ESTIMATOR_REGISTRY.pop(Mine.HALF_GAE)
    """

    def decorator(cls):
        _VALUE_ESTIMATOR_REGISTRY[value_type] = _ValueEstimatorRegistryEntry(
            cls, default_kwargs or {}
        )
        return cls

    return decorator


def _aliases() -> list[str]:
    names = [m.name.lower() for m in ValueEstimators]
    names += [
        k.name.lower()
        for k in _VALUE_ESTIMATOR_REGISTRY
        if isinstance(k, Enum) and k.name.lower() not in names
    ]
    return names


def _coerce_value_type(value_type: Any) -> Any:
    """The registry key of ``value_type``: an enum member, or a (lowercase) name of one."""
    if isinstance(value_type, ValueEstimators):
        return value_type
    if isinstance(value_type, str):
        if value_type in _VALUE_ESTIMATOR_REGISTRY:
            return value_type
        name = value_type.lower()
        for key in [*ValueEstimators, *_VALUE_ESTIMATOR_REGISTRY]:
            if isinstance(key, Enum) and key.name.lower() == name:
                return key
        raise KeyError(
            f"Unknown value estimator alias {value_type!r}. Known aliases: {_aliases()}."
        )
    if isinstance(value_type, Enum):
        return value_type
    try:
        if value_type in _VALUE_ESTIMATOR_REGISTRY:
            return value_type
    except TypeError:  # unhashable
        pass
    raise TypeError(
        "value_type must be a registered enum value or a string alias, got "
        f"{type(value_type).__name__}."
    )


def get_value_estimator_entry(value_type: Any) -> _ValueEstimatorRegistryEntry:
    """The registry entry (``.cls``, ``.default_kwargs``) of ``value_type``.

    Raises:
        KeyError: an unknown string alias.
        TypeError: neither an enum member nor a string.
        NotImplementedError: nothing registered for it.
    """
    key = _coerce_value_type(value_type)
    entry = _VALUE_ESTIMATOR_REGISTRY.get(key)
    if entry is None:
        raise NotImplementedError(
            f"No value estimator registered for {key!r}. Register one with "
            "@register_value_estimator(...)."
        )
    return entry


def build_value_estimator(loss_module: Any, value_type: Any, **hyperparams) -> Any:
    """The estimator of ``value_type`` for ``loss_module``: the registered class's
    ``for_loss(loss_module, **hp)``, ``hp`` its defaults updated with ``hyperparams``."""
    entry = get_value_estimator_entry(value_type)
    return entry.cls.for_loss(loss_module, **{**entry.default_kwargs, **hyperparams})


def dispatch_value_estimator(
    loss_module: Any,
    value_type: Any,
    *,
    supported: Iterable[Any],
    tensor_keys: dict[str, NestedKey] | None = None,
    **hyperparams,
) -> Any:
    """Builds the estimator of ``value_type`` and sets it on ``loss_module``.

    Checks ``value_type`` against ``supported``, adds the loss's ``gamma`` (when it has
    one and ``hyperparams`` do not), builds with :func:`build_value_estimator`, sets
    ``loss_module._value_estimator`` and ``loss_module.value_type``, and remaps the
    estimator's keys with ``tensor_keys``.

    Raises:
        NotImplementedError: ``value_type`` is not in ``supported`` (the message lists them).
    """
    supported = set(supported)
    key = _coerce_value_type(value_type)
    if key not in supported:
        names = sorted(getattr(v, "name", str(v)) for v in supported)
        raise NotImplementedError(
            f"Value type {key!r} is not implemented for loss {type(loss_module).__name__}. "
            f"Supported value types: {names}."
        )
    loss_module.value_type = key
    hp = dict(hyperparams)
    if hasattr(loss_module, "gamma"):
        hp.setdefault("gamma", loss_module.gamma)
    estimator = build_value_estimator(loss_module, key, **hp)
    loss_module._value_estimator = estimator
    if tensor_keys is not None:
        estimator.set_keys(**tensor_keys)
    return estimator


def default_value_kwargs(value_type) -> dict[str, Any]:
    """The default hyperparameters of a value estimator, as in TorchRL: the registry's
    (the built-in ones when not registered).

    Args:
        value_type (ValueEstimators, a registered enum member, or a name of one): the
            estimator.

    Returns:
        a new dict, e.g. ``{"gamma": 0.99, "lmbda": 0.95, "differentiable": True}`` for
        ``TDLambda``.

    Raises:
        ValueError: an unknown estimator.

    Examples:
        >>> from rl.objectives import default_value_kwargs
        >>> default_value_kwargs("TD0")
        {'gamma': 0.99, 'differentiable': True}
    """
    try:
        key = _coerce_value_type(value_type)
    except (KeyError, TypeError):
        key = None
    if key in _VALUE_ESTIMATOR_REGISTRY:
        return dict(_VALUE_ESTIMATOR_REGISTRY[key].default_kwargs)
    if isinstance(key, ValueEstimators):
        return dict(_DEFAULT_VALUE_KWARGS[key.name])
    raise ValueError(
        f"unknown value estimator {value_type!r}; valid ones are {list(_DEFAULT_VALUE_KWARGS)}"
    )
