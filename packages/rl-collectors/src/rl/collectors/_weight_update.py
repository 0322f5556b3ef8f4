"""Weight updaters: how ``update_policy_weights_`` reaches the policy a collector runs.

A collector built with ``weight_updater=`` hands every
:meth:`~rl.collectors.Collector.update_policy_weights_` call to it: the updater gets the
weights (given, or from :meth:`WeightUpdaterBase._get_server_weights`), maps them, and
writes them into each worker's copy (:meth:`WeightUpdaterBase._sync_weights_with_worker`).
Without one, a collector uses its own path (in place for a :class:`Collector`, shared
memory for the multiprocess collectors).
"""

from __future__ import annotations

import abc
import weakref
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from rl.core.ray_runtime import import_ray

__all__ = [
    "WeightUpdaterBase",
    "VanillaWeightUpdater",
    "MultiProcessedWeightUpdater",
    "RemoteModuleWeightUpdater",
    "RayWeightUpdater",
]

WorkerIds = int | torch.device | list[int] | list[torch.device] | None


class WeightUpdaterBase(metaclass=abc.ABCMeta):
    """Pushes policy weights from where they are trained to where they act.

    Subclasses implement :meth:`_sync_weights_with_worker` and may override
    :meth:`_get_server_weights` (weights when none are given), :meth:`_maybe_map_weights`
    (e.g. a module to its parameters), :meth:`all_worker_ids` (``None``: one target)
    and :meth:`_skip_update`. A collector registers itself with
    :meth:`register_collector` (kept through a weak reference).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.collectors import WeightUpdaterBase
        >>> class Copy(WeightUpdaterBase):
        ...     def __init__(self, target):
        ...         self.target = target
        ...     def _sync_weights_with_worker(self, *, worker_id=None, server_weights):
        ...         self.target.update_(server_weights)
        >>> target = TensorDict(w=torch.zeros(2))
        >>> Copy(target)(TensorDict(w=torch.ones(2)))
        >>> target["w"]
        tensor([1., 1.])
    """

    _collector_wrs: list | None = None
    _post_hooks: list[Callable[[], Any]] | None = None

    @property
    def post_hooks(self) -> list[Callable[[], Any]]:
        """Called (no argument, in order) after each :meth:`push_weights`."""
        if self._post_hooks is None:
            self._post_hooks = []
        return self._post_hooks

    @classmethod
    def from_policy(cls, policy: nn.Module) -> WeightUpdaterBase | None:
        """An updater built from ``policy`` (``None``: this class cannot)."""
        return None

    def register_collector(self, collector: Any) -> None:
        """Registers ``collector`` (weakly) as the owner of the weights to update."""
        if self._collector_wrs is None:
            self._collector_wrs = []
        self._collector_wrs.append(weakref.ref(collector))

    @property
    def collector(self) -> Any | None:
        """The registered collector (``None`` when none, or gone)."""
        if not self._collector_wrs:
            return None
        if len(self._collector_wrs) > 1:
            raise ValueError(
                f"{type(self).__name__} has {len(self._collector_wrs)} collectors: read "
                "`collectors` instead of `collector`"
            )
        return self._collector_wrs[0]()

    @property
    def collectors(self) -> list[Any] | None:
        """Every registered collector (``None`` for one that is gone)."""
        if not self._collector_wrs:
            return None
        return [wr() for wr in self._collector_wrs]

    def init(self, *args, **kwargs) -> None:
        """Custom initialisation (called by the owner when it is ready); no-op here."""
        return

    def register_post_hook(self, hook: Callable[[], Any]) -> None:
        """Adds a callable run after each weight push."""
        self.post_hooks.append(hook)

    def push_weights(
        self,
        policy_or_weights: nn.Module | TensorDictBase | dict | None = None,
        worker_ids: WorkerIds = None,
    ) -> None:
        """Writes ``policy_or_weights`` (or the server's, when ``None``) into the given
        workers (all of them by default), then runs the post-hooks."""
        self._push_weights(policy_or_weights=policy_or_weights, worker_ids=worker_ids)
        for hook in self.post_hooks:
            hook()

    __call__ = push_weights

    def _push_weights(self, *, policy_or_weights=None, worker_ids: WorkerIds = None) -> None:
        if policy_or_weights is None:
            weights = self._get_server_weights()
        else:
            weights = policy_or_weights
        weights = self._maybe_map_weights(weights)
        if isinstance(worker_ids, int | torch.device):
            worker_ids = [worker_ids]
        elif worker_ids is None:
            worker_ids = self.all_worker_ids()
        if worker_ids is None:
            self._sync_weights_with_worker(server_weights=weights)
            return
        for worker in worker_ids:
            if not self._skip_update(worker):
                self._sync_weights_with_worker(worker_id=worker, server_weights=weights)

    def _skip_update(self, worker_id: int | torch.device) -> bool:
        """Whether ``worker_id`` keeps its weights this time (never, by default)."""
        return False

    @abc.abstractmethod
    def _sync_weights_with_worker(
        self, *, worker_id: int | torch.device | None = None, server_weights: Any
    ) -> None:
        """Writes ``server_weights`` into worker ``worker_id`` (``None``: the one target)."""

    def _get_server_weights(self) -> Any:
        """The weights to push when none are given (``None`` by default)."""
        return None

    def _maybe_map_weights(self, server_weights: Any) -> Any:
        """A module becomes its parameters' TensorDict; weights pass unchanged."""
        if server_weights is None or isinstance(server_weights, TensorDictBase | dict):
            return server_weights
        if isinstance(server_weights, nn.Module):
            return TensorDict.from_module(server_weights).data
        raise TypeError(
            "policy_or_weights must be None, an nn.Module, a TensorDict or a dict of weights, "
            f"got {type(server_weights).__name__}"
        )

    def all_worker_ids(self) -> list[int] | list[torch.device] | None:
        """The workers to update (``None``: a single target)."""
        return None

    def increment_version(self) -> None:
        """Bumps the policy version of every registered collector."""
        for collector in self.collectors or ():
            if collector is not None:
                collector.increment_version()


