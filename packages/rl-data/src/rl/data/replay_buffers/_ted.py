"""TorchRL's compact layouts of a storage of transitions ("TED": root + ``"next"``).

A storage of transitions repeats each observation: ``("next", "obs")`` at step ``t`` is
``"obs"`` at step ``t + 1`` unless the trajectory ended at ``t``. The *flat* layout keeps
each observation once: per stream of the storage, the root values of every step in time
order, with the final ``"next"`` value of each trajectory inserted after its last step
(``T + n_traj`` rows); the done and reward entries are kept from ``"next"`` (``T`` rows)
and the root done flags, always ``False`` in such data, are dropped. The *nested* layout
cuts the flat one into one row per trajectory (``torch.nested`` tensors), and the *H5*
layout names each trajectory ``traj_<i>`` (one HDF5 group each).

These are the hooks TorchRL's :class:`~rl.data.NestedStorageCheckpointer` and
:class:`~rl.data.H5StorageCheckpointer` chain; the files they write hold the same entries,
shapes and metadata (``shift``, ``is_full``, ``_storage_shape``) as TorchRL's.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey, unravel_key

DEFAULT_DONE_KEYS = ("done", "truncated", "terminated")

_META_KEYS = ("_storage_shape",)


def _nested(parts: list[torch.Tensor]) -> torch.Tensor:
    """A strided ``torch.nested`` tensor (TorchRL's layout), without the prototype warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*nested tensors is in prototype.*")
        return torch.nested.nested_tensor(parts)


def _key_set(keys: Iterable[NestedKey]) -> set:
    return {unravel_key(key) for key in keys}


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-row equality of ``[N, *F]`` tensors (NaN equals NaN)."""
    eq = a == b
    if a.dtype.is_floating_point or a.dtype.is_complex:
        eq |= torch.isnan(a) & torch.isnan(b)
    return eq.reshape(a.shape[0], -1).all(-1)


def _ends(done: torch.Tensor, shift: int, is_full: bool) -> torch.Tensor:
    """The end flags of one stream in time order, the last written step ending a trajectory.

    Args:
        done: ``[T]`` the stream's ``("next", "done")`` in storage order.
    """
    if is_full:
        out = done.roll(-shift, 0).clone()
        out[-1] = True
    else:
        out = done.clone()
        out[shift - 1] = True
    return out


def _meta(data: TensorDictBase, key: str) -> Any:
    value = data.get_non_tensor(key, default=None)
    if value is None:
        raise KeyError(f"the flat data has no {key!r} entry (is it TED2Flat's output?)")
    return value


class TED2Flat:
    """Turns a storage of transitions (``[T, *B]``, time first) into the flat layout.

    Set :attr:`shift` (the next write position along the first dim) and :attr:`is_full`
    before calling it; the storage checkpointers do.

    Args:
        done_key: where the done flags are read (default ``("next", "done")``).
        shift_key: the metadata entry holding ``shift`` (default ``"shift"``).
        is_full_key: the metadata entry holding ``is_full`` (default ``"is_full"``).
        done_keys: the done entries, saved from ``"next"`` (default ``("done",
            "truncated", "terminated")``).
        reward_keys: the reward entries, saved from ``"next"`` (default ``("reward",)``).

    Raises:
        ValueError: (on call) the data breaks what the layout assumes (a root done flag
            set, or a ``"next"`` value that is not the following step's root value inside
            a trajectory): TorchRL would save it wrongly; save such data with
            :class:`~rl.data.FlatStorageCheckpointer` or
            :class:`~rl.data.TensorStorageCheckpointer`, which keep it exactly.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import Flat2TED, TED2Flat
        >>> obs = torch.arange(4.0).unsqueeze(-1)
        >>> done = torch.tensor([[False], [True], [False], [False]])
        >>> data = TensorDict(
        ...     {"obs": obs, "done": torch.zeros_like(done),
        ...      "next": {"obs": obs + 1, "done": done, "reward": obs}},
        ...     batch_size=[4],
        ... )
        >>> flat = TED2Flat()
        >>> flat.shift, flat.is_full = 0, True
        >>> out = flat(data)
        >>> out["obs"].squeeze(-1)
        tensor([0., 1., 2., 2., 3., 4.])
        >>> (Flat2TED()(out) == data).all()
        True
    """

    _shift: int | None = None
    _is_full: bool | None = None

    def __init__(
        self,
        done_key: NestedKey = ("next", "done"),
        shift_key: NestedKey = "shift",
        is_full_key: NestedKey = "is_full",
        done_keys: tuple[NestedKey, ...] = DEFAULT_DONE_KEYS,
        reward_keys: tuple[NestedKey, ...] = ("reward",),
    ) -> None:
        self.done_key = done_key
        self.shift_key = shift_key
        self.is_full_key = is_full_key
        self.done_keys = _key_set(done_keys)
        self.reward_keys = _key_set(reward_keys)

    @property
    def shift(self) -> int | None:
        return self._shift

    @shift.setter
    def shift(self, value: int) -> None:
        self._shift = value

    @property
    def is_full(self) -> bool | None:
        return self._is_full

    @is_full.setter
    def is_full(self, value: bool) -> None:
        self._is_full = value

    def _check_cursor(self, rows: int) -> tuple[int, bool]:
        shift, is_full = self.shift, self.is_full
        if shift is None or is_full is None:
            raise RuntimeError(
                f"{type(self).__name__} needs its shift and is_full set before it is called "
                f"(got shift={shift}, is_full={is_full})"
            )
        shift, is_full = int(shift), bool(is_full)
        if not is_full and not 0 < shift <= rows:
            raise ValueError(
                f"shift must be in [1, {rows}] for a storage that is not full, got {shift}"
            )
        return shift % rows, is_full

    def __call__(self, data: TensorDictBase, path: str | Path | None = None) -> TensorDictBase:
        """The flat layout of ``data``, memory-mapped under ``path`` when given."""
        if "next" not in data.keys():
            raise KeyError(f"{type(self).__name__} expects transitions with a 'next' entry")
        shift, is_full = self._check_cursor(data.shape[0])
        storage_shape = tuple(data.shape)
        rows = storage_shape[0]
        streams = data.reshape(rows, -1) if data.ndim != 2 else data
        whole = self.done_keys | self.reward_keys
        next_keys = set(data["next"].keys(True, True))
        root_keys = set(data.exclude("next").keys(True, True))
        expand = next_keys - whole
        for key in expand:
            if key not in root_keys:
                raise KeyError(
                    f"('next', {key!r}) has no root counterpart {key!r}: the flat layout keeps "
                    "only the root values of such an entry"
                )
        valid = rows if is_full else shift
        columns: dict[Any, list[torch.Tensor]] = {key: [] for key in root_keys | next_keys}
        done_all = streams.get(self.done_key).reshape(rows, streams.shape[1], -1).any(-1)
        for j in range(streams.shape[1]):
            order = torch.arange(rows).roll(-shift) if is_full else torch.arange(rows)
            stream = streams[:, j][order]
            ends = _ends(done_all[:, j].cpu(), shift, is_full)
            self._check_assumptions(stream, ends, valid, expand, root_keys & whole, j)
            steps = torch.arange(rows)
            root_at = steps + torch.nn.functional.pad(ends, [1, 0])[:-1].cumsum(0)
            final_at = (steps + ends.cumsum(0))[ends]
            for key in columns:
                if key in expand:
                    root, nxt = stream.get(key), stream.get(("next", *_tuple(key)))
                    buf = root.new_zeros((rows + int(ends.sum()), *root.shape[1:]))
                    buf[root_at.to(buf.device)] = root
                    buf[final_at.to(buf.device)] = nxt[ends.to(nxt.device)]
                    columns[key].append(buf)
                elif key in whole:
                    if ("next", *_tuple(key)) in stream.keys(True, True):
                        columns[key].append(stream.get(("next", *_tuple(key))))
                else:
                    columns[key].append(stream.get(key))
        out = TensorDict({}, batch_size=[])
        for key, parts in columns.items():
            if parts:
                out.set(key, torch.cat(parts).as_subclass(torch.Tensor))
        out.set_non_tensor(self.is_full_key, is_full)
        out.set_non_tensor(self.shift_key, shift)
        out.set_non_tensor("_storage_shape", storage_shape)
        if path is not None:
            out.memmap_(path)
        return out

    def _check_assumptions(
        self,
        stream: TensorDictBase,
        ends: torch.Tensor,
        valid: int,
        expand: set,
        root_done: set,
        j: int,
    ) -> None:
        for key in root_done:
            flags = stream.get(key)[:valid]
            if flags.any():
                step = int(flags.reshape(valid, -1).any(-1).nonzero()[0])
                raise ValueError(
                    f"{type(self).__name__} drops the root done entry {key!r}, expected all "
                    f"False; stream {j} has it set at step {step} (save this data with "
                    "FlatStorageCheckpointer or TensorStorageCheckpointer)"
                )
        if valid < 2:
            return
        inside = ~ends[: valid - 1]
        for key in expand:
            nxt = stream.get(("next", *_tuple(key)))[: valid - 1]
            root = stream.get(key)[1:valid]
            bad = inside.to(nxt.device) & ~_same(nxt, root)
            if bad.any():
                step = int(bad.nonzero()[0])
                raise ValueError(
                    f"{type(self).__name__} keeps ('next', {key!r}) only where a trajectory "
                    f"ends, expected it to equal {key!r} one step later; stream {j} differs at "
                    f"step {step} (save this data with FlatStorageCheckpointer or "
                    "TensorStorageCheckpointer)"
                )


def _tuple(key: NestedKey) -> tuple:
    return (key,) if isinstance(key, str) else tuple(key)


class Flat2TED:
    """Rebuilds a storage of transitions from :class:`TED2Flat`'s layout.

    Args:
        done_key: the flat layout's done entry (default ``"done"``).
        shift_key: the metadata entry holding ``shift`` (default ``"shift"``).
        is_full_key: the metadata entry holding ``is_full`` (default ``"is_full"``).
        done_keys: the done entries (default ``("done", "truncated", "terminated")``);
            their root values are rebuilt as ``False``.
        reward_keys: the reward entries (default ``("reward",)``).

    Calling it with ``out`` (a storage's TensorDict, ``[T, *B]``) writes the result there
    (only the entries ``out`` holds); it returns the rebuilt TensorDict, ``[T, *B]`` in
    storage order (the rows never written are zeros).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import Flat2TED
        >>> flat = TensorDict(
        ...     {"obs": torch.tensor([[0.0], [1.0], [2.0]]), "done": torch.tensor([[False], [True]])}
        ... )
        >>> _ = flat.set_non_tensor("shift", 0)
        >>> _ = flat.set_non_tensor("is_full", True)
        >>> _ = flat.set_non_tensor("_storage_shape", (2,))
        >>> Flat2TED()(flat)["next", "obs"].squeeze(-1)
        tensor([1., 2.])
    """

    def __init__(
        self,
        done_key: NestedKey = "done",
        shift_key: NestedKey = "shift",
        is_full_key: NestedKey = "is_full",
        done_keys: tuple[NestedKey, ...] = DEFAULT_DONE_KEYS,
        reward_keys: tuple[NestedKey, ...] = ("reward",),
    ) -> None:
        self.done_key = done_key
        self.shift_key = shift_key
        self.is_full_key = is_full_key
        self.done_keys = _key_set(done_keys)
        self.reward_keys = _key_set(reward_keys)

    def __call__(self, data: TensorDictBase, out: TensorDictBase | None = None) -> TensorDictBase:
        shape = _meta(data, "_storage_shape")
        shape = torch.Size([shape] if isinstance(shape, int) else list(shape))
        shift, is_full = int(_meta(data, self.shift_key)), bool(_meta(data, self.is_full_key))
        rows, nstreams = shape[0], shape[1:].numel()
        whole = self.done_keys | self.reward_keys
        tensors = {
            key: value for key, value in data.items(True, True) if isinstance(value, torch.Tensor)
        }
        if self.done_key not in tensors:
            raise KeyError(f"the flat data has no done entry {self.done_key!r}")
        done = tensors[self.done_key]
        if done.shape[0] != rows * nstreams:
            raise ValueError(
                f"the flat done entry has {done.shape[0]} rows, expected {rows * nstreams} "
                f"for a storage of shape {tuple(shape)}"
            )
        done = done.reshape(nstreams, rows, -1).any(-1)
        ends = [_ends_chrono(done[j].cpu(), shift, is_full) for j in range(nstreams)]
        offsets = [0]
        for e in ends:
            offsets.append(offsets[-1] + rows + int(e.sum()))
        valid = rows if is_full else shift
        streams = []
        for j, e in enumerate(ends):
            steps = torch.arange(rows)
            root_at = steps + torch.nn.functional.pad(e, [1, 0])[:-1].cumsum(0)
            next_at = root_at + 1
            stream = TensorDict({}, batch_size=[rows])
            for key, value in tensors.items():
                if value.shape[0] == rows * nstreams:
                    chunk = value[j * rows : (j + 1) * rows]
                    if key in whole:
                        stream.set(("next", *_tuple(key)), chunk)
                        if key in self.done_keys:
                            stream.set(key, torch.zeros_like(chunk))
                    else:
                        stream.set(key, chunk)
                elif value.shape[0] == offsets[-1]:
                    chunk = value[offsets[j] : offsets[j + 1]]
                    stream.set(key, chunk[root_at.to(chunk.device)])
                    nxt = chunk[next_at.clamp_max(chunk.shape[0] - 1).to(chunk.device)]
                    nxt[valid:] = 0  # rows never written (their "next" was not saved)
                    stream.set(("next", *_tuple(key)), nxt)
                else:
                    raise ValueError(
                        f"flat entry {key!r} has {value.shape[0]} rows, expected "
                        f"{rows * nstreams} or {offsets[-1]}"
                    )
            if is_full:
                stream = stream.apply(lambda t: t.roll(shift, 0))
            streams.append(stream)
        result = torch.stack(streams, 1).reshape(shape) if len(shape) > 1 else streams[0]
        if out is not None:
            for key in out.keys(True, True):
                if key in result.keys(True, True):
                    out.set_(key, result.get(key))
        return result


def _ends_chrono(done: torch.Tensor, shift: int, is_full: bool) -> torch.Tensor:
    """End flags of a stream already in time order (as TED2Flat saved it)."""
    out = done.clone()
    out[-1 if is_full else shift - 1] = True
    return out


def _traj_lengths(flat: TensorDictBase, done_key: NestedKey) -> tuple[list[int], list[int]]:
    """Per trajectory of the flat layout: its steps and its rows in the expanded entries."""
    shape = _meta(flat, "_storage_shape")
    shape = torch.Size([shape] if isinstance(shape, int) else list(shape))
    rows, nstreams = shape[0], shape[1:].numel()
    shift, is_full = int(_meta(flat, "shift")), bool(_meta(flat, "is_full"))
    done = flat.get(done_key).reshape(nstreams, rows, -1).any(-1).cpu()
    steps, expanded = [], []
    for j in range(nstreams):
        ends = _ends_chrono(done[j], shift, is_full)
        ends[-1] = True  # the rows never written make a trajectory of their own
        stops = ends.nonzero().squeeze(-1) + 1
        lengths = torch.diff(stops, prepend=torch.zeros(1, dtype=stops.dtype)).tolist()
        steps += lengths
        # every saved end gets its final "next" row; the unwritten tail has none
        tail = 0 if is_full or shift == rows else 1
        expanded += [n + 1 for n in lengths[: len(lengths) - tail]] + lengths[len(lengths) - tail :]
    return steps, expanded


class TED2Nested(TED2Flat):
    """:class:`TED2Flat`, then one row per trajectory: each entry a ``torch.nested`` tensor.

    Same arguments as :class:`TED2Flat`. The rows never written of a storage that is not
    full make one trajectory of their own at the end of each stream.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import Nested2TED, TED2Nested
        >>> obs = torch.arange(4.0).unsqueeze(-1)
        >>> done = torch.tensor([[False], [True], [False], [False]])
        >>> data = TensorDict(
        ...     {"obs": obs, "done": torch.zeros_like(done),
        ...      "next": {"obs": obs + 1, "done": done, "reward": obs}},
        ...     batch_size=[4],
        ... )
        >>> nested = TED2Nested()
        >>> nested.shift, nested.is_full = 0, True
        >>> out = nested(data)
        >>> [t.squeeze(-1).tolist() for t in out["obs"].unbind()]
        [[0.0, 1.0, 2.0], [2.0, 3.0, 4.0]]
        >>> (Nested2TED()(out) == data).all()
        True
    """

    def __call__(self, data: TensorDictBase, path: str | Path | None = None) -> TensorDictBase:
        flat = super().__call__(data)
        steps, expanded = _traj_lengths(flat, "done")
        out = TensorDict({}, batch_size=[len(steps)])
        for key, value in flat.items(True, True):
            if not isinstance(value, torch.Tensor):
                continue
            lengths = steps if value.shape[0] == sum(steps) else expanded
            out.set(key, _nested(list(value.split(lengths))))
        for key in (self.is_full_key, self.shift_key, "_storage_shape"):
            out.set_non_tensor(key, flat.get_non_tensor(key))
        if path is not None:
            out.memmap_(path)
        return out


class Nested2TED(Flat2TED):
    """Rebuilds a storage of transitions from :class:`TED2Nested`'s layout (same
    arguments and ``out`` as :class:`Flat2TED`)."""

    def __call__(self, data: TensorDictBase, out: TensorDictBase | None = None) -> TensorDictBase:
        flat = TensorDict({}, batch_size=[])
        for key, value in data.items(True, True):
            if isinstance(value, torch.Tensor):
                parts = value.unbind(0) if value.is_nested else list(value)
                flat.set(key, torch.cat([p.as_subclass(torch.Tensor) for p in parts]))
        for key in (self.is_full_key, self.shift_key, "_storage_shape"):
            flat.set_non_tensor(key, _meta(data, key))
        return super().__call__(flat, out=out)


class H5Split(TED2Flat):
    """Cuts :class:`TED2Nested`'s output into one TensorDict per trajectory, named
    ``traj_<i>`` (zero-padded), the metadata beside them: the layout of the HDF5 file.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.data import H5Combine, H5Split
        >>> nested = TensorDict(
        ...     {"obs": _nested([torch.zeros(2), torch.ones(3)])},
        ...     batch_size=[2],
        ... )
        >>> split = H5Split()(nested)
        >>> sorted(split.keys())
        ['traj_0', 'traj_1']
        >>> H5Combine()(split)["obs"].unbind()[1]
        tensor([1., 1., 1.])
    """

    def __call__(self, data: TensorDictBase, path: str | Path | None = None) -> TensorDictBase:
        ntraj = data.shape[0]
        width = math.ceil(math.log10(ntraj)) if ntraj > 1 else 0
        out = TensorDict({}, batch_size=[])
        rows = {
            key: value.unbind(0)
            for key, value in data.items(True, True)
            if isinstance(value, torch.Tensor)
        }
        for i in range(ntraj):
            traj = TensorDict({key: parts[i] for key, parts in rows.items()}, batch_size=[])
            out.set(f"traj_{str(i).zfill(width)}", traj)
        for key, value in data.non_tensor_items():
            out.set_non_tensor(key, value)
        return out


class H5Combine:
    """Inverse of :class:`H5Split`: stacks the ``traj_<i>`` entries (in name order) into
    ``torch.nested`` tensors, one row per trajectory, and keeps the metadata."""

    def __call__(self, data: TensorDictBase, out: TensorDictBase | None = None) -> TensorDictBase:
        names = sorted(key for key in data.keys() if key.startswith("traj"))
        if not names:
            raise KeyError("H5Combine found no 'traj_<i>' entry in the data")
        trajs = [data.get(name) for name in names]
        result = TensorDict({}, batch_size=[len(trajs)])
        for key in trajs[0].keys(True, True):
            parts = [traj.get(key).as_subclass(torch.Tensor) for traj in trajs]
            result.set(key, _nested(parts))
        for key in data.keys():
            if not key.startswith("traj"):
                result.set_non_tensor(key, data.get_non_tensor(key))
        return result


__all__ = [
    "DEFAULT_DONE_KEYS",
    "Flat2TED",
    "H5Combine",
    "H5Split",
    "Nested2TED",
    "TED2Flat",
    "TED2Nested",
]
