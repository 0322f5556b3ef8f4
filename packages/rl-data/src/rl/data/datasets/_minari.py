"""``MinariExperienceReplay``: a Minari dataset as a replay buffer of TED transitions."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rl.core import Binary, Bounded, Categorical, Composite, MultiCategorical, Unbounded
from rl.data.datasets._dataset import BaseDatasetExperienceReplay, _default_root
from rl.data.replay_buffers import ImmutableDatasetWriter, Sampler, TensorStorage, Writer

_has_minari = importlib.util.find_spec("minari") is not None
_INSTALL = 'pip install "rl-data[minari]"'
# a download that cannot reach its server fails within this many seconds instead of hanging
_DOWNLOAD_TIMEOUT_S = 30.0
# the server is probed first: minari's Hugging Face back-end retries an unreachable host
# for about 25 s before it gives up
_PROBE_TIMEOUT_S = 5.0
_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
_METADATA_FILE = "env_metadata.json"


def _import_minari():
    if not _has_minari:
        raise ImportError(f"MinariExperienceReplay needs the minari library: {_INSTALL}")
    import minari  # noqa: PLC0415 - optional back-end, imported where used

    return minari


@contextmanager
def _minari_datasets_path(path: str | Path) -> Iterator[None]:
    """Points minari at ``path`` (``MINARI_DATASETS_PATH``) for the duration of the block."""
    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(path)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = previous


@contextmanager
def _socket_timeout(seconds: float) -> Iterator[None]:
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def _local_minari_root() -> Path:
    """Minari's own dataset folder: ``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``."""
    path = os.environ.get("MINARI_DATASETS_PATH")
    return Path(path) if path else Path(os.path.expanduser("~")) / ".minari" / "datasets"


class _ClassProperty:
    def __init__(self, fget: Callable[[type], Any]) -> None:
        self.fget = fget
        self.__doc__ = fget.__doc__

    def __get__(self, instance: Any, owner: type) -> Any:
        return self.fget(owner)


def _remote_address(dataset_id: str) -> tuple[str, int] | None:
    """The host and port a minari download of ``dataset_id`` connects to first, for the
    remotes minari knows (``hf://``, the default, and ``gcp://``)."""
    remote = dataset_id if "://" in dataset_id else os.environ.get("MINARI_REMOTE", "hf://")
    kind = remote.split("://", 1)[0]
    if kind == "hf":
        url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    elif kind == "gcp":
        url = urlparse("https://storage.googleapis.com")
    else:
        return None
    if url.hostname is None:
        return None
    return url.hostname, url.port or (80 if url.scheme == "http" else 443)


def _probe_remote(dataset_id: str) -> OSError | None:
    """Why Minari's server cannot be reached (a DNS or connection error), or ``None``.

    Skipped behind a proxy (the direct connection says nothing about the proxied one).
    """
    address = _remote_address(dataset_id)
    if address is None or any(os.environ.get(v) for v in _PROXY_VARIABLES):
        return None
    try:
        socket.create_connection(address, timeout=_PROBE_TIMEOUT_S).close()
    except OSError as err:
        return OSError(f"{address[0]}:{address[1]} is unreachable: {err}")
    return None


def _listing_failed(err: BaseException) -> RuntimeError:
    return RuntimeError(
        f"could not list Minari's remote datasets ({type(err).__name__}: {err}); "
        "downloads are unavailable without network access to Minari's server"
    )


def _download_failed(dataset_id: str, err: BaseException) -> RuntimeError:
    return RuntimeError(
        f"could not download the Minari dataset {dataset_id!r} ({type(err).__name__}: {err}); "
        "downloads are unavailable without network access to Minari's server (and minari's "
        "remote back-end, e.g. huggingface_hub). To use a dataset made or copied locally, "
        "pass load_from_local_minari=True (it reads $MINARI_DATASETS_PATH, by default "
        "~/.minari/datasets)"
    )


