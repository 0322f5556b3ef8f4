"""``Collector(...)`` picks its execution back-end, as TorchRL 0.14.1's constructor does.

``Collector(env, policy, ...)`` collects in this process; ``num_collectors=N`` (or a list
of env factories) runs N collectors in worker processes; ``backend=`` chooses among
``"direct"``, ``"process"``, ``"ray"``, ``"distributed"`` (and TorchRL's ``"rpc"`` /
``"submitit"``, which ``rl`` refuses with the reason). Without ``backend=``, the
innermost enclosing :func:`rl.core.service_backend` block chooses.
"""

from __future__ import annotations

import inspect
from abc import ABCMeta
from collections.abc import Sequence
from typing import Any

from rl.core import current_service_backend, normalize_service_backend

__all__ = ["CollectorMeta"]

_BACKENDS = ("direct", "process", "ray", "rpc", "distributed", "submitit")
_RESERVED = frozenset({"backend_options", "num_collectors", "num_workers", "sync"})


class CollectorMeta(ABCMeta):
    """The metaclass of :class:`~rl.collectors.Collector`: constructing ``Collector``
    itself dispatches to the back-end's collector class (the object returned keeps that
    concrete type); constructing any subclass builds it as usual."""

    @property
    def __signature__(cls) -> inspect.Signature:
        """The constructor's signature (``__init__``'s without ``self``), for ``help()``,
        IDEs and config tools (the metaclass's ``__call__`` would hide it)."""
        signature = inspect.signature(cls.__init__)
        return signature.replace(parameters=tuple(signature.parameters.values())[1:])

    def __call__(
        cls, *args, backend=None, backend_options=None, num_collectors=None, sync=None, **kwargs
    ):
        from ._single import Collector  # noqa: PLC0415  (this metaclass is Collector's)

        if "env" in kwargs:  # rl's spelling of create_env_fn
            if args or "create_env_fn" in kwargs:
                raise TypeError("pass the env as create_env_fn or env=, not both")
            kwargs["create_env_fn"] = kwargs.pop("env")
        if cls is not Collector:
            if any(v is not None for v in (backend, backend_options, num_collectors, sync)):
                raise TypeError(
                    "backend, backend_options, num_collectors and sync are only supported "
                    f"when constructing Collector directly, not {cls.__name__}"
                )
            return super().__call__(*args, **kwargs)
        if len(args) > 2:
            raise TypeError(
                f"Collector accepts at most create_env_fn and policy positionally, got {len(args)} "
                "positional arguments"
            )
        if num_collectors is not None:
            if isinstance(num_collectors, bool) or not isinstance(num_collectors, int):
                raise TypeError(
                    f"num_collectors must be a positive integer, got {num_collectors!r}"
                )
            if num_collectors < 1:
                raise ValueError(f"num_collectors must be a positive integer, got {num_collectors}")
        from_context = False
        if backend is not None:
            backend = normalize_service_backend(backend)
        else:
            backend = current_service_backend()
            from_context = backend is not None
            if backend is None:
                backend = "process" if num_collectors is not None else "direct"
        if backend not in _BACKENDS:
            where = (
                " (selected by the enclosing rl.core.service_backend context)"
                if from_context
                else ""
            )
            raise ValueError(
                f"Collector does not support backend={backend!r}{where}. Expected one of "
                f"{sorted(_BACKENDS)}."
            )
        options = dict(backend_options or {})
        reserved = _RESERVED.intersection(options)
        if reserved:
            raise ValueError(f"backend_options contains reserved selector keys: {sorted(reserved)}")
        duplicates = set(options) & set(kwargs)
        duplicates |= set(options) & set(("create_env_fn", "policy")[: len(args)])
        if duplicates:
            raise ValueError(
                f"backend_options duplicate top-level collector arguments: {sorted(duplicates)}"
            )
        if backend == "direct":
            if num_collectors not in (None, 1):
                raise ValueError(
                    f"backend='direct' supports at most one collector, got num_collectors={num_collectors}"
                )
            if sync is not None:
                raise ValueError("sync is only valid for multi-collector back-ends, not 'direct'")
            if options:
                raise ValueError("backend_options are only valid for multi-collector back-ends")
            args, kwargs = _single_env_fn(args, kwargs)
            return super().__call__(*args, **kwargs)
        if sync is None:
            sync = False
        elif not isinstance(sync, bool):
            raise TypeError(f"sync must be a bool or None, got {sync!r}")
        kwargs.update(options)
        args, kwargs, num_collectors = _env_fn_list(args, kwargs, num_collectors)
        if backend == "process":
            from ._multi import MultiAsyncCollector, MultiSyncCollector  # noqa: PLC0415

            target = MultiSyncCollector if sync else MultiAsyncCollector
            return target(*args, **_applicable(target, kwargs))
        if backend == "ray":
            from .distributed import RayCollector  # noqa: PLC0415

            kwargs = _applicable(RayCollector, kwargs)
            return RayCollector(*args, num_collectors=num_collectors, sync=sync, **kwargs)
        if backend == "distributed":
            from .distributed import DistributedCollector  # noqa: PLC0415

            kwargs = _applicable(DistributedCollector, kwargs)
            return DistributedCollector(*args, sync=sync, **kwargs)
        if backend == "submitit" and kwargs.get("launcher", "submitit") != "submitit":
            raise ValueError("backend='submitit' requires launcher='submitit'")
        raise NotImplementedError(
            f"rl has no {backend!r} collector back-end (TorchRL's "
            f"{'RPCCollector' if backend == 'rpc' else 'submitit launcher, for SLURM clusters'}): "
            "use backend='process', 'ray' or 'distributed' (torch.distributed)"
        )


