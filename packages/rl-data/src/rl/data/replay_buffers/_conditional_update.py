"""Conditional updates: patching stored records only while they are still the ones a
caller sampled (``ReplayBuffer.update_if_present``)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorClass, TensorDictBase
from tensordict.utils import NestedKey, unravel_key

from rl.data.replay_buffers._utils import KeyMismatchError
from rl.data.replay_buffers.storages._base import Storage
from rl.data.replay_buffers.writers._writers import Writer

__all__ = ["ConditionalUpdateResult", "update_if_present"]


class ConditionalUpdateResult(TensorClass["nocast"]):
    """What :meth:`ReplayBuffer.update_if_present` did, record by record.

    Every record given lands in exactly one of three groups: updated, rejected by the
    version comparison, or stale (its slot was rewritten or emptied since its handle
    was taken). A tensorclass, as TorchRL's: its batch size is ``[N]`` (one row per
    record), so it indexes, stacks and moves like a TensorDict.

    Examples:
        >>> import torch
        >>> from rl.data import ConditionalUpdateResult
        >>> result = ConditionalUpdateResult(torch.tensor([True, False]), batch_size=[2])
        >>> result.updated_count, result.stale_count, result[1].updated.item()
        (1, 1, False)

    Attributes:
        updated: ``[N]`` bool, in the order of the given indices: the record was live
            and got the patch.
        version_rejected: ``[N]`` bool, only with a version comparison (``None``
            otherwise): the record was live but its stored version won.
    """

    updated: torch.Tensor
    version_rejected: torch.Tensor | None = None

    @property
    def updated_count(self) -> int:
        return int(self.updated.sum())

    @property
    def version_rejected_count(self) -> int:
        return 0 if self.version_rejected is None else int(self.version_rejected.sum())

    @property
    def stale_count(self) -> int:
        return self.updated.numel() - self.updated_count - self.version_rejected_count


def _stored_leaf(storage: Storage, key: NestedKey) -> torch.Tensor:
    """The whole stored column of ``key`` (writes to it reach the storage)."""
    stored = getattr(storage, "_storage", None)
    if not isinstance(stored, TensorDictBase):
        raise RuntimeError(
            "conditional updates need a storage that already holds TensorDicts; extend the "
            "buffer before calling update_if_present"
        )
    leaf = stored.get(key, None)
    if not isinstance(leaf, torch.Tensor):
        keys = ", ".join(sorted(map(repr, stored.keys(True, True))))
        raise KeyMismatchError(
            f"conditional updates patch stored entries; the storage holds no key {key!r} "
            f"(stored keys: {keys})"
        )
    return leaf.as_subclass(torch.Tensor)


def _coords(index: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Storage positions (``[N]``, or ``[N, ndim]`` coordinates) as an indexing tuple."""
    return tuple(index.unbind(-1)) if index.ndim > 1 else (index,)


def _version_winners(
    index: torch.Tensor, version: torch.Tensor, accepted: torch.Tensor
) -> torch.Tensor:
    """``accepted`` where, among the rows addressing one record, a row holds the highest
    incoming version (the last such row on ties): one write per record."""
    if index.ndim > 1:
        _, record = torch.unique(index, dim=0, return_inverse=True)
    else:
        _, record = torch.unique(index, return_inverse=True)
    n = int(record.max()) + 1 if record.numel() else 0
    if n == record.numel():
        return accepted
    info = torch.finfo if version.is_floating_point() else torch.iinfo
    best = torch.full((n,), info(version.dtype).min, dtype=version.dtype)
    best = best.scatter_reduce(0, record, version, "amax")
    row = torch.arange(record.numel())
    is_best = version == best[record]
    last_best = torch.full((n,), -1, dtype=torch.int64).scatter_reduce(
        0, record, torch.where(is_best, row, torch.full_like(row, -1)), "amax"
    )
    return accepted & (row == last_best[record])