class MinariExperienceReplay(BaseDatasetExperienceReplay):
    """A `Minari <https://minari.farama.org/>`_ dataset as a read-only replay buffer.

    The episodes are converted once into TorchRL's TED layout, one row per transition,
    and kept as a memory-mapped TensorDict under ``<root>/<dataset_id>``; later
    constructions read that copy without minari. Each row holds:

    - ``"observation"`` and ``("next", "observation")``: the observation the action was
      taken in and the one that followed (a nested TensorDict for ``Dict`` spaces);
    - ``"action"``;
    - ``("next", "reward")``, ``("next", "terminated")``, ``("next", "truncated")`` and
      ``("next", "done")`` (their ``or``), each ``[N, 1]``;
    - ``"episode"``: the Minari episode id;
    - ``"info"`` and ``("next", "info")`` when the episodes stored infos (an info entry
      without its reset value is given a zero there, as TorchRL does).

    Dtypes are the stored ones (Minari keeps rewards as ``float64``). Text data is
    dropped (as in TorchRL). :attr:`metadata` holds the dataset's description, with its
    ``"observation_space"`` and ``"action_space"`` as specs (:class:`~rl.core.Bounded`,
    :class:`~rl.core.Categorical`, :class:`~rl.core.Composite`, ...).

    Where the data comes from: with ``load_from_local_minari=True``, Minari's local folder
    (``$MINARI_DATASETS_PATH``, by default ``~/.minari/datasets``), read with minari's own
    reader, so both its HDF5 and Arrow formats work. Otherwise the dataset is downloaded
    with ``minari.download_dataset``, which needs network access and minari's remote
    back-end; where that fails (no network) the error names the dataset and says so. The
    server is probed first (a connection with a 5 s timeout, skipped behind a proxy), so
    that a machine without network fails at once rather than after minari's retries;
    sockets opened by the download itself time out after 30 s.

    Args:
        dataset_id: the Minari dataset id (e.g. ``"mujoco/hopper/expert-v0"``).
        batch_size: the default batch size of :meth:`sample`.

    Keyword Args:
        root: the folder of the converted datasets (default ``~/.cache/rl/minari``; TorchRL
            uses ``~/.cache/torchrl/minari``, with the same layout).
        download: ``True`` downloads and converts the dataset unless it is under ``root``
            already; ``"force"`` converts it again, replacing the copy under ``root``;
            ``False`` only reads the copy under ``root``.
        sampler: default :class:`~rl.data.RandomSampler`.
        writer: default :class:`~rl.data.ImmutableDatasetWriter` (the dataset is read-only).
        collate_fn, pin_memory, prefetch, transform: as :class:`~rl.data.ReplayBuffer`.
        split_trajs: store the data as ``[n_episodes, max_len]``, each episode a row padded
            with zeros, with a ``"mask"`` of its valid steps and ``"traj_ids"``
            (``0 .. n_episodes - 1``); kept under ``<root>/<dataset_id>_split``.
        load_from_local_minari: convert the dataset from Minari's local folder instead of
            downloading it (done at every construction, so changes to it are picked up).

    Raises:
        ImportError: minari is needed (a conversion) and not installed.
        FileNotFoundError: ``load_from_local_minari`` and the dataset is not in Minari's
            folder; or ``download=False`` and it is not under ``root``.
        RuntimeError: the download failed (no network, unknown dataset id, ...).
        ValueError: ``download`` is not ``True``, ``False`` or ``"force"``.

    Examples:
        >>> import os, tempfile, warnings
        >>> from unittest import mock
        >>> import gymnasium as gym
        >>> import minari
        >>> import numpy as np
        >>> from minari.data_collector import EpisodeBuffer
        >>> from rl.data.datasets import MinariExperienceReplay
        >>> episode = EpisodeBuffer(
        ...     id=0,
        ...     observations=np.arange(12, dtype=np.float32).reshape(3, 4),  # 2 steps
        ...     actions=np.array([0, 1]),
        ...     rewards=np.array([1.0, 1.0]),
        ...     terminations=np.array([False, True]),
        ...     truncations=np.array([False, False]),
        ... )
        >>> with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(
        ...     os.environ, MINARI_DATASETS_PATH=os.path.join(tmp, "minari")
        ... ):
        ...     with warnings.catch_warnings():
        ...         warnings.simplefilter("ignore")  # minari asks for an author, a URL, ...
        ...         _ = minari.create_dataset_from_buffers(
        ...             "cartpole/tiny-v0", [episode], env=gym.make("CartPole-v1")
        ...         )
        ...     data = MinariExperienceReplay(
        ...         "cartpole/tiny-v0", batch_size=2, root=os.path.join(tmp, "rl"),
        ...         load_from_local_minari=True,
        ...     )
        ...     print(len(data), data[:]["next", "observation"][:, 0].tolist())
        ...     print(data[:]["next", "done"].squeeze(-1).tolist())
        ...     print(data.metadata["action_space"])
        2 [4.0, 8.0]
        [False, True]
        Categorical(shape=torch.Size([]), n=2, device=cpu, dtype=torch.int64)
    """

    def __init__(
        self,
        dataset_id: str,
        batch_size: int,
        *,
        root: str | Path | None = None,
        download: bool | str = True,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable | None = None,
        split_trajs: bool = False,
        load_from_local_minari: bool = False,
    ) -> None:
        if download not in (True, False, "force"):
            raise ValueError(f"download is True, False or 'force', got {download!r}")
        self.dataset_id = dataset_id
        if root is None:
            root = _default_root("minari")
        self.root = root
        self.split_trajs = split_trajs
        self.download = download
        self.load_from_local_minari = load_from_local_minari

        if (
            download == "force"
            or (download and not self._is_downloaded())
            or load_from_local_minari
        ):
            self._convert()
        elif not self._is_downloaded():
            raise FileNotFoundError(
                f"the Minari dataset {dataset_id!r} is not under root ({self.data_path_root} "
                "does not exist); pass download=True, or load_from_local_minari=True for a "
                "dataset in Minari's local folder"
            )
        elif split_trajs and not self.data_path.exists():
            self._make_split()
        self._load_metadata()
        data = TensorDict.load_memmap(self.data_path)
        super().__init__(
            storage=TensorStorage(data),
            sampler=sampler,
            writer=writer if writer is not None else ImmutableDatasetWriter(),
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            batch_size=batch_size,
            transform=transform,
        )

    @_ClassProperty
    def available_datasets(cls) -> list[str]:
        """The ids of the datasets on Minari's server (needs network access)."""
        minari = _import_minari()
        unreachable = _probe_remote("")
        if unreachable is not None:
            raise _listing_failed(unreachable)
        try:
            with _socket_timeout(_DOWNLOAD_TIMEOUT_S):
                return list(minari.list_remote_datasets().keys())
        except Exception as err:  # noqa: BLE001 - any failure of the remote listing
            raise _listing_failed(err) from err

    def _is_downloaded(self) -> bool:
        return self.data_path_root.exists()

    @property
    def data_path(self) -> Path:
        if self.split_trajs:
            return Path(self.root) / (self.dataset_id + "_split")
        return self.data_path_root

    @property
    def data_path_root(self) -> Path:
        return Path(self.root) / self.dataset_id

    @property
    def metadata_path(self) -> Path:
        return self.data_path_root / _METADATA_FILE

    # ------------------------------------------------------------------ conversion

    def _convert(self) -> None:
        """Reads the Minari dataset (local or downloaded) and writes its TED copy."""
        minari = _import_minari()
        if self.load_from_local_minari:
            source = _local_minari_root()
            if not (source / self.dataset_id / "data").exists():
                raise FileNotFoundError(
                    f"the Minari dataset {self.dataset_id!r} is not in Minari's local folder "
                    f"({source / self.dataset_id / 'data'} does not exist; the folder is "
                    "$MINARI_DATASETS_PATH, by default ~/.minari/datasets)"
                )
            with _minari_datasets_path(source):
                self._write(minari.load_dataset(self.dataset_id))
            return
        unreachable = _probe_remote(self.dataset_id)
        if unreachable is not None:
            raise _download_failed(self.dataset_id, unreachable)
        with tempfile.TemporaryDirectory() as tmp, _minari_datasets_path(tmp):
            try:
                with _socket_timeout(_DOWNLOAD_TIMEOUT_S):
                    minari.download_dataset(self.dataset_id)
            except Exception as err:  # noqa: BLE001 - every download failure gets one message
                raise _download_failed(self.dataset_id, err) from err
            self._write(minari.load_dataset(self.dataset_id))

    def _write(self, dataset: Any) -> None:
        """Writes ``dataset`` (a ``minari.MinariDataset``) and its metadata under ``root``."""
        episode_ids = sorted(int(i) for i in dataset.episode_indices)
        if not episode_ids:
            raise ValueError(f"the Minari dataset {self.dataset_id!r} has no episodes")
        first = _episode_to_ted(next(iter(dataset.iterate_episodes([episode_ids[0]]))))
        total = int(dataset.total_steps)
        metadata = _dataset_metadata(dataset, self.dataset_id)

        def write(folder: Path) -> None:
            data = first[0].expand(total).memmap_like(folder)
            start = 0
            for episode in dataset.iterate_episodes(episode_ids):
                ted = _episode_to_ted(episode)
                if set(ted.keys(True, True)) != set(first.keys(True, True)):
                    raise RuntimeError(
                        f"episode {episode.id} of the Minari dataset {self.dataset_id!r} has "
                        f"the entries {sorted(map(str, ted.keys(True, True)))}, episode "
                        f"{episode_ids[0]} has {sorted(map(str, first.keys(True, True)))}"
                    )
                data[start : start + ted.shape[0]].update_(ted)
                start += ted.shape[0]
            if start != total:
                raise RuntimeError(
                    f"the Minari dataset {self.dataset_id!r} says it has {total} steps, its "
                    f"episodes hold {start}"
                )
            with open(folder / _METADATA_FILE, "w") as file:
                json.dump(metadata, file)

        # a split of the previous copy, whether or not this construction splits: a split
        # left behind would be read by a later split_trajs load as this conversion's
        split_path = Path(self.root) / (self.dataset_id + "_split")
        if split_path.exists():
            shutil.rmtree(split_path)
        _write_folder(self.data_path_root, write)
        if self.split_trajs:
            self._make_split()

    def _make_split(self) -> None:
        data = TensorDict.load_memmap(self.data_path_root)
        split = _split_episodes(data.to_tensordict())
        _write_folder(self.data_path, lambda folder: split.memmap_(folder))

    def _load_metadata(self) -> None:
        with open(self.metadata_path) as file:
            self.metadata = json.load(file)
        for key in ("observation_space", "action_space"):
            self.metadata[key] = _spec_from_dict(self.metadata[key])