class VanillaWeightUpdater(WeightUpdaterBase):
    """Copies weights in place into the local policy's parameters.

    Args:
        weight_getter: returns the weights to push when none are given.
        policy_weights: the policy's parameters (``TensorDict.from_module(policy)``),
            updated in place.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.collectors import VanillaWeightUpdater
        >>> net = torch.nn.Linear(2, 1)
        >>> updater = VanillaWeightUpdater(policy_weights=TensorDict.from_module(net).data)
        >>> updater(TensorDict.from_module(torch.nn.Linear(2, 1)).data.zero_())
        >>> float(net.weight.abs().sum())
        0.0
    """

    def __init__(
        self,
        *,
        weight_getter: Callable[[], TensorDictBase] | None = None,
        policy_weights: TensorDictBase,
    ) -> None:
        self.weight_getter = weight_getter
        self.policy_weights = policy_weights

    @classmethod
    def from_policy(cls, policy: nn.Module) -> VanillaWeightUpdater:
        """An updater writing into ``policy``'s parameters."""
        return cls(policy_weights=TensorDict.from_module(policy).data)

    def _get_server_weights(self) -> TensorDictBase | None:
        return None if self.weight_getter is None else self.weight_getter()

    def _sync_weights_with_worker(self, *, worker_id=None, server_weights: Any) -> None:
        if server_weights is None:
            return
        if isinstance(server_weights, dict):
            server_weights = TensorDict(server_weights).unflatten_keys(".")
        self.policy_weights.data.update_(server_weights)


class MultiProcessedWeightUpdater(WeightUpdaterBase):
    """Copies weights into one parameter TensorDict per worker (or device), e.g. the
    shared-memory copies that worker processes read.

    Args:
        get_server_weights: returns the weights to push when none are given.
        policy_weights: worker id (or device) -> that worker's parameters.
    """

    def __init__(
        self,
        *,
        get_server_weights: Callable[[], TensorDictBase] | None,
        policy_weights: dict[Any, TensorDictBase],
    ) -> None:
        self.weights_getter = get_server_weights
        self._policy_weights = policy_weights

    def all_worker_ids(self) -> list:
        return list(self._policy_weights)

    def _get_server_weights(self) -> TensorDictBase | None:
        if self.weights_getter is None:
            return None
        weights = self.weights_getter()
        return None if weights is None else weights.data

    def _sync_weights_with_worker(self, *, worker_id=None, server_weights: Any) -> None:
        if server_weights is None:
            return
        self._policy_weights[worker_id].data.update_(server_weights)


class RemoteModuleWeightUpdater(WeightUpdaterBase):
    """For workers whose weights the caller cannot reach (a ``policy_factory``): weights
    must be passed explicitly; the synchronisation itself happens elsewhere.

    Raises:
        RuntimeError: on a push without weights.
    """

    def __init__(self) -> None:
        pass

    def _sync_weights_with_worker(self, *, worker_id=None, server_weights: Any) -> None:
        if server_weights is None:
            raise RuntimeError(
                "RemoteModuleWeightUpdater requires the weights: call "
                "update_policy_weights_(weights) with the weights to synchronise"
            )


