"""``RemoteTensorDictReplayBuffer``: a TensorDict buffer whose methods accept
``torch.distributed.rpc`` calls made with a reference to it."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import torch.distributed.rpc

from rl.data.replay_buffers._td_buffers import TensorDictReplayBuffer

__all__ = ["RemoteTensorDictReplayBuffer"]

# the RRef class exists only where torch was built with distributed support
_RREF: type | None = torch.distributed.rpc.PyRRef if torch.distributed.rpc.is_available() else None


def _accepting_rref(method: Callable) -> Callable:
    """``method`` called with an RRef of its object runs on the object the RRef owns."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _RREF is not None and isinstance(self, _RREF):
            self = self.local_value()
        return method(self, *args, **kwargs)

    return call


class RemoteTensorDictReplayBuffer(TensorDictReplayBuffer):
    """A :class:`TensorDictReplayBuffer` that other RPC workers can use through a reference.

    The process that builds it (the buffer's owner) makes it reachable with
    ``rref = torch.distributed.rpc.RRef(buffer)``; a worker holding ``rref`` calls any
    public method as ``rpc.rpc_sync(owner, RemoteTensorDictReplayBuffer.extend,
    args=(rref, data))``: the method runs on the owner's buffer. Called locally, it is a
    plain :class:`TensorDictReplayBuffer`.

    Args:
        **kwargs: the :class:`TensorDictReplayBuffer` arguments.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, RemoteTensorDictReplayBuffer
        >>> rb = RemoteTensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
        >>> _ = rb.extend(TensorDict({"obs": torch.arange(4)}, batch_size=[4]))
        >>> rb.sample().batch_size
        torch.Size([2])
    """


def _accept_rrefs(cls: type) -> None:
    """Wraps every public method of ``cls`` (inherited ones included) in
    :func:`_accepting_rref`, as TorchRL's ``accept_remote_rref_udf_invocation``."""
    for name in dir(cls):
        method = inspect.getattr_static(cls, name)
        # plain methods only: properties, static and class methods take no instance
        if not name.startswith("_") and isinstance(method, types.FunctionType):
            wrapped = _accepting_rref(method)
            # RPC pickles a function by where it is found: here, not where it was written
            wrapped.__module__, wrapped.__qualname__ = cls.__module__, f"{cls.__qualname__}.{name}"
            setattr(cls, name, wrapped)


_accept_rrefs(RemoteTensorDictReplayBuffer)
