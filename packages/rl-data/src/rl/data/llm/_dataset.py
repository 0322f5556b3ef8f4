"""Tokenized text datasets cached as memory-mapped TensorDicts, and their dataloader."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from rl.core.datafiles import read_rows
from rl.data.replay_buffers import ReplayBuffer, SamplerWithoutReplacement, TensorStorage

__all__ = [
    "TensorDictTokenizer",
    "TokenizedDatasetLoader",
    "create_infinite_iterator",
    "get_dataloader",
]

logger = logging.getLogger(__name__)

_has_datasets = importlib.util.find_spec("datasets") is not None
_SUFFIXES = (".jsonl", ".json", ".csv")
_EXCLUDED = ("text", "prompt", "label", "valid_sample")
_MAP_BATCH = 1000  # rows per tokenizer call, as ``datasets.Dataset.map(batched=True)``


def _require_datasets(what: str) -> None:
    if not _has_datasets:
        raise ImportError(
            f"{what} needs the Hugging Face `datasets` package (pip install datasets); "
            "no rl extra brings it. A .jsonl / .json / .csv file or a folder of split "
            "files is read without it."
        )


class TensorDictTokenizer:
    """Factory for a process function that tokenizes the text of an example.

    Args:
        tokenizer: a ``transformers`` tokenizer.
        max_length (int): the maximum sequence length.
        key (str, optional): the entry holding the text. Defaults to ``"text"``.
        padding (str, optional): the tokenizer's padding. Defaults to ``"max_length"``.
        truncation (bool, optional): truncate to ``max_length``. Defaults to ``True``.
        return_tensordict (bool, optional): return a ``TensorDict`` (else the tokenizer's
            own output). Defaults to ``True``.
        device (torch.device, optional): the device of the returned ``TensorDict``.

    Returns (when called on ``{key: text}``): a ``TensorDict`` with ``input_ids`` and
    ``attention_mask`` of shape ``[max_length]`` for one string, ``[B, max_length]``
    (batch size ``[B]``) for a list of ``B`` strings.

    Examples:
        >>> process = TensorDictTokenizer(tokenizer, max_length=6)
        >>> process({"text": ["ab", "abc"]})["input_ids"].shape
        torch.Size([2, 6])
        >>> process({"text": "ab"})["attention_mask"]
        tensor([1, 1, 0, 0, 0, 0])
    """

    def __init__(
        self,
        tokenizer,
        max_length,
        key="text",
        padding="max_length",
        truncation=True,
        return_tensordict=True,
        device=None,
    ):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.key = key
        self.padding = padding
        self.truncation = truncation
        self.return_tensordict = return_tensordict
        self.device = device

    def _text(self, sample: Mapping) -> str | list[str]:
        if self.key not in sample:
            raise KeyError(f"the sample has no entry {self.key!r} (key=); it has {sorted(sample)}")
        return sample[self.key]

    def __call__(self, sample):
        text = self._text(sample)
        tokens = self.tokenizer(
            text, max_length=self.max_length, padding=self.padding, truncation=self.truncation
        )
        if not self.return_tensordict:
            return tokens
        batch_size = [] if isinstance(text, str) else [len(text)]
        return TensorDict(
            {k: torch.as_tensor(v) for k, v in dict(tokens).items()},
            batch_size=batch_size,
            device=self.device,
        )


def _columns(rows: Any) -> dict[str, list]:
    """Columns of a dataset: a ``datasets.Dataset``, a ``{field: values}`` mapping, or rows."""
    if hasattr(rows, "to_dict") and hasattr(rows, "column_names"):  # datasets.Dataset
        return rows.to_dict()
    if isinstance(rows, Mapping):
        return {k: list(v) for k, v in rows.items()}
    rows = list(rows)
    keys = list(rows[0]) if rows else []
    return {k: [row[k] for row in rows] for k in keys}


def _is_split_mapping(source: Any) -> bool:
    """A ``{split: dataset}`` mapping, as opposed to ``{field: values}`` columns."""
    if not isinstance(source, Mapping) or not source:
        return False
    first = next(iter(source.values()))
    if hasattr(first, "column_names"):  # datasets.Dataset
        return True
    return isinstance(first, (list, tuple)) and bool(first) and isinstance(first[0], Mapping)


def _num_rows(columns: Mapping[str, list]) -> int:
    return len(next(iter(columns.values()))) if columns else 0


class TokenizedDatasetLoader:
    """Loads a local text dataset, tokenizes it and caches a memory-mapped copy of it.

    As TorchRL's, except that nothing downloads: ``dataset_name`` is a ``.jsonl`` /
    ``.json`` / ``.csv`` file, a folder holding ``<split>.jsonl`` (or ``.json`` /
    ``.csv``), a saved ``datasets`` folder with ``from_disk=True``, or a dataset already
    in memory (a ``datasets.Dataset`` / ``DatasetDict``, a list of row dicts, or a
    ``{split: rows}`` mapping). The tokenizer is ``tokenizer_class.from_pretrained(
    tokenizer_model_name)`` (a local folder works) or the ``tokenizer`` given; its
    ``pad_token`` is set to its ``eos_token``.

    Args:
        split (str): the split, e.g. ``"train"`` or ``"valid"``.
        max_length (int): the maximum sequence length.
        dataset_name: the local dataset (see above).
        tokenizer_fn (callable): the tokenizing recipe, such as
            :class:`TensorDictTokenizer`, called as ``tokenizer_fn(tokenizer,
            max_length=..., return_tensordict=False)``.
        pre_tokenization_hook (callable, optional): maps the dataset (rows) before
            tokenization, e.g. to filter rows.
        root_dir (path, optional): where the cache is written. Defaults to
            ``"$HOME/.cache/rl/data"``.
        from_disk (bool, optional): read ``dataset_name`` with ``datasets.load_from_disk``.
            Defaults to ``False``.
        valid_size (int, optional): a split starting with ``"valid"`` keeps its first
            ``valid_size`` rows. Defaults to ``2000``.
        num_workers (int, optional): kept for TorchRL's signature; rows are tokenized
            in this process, ``1000`` per tokenizer call. Defaults to
            ``max(os.cpu_count() // 2, 1)``.
        tokenizer_class (type, optional): defaults to ``transformers.AutoTokenizer``.
        tokenizer_model_name (str, optional): defaults to ``"gpt2"``.
        tokenizer (optional): a tokenizer instance, used instead of loading one.

    The cache is ``<root_dir>/<dataset name>-<digest>/<split>/<max_length>/``, the digest
    covering the data, the tokenizer and the recipe: a later :meth:`load` of the same
    dataset reads it back without tokenizing, another dataset never does.

    Examples:
        >>> rows = [{"text": "ab"}, {"text": "abc"}]
        >>> loader = TokenizedDatasetLoader(
        ...     "train", 8, rows, TensorDictTokenizer, root_dir=tmpdir, tokenizer=tokenizer)
        >>> data = loader.load()
        >>> data["input_ids"].shape, data.is_memmap()
        (torch.Size([2, 8]), True)
    """

    def __init__(
        self,
        split,
        max_length,
        dataset_name,
        tokenizer_fn: type[TensorDictTokenizer],
        pre_tokenization_hook=None,
        root_dir=None,
        from_disk=False,
        valid_size: int = 2000,
        num_workers: int | None = None,
        tokenizer_class=None,
        tokenizer_model_name=None,
        *,
        tokenizer=None,
    ):
        self.split = split
        self.max_length = max_length
        self.dataset_name = dataset_name
        self.tokenizer_fn = tokenizer_fn
        self.pre_tokenization_hook = pre_tokenization_hook
        self.root_dir = root_dir
        self.from_disk = from_disk
        self.valid_size = valid_size
        if num_workers is None:
            num_workers = max((os.cpu_count() or 2) // 2, 1)
        self.num_workers = num_workers
        if tokenizer is None:
            if tokenizer_class is None:
                from transformers import AutoTokenizer

                tokenizer_class = AutoTokenizer
            if tokenizer_model_name is None:
                tokenizer_model_name = "gpt2"
            self.make_tokenizer(
                tokenizer_class=tokenizer_class, tokenizer_model_name=tokenizer_model_name
            )
        else:
            tokenizer.pad_token = tokenizer.eos_token
            self.tokenizer = tokenizer

    def make_tokenizer(self, *, tokenizer_class, tokenizer_model_name):
        tokenizer = tokenizer_class.from_pretrained(tokenizer_model_name)
        tokenizer.pad_token = tokenizer.eos_token
        self.tokenizer = tokenizer

    def _cache_name(self) -> str:
        """A readable stem and a digest of what the cache depends on.

        The digest covers the data (a file's or folder's resolved path; an in-memory
        dataset's fingerprint or contents), the tokenizer
        (its name and vocabulary size), the tokenizer class and ``from_disk``, so that two
        datasets never share a cache.
        """
        name = self.dataset_name
        if isinstance(name, (str, os.PathLike)):
            path = Path(name).expanduser().resolve()
            stem = path.name.split("-")[0].split(".")[0] or "dataset"
            content = str(path)  # the cache outlives its source, as TorchRL's
        else:
            stem = type(name).__name__.lower()
            content = getattr(name, "_fingerprint", None) or repr(name)
        tokenizer = self.tokenizer
        key = repr(
            (
                content,
                getattr(tokenizer, "name_or_path", type(tokenizer).__name__),
                len(tokenizer) if hasattr(tokenizer, "__len__") else None,
                getattr(self.tokenizer_fn, "__qualname__", repr(self.tokenizer_fn)),
                self.from_disk,
                self.valid_size,
            )
        )
        return f"{stem}-{hashlib.sha1(key.encode()).hexdigest()[:16]}"

    def load(self):
        """Reads the memory-mapped cache if it exists, else builds and writes it.

        A cache counts once its write completed (a marker file written last), so an
        interrupted write is rebuilt rather than read back.
        """
        root_dir = self.root_dir
        if root_dir is None:
            root_dir = Path(os.environ.get("HOME", ".")) / ".cache/rl/data/"
        os.makedirs(root_dir, exist_ok=True)
        data_dir = Path(root_dir) / self._cache_name()
        data_dir_total = data_dir / self.split / str(self.max_length)
        complete = data_dir / self.split / f"{self.max_length}.complete"
        logger.info("Looking for data in %s", data_dir_total)
        if data_dir_total.exists():
            if complete.exists():
                return TensorDict.load_memmap(data_dir_total)
            shutil.rmtree(data_dir_total)  # an interrupted write
        dataset = self._tokenize(self._load_dataset())
        prefix = (self.split, str(self.max_length))
        result = self.dataset_to_tensordict(
            dataset, data_dir=data_dir, prefix=prefix, valid_mask_key="valid_sample"
        )
        complete.touch()
        return result[prefix]

    def _load_dataset(self):
        """The rows of the split, after ``valid_size`` and the pre-tokenization hook."""
        source = self.dataset_name
        split = self.split
        if self.from_disk:
            _require_datasets("from_disk=True")
            from datasets import load_from_disk

            source = load_from_disk(str(source))
        elif isinstance(source, (str, os.PathLike)):
            path = Path(source)
            if path.is_dir():
                files = [path / f"{split}{s}" for s in _SUFFIXES if (path / f"{split}{s}").exists()]
                if not files:
                    raise FileNotFoundError(
                        f"dataset folder {path} has no {split}.jsonl / .json / .csv for split={split!r}"
                    )
                source = read_rows(files[0], _SUFFIXES)
            elif path.is_file():
                source = read_rows(path, _SUFFIXES)
            else:
                raise ValueError(
                    f"dataset_name={str(source)!r} is not a local file or folder: nothing "
                    "downloads at run time; pass a .jsonl / .json / .csv file, a folder of "
                    "split files, or a dataset in memory"
                )
        if _is_split_mapping(source):  # a DatasetDict or {split: rows}
            if split not in source:
                raise ValueError(
                    f"split={split!r} is not in the dataset, which has {sorted(source)}"
                )
            source = source[split]
        if split.startswith("valid"):
            if hasattr(source, "select"):
                source = source.select(range(min(self.valid_size, len(source))))
            else:
                columns = _columns(source)
                source = {k: v[: self.valid_size] for k, v in columns.items()}
        if self.pre_tokenization_hook is not None:
            source = self.pre_tokenization_hook(source)
        return source

    def _tokenize(self, dataset, excluded_features: Sequence[str] | None = None):
        """Tokenizes the rows (``1000`` per call) into a TensorDict of shape ``[N]``.

        Args:
            dataset: the rows (a ``datasets.Dataset``, a list of dicts or columns).
            excluded_features (sequence of str, optional): entries dropped after
                tokenization. Defaults to ``{"text", "prompt", "label", "valid_sample"}``;
                rows whose ``"valid_sample"`` is ``False`` are dropped first.

        Entries that are not numbers (other text columns) are dropped too.
        """
        if excluded_features is None:
            excluded_features = _EXCLUDED
        columns = _columns(dataset)
        n = _num_rows(columns)
        if n == 0:
            raise ValueError(f"split={self.split!r} of the dataset holds no rows to tokenize")
        process = self.tokenizer_fn(
            self.tokenizer, max_length=self.max_length, return_tensordict=False
        )
        merged: dict[str, list] = {k: list(v) for k, v in columns.items()}
        for start in range(0, n, _MAP_BATCH):
            chunk = {k: v[start : start + _MAP_BATCH] for k, v in columns.items()}
            for key, values in dict(process(chunk)).items():
                merged.setdefault(key, [None] * n)[start : start + len(values)] = list(values)
        out = {}
        for key, values in merged.items():
            try:
                out[key] = torch.as_tensor(values)
            except (TypeError, ValueError, RuntimeError):
                logger.debug("entry %r is not numeric: not kept in the tokenized dataset", key)
        td = TensorDict(out, batch_size=[n])
        if "valid_sample" in td.keys():
            td = td[td.get("valid_sample").bool()]
        return td.exclude(*excluded_features)

    @staticmethod
    def dataset_to_tensordict(
        dataset,
        data_dir: Path,
        prefix: NestedKey = None,
        features: Sequence[str] = None,
        batch_dims=1,
        valid_mask_key=None,
    ):
        """Writes a dataset to ``data_dir`` as a memory-mapped TensorDict under ``prefix``.

        Args:
            dataset: a ``TensorDict``, or a dataset whose columns ``dataset[key]`` for
                ``key`` in ``features`` (default: ``dataset.features``) become tensors.
            data_dir (path): the folder written.
            prefix (NestedKey, optional): where the data sits in the result. Defaults to
                ``()``.
            features (sequence of str, optional): the columns kept.
            batch_dims (int, optional): batch dimensions of the result. Defaults to ``1``.
            valid_mask_key (NestedKey, optional): a boolean entry; rows where it is
                ``False`` are dropped.

        Returns: a TensorDict of memory-mapped tensors with the data under ``prefix``.
        """
        if not isinstance(dataset, TensorDictBase):
            if features is None:
                features = dataset.features
            data = {key: torch.as_tensor(dataset[key]) for key in features}
            out = TensorDict(data, batch_size=[])
            out.auto_batch_size_(batch_dims=batch_dims)
        else:
            out = dataset
        if valid_mask_key is not None and valid_mask_key in out.keys(include_nested=True):
            out = out[out.get(valid_mask_key).bool()]
        if prefix is None:
            prefix = ()
        out = TensorDict({prefix: out}) if prefix != () else out
        out.memmap_(prefix=data_dir)
        return out


def create_infinite_iterator(iterator: Iterable) -> Iterator:
    """Iterates over ``iterator`` again and again, without end."""
    while True:
        yield from iterator


def get_dataloader(
    batch_size: int,
    block_size: int,
    tensorclass_type: type,
    device: torch.device,
    dataset_name: str | None = None,
    infinite: bool = True,
    prefetch: int = 0,
    split: str = "train",
    root_dir: str | None = None,
    from_disk: bool = False,
    num_workers: int | None = None,
    *,
    tokenizer=None,
):
    """Loads a dataset with ``tensorclass_type.from_dataset`` and batches it.

    Args:
        batch_size (int): items per batch.
        block_size (int): the maximum sequence length (``max_length`` of ``from_dataset``).
        tensorclass_type (type): a tensorclass with a ``from_dataset(split=, dataset_name=,
            max_length=, root_dir=, from_disk=, num_workers=)`` classmethod, such as
            :class:`PairwiseDataset` or :class:`PromptData`.
        device (torch.device): where batches are moved.
        dataset_name (optional): the local dataset (see :class:`TokenizedDatasetLoader`).
        infinite (bool, optional): return an endless iterator (else the replay buffer,
            one pass per iteration). Defaults to ``True``.
        prefetch (int, optional): batches prefetched in a thread. Defaults to ``0``.
        split (str, optional): the split. Defaults to ``"train"``.
        root_dir (path, optional): where the cache is written.
        from_disk (bool, optional): read with ``datasets.load_from_disk``.
        num_workers (int, optional): passed to ``from_dataset``.
        tokenizer (optional): a tokenizer instance, passed to ``from_dataset`` when given.

    Batches are drawn without replacement, the last incomplete one dropped.

    Examples:
        >>> from rl.data.llm import PromptData
        >>> rows = [{"prompt": "ab", "label": "c"}, {"prompt": "d", "label": "ef"}]
        >>> loader = get_dataloader(2, 16, PromptData, "cpu",
        ...     dataset_name={"train": rows}, root_dir=tmpdir, tokenizer=tokenizer)
        >>> next(loader).input_ids.shape
        torch.Size([2, 16])
    """
    extra = {} if tokenizer is None else {"tokenizer": tokenizer}
    data = tensorclass_type.from_dataset(
        split=split,
        dataset_name=dataset_name,
        max_length=block_size,
        root_dir=root_dir,
        from_disk=from_disk,
        num_workers=num_workers,
        **extra,
    )
    out = ReplayBuffer(
        storage=TensorStorage(data),
        collate_fn=_ToDevice(device),
        sampler=SamplerWithoutReplacement(drop_last=True),
        batch_size=batch_size,
        prefetch=prefetch,
    )
    if infinite:
        return create_infinite_iterator(out)
    return out


class _ToDevice:
    """Collate: a memory-mapped batch as plain tensors on ``device``."""

    def __init__(self, device):
        self.device = device

    def __call__(self, batch):
        return batch.as_tensor().to(self.device, non_blocking=True)