def update_if_present(
    storage: Storage,
    writer: Writer,
    lock: threading.RLock,
    *,
    index: Any,
    generation: Any,
    patch: Mapping[NestedKey, torch.Tensor] | TensorDictBase,
    version_key: NestedKey | None = None,
    version: int | torch.Tensor | None = None,
    require_newer: bool = False,
) -> ConditionalUpdateResult:
    """Patches the records at ``index`` whose slot generation still is ``generation``.

    See :meth:`ReplayBuffer.update_if_present`; ``lock`` is the buffer's.
    """
    if not getattr(storage, "supports_conditional_update", False) or not writer.tracks_generations:
        raise RuntimeError(
            f"conditional updates need a tensor storage and a writer that tracks slot "
            f"generations (RoundRobinWriter(track_generations=True)); this buffer has "
            f"{type(storage).__name__} and {type(writer).__name__}"
            + ("" if writer.tracks_generations else " without track_generations")
        )
    index = torch.as_tensor(index, dtype=torch.long).cpu()
    rows = index[..., 0] if index.ndim > 1 else index.reshape(-1)
    n = rows.numel()
    generation = torch.as_tensor(generation, dtype=torch.long).reshape(-1)
    if generation.numel() != n:
        raise ValueError(
            f"index and generation must address the same records, got {n} indices and "
            f"{generation.numel()} generations"
        )
    if (version_key is None) != (version is None):
        raise ValueError(
            f"version_key and version go together, got version_key={version_key!r} and "
            f"version={version!r}"
        )
    if isinstance(patch, TensorDictBase):
        patch = dict(patch.items(include_nested=True, leaves_only=True))
    patch = {unravel_key(key): value for key, value in dict(patch).items()}
    coord_dims = index.shape[-1] if index.ndim > 1 else 1

    version_leaf = None
    if version_key is not None:
        if isinstance(version_key, str) and "." in version_key:
            raise ValueError(
                f"Dotted-string version keys are not supported: got {version_key!r}, pass "
                f"{tuple(version_key.split('.'))!r} for a nested entry"
            )
        version_key = unravel_key(version_key)
        if version_key in patch:
            raise ValueError(
                f"version_key {version_key!r} may not appear in patch: the version "
                "comparison writes it"
            )
        version_leaf = _stored_leaf(storage, version_key)
        features = version_leaf.shape[coord_dims:]
        if any(d != 1 for d in features):
            raise ValueError(
                f"version_key {version_key!r} must hold one number per record, the storage "
                f"holds shape {tuple(features)} per record"
            )
        version = torch.as_tensor(version)
        given_shape = tuple(version.shape)
        while version.ndim > 1 and version.shape[-1] == 1:
            version = version.squeeze(-1)
        if version.ndim == 0:
            version = version.expand(n)
        elif version.ndim != 1 or version.numel() != n:
            raise ValueError(
                f"version must be a number or hold one per record, got shape {given_shape} "
                f"for {n} records"
            )
        patch[version_key] = version.reshape(n, *features).to(version_leaf.dtype)

    # every entry is checked before anything is written
    checked = {}
    for key, value in patch.items():
        leaf = _stored_leaf(storage, key)
        value = torch.as_tensor(value)
        if value.dtype != leaf.dtype:
            raise ValueError(
                f"patch key {key!r} has dtype {value.dtype}, the storage holds {leaf.dtype}"
            )
        features = leaf.shape[coord_dims:]
        if value.numel() != n * features.numel():
            raise ValueError(
                f"patch key {key!r} has shape {tuple(value.shape)}, expected {n} records of "
                f"shape {tuple(features)}"
            )
        checked[key] = value.reshape(n, *features).to(leaf.device)

    with lock:
        current = writer.generations_of(rows).cpu()
        live = (current >= 0) & (current == generation.cpu())
        rejected = None
        if version_key is not None:
            rejected = torch.zeros_like(live)
            if live.any():
                live_index = index[live]
                stored = version_leaf[_coords(live_index.to(version_leaf.device))].reshape(-1)
                incoming = checked[version_key][live.to(version_leaf.device)].reshape(-1)
                accepted = incoming > stored if require_newer else incoming >= stored
                accepted = _version_winners(live_index.cpu(), incoming.cpu(), accepted.cpu())
                rejected[live] = ~accepted
                applied = torch.zeros_like(live)
                applied[live] = accepted
                live = applied
        if live.any():
            for key, value in checked.items():
                leaf = _stored_leaf(storage, key)
                leaf[_coords(index[live].to(leaf.device))] = value[live.to(value.device)]
            storage._bump_mutation_revision()
    return ConditionalUpdateResult(
        updated=live, version_rejected=rejected, batch_size=live.shape[:1]
    )
