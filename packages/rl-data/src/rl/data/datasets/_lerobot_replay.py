"""``LeRobotExperienceReplay``: a local LeRobot dataset as a replay buffer in the VLA layout."""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import NonTensorStack, TensorDict, TensorDictBase, is_non_tensor
from tensordict.utils import NestedKey

from rl.data._video import VideoClipRef
from rl.data.datasets._dataset import BaseDatasetExperienceReplay, _default_root
from rl.data.datasets._lerobot import (
    _DEFAULT_KEY_MAP,
    _target_key,
    lerobot_columns_to_tensordict,
)
from rl.data.datasets._lerobot_snapshot import _LeRobotSnapshot
from rl.data.replay_buffers import (
    ImmutableDatasetWriter,
    Sampler,
    SliceSampler,
    TensorStorage,
    Writer,
)

logger = logging.getLogger(__name__)

_has_rl_envs = importlib.util.find_spec("rl.envs") is not None


def _hub_cache_snapshot(repo_id: str) -> Path | None:
    """The snapshot of ``repo_id`` in the Hugging Face hub cache, if one is there."""
    cache = os.environ.get("HF_HUB_CACHE")
    if cache is None:
        home = os.environ.get(
            "HF_HOME", os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
        )
        cache = os.path.join(home, "hub")
    folder = Path(cache) / f"datasets--{repo_id.replace('/', '--')}"
    ref = folder / "refs" / "main"
    if ref.is_file():
        snapshot = folder / "snapshots" / ref.read_text().strip()
        return snapshot if snapshot.is_dir() else None
    snapshots = sorted((folder / "snapshots").glob("*")) if folder.is_dir() else []
    return snapshots[0] if len(snapshots) == 1 else None


def _non_tensor_leaves(data: TensorDictBase) -> tuple[list[NestedKey], list[NestedKey]]:
    """The keys of the string entries and of the ``VideoClipRef`` entries of ``data``."""
    strings: list[NestedKey] = []
    videos: list[NestedKey] = []

    def walk(td: TensorDictBase, prefix: tuple) -> None:
        for key in td.keys():
            value = td.get(key)
            full = (*prefix, key) if prefix else key
            if isinstance(value, VideoClipRef):
                videos.append(full)
            elif is_non_tensor(value):
                strings.append(full)
            elif isinstance(value, TensorDictBase):
                walk(value, (*prefix, key))

    walk(data, ())
    return strings, videos


def _nested(codes: Any, vocabulary: list[str]) -> Any:
    if isinstance(codes, list):
        return [_nested(c, vocabulary) for c in codes]
    return vocabulary[codes]


