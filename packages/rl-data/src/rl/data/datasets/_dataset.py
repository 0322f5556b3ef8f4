"""``BaseDatasetExperienceReplay``: an offline dataset kept on disk, read as a replay buffer."""

from __future__ import annotations

import abc
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from tensordict import TensorDictBase

from rl.data.replay_buffers import TensorDictReplayBuffer, TensorStorage


def _default_root(source: str) -> Path:
    """Where a dataset source keeps its files unless told otherwise: ``~/.cache/rl/<source>``."""
    return Path(os.path.expanduser("~")) / ".cache" / "rl" / source


class BaseDatasetExperienceReplay(TensorDictReplayBuffer, metaclass=abc.ABCMeta):
    """The base of the offline datasets: a read-only replay buffer over data kept on disk.

    A dataset is written once under :attr:`root` as a memory-mapped TensorDict (one
    folder per dataset, :attr:`data_path`) and sampled like any
    :class:`~rl.data.TensorDictReplayBuffer`. A subclass says where its files are
    (:attr:`data_path`, :attr:`data_path_root`) and whether they are there
    (:meth:`_is_downloaded`); it cannot be instantiated without them.

    :meth:`preprocess` maps a function over every stored item into a new memory-mapped
    storage, and :meth:`delete` removes the dataset's files.
    """

    @property
    @abc.abstractmethod
    def data_path(self) -> Path:
        """The folder of the stored data (for a split dataset, the split copy)."""

    @property
    @abc.abstractmethod
    def data_path_root(self) -> Path:
        """The folder of the stored data as it was first written (before any split)."""

    @abc.abstractmethod
    def _is_downloaded(self) -> bool:
        """Whether the dataset's files are already under :attr:`root`."""

    @property
    def root(self) -> Path | None:
        """The folder that holds this source's datasets."""
        return self._root

    @root.setter
    def root(self, value: str | Path | None) -> None:
        self._root = Path(value) if value is not None else None

    def preprocess(
        self,
        fn: Callable[[TensorDictBase], TensorDictBase],
        dim: int = 0,
        num_workers: int | None = None,
        *,
        chunksize: int | None = None,
        num_chunks: int | None = None,
        pool=None,
        generator: torch.Generator | None = None,
        max_tasks_per_child: int | None = None,
        worker_threads: int = 1,
        index_with_generator: bool = False,
        pbar: bool = False,
        mp_start_method: str | None = None,
        num_frames: int | None = None,
        dest: str | Path,
    ) -> TensorStorage:
        """Applies ``fn`` to every stored item and returns a new storage with the results.

        ``fn`` takes one item (a TensorDict with the dataset's item shape) and returns the
        transformed item; every result must have the same structure. The output is a
        memory-mapped TensorDict written under ``dest``, wrapped in a
        :class:`~rl.data.TensorStorage` to give to a :class:`~rl.data.ReplayBuffer`.
        The dataset itself is not changed.

        Args:
            fn: the transform of one item.
            dim: the dimension along which the data is mapped.
            num_workers: the number of worker processes (default: one per CPU, as
                :meth:`tensordict.TensorDictBase.map`). ``0`` runs ``fn`` in this process,
                which also takes functions that cannot be pickled (lambdas, closures).

        Keyword Args:
            chunksize, num_chunks, pool, generator, max_tasks_per_child, worker_threads,
                index_with_generator, pbar, mp_start_method: forwarded to
                :meth:`tensordict.TensorDictBase.map`.
            num_frames: transform only the first ``num_frames`` items (to try a transform
                on a few items first). Default: all of them.
            dest: the folder of the new memory-mapped data.

        Returns:
            a :class:`~rl.data.TensorStorage` over the transformed data.

        Raises:
            RuntimeError: the dataset's storage is not a :class:`~rl.data.TensorStorage`.
            TypeError: ``fn`` cannot be pickled and worker processes were asked for.

        Examples:
            >>> import tempfile
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from rl.data import ReplayBuffer, TensorStorage
            >>> from rl.data.datasets import BaseDatasetExperienceReplay
            >>> class InMemory(BaseDatasetExperienceReplay):
            ...     data_path = data_path_root = None  # nothing on disk
            ...     def _is_downloaded(self):
            ...         return True
            >>> data = TensorDict(x=torch.arange(4.0), batch_size=[4])
            >>> dataset = InMemory(storage=TensorStorage(data), batch_size=2)
            >>> with tempfile.TemporaryDirectory() as dest:
            ...     storage = dataset.preprocess(
            ...         lambda td: td.set("x2", td["x"] ** 2), num_workers=0, dest=dest
            ...     )
            ...     ReplayBuffer(storage=storage)[:]["x2"].tolist()
            [0.0, 1.0, 4.0, 9.0]
        """
        if not isinstance(self._storage, TensorStorage):
            raise RuntimeError(
                f"preprocess needs a TensorStorage, this dataset's storage is a "
                f"{type(self._storage).__name__}"
            )
        if num_workers != 0 and pool is None:
            try:
                pickle.dumps(fn)
            except (pickle.PicklingError, AttributeError, TypeError) as err:
                raise TypeError(
                    f"preprocess sends fn to worker processes, and {fn!r} cannot be pickled "
                    f"({err}); pass num_workers=0 to run it in this process, or a "
                    "module-level function"
                ) from err
        data = self._storage[:]
        if num_frames is None:
            num_frames = data.shape[0]
        data = data[:num_frames]
        with data.unlock_():
            example = fn(data[0].clone())
        out = example.expand(num_frames, *example.shape).memmap_like(dest)
        if num_workers == 0:
            # fn is batch-agnostic (tensordict's map also gives it chunks of items)
            size = data.shape[dim]
            step = chunksize or size
            for start in range(0, size, step):
                index = (slice(None),) * dim + (slice(start, start + step),)
                out[index].update_(fn(data[index].clone()))
        else:
            with data.unlock_():
                data.map(
                    fn=fn,
                    dim=dim,
                    num_workers=num_workers,
                    chunksize=chunksize,
                    num_chunks=num_chunks,
                    pool=pool,
                    generator=generator,
                    max_tasks_per_child=max_tasks_per_child,
                    worker_threads=worker_threads,
                    index_with_generator=index_with_generator,
                    pbar=pbar,
                    mp_start_method=mp_start_method,
                    out=out,
                )
        return TensorStorage(out)

    def delete(self) -> None:
        """Deletes the dataset's files (:attr:`data_path`) from disk."""
        shutil.rmtree(self.data_path)
