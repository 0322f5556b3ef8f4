"""Weight-sync schemes across machines (Ray, torch RPC, torch.distributed): their
configuration.

rl's remote collectors (:class:`~rl.collectors.distributed.RayCollector`,
:class:`~rl.collectors.distributed.DistributedDataCollector`) move weights with their own
``update_policy_weights_``; these classes carry TorchRL's configuration (back-end,
strategy, ``sync``, ``timeout``) so that code building them runs, and
:meth:`WeightSyncScheme.from_backend` finds them. Setting one up on a sender or a
receiver raises ``NotImplementedError`` naming the collector that does the job.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from ._weight_sync import WeightSyncScheme, register_weight_sync_backend

__all__ = [
    "RayTransport",
    "RPCTransport",
    "DistributedTransport",
    "RayWeightSyncScheme",
    "RayModuleTransformScheme",
    "RPCWeightSyncScheme",
    "DistributedWeightSyncScheme",
]


def _not_here(scheme: str, instead: str) -> NotImplementedError:
    return NotImplementedError(
        f"rl's {scheme} holds TorchRL's configuration only: weights of a remote collector go "
        f"through {instead}.update_policy_weights_ (use SharedMemWeightSyncScheme or "
        "MultiProcessWeightSyncScheme with MultiSyncCollector / MultiAsyncCollector)"
    )


class _RemoteTransport:
    _scheme = "remote weight sync"
    _instead = "the remote collector"

    def send_weights(self, weights: Any) -> None:
        raise _not_here(type(self).__name__, self._instead)

    def receive_weights(self, timeout=None, *, weights=None, model=None, strategy=None) -> Any:
        raise _not_here(type(self).__name__, self._instead)


class RayTransport(_RemoteTransport):
    """TorchRL's Ray transport (configuration only here; see the module)."""

    _instead = "RayCollector"

    def __init__(
        self,
        *,
        remote_actor: Any = None,
        worker_idx: int | None = None,
        backend: str = "gloo",
        connection_info_name: str = "connection_info",
        model_id: str | None = None,
    ) -> None:
        self.remote_actor = remote_actor
        self.worker_idx = worker_idx
        self.backend = backend
        self.connection_info_name = connection_info_name
        self.model_id = model_id


class RPCTransport(_RemoteTransport):
    """TorchRL's torch.distributed.rpc transport (configuration only here)."""

    _instead = "DistributedDataCollector"

    def __init__(
        self, collector_info=None, collector_rref=None, collector_class=None, worker_rank=None
    ) -> None:
        self._collector_info = collector_info
        self._collector_rref = collector_rref
        self._collector_class = collector_class
        self._worker_rank = worker_rank


class DistributedTransport(_RemoteTransport):
    """TorchRL's torch.distributed transport (configuration only here)."""

    _instead = "DistributedDataCollector"

    def __init__(
        self, *, weights_buffer: Any, store: Any = None, rank: int | None = None, sync: bool = True
    ) -> None:
        self._weights_buffer = weights_buffer
        self._store = store
        self._rank = rank
        self._sync = sync


class _RemoteScheme(WeightSyncScheme):
    _instead = "the remote collector"
    _transport: type = _RemoteTransport

    def _init_on_sender_impl(self, *args, **kwargs) -> None:
        raise _not_here(type(self).__name__, self._instead)

    def _init_on_receiver_impl(self, *, model_id: str, context: Any = None, **kwargs) -> None:
        raise _not_here(type(self).__name__, self._instead)

    def create_transport(self, **kwargs) -> Any:
        return self._transport(**kwargs)


@register_weight_sync_backend("ray")
class RayWeightSyncScheme(_RemoteScheme):
    """TorchRL's Ray weight sync (``backend``: the collective back-end, ``"gloo"`` or
    ``"nccl"``); configuration only in rl (see the module)."""

    _instead = "RayCollector"
    _transport = RayTransport

    def __init__(
        self, strategy: Literal["tensordict", "state_dict"] = "tensordict", backend: str = "gloo"
    ) -> None:
        super().__init__(strategy)
        self._backend = backend
        self._rendezvous_id = uuid.uuid4().hex

    def _copy_uninitialized(self) -> RayWeightSyncScheme:
        """A copy with the same configuration, no runtime state and a new rendez-vous id."""
        copy = type(self).__new__(type(self))
        copy.__setstate__(self.__getstate__())
        copy._model_id = None
        copy._rendezvous_id = uuid.uuid4().hex
        return copy


class RayModuleTransformScheme(RayWeightSyncScheme):
    """TorchRL's scheme for a module transform living in a Ray actor (configuration only)."""


@register_weight_sync_backend("rpc")
class RPCWeightSyncScheme(_RemoteScheme):
    """TorchRL's torch.distributed.rpc weight sync (configuration only in rl)."""

    _instead = "DistributedDataCollector"
    _transport = RPCTransport


@register_weight_sync_backend("distributed")
class DistributedWeightSyncScheme(_RemoteScheme):
    """TorchRL's torch.distributed weight sync (configuration only in rl).

    Args:
        backend: the process-group back-end (``"gloo"``).
        sync: wait for the workers in ``send``.
        timeout: seconds for the process group's operations.
    """

    _instead = "DistributedDataCollector"
    _transport = DistributedTransport

    def __init__(self, backend: str = "gloo", sync: bool = True, timeout: float = 3600.0) -> None:
        super().__init__()
        self.backend = backend
        self.sync = sync
        self._timeout = timeout