class _StoredColumns:
    """Buffer transform: the stored codes of the non-tensor columns back into their values.

    A :class:`~rl.data.TensorStorage` holds tensors only, so each string column is stored
    as ``long`` codes into its vocabulary (a LeRobot dataset has a handful of tasks) and
    each video column as the ``file_id`` and ``frame_index`` of its
    :class:`~rl.data.VideoClipRef`. On the sample path, this puts back the strings and
    the references (which ``DecodeVideoTransform`` then decodes).
    """

    def __init__(self, strings: dict[NestedKey, list[str]], videos: dict[NestedKey, dict]) -> None:
        self.strings = strings
        self.videos = videos

    @staticmethod
    def encode(data: TensorDictBase, strings: list[NestedKey], videos: list[NestedKey]):
        """``data`` with tensors only, and the transform that restores what was encoded."""
        data = data.copy()
        vocabularies: dict[NestedKey, list[str]] = {}
        for key in strings:
            values = list(data.get(key).tolist())
            vocabulary = list(dict.fromkeys(values))
            index = {v: i for i, v in enumerate(vocabulary)}
            data.del_(key)
            data.set(key, torch.tensor([index[v] for v in values], dtype=torch.long))
            vocabularies[key] = vocabulary
        refs: dict[NestedKey, dict] = {}
        for key in videos:
            ref = data.get(key)
            paths = ref.source
            if isinstance(paths, str):
                sources, file_id = (paths,), torch.zeros_like(ref.frame_index)
            else:
                sources = tuple(dict.fromkeys(paths))
                position = {p: i for i, p in enumerate(sources)}
                file_id = torch.tensor([position[p] for p in paths], dtype=torch.long)
            refs[key] = {
                "sources": sources,
                "stream": ref.stream,
                "out_device": ref.out_device,
                "out_dtype": ref.out_dtype,
            }
            frame_index = ref.frame_index.reshape(-1)
            data.del_(key)
            data.set(
                key, TensorDict(frame_index=frame_index, file_id=file_id, batch_size=data.shape)
            )
        return data, _StoredColumns(vocabularies, refs)

    def __call__(self, data: TensorDictBase) -> TensorDictBase:
        for key, vocabulary in self.strings.items():
            codes = data.get(key, None)
            if isinstance(codes, torch.Tensor):
                data.del_(key)
                data.set(key, NonTensorStack.from_list(_nested(codes.tolist(), vocabulary)))
        for key, spec in self.videos.items():
            stored = data.get(key, None)
            if isinstance(stored, TensorDictBase) and not isinstance(stored, VideoClipRef):
                ref = VideoClipRef(
                    spec["sources"],
                    frame_index=stored.get("frame_index"),
                    file_id=stored.get("file_id"),
                    stream=spec["stream"],
                    out_device=spec["out_device"],
                    out_dtype=spec["out_dtype"],
                )
                data.del_(key)
                data.set(key, ref)
        return data


