"""Offline-to-online replay: a fixed offline dataset next to a growing online buffer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rl.data.replay_buffers._buffers import ReplayBuffer
from rl.data.replay_buffers.storages._base import Storage
from rl.data.replay_buffers.storages._tensor import LazyTensorStorage


def _load_dataset(dataset_id: str, **kwargs: Any) -> Any:
    """``rl.data.datasets.load_dataset``, imported on first use (it is a subpackage that
    ``import rl.data`` leaves out)."""
    from rl.data.datasets import load_dataset  # noqa: PLC0415

    return load_dataset(dataset_id, **kwargs)


class OfflineToOnlineReplayBuffer:
    """An offline dataset that is never modified, next to an online buffer that grows.

    ``extend`` writes to the online buffer only. ``sample(batch_size)`` draws exactly
    ``round(offline_fraction * batch_size)`` items from the offline dataset and the rest
    from the online buffer, concatenated into one ``[batch_size]`` batch (offline first);
    while the online buffer is empty every item comes from the offline dataset.
    ``anneal(step, total_steps)`` lowers the fraction linearly to 0 (as TorchRL's).

    Args:
        offline_dataset: a replay buffer holding the offline data (or anything with
            ``sample(n)`` and ``len``), or a dataset name such as
            ``"minari:mujoco/hopper/expert-v0"``, built by
            :func:`rl.data.datasets.load_dataset` with ``batch_size`` and
            ``dataset_kwargs``.
        online_storage: the online buffer's storage; or
        online_capacity: the capacity of a :class:`LazyTensorStorage` for it.
        offline_fraction: the share of each batch drawn offline, in ``(0, 1)``.
        batch_size: the default batch size of :meth:`sample` (also the dataset's, for a
            dataset given by name, unless ``dataset_kwargs`` has one).
        transform: applied to every concatenated batch.
        **dataset_kwargs: passed to the dataset's constructor when ``offline_dataset`` is a
            name (``root``, ``split_trajs``, ...).

    Raises:
        ValueError: both or neither of ``online_storage`` and ``online_capacity``,
            ``offline_fraction`` outside ``(0, 1)``, a dataset name without a batch size,
            or ``dataset_kwargs`` with a dataset object.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, OfflineToOnlineReplayBuffer, ReplayBuffer
        >>> offline = ReplayBuffer(storage=LazyTensorStorage(100))
        >>> _ = offline.extend(TensorDict({"source": torch.zeros(100)}, [100]))
        >>> rb = OfflineToOnlineReplayBuffer(offline, online_capacity=50, offline_fraction=0.25)
        >>> _ = rb.extend(TensorDict({"source": torch.ones(10)}, [10]))
        >>> rb.sample(8)["source"].tolist()
        [0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    """

    def __init__(
        self,
        offline_dataset: Any,
        *,
        online_storage: Storage | None = None,
        online_capacity: int | None = None,
        offline_fraction: float = 0.5,
        batch_size: int | None = None,
        transform: Callable | None = None,
        **dataset_kwargs: Any,
    ) -> None:
        if online_storage is not None and online_capacity is not None:
            raise ValueError("give exactly one of online_storage and online_capacity, not both")
        if online_storage is None and online_capacity is None:
            raise ValueError("give exactly one of online_storage and online_capacity (got neither)")
        if not 0.0 < offline_fraction < 1.0:
            raise ValueError(f"offline_fraction must be in (0, 1), got {offline_fraction}")
        if isinstance(offline_dataset, str):
            if "batch_size" not in dataset_kwargs:
                if batch_size is None:
                    raise ValueError(
                        f"batch_size must be provided to build the dataset {offline_dataset!r}"
                    )
                dataset_kwargs["batch_size"] = batch_size
            offline_dataset = _load_dataset(offline_dataset, **dataset_kwargs)
        elif dataset_kwargs:
            raise ValueError(
                f"dataset keyword arguments ({sorted(dataset_kwargs)}) are only forwarded when "
                "offline_dataset is a dataset name; pass them to your dataset instead"
            )
        if online_storage is None:
            online_storage = LazyTensorStorage(online_capacity)
        self._offline_buffer = offline_dataset
        self._online_buffer = ReplayBuffer(storage=online_storage)
        self._offline_fraction = float(offline_fraction)
        self._base_offline_fraction = float(offline_fraction)
        self._batch_size = batch_size
        self._transform = transform

    def extend(self, data: Any) -> torch.Tensor:
        """Writes online experience (the offline dataset is never written)."""
        return self._online_buffer.extend(data)

    def sample(self, batch_size: int | None = None) -> Any:
        """A ``[batch_size]`` batch: offline items first, then online ones."""
        if batch_size is None:
            batch_size = self._batch_size
        if batch_size is None:
            raise ValueError(
                "sample() needs a batch_size: batch_size must be provided here or to the "
                "constructor"
            )
        n_offline = round(self._offline_fraction * batch_size)
        if len(self._online_buffer) == 0 or n_offline >= batch_size:
            out = self._offline_buffer.sample(batch_size)
        elif n_offline == 0:
            out = self._online_buffer.sample(batch_size)
        else:
            out = torch.cat(
                [
                    self._offline_buffer.sample(n_offline),
                    self._online_buffer.sample(batch_size - n_offline),
                ],
                0,
            )
        return self._transform(out) if self._transform is not None else out

    def anneal(self, step: int, total_steps: int) -> None:
        """Sets ``offline_fraction`` to ``base * max(0, 1 - step / total_steps)``."""
        self._offline_fraction = self._base_offline_fraction * max(0.0, 1.0 - step / total_steps)

    @property
    def offline_fraction(self) -> float:
        return self._offline_fraction

    @property
    def offline_buffer(self) -> Any:
        return self._offline_buffer

    @property
    def online_buffer(self) -> ReplayBuffer:
        return self._online_buffer

    def __len__(self) -> int:
        return len(self._offline_buffer) + len(self._online_buffer)

    def state_dict(self) -> dict[str, Any]:
        """The online buffer's state and the sampling fractions (the offline dataset is
        never modified, so it is not part of the state)."""
        return {
            "online_buffer": self._online_buffer.state_dict(),
            "offline_fraction": self._offline_fraction,
            "base_offline_fraction": self._base_offline_fraction,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`: the online buffer, the current offline fraction and
        the one :meth:`anneal` starts from."""
        self._online_buffer.load_state_dict(state_dict["online_buffer"])
        self._offline_fraction = float(state_dict["offline_fraction"])
        self._base_offline_fraction = float(
            state_dict.get("base_offline_fraction", self._base_offline_fraction)
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(offline={type(self._offline_buffer).__name__}, "
            f"offline_fraction={self._offline_fraction:.3f}, "
            f"online_size={len(self._online_buffer)}, batch_size={self._batch_size})"
        )


def prefill_replay_buffer(
    rb: ReplayBuffer, dataset: Any, n_samples: int | None = None, chunk_size: int = 1000
) -> ReplayBuffer:
    """Copies ``n_samples`` items (default: as many as the dataset holds) sampled from
    ``dataset`` into ``rb``, ``chunk_size`` at a time, and returns ``rb``.

    ``dataset`` is a replay buffer, or a dataset name (``"minari:..."``) built by
    :func:`rl.data.datasets.load_dataset` with ``batch_size=chunk_size``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyTensorStorage, ReplayBuffer, prefill_replay_buffer
        >>> dataset = ReplayBuffer(storage=LazyTensorStorage(500))
        >>> _ = dataset.extend(TensorDict({"obs": torch.randn(500, 4)}, [500]))
        >>> len(prefill_replay_buffer(ReplayBuffer(storage=LazyTensorStorage(1000)), dataset, 200))
        200
    """
    if isinstance(dataset, str):
        dataset = _load_dataset(dataset, batch_size=chunk_size)
    total = len(dataset) if n_samples is None else min(n_samples, len(dataset))
    copied = 0
    while copied < total:
        chunk = min(chunk_size, total - copied)
        rb.extend(dataset.sample(chunk))
        copied += chunk
    return rb
