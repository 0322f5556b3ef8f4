"""``RayReplayBuffer``: a replay buffer hosted in a Ray actor.

Ray is imported when a buffer is built (``rl-data[ray]``); ``import rl.data`` does not
need it. The Ray runtime is shared with the other rl objects that use Ray (see
:mod:`rl.core.ray_runtime`): it is started here when Ray does not run, and shut down by the last rl
object using it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from rl.core.ray_runtime import acquire_runtime, import_ray, release_runtime, wait_started
from rl.data.replay_buffers._buffers import ReplayBuffer
from rl.data.replay_buffers._utils import CheckpointAliases
from rl.data.replay_buffers.samplers import Sampler
from rl.data.replay_buffers.storages import Storage
from rl.data.replay_buffers.writers import Writer

__all__ = ["RayReplayBuffer", "DEFAULT_REMOTE_CONFIG"]

#: the Ray resources of the buffer actor when ``remote_config`` is not given
DEFAULT_REMOTE_CONFIG: dict[str, Any] = {"num_cpus": 1}

_COMPONENTS = {"storage": Storage, "sampler": Sampler, "writer": Writer}
_TRANSPORTS = ("auto", "ray")


def _import_ray() -> Any:
    return import_ray("RayReplayBuffer", "rl-data[ray]")


class _BufferActor:
    """Holds ``replay_buffer_cls(*args, **kwargs)``; made an actor with ``ray.remote``."""

    def __init__(self, replay_buffer_cls: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        kwargs = dict(kwargs)
        for name, base in _COMPONENTS.items():
            value = kwargs.get(name)
            if value is not None and not isinstance(value, base) and callable(value):
                kwargs[name] = value()  # a constructor (e.g. functools.partial)
        self.rb = replay_buffer_cls(*args, **kwargs)

    def info(self) -> dict:
        return {"pid": os.getpid(), "batch_size": self.rb.batch_size, "repr": repr(self.rb)}

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.rb, name)(*args, **kwargs)

    def get(self, name: str) -> Any:
        return getattr(self.rb, name)


class RayReplayBuffer(CheckpointAliases):
    """A replay buffer in a Ray actor, used through the local buffer's API.

    The buffer (``replay_buffer_cls(*args, **kwargs)``: a
    :class:`~rl.data.ReplayBuffer`, :class:`~rl.data.TensorDictReplayBuffer`, ... with
    its storage, sampler and writer) lives in one actor; every method here is a call to
    it. The object can be sent to other Ray tasks and actors (a
    :class:`~rl.collectors.distributed.RayCollector`'s collectors extend it directly):
    the copies there talk to the same actor and do not own it. The learner samples it
    here.

    Storage, sampler and writer may be given as instances (sent to the actor) or as
    constructors (``functools.partial(LazyTensorStorage, 10_000)``, built in the actor).
    Errors raised in the actor are raised here with their type (a ``ValueError`` stays a
    ``ValueError``); a dead actor raises a ``RuntimeError``, and so does, within seconds,
    an actor whose worker cannot import rl or Ray (the message names the fix).

    It is not a :class:`~rl.data.ReplayBuffer` (``isinstance`` is ``False``): it has no
    local ``storage``, ``sampler`` or ``writer`` that code checking for a replay buffer
    could read; collectors recognise it by ``service_backend == "ray"``.

    Args:
        *args: positional arguments of ``replay_buffer_cls``.
        replay_buffer_cls: the buffer class built in the actor.
        ray_init_config: keyword arguments of ``ray.init()`` when Ray does not run
            (``{"address": "auto"}`` joins a cluster).
        remote_config: the actor's Ray options (``num_cpus``, ``num_gpus``,
            ``resources``, ...); default :data:`DEFAULT_REMOTE_CONFIG`.
        transport: how data travels: ``"auto"`` and ``"ray"`` (the default, and the
            only transport here) use Ray's object store; TorchRL's ``"distributed"``
            (a torch.distributed side channel) is not supported.
        transport_options: options of the ``"distributed"`` transport; not supported.
        delayed_init: passed on to ``replay_buffer_cls`` when ``True`` (rl's buffers
            build their components at once either way).
        **kwargs: keyword arguments of ``replay_buffer_cls`` (``storage``, ``sampler``,
            ``writer``, ``batch_size``, ``transform``, ...).

    Raises:
        ImportError: Ray is not installed (``pip install "rl-data[ray]"``).
        ValueError: an unknown or unsupported ``transport``, or ``transport_options``.

    Examples:
        >>> import torch
        >>> from functools import partial
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, RayReplayBuffer
        >>> rb = RayReplayBuffer(  # doctest: +SKIP
        ...     storage=partial(LazyTensorStorage, 100),
        ...     batch_size=4,
        ...     remote_config={"num_cpus": 0},
        ... )
        >>> rb.extend(TensorDict({"x": torch.arange(8)}, batch_size=[8]))  # doctest: +SKIP
        tensor([0, 1, 2, 3, 4, 5, 6, 7])
        >>> rb.sample().shape  # doctest: +SKIP
        torch.Size([4])
        >>> rb.shutdown()  # doctest: +SKIP
    """

    #: how a collector recognises a buffer that its remote workers may extend directly
    service_backend = "ray"

    def __init__(
        self,
        *args: Any,
        replay_buffer_cls: Callable[..., Any] = ReplayBuffer,
        ray_init_config: Mapping[str, Any] | None = None,
        remote_config: Mapping[str, Any] | None = None,
        transport: Literal["auto", "ray", "distributed"] = "auto",
        transport_options: Mapping[str, Any] | None = None,
        delayed_init: bool = False,
        **kwargs: Any,
    ) -> None:
        self._owner = False
        self._actor = None
        self._held_runtime = False
        if transport == "distributed":
            raise ValueError(
                "transport='distributed' is not supported by RayReplayBuffer: data "
                "travels through Ray's object store (transport='auto' or 'ray')"
            )
        if transport not in _TRANSPORTS:
            raise ValueError(f"transport must be one of {_TRANSPORTS}, got {transport!r}")
        if transport_options:
            raise ValueError(
                "transport_options configure TorchRL's 'distributed' transport, which is "
                f"not supported, got transport_options={dict(transport_options)!r}"
            )
        if delayed_init:
            kwargs["delayed_init"] = True
        ray = _import_ray()
        self._held_runtime = acquire_runtime(ray, ray_init_config)
        try:
            config = dict(DEFAULT_REMOTE_CONFIG if remote_config is None else remote_config)
            self._actor = (
                ray.remote(_BufferActor).options(**config).remote(replay_buffer_cls, args, kwargs)
            )
            self._owner = True
            # a worker that cannot import rl or Ray is reported at once, not awaited forever
            info = wait_started(
                ray, [self._actor.info.remote()], what="the RayReplayBuffer actor", timeout=None
            )[0]
        except BaseException:
            self.shutdown()
            raise
        self._batch_size = info["batch_size"]
        self._repr = info["repr"]

    # ------------------------------------------------------------------- remote calls
    def _get(self, ref: Any) -> Any:
        ray = _import_ray()
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as err:
            raise RuntimeError(f"the RayReplayBuffer actor is not running: {err}") from err
        except ray.exceptions.RayTaskError as err:
            # the actor's own error, with its type (ValueError, KeyError, ...)
            raise err.as_instanceof_cause() from None

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self._actor is None:
            raise RuntimeError("the RayReplayBuffer was shut down")
        return self._get(self._actor.call.remote(name, *args, **kwargs))

    # ---------------------------------------------------------------- the buffer's API
    def extend(self, data: Any) -> Any:
        """Writes a batch of items; returns their indices."""
        return self._call("extend", data)

    def add(self, data: Any) -> int:
        """Writes one item; returns its index."""
        return self._call("add", data)

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Samples a batch (see :meth:`rl.data.ReplayBuffer.sample`)."""
        return self._call("sample", batch_size, return_info=return_info)

    def next(self) -> Any:
        return self._call("next")

    def __iter__(self) -> Iterator[Any]:
        if self._batch_size is None:
            raise RuntimeError("iterating over a replay buffer needs batch_size at construction")
        while True:
            yield self.sample()

    def __len__(self) -> int:
        return self._call("__len__")

    def __getitem__(self, index: Any) -> Any:
        return self._call("__getitem__", index)

    def update_priority(self, index: Any, priority: Any) -> None:
        self._call("update_priority", index, priority)

    def mark_update(self, index: Any) -> None:
        self._call("mark_update", index)

    def can_sample(self, batch_size: int | None = None) -> bool:
        return self._call("can_sample", batch_size)

    def empty(self) -> None:
        """Removes every item."""
        self._call("empty")

    def append_transform(self, transform: Callable) -> RayReplayBuffer:
        self._call("append_transform", transform)
        return self

    def insert_transform(self, index: int, transform: Callable) -> RayReplayBuffer:
        self._call("insert_transform", index, transform)
        return self

    @property
    def batch_size(self) -> int | None:
        return self._batch_size

    @property
    def write_count(self) -> int:
        if self._actor is None:
            raise RuntimeError("the RayReplayBuffer was shut down")
        return self._get(self._actor.get.remote("write_count"))

    def state_dict(self) -> dict[str, Any]:
        """The remote buffer's state (tensors and plain containers)."""
        return self._call("state_dict")

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._call("load_state_dict", state_dict)

    def dumps(self, path: str | Path) -> None:
        """Saves the buffer in the directory ``path`` of the actor's machine."""
        self._call("dumps", str(path))

    def loads(self, path: str | Path) -> None:
        """Restores a buffer saved by :meth:`dumps` (a path on the actor's machine)."""
        self._call("loads", str(path))

    # ---------------------------------------------------------------------- lifetime
    @property
    def is_alive(self) -> bool:
        """Whether this object can still reach its actor."""
        return self._actor is not None

    @property
    def transport_kind(self) -> str:
        """How data travels to and from the actor: ``"ray"`` (Ray's object store)."""
        return "ray"

    @property
    def actor(self) -> Any:
        """The Ray actor handle (to pass to code that calls the actor itself)."""
        return self._actor

    def shutdown(self, timeout: float | None = None) -> None:
        """Kills the actor (when this object created it) and gives Ray back; a copy
        sent to another task only forgets the actor (idempotent).

        Args:
            timeout: accepted for TorchRL compatibility: the actor holds no work to
                wait for, it is killed at once.
        """
        actor, self._actor = self._actor, None
        owner, self._owner = self._owner, False
        held, self._held_runtime = getattr(self, "_held_runtime", False), False
        if owner and actor is not None:
            ray = _import_ray()
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass
        if held:
            release_runtime(_import_ray(), held)

    def close(self) -> None:
        """Same as :meth:`shutdown`."""
        self.shutdown()

    def __getstate__(self) -> dict:
        # a copy sent to a Ray task or actor talks to the same actor without owning it
        return {"_actor": self._actor, "_batch_size": self._batch_size, "_repr": self._repr}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._owner = False
        self._held_runtime = False

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "" if self._actor is not None else ", shut down"
        return f"RayReplayBuffer({getattr(self, '_repr', '?')}{state})"