class LeRobotExperienceReplay(BaseDatasetExperienceReplay):
    """A `LeRobot <https://github.com/huggingface/lerobot>`_ dataset read from a local folder.

    LeRobot keeps robot-learning datasets as parquet files (state, action, indices, one
    row per frame) and one MP4 stream per camera. This reads such a folder (LeRobot
    formats v2.x and v3.x) into a read-only replay buffer in the VLA layout of
    :func:`lerobot_columns_to_tensordict`: ``("observation", "state")``, ``"action"``,
    ``"episode"``, ``"frame"``, ``"language_instruction"`` (the text of each frame's
    ``task_index``), and each camera at ``("observation", "image", camera)`` as a
    :class:`~rl.data.VideoClipRef`, decoded when sampled by
    :class:`rl.envs.DecodeVideoTransform` (the frame of a row is the one at its
    ``timestamp`` in the episode's video, as lerobot reads it).

    Only local data is read: rl does not download (TorchRL fetches the hub snapshot
    with ``huggingface_hub``). The dataset folder — the one holding ``meta/info.json``,
    as ``huggingface-cli download <repo_id> --repo-type dataset --local-dir <folder>``
    writes it — is looked for at ``root / repo_id``, then ``root /
    repo_id.replace("/", "_")``, then in the Hugging Face hub cache
    (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or ``~/.cache/huggingface/hub``). Nothing is
    converted or copied: the parquet files are read at construction (``pip install
    "rl-data[lerobot]"``) and the frames stay in the MP4 files. Parquet columns that are
    neither numbers, strings nor fixed-length lists of numbers (images stored inline,
    ``dtype: image``) are skipped with a warning.

    Rows go in a :class:`~rl.data.TensorStorage`, which holds tensors only: string
    columns are stored as codes into their vocabulary and cameras as the ``file_id`` /
    ``frame_index`` of their reference; the first transform of the sample path puts
    the strings and the references back (``rb.storage[:]`` shows the codes, ``rb[:]``
    and :meth:`sample` the values). The dataset's own ``index`` column is replaced in a
    sample by the buffer's ``"index"``, the row position (equal to the dataset's index
    when every episode is read).

    Args:
        repo_id (str): the dataset's hub id, e.g. ``"lerobot/pusht"``.

    Keyword Args:
        root (str or Path, optional): the folder holding local datasets. Default:
            ``~/.cache/rl/lerobot``.
        download (bool): accepted for TorchRL compatibility. Downloads are unavailable:
            with ``True`` and no local copy, the error says so. Default: ``True``.
        batch_size (int, optional): the batch size of :meth:`sample`.
        num_slices (int, optional): slices of an episode per batch (a
            :class:`~rl.data.SliceSampler` over ``"episode"``); not with ``slice_len``.
        slice_len (int, optional): the length of each slice; not with ``num_slices``.
        sampler (Sampler, optional): a sampler of your own (then ``num_slices`` and
            ``slice_len`` are ignored). Default: uniform sampling.
        writer (Writer, optional): default :class:`~rl.data.ImmutableDatasetWriter`.
        collate_fn (Callable, optional): merges the sampled items.
        transform (Callable, optional): run on each sample, after the video decoding.
        key_map (dict, optional): column name -> key, over the defaults of
            :func:`lerobot_columns_to_tensordict`.
        decode_video (bool): decode the camera references on sampling with
            :class:`rl.envs.DecodeVideoTransform` (needs rl-envs, which the
            ``rl-data[lerobot]`` extra installs; without it the references are kept,
            with a warning). Default: ``True``.
        rehydrate (bool): fill ``("next", "observation", ...)`` of a sample from the next
            row of its slice with :class:`rl.envs.NextStateReconstructor` (``NaN`` for
            floating-point entries, ``0`` for integer ones, where the next row is not
            the episode's next step). Default: ``False``.
        strict_length (bool): passed to the slice sampler. Default: ``True``.
        pin_memory (bool): pin sampled tensors. Default: ``False``.
        prefetch (int, optional): batches prepared ahead by a background thread.
        episodes (sequence of int, optional): read only these episode indices (as
            lerobot's ``LeRobotDataset(episodes=...)``; not a TorchRL argument).
            Default: every episode.

    Raises:
        RuntimeError: no local copy of ``repo_id`` (the message lists where it looked).
        FileNotFoundError: a file of the dataset is missing (named: ``meta/info.json``,
            the data parquet files, the episode metadata, a camera's video).
        ValueError: an unsupported ``codebase_version``; episode ids the dataset does not
            hold; ``num_slices`` with ``slice_len``.

    Examples:
        >>> import torch
        >>> from rl.data.datasets import LeRobotExperienceReplay
        >>> columns = {
        ...     "observation.state": torch.arange(8.0).view(8, 1),
        ...     "action": torch.zeros(8, 2),
        ...     "episode_index": torch.arange(2).repeat_interleave(4),
        ...     "task": ["pick"] * 4 + ["place"] * 4,
        ... }
        >>> rb = LeRobotExperienceReplay.from_columns(columns, slice_len=4, batch_size=8)
        >>> sample = rb.sample()
        >>> sample["action"].shape
        torch.Size([8, 2])
        >>> [set(w.tolist()) for w in sample["episode"].view(2, 4)] in (
        ...     [{0}, {0}], [{0}, {1}], [{1}, {0}], [{1}, {1}])
        True
    """

    def __init__(
        self,
        repo_id: str,
        *,
        root: str | Path | None = None,
        download: bool = True,
        batch_size: int | None = None,
        num_slices: int | None = None,
        slice_len: int | None = None,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable | None = None,
        transform: Callable | None = None,
        key_map: dict[str, NestedKey] | None = None,
        decode_video: bool = True,
        rehydrate: bool = False,
        strict_length: bool = True,
        pin_memory: bool = False,
        prefetch: int | None = None,
        episodes: Sequence[int] | None = None,
        _data: TensorDictBase | None = None,
    ) -> None:
        if num_slices is not None and slice_len is not None:
            raise ValueError(
                f"pass num_slices or slice_len, not both (got num_slices={num_slices}, "
                f"slice_len={slice_len})"
            )
        self.repo_id = repo_id
        self.key_map = key_map
        self.num_slices = num_slices
        self.slice_len = slice_len
        self.strict_length = strict_length
        self.episodes = None if episodes is None else list(episodes)
        self.root = _default_root("lerobot") if root is None else Path(root)
        self._snapshot_path = self._find_snapshot()
        if _data is None:
            if self._snapshot_path is None:
                raise RuntimeError(self._not_found_message(download))
            data = self._read_snapshot()
        else:
            data = _data
        key_map_all = {**_DEFAULT_KEY_MAP, **(key_map or {})}
        episode_key = _target_key("episode_index", key_map_all)

        string_keys, video_keys = _non_tensor_leaves(data)
        stored, restore = _StoredColumns.encode(data, string_keys, video_keys)
        storage = TensorStorage(stored)

        transforms: list[Callable] = [restore]
        decoded = False
        if decode_video and video_keys:
            if _has_rl_envs:
                from rl.envs import DecodeVideoTransform  # noqa: PLC0415 - the lerobot extra

                transforms.append(DecodeVideoTransform(in_keys=video_keys))
                decoded = True
            else:
                logger.warning(
                    "LeRobotExperienceReplay: the camera entries %s stay VideoClipRefs: "
                    'decoding them on sampling needs rl-envs (pip install "rl-data[lerobot]"); '
                    "pass decode_video=False to keep them without this warning",
                    video_keys,
                )
        if rehydrate:
            transforms.extend(
                self._rehydrate_transforms(data, video_keys, decoded, episode_key, key_map_all)
            )
        if transform is not None:
            transforms.append(transform)
        if sampler is None and (num_slices is not None or slice_len is not None):
            sampler = SliceSampler(
                num_slices=num_slices,
                slice_len=slice_len,
                traj_key=episode_key,
                strict_length=strict_length,
            )
        super().__init__(
            storage=storage,
            sampler=sampler,
            writer=ImmutableDatasetWriter() if writer is None else writer,
            collate_fn=collate_fn,
            batch_size=batch_size,
            transform=transforms,
            pin_memory=pin_memory,
            prefetch=prefetch,
        )

    # -- where the data is ------------------------------------------------------------
    def _candidates(self) -> list[Path]:
        folders = [self.root / self.repo_id, self.root / self.repo_id.replace("/", "_")]
        hub = _hub_cache_snapshot(self.repo_id)
        return folders + ([hub] if hub is not None else [])

    def _find_snapshot(self) -> Path | None:
        return next((p for p in self._candidates() if (p / "meta").is_dir()), None)

    def _not_found_message(self, download: bool) -> str:
        looked = ", ".join(str(p) for p in self._candidates())
        if download:
            return (
                f"LeRobot dataset {self.repo_id!r} has no local copy (looked in {looked}) and "
                "downloads are unavailable here: rl reads local LeRobot folders only. Put the "
                f"dataset at {self.root / self.repo_id} (e.g. `huggingface-cli download "
                f"{self.repo_id} --repo-type dataset --local-dir "
                f"{self.root / self.repo_id}` on a machine with network access) or pass root="
            )
        return (
            f"LeRobot dataset {self.repo_id!r} not found (looked in {looked}); pass the root "
            "folder that holds it"
        )

    @property
    def data_path_root(self) -> Path:
        """The dataset folder (the one holding ``meta/info.json``)."""
        if self._snapshot_path is not None:
            return self._snapshot_path
        return self.root / self.repo_id

    @property
    def data_path(self) -> Path:
        return self.data_path_root

    def _is_downloaded(self) -> bool:
        return self._snapshot_path is not None

    # -- reading ----------------------------------------------------------------------
    def _read_snapshot(self) -> TensorDictBase:
        snapshot = _LeRobotSnapshot(self._snapshot_path, episodes=self.episodes)
        self.fps = snapshot.fps
        self.codebase_version = snapshot.version
        columns: dict[str, Any] = dict(snapshot.columns)
        for key in snapshot.video_keys:
            paths, file_id, frame_index = snapshot.video_frames(key)
            columns[key] = VideoClipRef(paths, frame_index=frame_index, file_id=file_id)
        if "task" not in columns and "task_index" in columns and snapshot.tasks:
            unknown = sorted(set(columns["task_index"].tolist()) - set(snapshot.tasks))
            if unknown:
                raise ValueError(
                    f"task_index values {unknown} of the LeRobot dataset at "
                    f"{self._snapshot_path} have no entry in its tasks metadata"
                )
            columns["task"] = [snapshot.tasks[int(i)] for i in columns["task_index"].tolist()]
        return lerobot_columns_to_tensordict(columns, key_map=self.key_map)

    @staticmethod
    def _rehydrate_transforms(
        data: TensorDictBase,
        video_keys: list[NestedKey],
        decoded: bool,
        episode_key: NestedKey,
        key_map: dict[str, NestedKey],
    ) -> list[Callable]:
        """One ``NextStateReconstructor`` per fill value (``NaN`` for floats, ``0`` else)."""
        if not _has_rl_envs:
            raise ModuleNotFoundError(
                'rehydrate=True needs rl-envs (NextStateReconstructor): pip install "rl-data[lerobot]"'
            )
        from rl.envs import NextStateReconstructor  # noqa: PLC0415 - the lerobot extra

        if "observation" not in data.keys():
            logger.warning("LeRobotExperienceReplay: rehydrate=True but no 'observation' entry")
            return []
        leaves = set(data.keys(include_nested=True, leaves_only=True))
        if episode_key not in leaves:
            raise ValueError(
                f"rehydrate=True needs the episode entry {episode_key!r} to tell episodes "
                "apart, and the dataset has none"
            )
        frame_key = _target_key("frame_index", key_map)
        frame_key = frame_key if frame_key in leaves else None
        done_key = key_map.get("next.done", ("next", "done"))
        done_key = done_key if done_key in leaves else None
        refs = {k if isinstance(k, tuple) else (k,) for k in video_keys}
        floats: list[NestedKey] = []
        ints: list[NestedKey] = []
        for key in data.get("observation").keys(include_nested=True, leaves_only=True):
            full = ("observation", *(key if isinstance(key, tuple) else (key,)))
            if any(full[: len(ref)] == ref for ref in refs):
                continue  # a field of a video reference
            value = data.get(full)
            if isinstance(value, torch.Tensor):
                (floats if value.dtype.is_floating_point else ints).append(full)
        for ref in sorted(r for r in refs if r[0] == "observation"):
            if decoded:
                dtype = data.get(ref).out_dtype
                floating = isinstance(dtype, torch.dtype) and dtype.is_floating_point
                (floats if floating else ints).append(ref)
            else:
                logger.warning(
                    "LeRobotExperienceReplay: rehydrate=True cannot shift the undecoded "
                    "video entry %r; it is left out",
                    ref,
                )
        kwargs = dict(traj_key=episode_key, done_key=done_key, step_count_key=frame_key)
        out: list[Callable] = []
        if floats:
            out.append(NextStateReconstructor(floats, **kwargs))
        if ints:
            out.append(NextStateReconstructor(ints, fill_value=0, **kwargs))
        return out

    @classmethod
    def from_columns(
        cls,
        columns: dict[str, Any],
        *,
        repo_id: str = "local",
        key_map: dict[str, NestedKey] | None = None,
        **kwargs: Any,
    ) -> LeRobotExperienceReplay:
        """Builds the buffer from LeRobot-style columns already in memory (no files read).

        ``columns`` goes through :func:`lerobot_columns_to_tensordict`; ``kwargs`` are
        the constructor's (``batch_size``, ``slice_len``, ``transform``, ...).
        """
        data = lerobot_columns_to_tensordict(columns, key_map=key_map)
        return cls(repo_id, download=False, key_map=key_map, _data=data, **kwargs)