def _env_fn(args: tuple, kwargs: dict) -> tuple[Any, str | None]:
    if args:
        return args[0], "args"
    if "create_env_fn" in kwargs:
        return kwargs["create_env_fn"], "create_env_fn"
    return None, None


def _set_env_fn(args: tuple, kwargs: dict, where: str, value) -> tuple[tuple, dict]:
    if where == "args":
        return (value, *args[1:]), kwargs
    kwargs = dict(kwargs)
    kwargs[where] = value
    return args, kwargs


def _is_sequence(value) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _single_env_fn(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``[env_fn]`` -> ``env_fn`` for the direct back-end (one collector, one env)."""
    fn, where = _env_fn(args, kwargs)
    if where is None or not _is_sequence(fn):
        return args, kwargs
    if len(fn) != 1:
        raise ValueError(
            f"backend='direct' requires exactly one environment constructor, got {len(fn)}"
        )
    return _set_env_fn(args, kwargs, where, fn[0])


def _env_fn_list(args: tuple, kwargs: dict, num_collectors: int | None):
    """One env constructor per collector: a list given as is (its length is the number
    of collectors), one constructor repeated ``num_collectors`` times."""
    fn, where = _env_fn(args, kwargs)
    if where is None:
        return args, kwargs, num_collectors
    if _is_sequence(fn):
        fns = list(fn)
        if not fns:
            raise ValueError("create_env_fn must hold at least one environment constructor")
        if num_collectors is not None and num_collectors != len(fns):
            raise ValueError(
                "num_collectors does not match the number of environment constructors: "
                f"{num_collectors} != {len(fns)}"
            )
        num_collectors = len(fns)
    else:
        num_collectors = num_collectors or 1
        fns = [fn] * num_collectors
    args, kwargs = _set_env_fn(args, kwargs, where, fns)
    return args, kwargs, num_collectors


def _applicable(target: type, kwargs: dict) -> dict:
    """``kwargs`` without the ``Collector`` defaults the target class does not share (a
    value equal to Collector's default leaves the target its own default; TorchRL drops
    them the same way for configs that spell every default out)."""
    from ._single import Collector  # noqa: PLC0415

    target_params = inspect.signature(target.__init__).parameters
    out = dict(kwargs)
    for name, param in inspect.signature(Collector.__init__).parameters.items():
        if name not in out or param.default is inspect.Parameter.empty:
            continue
        value = out[name]
        if value is not param.default and value != param.default:
            continue
        own = target_params.get(name)
        if own is None or own.default != param.default:
            out.pop(name)
    return out