def _write_folder(target: Path, write: Callable[[Path], Any]) -> None:
    """Runs ``write(folder)`` on a staging folder, then renames it to ``target``: an
    interrupted conversion leaves no partial dataset that a later load would take."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        write(staging)
        if target.exists():
            shutil.rmtree(target)
        os.rename(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _is_numeric(array: np.ndarray) -> bool:
    return array.dtype.kind in "biuf"


def _tree(value: Any) -> torch.Tensor | TensorDict | None:
    """A numpy array -> tensor; a dict of them -> TensorDict (leading dim as batch); text
    and other non-numeric data -> None (dropped)."""
    if isinstance(value, dict):
        items = {k: _tree(v) for k, v in value.items()}
        items = {k: v for k, v in items.items() if v is not None}
        if not items:
            return None
        lengths = {v.shape[0] for v in items.values()}
        if len(lengths) != 1:
            return TensorDict(items, batch_size=[])  # infos of two lengths; see _split_info
        return TensorDict(items, batch_size=[lengths.pop()])
    array = np.asarray(value)
    if not _is_numeric(array):
        return None
    return torch.as_tensor(array)


def _split_info(info: TensorDict, steps: int, episode_id: int) -> TensorDict:
    """Infos as ``steps + 1`` values (reset, then each step): an entry with ``steps``
    values lacks the reset one and gets a zero there."""
    out = {}
    for key, value in info.items():
        if isinstance(value, TensorDictBase) and value.batch_size == torch.Size([]):
            value = _split_info(value, steps, episode_id)
        elif value.shape[0] == steps:
            value = torch.cat([torch.zeros_like(value[:1]), value], 0)
        elif value.shape[0] != steps + 1:
            raise RuntimeError(
                f"episode {episode_id}: info entry {key!r} has {value.shape[0]} values, "
                f"expected {steps + 1} (reset and steps) or {steps}"
            )
        out[key] = value
    return TensorDict(out, batch_size=[steps + 1])


def _episode_to_ted(episode: Any) -> TensorDict:
    """One Minari episode (``minari.EpisodeData``) as ``[steps]`` TED transitions."""
    rewards = torch.as_tensor(np.asarray(episode.rewards))
    steps = rewards.shape[0]
    observations = _tree(episode.observations)
    got = None if observations is None or observations.ndim == 0 else observations.shape[0]
    if got != steps + 1:
        raise RuntimeError(
            f"episode {episode.id}: {got} observations, expected one more than the {steps} rewards"
        )
    terminated = torch.as_tensor(np.asarray(episode.terminations)).bool().unsqueeze(-1)
    truncated = torch.as_tensor(np.asarray(episode.truncations)).bool().unsqueeze(-1)
    ted = TensorDict(
        {
            "episode": torch.full((steps,), int(episode.id), dtype=torch.int64),
            "observation": observations[:-1],
            "action": _tree(episode.actions),
            "next": {
                "observation": observations[1:],
                "reward": rewards.unsqueeze(-1),
                "terminated": terminated,
                "truncated": truncated,
                "done": terminated | truncated,
            },
        },
        batch_size=[steps],
    )
    infos = _tree(episode.infos) if episode.infos else None
    if infos is not None and not infos.is_empty():
        infos = _split_info(infos, steps, int(episode.id))
        ted["info"] = infos[:-1]
        ted["next", "info"] = infos[1:]
    return ted


def _split_episodes(data: TensorDict) -> TensorDict:
    """``[N]`` transitions -> ``[n_episodes, max_len]``, zero-padded, with ``"mask"`` and
    ``"traj_ids"`` (episodes are stored contiguously, in id order)."""
    ids = data["episode"]
    new = torch.ones_like(ids, dtype=torch.bool)
    new[1:] = ids[1:] != ids[:-1]
    run = new.cumsum(0) - 1
    starts = new.nonzero().squeeze(-1)
    lengths = torch.diff(starts, append=torch.tensor([ids.numel()]))
    n_traj, max_len = starts.numel(), int(lengths.max())
    offset = torch.arange(ids.numel()) - starts[run]
    data = data.clone(False)
    data["traj_ids"] = run

    def pad(value: torch.Tensor) -> torch.Tensor:
        out = value.new_zeros((n_traj, max_len, *value.shape[1:]))
        out[run, offset] = value
        return out

    out = data.apply(pad, batch_size=[n_traj, max_len])
    mask = torch.zeros(n_traj, max_len, dtype=torch.bool)
    mask[run, offset] = True
    out["mask"] = mask
    return out


# ---------------------------------------------------------------------- spaces and specs


def _space_to_dict(space: Any) -> dict | None:
    """A gymnasium space as plain JSON data (``None`` for text spaces, which are dropped)."""
    from gymnasium import spaces  # noqa: PLC0415 - minari's dependency, only with it

    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "subspaces": {k: _space_to_dict(v) for k, v in space.items()}}
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "low": space.low.tolist(),
            "high": space.high.tolist(),
            "dtype": str(space.dtype),
            "shape": list(space.shape),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "dtype": str(space.dtype), "shape": []}
    if isinstance(space, spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": space.nvec.tolist(),
            "dtype": str(space.dtype),
            "shape": list(space.shape),
        }
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "dtype": str(space.dtype), "shape": list(space.shape)}
    if isinstance(space, spaces.Text):
        return None
    raise NotImplementedError(f"no spec for the Minari space {space!r} (type {type(space)})")


def _dtype(name: str) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=name)).dtype


def _spec_from_dict(data: dict | None) -> Any:
    """The spec of a space stored by :func:`_space_to_dict`."""
    if data is None:
        return None
    kind = data["type"]
    if kind == "Dict":
        specs = {k: _spec_from_dict(v) for k, v in data["subspaces"].items()}
        return Composite({k: v for k, v in specs.items() if v is not None})
    shape = torch.Size(data["shape"])
    dtype = _dtype(data["dtype"])
    if kind == "Box":
        low = torch.as_tensor(data["low"], dtype=torch.float64)
        high = torch.as_tensor(data["high"], dtype=torch.float64)
        if bool((low == -float("inf")).all()) and bool((high == float("inf")).all()):
            return Unbounded(shape=shape, dtype=dtype)
        return Bounded(low=low.to(dtype), high=high.to(dtype), shape=shape, dtype=dtype)
    if kind == "Discrete":
        return Categorical(data["n"], shape=shape, dtype=dtype)
    if kind == "MultiDiscrete":
        return MultiCategorical(data["nvec"], shape=shape, dtype=dtype)
    if kind == "MultiBinary":
        return Binary(n=shape[-1] if shape else 1, shape=shape, dtype=dtype)
    raise NotImplementedError(f"no spec for the stored space type {kind!r}")


def _dataset_metadata(dataset: Any, dataset_id: str) -> dict:
    """The JSON-able description of a ``minari.MinariDataset``."""
    spec = dataset.spec
    env_spec = getattr(spec, "env_spec", None)
    return {
        "dataset_id": dataset_id,
        "total_episodes": int(spec.total_episodes),
        "total_steps": int(spec.total_steps),
        "minari_version": str(getattr(spec, "minari_version", "")),
        "env_id": getattr(env_spec, "id", None),
        "observation_space": _space_to_dict(dataset.observation_space),
        "action_space": _space_to_dict(dataset.action_space),
    }
