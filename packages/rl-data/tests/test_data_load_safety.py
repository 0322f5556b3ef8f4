"""Every load path of rl-data refuses crafted files and runs nothing from them.

Each crafted file carries a payload that would create a marker file if it ran (a pickle
calling ``exec``, a class named in tensordict metadata whose module creates it on import);
each load must raise an error that names the file and leave no marker.
"""

from __future__ import annotations

import builtins
import json
import sys

import numpy as np
import pytest
import torch
from tensordict import NonTensorData, TensorDict

from rl.core.trainers import CheckpointError
from rl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
    SliceSampler,
    TensorDictMaxValueWriter,
    TensorStorageCheckpointer,
)


class _Payload:
    """Unpickling this runs ``exec``, which creates ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (builtins.exec, (f"open({self.marker!r}, 'w').close()",))


def _crafted(path, payload):
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(payload, path)


COMPONENTS = {
    "LazyTensorStorage": lambda: LazyTensorStorage(4),
    "ListStorage": lambda: ListStorage(4),
    "LazyMemmapStorage": lambda: LazyMemmapStorage(4),
    "PrioritizedSampler": lambda: PrioritizedSampler(4, alpha=0.5, beta=0.5),
    "RandomSampler": lambda: RandomSampler(),
    "SliceSampler": lambda: SliceSampler(num_slices=2),
    "RoundRobinWriter": lambda: RoundRobinWriter(),
    "TensorDictMaxValueWriter": lambda: TensorDictMaxValueWriter(rank_key="r"),
}


class TestCheckpointFiles:
    def test_replay_buffer_loads(self, tmp_path):
        marker = tmp_path / "marker"
        _crafted(tmp_path / "ckpt" / "replay_buffer.pt", {"version": 1, "x": _Payload(marker)})
        with pytest.raises(
            CheckpointError,
            match=r"refusing to load '.*ckpt/replay_buffer.pt': it holds objects other than "
            "tensors and plain containers",
        ):
            ReplayBuffer(storage=LazyTensorStorage(4)).loads(tmp_path / "ckpt")
        assert not marker.exists()

    @pytest.mark.parametrize("name", sorted(COMPONENTS))
    def test_component_loads(self, tmp_path, name):
        marker = tmp_path / "marker"
        _crafted(tmp_path / "ckpt" / "state.pt", {"max_size": 4, "x": _Payload(marker)})
        with pytest.raises(CheckpointError, match=r"refusing to load '.*ckpt/state.pt'"):
            COMPONENTS[name]().loads(tmp_path / "ckpt")
        assert not marker.exists()

    def test_storage_checkpointer(self, tmp_path):
        marker = tmp_path / "marker"
        rb = ReplayBuffer(storage=LazyTensorStorage(4), checkpointer=TensorStorageCheckpointer())
        rb.extend(torch.arange(2))
        rb.dumps(tmp_path / "ckpt")  # a genuine buffer file, the storage beside it...
        _crafted(tmp_path / "ckpt" / "storage" / "state.pt", {"data": _Payload(marker)})
        other = ReplayBuffer(storage=LazyTensorStorage(4), checkpointer=TensorStorageCheckpointer())
        with pytest.raises(CheckpointError, match=r"refusing to load '.*storage/state.pt'"):
            other.loads(tmp_path / "ckpt")
        with pytest.raises(CheckpointError, match=r"refusing to load '.*storage/state.pt'"):
            TensorStorageCheckpointer().loads(LazyTensorStorage(4), tmp_path / "ckpt" / "storage")
        assert not marker.exists()

    def test_not_a_checkpoint(self, tmp_path):
        (tmp_path / "replay_buffer.pt").write_bytes(b"\x80\x04not a zip archive")
        with pytest.raises(CheckpointError, match="is not a readable checkpoint: not a torch.save"):
            ReplayBuffer().loads(tmp_path)
        torch.save([1, 2], tmp_path / "state.pt")
        with pytest.raises(CheckpointError, match="expected a dict .* it holds a list"):
            RandomSampler().loads(tmp_path)


def _memmap_dir(path) -> None:
    storage = LazyMemmapStorage(4, scratch_dir=path)
    storage.set(slice(0, 2), TensorDict({"a": torch.zeros(2, 3), ("n", "b"): torch.ones(2)}, [2]))


def _edit_json(path, edit) -> None:
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))


class TestMemmapDirectory:
    """Reopening a ``scratch_dir`` reads JSON and raw tensor files only."""

    def test_pickled_entry_is_refused(self, tmp_path):
        marker = tmp_path / "marker"
        td = TensorDict({"a": torch.zeros(4, 3)}, [4])
        td["s"] = NonTensorData(_Payload(marker), batch_size=[4])
        td.memmap(tmp_path / "dir")
        (tmp_path / "dir" / "rl_storage.json").write_text('{"kind": "tensordict", "max_size": 4}')
        np.zeros(5, dtype=np.int64).tofile(tmp_path / "dir" / "rl_storage_len.bin")
        with pytest.raises(
            CheckpointError,
            match=r"scratch_dir '.*dir' does not hold a readable LazyMemmapStorage: its tensors "
            r"cannot be loaded \(Refusing to load pickled non-tensor data",
        ):
            LazyMemmapStorage(4, scratch_dir=tmp_path / "dir")
        assert not marker.exists()

    def test_class_named_in_metadata_is_not_imported(self, tmp_path, monkeypatch):
        marker = tmp_path / "marker"
        module = "rl_test_crafted_module"
        (tmp_path / f"{module}.py").write_text(
            f"open({str(marker)!r}, 'w').close()\nclass Evil:\n    pass\n"
        )
        monkeypatch.syspath_prepend(str(tmp_path))
        _memmap_dir(tmp_path / "dir")
        _edit_json(
            tmp_path / "dir" / "n" / "meta.json",
            lambda m: m.update({"_type": f"<class '{module}.Evil'>", "_class": f"{module}:Evil"}),
        )
        with pytest.raises(CheckpointError, match=f"Could not find the class {module}.Evil"):
            LazyMemmapStorage(4, scratch_dir=tmp_path / "dir")
        assert not marker.exists() and module not in sys.modules

    @pytest.mark.parametrize(
        "edit, message",
        [
            (lambda m: m.update(kind="pickle"), "rl_storage.json has kind 'pickle', expected"),
            (lambda m: m.update(max_size="4"), "rl_storage.json has max_size '4'"),
            (
                lambda m: m.update(kind="tensor", dtype="load", shape=[4]),
                r"cannot be loaded \(expected the name of a torch dtype .*got 'load'\)",
            ),
            (
                lambda m: m.update(kind="tensor", dtype="float32", shape=["4"]),
                r"rl_storage.json has shape \['4'\], expected a list of sizes",
            ),
        ],
    )
    def test_storage_metadata(self, tmp_path, edit, message):
        _memmap_dir(tmp_path)
        _edit_json(tmp_path / "rl_storage.json", edit)
        with pytest.raises(CheckpointError, match=message):
            LazyMemmapStorage(4, scratch_dir=tmp_path)

    def test_metadata_not_json(self, tmp_path):
        _memmap_dir(tmp_path)
        (tmp_path / "rl_storage.json").write_text("\x80garbage")
        with pytest.raises(CheckpointError, match="rl_storage.json is not JSON"):
            LazyMemmapStorage(4, scratch_dir=tmp_path)

    def test_shape_past_the_end_of_the_file(self, tmp_path):
        """A map past the end of its file would kill the process (SIGBUS) on reading."""
        _memmap_dir(tmp_path)
        _edit_json(tmp_path / "meta.json", lambda m: m["a"].update(shape=[4, 3000]))
        with pytest.raises(
            CheckpointError, match=r"the file of 'a' holds 48 bytes, its shape \(4, 3000\) needs"
        ):
            LazyMemmapStorage(4, scratch_dir=tmp_path)
        _memmap_dir(tmp_path / "rows")
        _edit_json(tmp_path / "rows" / "meta.json", lambda m: m["a"].update(shape=[400, 3]))
        with pytest.raises(CheckpointError, match=r"'a' has shape \(400, 3\), expected 4 rows"):
            LazyMemmapStorage(4, scratch_dir=tmp_path / "rows")

    def test_counter_out_of_range(self, tmp_path):
        _memmap_dir(tmp_path)
        np.array([1000, 0, 0, 0, 0], dtype=np.int64).tofile(tmp_path / "rl_storage_len.bin")
        with pytest.raises(
            CheckpointError,
            match=r"rl_storage_len.bin holds \[1000, 0, 0, 0, 0\], out of range for 4 rows",
        ):
            LazyMemmapStorage(4, scratch_dir=tmp_path)