class RayWeightUpdater(WeightUpdaterBase):
    """Pushes policy weights to collectors that run as Ray actors.

    Each push puts the weights in Ray's object store once and calls
    ``update_policy_weights_(policy_weights=<ref>)`` on every remote collector (any Ray
    actor with that method: an rl :class:`~rl.collectors.Collector` made an actor with
    ``ray.remote(Collector)``, as TorchRL's ``RayCollector`` builds them), which copies
    them into the policy it runs. Unlike TorchRL, which returns at once, a push waits
    until every actor has loaded the weights: a failure is raised here, naming the worker,
    instead of being lost (and the next batch of each actor uses the new weights).

    Args:
        policy_weights: the policy's parameters (``TensorDict.from_module(policy)``):
            what a push without weights sends, as they are at the push.
        remote_collectors: the remote collectors (Ray actor handles); worker ``i`` is
            ``remote_collectors[i]``.
        max_interval: a worker keeps its weights for up to this many pushes, and is
            updated on the next (``0``, the default: every push updates every worker).

    Raises:
        ImportError: Ray is not installed (``pip install "rl-collectors[ray]"``).
        RuntimeError: on a push, an actor failed to load the weights (naming the worker).

    Examples:
        >>> import ray, torch  # doctest: +SKIP
        >>> from tensordict import TensorDict
        >>> from rl.collectors import Collector, RayWeightUpdater
        >>> actor = ray.remote(Collector).remote(make_env, policy, frames_per_batch=8,
        ...                                      total_frames=64)  # doctest: +SKIP
        >>> updater = RayWeightUpdater(TensorDict.from_module(policy), [actor])  # doctest: +SKIP
        >>> updater.push_weights()  # doctest: +SKIP
    """

    def __init__(
        self,
        policy_weights: TensorDictBase,
        remote_collectors: list,
        max_interval: int = 0,
    ) -> None:
        self._ray = import_ray("RayWeightUpdater", "rl-collectors[ray]")
        self.policy_weights = policy_weights
        self.remote_collectors = list(remote_collectors)
        self.max_interval = max(0, int(max_interval))
        self._batches_since_weight_update = [0] * len(self.remote_collectors)
        self._pending: dict[int, Any] = {}

    def all_worker_ids(self) -> list[int]:
        """``[0, ..., len(remote_collectors) - 1]``."""
        return list(range(len(self.remote_collectors)))

    def _get_server_weights(self) -> Any:
        return self.policy_weights.data

    def _maybe_map_weights(self, server_weights: Any) -> Any:
        if isinstance(server_weights, self._ray.ObjectRef):
            return server_weights
        mapped = super()._maybe_map_weights(server_weights)
        return None if mapped is None else self._ray.put(mapped)  # one copy for every actor

    def _push_weights(self, *, policy_or_weights=None, worker_ids=None) -> None:
        super()._push_weights(policy_or_weights=policy_or_weights, worker_ids=worker_ids)
        pending, self._pending = self._pending, {}
        for worker_id, ref in pending.items():
            try:
                self._ray.get(ref)
            except self._ray.exceptions.RayError as err:
                raise RuntimeError(
                    f"RayWeightUpdater: remote collector {worker_id} "
                    f"({self.remote_collectors[worker_id]!r}) failed to load the weights: "
                    f"{getattr(err, 'cause', None) or err!r}"
                ) from None

    def _check_worker(self, worker_id: Any) -> None:
        if not isinstance(worker_id, int) or not 0 <= worker_id < len(self.remote_collectors):
            raise ValueError(
                f"RayWeightUpdater has {len(self.remote_collectors)} remote collectors, "
                f"got worker_id={worker_id!r}"
            )

    def _sync_weights_with_worker(self, *, worker_id=None, server_weights: Any) -> None:
        self._check_worker(worker_id)
        if server_weights is None:
            return
        actor = self.remote_collectors[worker_id]
        self._pending[worker_id] = actor.update_policy_weights_.remote(
            policy_weights=server_weights
        )
        self._batches_since_weight_update[worker_id] = 0

    def _skip_update(self, worker_id: int) -> bool:
        self._check_worker(worker_id)
        self._batches_since_weight_update[worker_id] += 1
        return self._batches_since_weight_update[worker_id] <= self.max_interval
