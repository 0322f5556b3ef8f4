"""TorchRL's TED layouts (TED2Flat, TED2Nested, H5Split and inverses) and the checkpointers
built on them, plus the CompressedList and StorageEnsemble checkpointers."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest
import torch
from tensordict import TensorDict

from rl.core import CheckpointError
from rl.data import (
    CompressedListStorage,
    CompressedListStorageCheckpointer,
    Flat2TED,
    H5Combine,
    H5Split,
    H5StorageCheckpointer,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    Nested2TED,
    NestedStorageCheckpointer,
    ReplayBuffer,
    StorageEnsemble,
    StorageEnsembleCheckpointer,
    TED2Flat,
    TED2Nested,
    create_infinite_iterator,
)


def rollout(ends: list[int], start: float = 0.0) -> TensorDict:
    """Transitions whose ``("next", "obs")`` is the next step's ``obs`` inside an episode.

    ``ends`` lists the steps that end an episode; the first observation of an episode is
    ``100 + step`` (so that it differs from the previous ``next`` one).
    """
    n = len(ends)
    obs, nxt = torch.zeros(n, 2), torch.zeros(n, 2)
    value = start
    for t in range(n):
        obs[t] = torch.tensor([value, 2 * value])
        nxt[t] = torch.tensor([value + 1, 2 * value + 2])
        value = 100.0 + t + start if ends[t] else value + 1
    done = torch.tensor(ends, dtype=torch.bool).unsqueeze(-1)
    return TensorDict(
        {
            "obs": obs,
            "action": torch.arange(n) + int(start),
            "done": torch.zeros_like(done),
            "next": {"obs": nxt, "done": done, "reward": torch.arange(n).float().unsqueeze(-1)},
        },
        batch_size=[n],
    )


class TestTED2Flat:
    def test_layout_values(self):
        data = rollout([0, 1, 0, 0])
        hook = TED2Flat()
        hook.shift, hook.is_full = 0, True
        out = hook(data)
        # root obs of each step, the final next obs after each trajectory end
        expected = [0.0, 1.0, 2.0, 101.0, 102.0, 103.0]
        assert out["obs"][:, 0].tolist() == expected
        assert out["done"].squeeze(-1).tolist() == [False, True, False, False]
        assert out["reward"].squeeze(-1).tolist() == [0.0, 1.0, 2.0, 3.0]
        assert out["action"].tolist() == [0, 1, 2, 3]
        assert "next" not in out.keys()
        assert out.get_non_tensor("shift") == 0 and out.get_non_tensor("is_full") is True
        assert tuple(out.get_non_tensor("_storage_shape")) == (4,)

    def test_full_ring_is_saved_in_time_order(self):
        chrono = rollout([0, 0, 1, 0, 0])
        stored = chrono.roll(2, 0)  # the oldest step sits at the next write position 2
        hook = TED2Flat()
        hook.shift, hook.is_full = 2, True
        out = hook(stored)
        assert out["action"].tolist() == [0, 1, 2, 3, 4]
        back = Flat2TED()(out)
        assert (back == stored).all()

    def test_not_full_keeps_the_capacity(self):
        data = torch.cat([rollout([0, 1, 0]), rollout([0, 0, 0]).zero_()])
        hook = TED2Flat()
        hook.shift, hook.is_full = 3, False
        out = hook(data)
        # 6 rows + 2 ends (step 1, and the last written step 2)
        assert out["obs"].shape == (8, 2)
        back = Flat2TED()(out)
        assert (back[:3] == data[:3]).all()

    def test_two_streams(self):
        a, b = rollout([0, 1, 0, 0]), rollout([1, 0, 0, 0], start=50)
        data = torch.stack([a, b], 1)  # [T, B]: time first, as a storage with ndim=2
        hook = TED2Flat()
        hook.shift, hook.is_full = 0, True
        out = hook(data)
        assert out["obs"].shape == (2 * 4 + 2 + 2, 2)
        assert out["action"].tolist() == a["action"].tolist() + b["action"].tolist()
        back = Flat2TED()(out)
        assert back.shape == (4, 2)
        assert (back == data).all()

    def test_root_done_set_raises(self):
        data = rollout([0, 1, 0])
        data["done"][1] = True
        hook = TED2Flat()
        hook.shift, hook.is_full = 0, True
        with pytest.raises(ValueError, match="root done entry 'done'.*step 1"):
            hook(data)

    def test_next_not_following_root_raises(self):
        data = rollout([0, 0, 1])
        data["next", "obs"][0] = 7.0  # a multi-step transform would do this
        hook = TED2Flat()
        hook.shift, hook.is_full = 0, True
        with pytest.raises(ValueError, match=r"\('next', 'obs'\).*step 0"):
            hook(data)

    def test_cursor_unset_raises(self):
        with pytest.raises(RuntimeError, match="shift and is_full"):
            TED2Flat()(rollout([0, 1]))

    def test_default_keys(self):
        assert TED2Flat().done_keys == {"done", "truncated", "terminated"}
        assert TED2Flat().reward_keys == {"reward"}


class TestTED2Nested:
    def test_one_row_per_trajectory(self):
        data = rollout([0, 1, 0, 0, 1])
        hook = TED2Nested()
        hook.shift, hook.is_full = 0, True
        out = hook(data)
        assert out.shape == (2,)
        assert [len(t) for t in out["obs"].unbind()] == [3, 4]  # steps + the final next
        assert [len(t) for t in out["action"].unbind()] == [2, 3]
        assert (Nested2TED()(out) == data).all()

    def test_h5_split_combine(self):
        data = rollout([1] * 11)
        hook = TED2Nested()
        hook.shift, hook.is_full = 0, True
        nested = hook(data)
        split = H5Split()(nested)
        names = sorted(k for k in split.keys() if k.startswith("traj"))
        assert names[:2] == ["traj_00", "traj_01"] and len(names) == 11
        assert split["traj_03", "action"].tolist() == [3]
        back = Nested2TED()(H5Combine()(split))
        assert (back == data).all()


def fill(rb: ReplayBuffer, batches: int, ndim: int = 1) -> None:
    for i in range(batches):
        # each batch ends its episodes: the next batch starts new ones
        n = 4 + i % 3
        batch = rollout([0, 0, 1, 0, 0, 0][: n - 1] + [1], start=10.0 * i)
        if ndim == 2:
            other = rollout([0, 1, 0, 0, 0, 0][: n - 1] + [1], start=5.0 * i)
            batch = torch.stack([batch, other])
        rb.extend(batch)


CHECKPOINTERS = [NestedStorageCheckpointer, H5StorageCheckpointer]


@pytest.fixture(params=CHECKPOINTERS, ids=lambda c: c.__name__)
def checkpointer(request):
    """Each TED checkpointer; the HDF5 one only where its optional ``h5py`` is installed."""
    if request.param is H5StorageCheckpointer:
        pytest.importorskip("h5py")
    return request.param


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


class TestTEDCheckpointers:
    @pytest.mark.parametrize("storage_type", [LazyTensorStorage, LazyMemmapStorage])
    @pytest.mark.parametrize("batches", [1, 6])  # 6: the ring wraps
    def test_round_trip(self, checkpointer, storage_type, batches, tmp_path):
        rb = ReplayBuffer(storage=storage_type(13), checkpointer=checkpointer())
        fill(rb, batches)
        rb.dumps(tmp_path)
        rb2 = ReplayBuffer(storage=storage_type(13), checkpointer=checkpointer())
        rb2.loads(tmp_path)
        assert (rb2[:] == rb[:]).all()
        assert rb2.writer._cursor == rb.writer._cursor
        # a second load into the now allocated storage, after more writes, restores again
        fill(rb2, 2)
        rb2.loads(tmp_path)
        assert (rb2[:] == rb[:]).all()

    def test_round_trip_two_dims(self, checkpointer, tmp_path):
        rb = ReplayBuffer(storage=LazyTensorStorage(14, ndim=2), checkpointer=checkpointer())
        for _ in range(3):
            fill(rb, 2, ndim=2)
            rb.dumps(tmp_path)
            rb2 = ReplayBuffer(storage=LazyTensorStorage(14, ndim=2), checkpointer=checkpointer())
            rb2.loads(tmp_path)
            assert (rb2[:] == rb[:]).all()

    def test_nested_files_are_torchrl_layout(self, tmp_path):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=NestedStorageCheckpointer())
        rb.extend(rollout([0, 1, 0, 0]))
        rb.dumps(tmp_path)
        meta = json.loads((tmp_path / "storage" / "storage_metadata.json").read_text())
        assert meta["len"] == 4 and meta["is_pytree"] is False
        saved = TensorDict.load_memmap(tmp_path / "storage", allow_pickle=False)
        # trajectories: steps 0-1, steps 2-3 (the last written), rows 4-9 never written
        assert saved.shape == (3,)
        assert [len(t) for t in saved["obs"].unbind(0)] == [3, 3, 6]
        assert saved.get_non_tensor("shift") == 4 and saved.get_non_tensor("is_full") is False

    def test_h5_file_layout(self, tmp_path):
        h5py = pytest.importorskip("h5py")
        rb = ReplayBuffer(storage=LazyTensorStorage(4), checkpointer=H5StorageCheckpointer())
        rb.extend(rollout([0, 1, 0, 1]))
        rb.dumps(tmp_path)
        with h5py.File(tmp_path / "storage" / "checkpoint.h5", "r") as f:
            assert sorted(f.keys()) == ["traj_0", "traj_1"]
            assert f["traj_1/obs"].shape == (3, 2)
            assert f["traj_1/action"][()].tolist() == [2, 3]
            assert int(f.attrs["_len"]) == 4 and bool(f.attrs["is_full"])

    def test_h5_path_with_suffix(self, tmp_path):
        pytest.importorskip("h5py")
        ckpt = H5StorageCheckpointer(checkpoint_file="ignored.h5")
        storage = LazyTensorStorage(5)
        storage.set(slice(0, 3), rollout([0, 0, 1]))
        ckpt.dumps(storage, tmp_path / "buffer.h5")
        assert (tmp_path / "buffer.h5").exists()
        storage2 = LazyTensorStorage(5)
        ckpt.loads(storage2, tmp_path / "buffer.h5")
        assert (storage2.get(slice(None)) == storage.get(slice(None))).all()

    def test_redump_replaces_the_directory(self, tmp_path):
        rb = ReplayBuffer(storage=LazyTensorStorage(8), checkpointer=NestedStorageCheckpointer())
        fill(rb, 1)
        rb.dumps(tmp_path)
        fill(rb, 3)
        rb.dumps(tmp_path)
        left = [p.name for p in tmp_path.iterdir()]
        assert not [n for n in left if n.startswith(".storage")], left
        rb2 = ReplayBuffer(storage=LazyTensorStorage(8), checkpointer=NestedStorageCheckpointer())
        rb2.loads(tmp_path)
        assert (rb2[:] == rb[:]).all()

    def test_bad_data_raises_and_keeps_the_previous_checkpoint(self, checkpointer, tmp_path):
        rb = ReplayBuffer(storage=LazyTensorStorage(8), checkpointer=checkpointer())
        rb.extend(rollout([0, 1, 0]))
        rb.dumps(tmp_path)
        bad = rollout([0, 0, 1])
        bad["next", "obs"][1] = -5.0
        rb.extend(bad)
        with pytest.raises(ValueError, match=r"\('next', 'obs'\)"):
            rb.dumps(tmp_path)
        rb2 = ReplayBuffer(storage=LazyTensorStorage(8), checkpointer=checkpointer())
        rb2.loads(tmp_path)
        assert (rb2[:] == rollout([0, 1, 0])).all()

    def test_empty_storage_raises(self, checkpointer, tmp_path):
        with pytest.raises(RuntimeError, match="non-initialized storage"):
            checkpointer().dumps(LazyTensorStorage(4), tmp_path)

    def test_not_transitions_raises(self, tmp_path):
        storage = ListStorage(4)
        storage.set(0, torch.zeros(2))
        with pytest.raises(RuntimeError, match="non-initialized"):
            NestedStorageCheckpointer().dumps(storage, tmp_path)
        storage = LazyTensorStorage(4)
        storage.set(slice(0, 2), torch.zeros(2, 3))
        with pytest.raises(ValueError, match="TensorDicts of transitions"):
            NestedStorageCheckpointer().dumps(storage, tmp_path)

    def test_missing_checkpoint_raises(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="NestedStorageCheckpointer"):
            NestedStorageCheckpointer().loads(LazyTensorStorage(4), tmp_path / "none")

    def test_missing_h5_file_raises(self, tmp_path):
        pytest.importorskip("h5py")
        with pytest.raises(FileNotFoundError, match="checkpoint.h5"):
            H5StorageCheckpointer().loads(LazyTensorStorage(4), tmp_path)

    def test_pickled_entry_is_not_loaded(self, tmp_path):
        rb = ReplayBuffer(storage=LazyTensorStorage(8), checkpointer=NestedStorageCheckpointer())
        rb.extend(rollout([0, 1, 0]))
        rb.dumps(tmp_path)
        meta_file = tmp_path / "storage" / "meta.json"
        meta = json.loads(meta_file.read_text())
        meta["evil"] = {"is_pickle": True, "type": "pickle"}
        meta_file.write_text(json.dumps(meta))
        (tmp_path / "storage" / "evil.pkl").write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")
        rb2 = ReplayBuffer(storage=LazyTensorStorage(8), checkpointer=NestedStorageCheckpointer())
        try:
            rb2.loads(tmp_path)
        except Exception as err:  # refused: what matters is that nothing ran
            assert "pwned" not in str(err)
        else:
            assert (rb2[:] == rb[:]).all()


def _saved_obs(path) -> list:
    rb = ReplayBuffer(storage=LazyTensorStorage(8), checkpointer=NestedStorageCheckpointer())
    rb.loads(path)
    return rb[:]["obs"][:, 0].tolist()


class TestCrashSafety:
    """What a dump killed mid-way leaves behind, and what the next dump and load do."""

    def test_stale_temporaries_of_dead_writers_are_removed(self, checkpointer, tmp_path):
        rb = ReplayBuffer(storage=LazyTensorStorage(8), checkpointer=checkpointer())
        rb.extend(rollout([0, 1, 1]))
        rb.dumps(tmp_path)
        folder = tmp_path / "storage"
        # the staged directory (nested) or file (HDF5) of the dump
        target = folder if checkpointer is NestedStorageCheckpointer else folder / "checkpoint.h5"
        dead = target.parent / f".{target.name}.tmp-{_dead_pid()}-0123"
        live = target.parent / f".{target.name}.tmp-{os.getpid()}-4567"
        for stale in (dead, live):
            if checkpointer is NestedStorageCheckpointer:
                stale.mkdir()
                (stale / "half").write_text("partial")
            else:
                stale.write_bytes(b"partial")
        rb.extend(rollout([0, 0, 1], start=10.0))
        rb.dumps(tmp_path)
        assert not dead.exists() and live.exists()
        rb2 = ReplayBuffer(storage=LazyTensorStorage(8), checkpointer=checkpointer())
        rb2.loads(tmp_path)
        assert (rb2[:] == rb[:]).all()

    def test_killed_writer_leaves_the_previous_state_and_no_temporary(self, tmp_path):
        rb = ReplayBuffer(storage=LazyTensorStorage(8), checkpointer=NestedStorageCheckpointer())
        rb.extend(rollout([0, 1, 1]))
        rb.dumps(tmp_path)
        writer = (
            "import os, signal, sys\n"
            "from rl.data import LazyTensorStorage, NestedStorageCheckpointer\n"
            "from rl.data.replay_buffers import _checkpointers\n"
            "def killed(*args, **kwargs):\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "_checkpointers._fsync_tree = killed  # killed once the staged copy is written\n"
            "storage = LazyTensorStorage(8)\n"
            "storage.set(slice(0, 2), torch_data)\n"
        )
        script = tmp_path / "writer.py"
        script.write_text(
            "import torch\nfrom tensordict import TensorDict\n"
            "obs = torch.full((2, 1), 7.0)\n"
            "torch_data = TensorDict({'obs': obs, 'next': {'obs': obs,"
            " 'done': torch.tensor([[False], [True]])}}, [2])\n"
            + writer
            + "NestedStorageCheckpointer().dumps(storage, sys.argv[1])\n"
        )
        process = subprocess.run(
            [sys.executable, str(script), str(tmp_path / "storage")], timeout=120
        )
        assert process.returncode == -9
        assert [p.name.split("-")[0] for p in tmp_path.iterdir() if p.name.startswith(".")] == [
            ".storage.tmp"
        ]
        assert _saved_obs(tmp_path) == [0.0, 1.0, 101.0]
        rb.extend(rollout([0, 0, 1], start=10.0))
        rb.dumps(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []

    def test_load_after_a_crash_between_renames_takes_the_newest_survivor(self, tmp_path):
        rb = ReplayBuffer(storage=LazyTensorStorage(8), checkpointer=NestedStorageCheckpointer())
        rb.extend(rollout([0, 1, 1]))
        rb.dumps(tmp_path)
        # pid 9 sorts after pid 10 as text, but its state is the older one
        os.replace(tmp_path / "storage", tmp_path / ".storage.old-9")
        os.utime(tmp_path / ".storage.old-9", ns=(10**18, 10**18))
        rb.extend(rollout([0, 0, 1], start=10.0))
        rb.dumps(tmp_path)
        os.replace(tmp_path / "storage", tmp_path / ".storage.old-10")
        os.utime(tmp_path / ".storage.old-10", ns=(2 * 10**18, 2 * 10**18))
        assert _saved_obs(tmp_path) == [0.0, 1.0, 101.0, 10.0, 11.0, 12.0]
        # the next dump replaces both survivors
        rb.dumps(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir() if "storage" in p.name) == ["storage"]

    def test_files_and_directory_are_synced(self, checkpointer, tmp_path, monkeypatch):
        from rl.data.replay_buffers import _checkpointers

        synced, dirs = [], []
        real_fsync = os.fsync

        def fsync(fd):
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
            real_fsync(fd)

        monkeypatch.setattr(_checkpointers.os, "fsync", fsync)
        monkeypatch.setattr(_checkpointers, "fsync_dir", lambda path: dirs.append(str(path)))
        storage = LazyTensorStorage(8)
        storage.set(slice(0, 3), rollout([0, 1, 1]))
        checkpointer().dumps(storage, tmp_path / "buffer")
        if checkpointer is NestedStorageCheckpointer:
            assert any(".buffer.tmp-" in n and n.endswith(".json") for n in synced)
            assert dirs[-1] == str(tmp_path)  # the rename of the buffer's folder
        else:
            assert len(synced) == 1 and "/buffer/.checkpoint.h5.tmp-" in synced[0]
            assert dirs == [str(tmp_path / "buffer")]


class TestCompressedListStorageCheckpointer:
    def test_round_trip(self, tmp_path):
        rb = ReplayBuffer(
            storage=CompressedListStorage(6), checkpointer=CompressedListStorageCheckpointer()
        )
        items = [torch.full((4, 4), float(i)) for i in range(8)]  # 8 > 6: overwrites
        rb.extend(items)
        rb.dumps(tmp_path)
        assert (tmp_path / "storage" / "compressed_storage.pt").exists()
        rb2 = ReplayBuffer(
            storage=CompressedListStorage(6), checkpointer=CompressedListStorageCheckpointer()
        )
        rb2.loads(tmp_path)
        assert len(rb2) == 6
        for i in range(6):
            torch.testing.assert_close(rb2[i], rb[i])
        assert rb2.storage.compressed_bytes() == rb.storage.compressed_bytes()

    def test_tensordict_items(self, tmp_path):
        storage = CompressedListStorage(3)
        td = TensorDict({"a": torch.arange(5), "b": {"c": torch.ones(2, 2)}}, [])
        storage.set(0, td)
        ckpt = CompressedListStorageCheckpointer()
        ckpt.dumps(storage, tmp_path)
        storage2 = CompressedListStorage(3)
        ckpt.loads(storage2, tmp_path)
        assert (storage2.get(0) == td).all()

    def test_errors(self, tmp_path):
        ckpt = CompressedListStorageCheckpointer()
        with pytest.raises(RuntimeError, match="empty"):
            ckpt.dumps(CompressedListStorage(3), tmp_path)
        with pytest.raises(TypeError, match="CompressedListStorage, got ListStorage"):
            ckpt.dumps(ListStorage(3), tmp_path)
        storage = CompressedListStorage(3)
        storage.set(0, torch.ones(2))
        ckpt.dumps(storage, tmp_path)
        with pytest.raises(ValueError, match="max_size 3, this storage 5"):
            ckpt.loads(CompressedListStorage(5), tmp_path)

    @pytest.mark.parametrize(
        ("payload", "found"),
        [(torch.zeros(3), "a torch.float32 tensor"), ([1, 2], "list")],
    )
    def test_tensor_entry_that_is_not_bytes_raises(self, tmp_path, payload, found):
        storage = CompressedListStorage(3)
        storage.set(0, TensorDict({"obs": torch.ones(2)}, []))
        ckpt = CompressedListStorageCheckpointer()
        ckpt.dumps(storage, tmp_path)
        file = tmp_path / "compressed_storage.pt"
        state = torch.load(file, weights_only=True)
        state["items"][0][1]["obs"][1] = payload
        torch.save(state, file)
        with pytest.raises(
            CheckpointError,
            match=rf"item 0 key 'obs' is a compressed tensor whose bytes should be a "
            rf"torch.uint8 tensor, got {found}",
        ):
            ckpt.loads(CompressedListStorage(3), tmp_path)


class TestStorageEnsembleCheckpointer:
    def test_round_trip(self, tmp_path):
        ens = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(6))
        ens[0].set(slice(0, 3), torch.tensor([1, 2, 3]))
        ens[1].set(slice(0, 2), torch.tensor([7, 8]))
        StorageEnsembleCheckpointer().dumps(ens, tmp_path)
        assert (tmp_path / "0").is_dir() and (tmp_path / "1").is_dir()
        ens2 = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(6))
        StorageEnsembleCheckpointer().loads(ens2, tmp_path)
        assert ens2[0].get(slice(None)).tolist() == [1, 2, 3]
        assert ens2[1].get(slice(None)).tolist() == [7, 8]

    def test_not_an_ensemble(self, tmp_path):
        with pytest.raises(TypeError, match="StorageEnsemble, got LazyTensorStorage"):
            StorageEnsembleCheckpointer().dumps(LazyTensorStorage(3), tmp_path)


def test_create_infinite_iterator_cycles():
    out = list(itertools.islice(create_infinite_iterator([1, 2, 3]), 7))
    assert out == [1, 2, 3, 1, 2, 3, 1]


def test_default_done_keys_are_torchrl_s_and_the_checkpointers_default():
    import rl.data
    import rl.data.replay_buffers

    assert rl.data.DEFAULT_DONE_KEYS == ("done", "truncated", "terminated")
    assert rl.data.replay_buffers.DEFAULT_DONE_KEYS is rl.data.DEFAULT_DONE_KEYS
    assert TED2Flat().done_keys == set(rl.data.DEFAULT_DONE_KEYS)
