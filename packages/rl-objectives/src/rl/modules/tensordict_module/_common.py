"""SafeModule: a TensorDictModule that knows the spec of what it writes and can project into it."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase, unravel_key_list
from tensordict.nn import TensorDictModule
from tensordict.utils import NestedKey
from torch import nn

from rl.core import (
    Binary,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    TensorSpec,
)

__all__ = ["SafeModule", "ensure_tensordict_compatible", "is_tensordict_compatible"]

_ACTION_SPACE_MAP: dict[Any, str] = {
    OneHot: "one_hot",
    MultiOneHot: "mult_one_hot",
    Binary: "binary",
    Categorical: "categorical",
    MultiCategorical: "multi_categorical",
    "one_hot": "one_hot",
    "one-hot": "one_hot",
    "mult_one_hot": "mult_one_hot",
    "mult-one-hot": "mult_one_hot",
    "multi_one_hot": "mult_one_hot",
    "multi-one-hot": "mult_one_hot",
    "binary": "binary",
    "categorical": "categorical",
    "multi_categorical": "multi_categorical",
    "multi-categorical": "multi_categorical",
    "multi_discrete": "multi_categorical",
    "multi-discrete": "multi_categorical",
}


def _action_leaf(spec: Composite) -> TensorSpec:
    """The ``"action"`` entry of a composite spec (at the root or as the last part of a key)."""
    if "action" in spec.keys():
        return spec["action"]
    for key in spec.keys(True, True):
        if isinstance(key, tuple) and key[-1] == "action":
            return spec[key]
    raise KeyError(
        "no 'action' entry in the composite spec: pass the action spec itself, or a Composite "
        f"with an 'action' leaf; got keys {list(spec.keys(True, True))}"
    )


def _find_action_space(action_space: Any) -> str:
    if isinstance(action_space, Composite):
        action_space = _action_leaf(action_space)
    key = type(action_space) if isinstance(action_space, TensorSpec) else action_space
    if isinstance(key, type):
        # aliases of the spec classes (OneHotDiscreteTensorSpec, ...) subclass them
        for cls in key.__mro__:
            if cls in _ACTION_SPACE_MAP:
                return _ACTION_SPACE_MAP[cls]
    elif key in _ACTION_SPACE_MAP:
        return _ACTION_SPACE_MAP[key]
    raise ValueError(
        f"action_space must be one of {sorted(k for k in _ACTION_SPACE_MAP if isinstance(k, str))} "
        f"or a discrete action spec (OneHot, MultiOneHot, Categorical, Binary), got {action_space!r}"
    )


def _process_action_space_spec(action_space: Any, spec: TensorSpec | None) -> tuple[str, Any]:
    """Resolves the action-space name from ``action_space`` and/or ``spec`` (which must agree)."""
    leaf = _action_leaf(spec) if isinstance(spec, Composite) else spec
    if action_space is not None:
        if isinstance(action_space, Composite):
            raise ValueError("action_space cannot be a Composite: pass the action spec as spec=")
        if isinstance(action_space, TensorSpec):
            if leaf is not None and action_space is not leaf:
                raise ValueError(
                    "action_space given as a spec and a different spec=: pass only one of them"
                )
            spec = leaf = action_space
        name = _find_action_space(action_space)
        if leaf is not None and _find_action_space(leaf) != name:
            raise ValueError(
                f"The action spec and the action space do not match: action_space={action_space!r} "
                f"but spec={leaf!r}"
            )
    elif leaf is not None:
        name = _find_action_space(leaf)
    else:
        raise ValueError(
            "Neither action_space nor spec was defined: the action space cannot be inferred"
        )
    return name, spec


def _forward_hook_safe_action(module: nn.Module, args: Any, tensordict_out: Any) -> None:
    """Forward hook of ``safe=True`` modules: projects each output into its spec."""
    if not isinstance(tensordict_out, TensorDictBase):
        return
    spec = module.spec
    for key in spec.keys(True, True):
        leaf = spec[key]
        if leaf is None:
            continue
        item = tensordict_out.get(key, None)
        if item is not None:
            tensordict_out.set(key, leaf.project(item))


def _register_spec(
    module: nn.Module, out_keys: Sequence[NestedKey], spec: TensorSpec | None, safe: bool
) -> None:
    """Stores ``spec`` as a Composite whose leaves are exactly ``out_keys`` (None where unknown)."""
    if spec is not None and not isinstance(spec, TensorSpec):
        raise TypeError(f"spec must be a TensorSpec (rl.core), got {type(spec).__name__}")
    out_keys = [k for k in unravel_key_list(list(out_keys)) if k != "_"]
    if spec is None:
        spec = Composite()
    elif not isinstance(spec, Composite):
        if len(out_keys) > 1:
            raise RuntimeError(
                f"got one spec for several out_keys {out_keys}: pass a Composite with one entry "
                "per out_key, or no spec"
            )
        spec = Composite({out_keys[0]: spec.clone()})
    else:
        spec = spec.clone()
        if "_" in spec.keys():
            # "_" marks an output to discard: its spec has nothing to describe
            if spec["_"] is not None:
                warnings.warn(
                    'got a spec with key "_": it will be ignored', UserWarning, stacklevel=3
                )
            del spec["_"]
    spec_keys = set(unravel_key_list(list(spec.keys(True, True))))
    for key in out_keys:
        if key not in spec_keys:
            spec[key] = None
    spec_keys = set(unravel_key_list(list(spec.keys(True, True))))
    if spec_keys != set(out_keys):
        raise RuntimeError(
            f"the spec has entries {sorted(map(str, spec_keys - set(out_keys)))} that are not "
            f"out_keys {out_keys}"
        )
    module._spec = spec
    module.safe = safe
    if safe:
        if all(leaf is None for leaf in spec.values(True, True)):
            raise RuntimeError(
                f"{type(module).__name__}(safe=True) is not a valid configuration as the tensor specs "
                "are not specified (spec=None: nothing to project the outputs into)"
            )
        module.register_forward_hook(_forward_hook_safe_action)


class _SpecMixin:
    """The ``spec`` property (always a Composite) and ``random``."""

    _spec: Composite
    out_keys: list

    @property
    def spec(self) -> Composite:
        return self._spec

    @spec.setter
    def spec(self, spec: Composite) -> None:
        if not isinstance(spec, Composite):
            raise TypeError(
                f"{type(self).__name__}.spec must be a Composite, got {type(spec).__name__}"
            )
        self._spec = spec

    def random(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes a random value of the first out_key's spec, whatever the input.

        Args:
            tensordict: where the value is written.

        Returns:
            ``tensordict``, updated.
        """
        key = self.out_keys[0]
        tensordict.set(key, self._spec[key].rand(tensordict.batch_size))
        return tensordict

    def random_sample(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Alias of :meth:`random`."""
        return self.random(tensordict)


class SafeModule(_SpecMixin, TensorDictModule):
    """A :class:`~tensordict.nn.TensorDictModule` with the spec of its outputs.

    With ``safe=True``, every output with a spec is projected into it after each call
    (``spec.project``): out-of-bounds actions, from exploration noise or numerical
    overflow, are clamped back into the action space.

    Args:
        module: the network mapping the ``in_keys`` tensors to the ``out_keys`` tensors.
        in_keys: keys read from the input tensordict, in the order the module takes them.
        out_keys: keys written, in the order the module returns them (``"_"`` skips one).
        spec: spec of the output; a :class:`~rl.core.Composite` keyed by out_keys when
            there are several.
        safe: if ``True``, project the outputs into ``spec`` (needs a spec). Defaults to
            ``False``.
        inplace: ``True`` (default) writes into the input; ``False`` into a new
            TensorDict; ``"empty"`` into ``input.empty()``.

    A missing in_key is read as ``None``, as TorchRL's ``SafeModule`` does (a recurrent
    cell, an RSSM prior, starts its state there); a module that cannot take ``None``
    raises tensordict's ``KeyError`` naming the missing keys. (``forward`` is
    tensordict's own, so the policy's tensor-level twin, :func:`rl.core.tensor_policy`,
    still recognises the module.)

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Bounded
        >>> from rl.modules import SafeModule
        >>> module = SafeModule(
        ...     torch.nn.Linear(3, 2),
        ...     in_keys=["observation"],
        ...     out_keys=["action"],
        ...     spec=Bounded(-0.1, 0.1, shape=(2,)),
        ...     safe=True,
        ... )
        >>> td = module(TensorDict(observation=torch.full((4, 3), 100.0), batch_size=[4]))
        >>> bool(td["action"].abs().max() <= 0.1)
        True
    """

    def __init__(
        self,
        module: nn.Module,
        in_keys: NestedKey | Iterable[NestedKey],
        out_keys: NestedKey | Iterable[NestedKey],
        spec: TensorSpec | None = None,
        safe: bool = False,
        inplace: bool | str = True,
    ):
        super().__init__(module, in_keys, out_keys, inplace=inplace, strict=False)
        _register_spec(self, self.out_keys, spec, safe)

    def to(self, *args: Any, **kwargs: Any) -> SafeModule:
        out = super().to(*args, **kwargs)
        dest = args[0] if args else kwargs.get("device", kwargs.get("dtype"))
        if isinstance(dest, str | torch.device | int):
            self._spec = self._spec.to(dest)
        return out


def is_tensordict_compatible(module: nn.Module) -> bool:
    """Whether ``module`` already reads and writes a TensorDict.

    ``True`` for a ``TensorDictModule``, or a module whose ``forward`` takes one argument
    and that defines ``in_keys`` and ``out_keys``; ``False`` for a module defining
    neither (a plain network, to be wrapped).

    Raises:
        TypeError: for a module that defines ``in_keys`` or ``out_keys`` but whose
            ``forward`` takes several arguments (neither kind: ambiguous).

    Examples:
        >>> from torch import nn
        >>> from rl.modules import SafeModule, is_tensordict_compatible
        >>> is_tensordict_compatible(nn.Linear(3, 4))
        False
        >>> is_tensordict_compatible(SafeModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"]))
        True
    """
    if isinstance(module, TensorDictModule):
        return True
    forward = getattr(module, "forward", None)
    if not callable(forward):
        return False
    n_args = len(inspect.signature(forward).parameters)
    has_in, has_out = hasattr(module, "in_keys"), hasattr(module, "out_keys")
    if n_args == 1 and has_in and has_out:
        return True
    if not has_in and not has_out:
        return False
    raise TypeError(
        f"{type(module).__name__} defines in_keys/out_keys but its forward takes {n_args} "
        "arguments: a TensorDict module takes one argument (the TensorDict) and defines both "
        "in_keys and out_keys; a module to wrap takes tensors and defines neither."
    )


def ensure_tensordict_compatible(
    module: nn.Module,
    in_keys: Sequence[NestedKey] | None = None,
    out_keys: Sequence[NestedKey] | None = None,
    safe: bool = False,
    wrapper_type: type | None = TensorDictModule,
    **kwargs: Any,
) -> nn.Module:
    """``module`` itself if it reads a TensorDict, else ``module`` wrapped by ``wrapper_type``.

    Args:
        module: a TensorDict module, or an ``nn.Module`` taking tensors.
        in_keys: the keys expected; for a module to wrap, they must be the names of its
            ``forward`` arguments.
        out_keys: the keys expected (checked against a TensorDict module's).
        safe: when ``True``, passed on to ``wrapper_type``, which must take it (as
            :class:`SafeModule` does, with a ``spec`` in ``kwargs``). Defaults to
            ``False``.
        wrapper_type: the wrapper class. Defaults to ``TensorDictModule``.
        **kwargs: more arguments of ``wrapper_type``.

    Raises:
        TypeError: when a TensorDict module's keys differ from ``in_keys`` /
            ``out_keys``, when ``module`` is not an ``nn.Module``, or when its
            ``forward`` arguments are not ``in_keys``.

    Examples:
        >>> from torch import nn
        >>> from rl.modules import ensure_tensordict_compatible
        >>> class Add(nn.Module):
        ...     def forward(self, x, y):
        ...         return x + y
        >>> ensure_tensordict_compatible(Add(), in_keys=["x", "y"], out_keys=["z"]).in_keys
        ['x', 'y']
    """
    in_keys = unravel_key_list(list(in_keys)) if in_keys else in_keys
    out_keys = unravel_key_list(list(out_keys)) if out_keys else out_keys
    if is_tensordict_compatible(module):
        if in_keys is not None and set(in_keys) != set(module.in_keys):
            raise TypeError(
                f"the module reads {set(module.in_keys)}, which does not match the expected "
                f"in_keys {set(in_keys)}"
            )
        if out_keys is not None and set(out_keys) != set(module.out_keys):
            raise TypeError(
                f"the module writes {set(module.out_keys)}, which does not match the expected "
                f"out_keys {set(out_keys)}"
            )
        return module
    if not isinstance(module, nn.Module):
        raise TypeError(
            "ensure_tensordict_compatible takes a TensorDictModule or an nn.Module, got "
            f"{type(module).__name__}"
        )
    arg_names = set(inspect.signature(module.forward).parameters)
    if in_keys is not None and arg_names != set(in_keys):
        raise TypeError(
            f"the arguments of {type(module).__name__}.forward {sorted(arg_names)} must be the "
            f"in_keys {in_keys} one to one to wrap it; write a TensorDictModule otherwise"
        )
    if in_keys is not None:
        kwargs["in_keys"] = in_keys
    if out_keys is not None:
        kwargs["out_keys"] = out_keys
    if safe:
        kwargs["safe"] = safe
    return wrapper_type(module, **kwargs)
