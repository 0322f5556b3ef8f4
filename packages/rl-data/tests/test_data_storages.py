import errno
import gc
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import NonTensorStack, TensorDict, tensorclass

from rl.data import (
    FlatStorageCheckpointer,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    SamplerWithoutReplacement,
    SliceSampler,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorStorage,
    TensorStorageCheckpointer,
)
from rl.data.replay_buffers.storages import Storage

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


class _CountingCheckpointer(TensorStorageCheckpointer):
    def __init__(self):
        self.calls = []

    def dumps(self, storage, path):
        self.calls.append("dumps")
        super().dumps(storage, path)

    def loads(self, storage, path):
        self.calls.append("loads")
        super().loads(storage, path)


class TestStorageArguments:
    """TorchRL's ``Storage(max_size, checkpointer=None, compilable=False)``."""

    def test_storage_checkpointer_is_used_by_the_buffer(self, tmp_path):
        ckpt = _CountingCheckpointer()
        storage = LazyTensorStorage(10)
        Storage.__init__(storage, 10, ckpt, True)  # TorchRL's positional order
        assert storage.checkpointer is ckpt and storage._compilable
        rb = ReplayBuffer(storage=storage)
        rb.extend(torch.arange(3))
        rb.dumps(tmp_path)
        rb2 = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=_CountingCheckpointer())
        rb2.loads(tmp_path)
        assert ckpt.calls == ["dumps"] and rb2.storage.checkpointer.calls == ["loads"]
        assert rb2[:].tolist() == [0, 1, 2]
        with pytest.raises(TypeError, match="checkpointer must have dumps.*object has no dumps"):
            Storage.__init__(ListStorage(3), 3, object())

    def test_list_storage_is_unbounded_by_default(self):
        storage = ListStorage()
        assert storage.max_size == sys.maxsize
        rb = ReplayBuffer(storage=storage, collate_fn=lambda x: x)
        rb.extend(list(range(2000)))
        assert len(rb) == 2000 and rb[1999] == 1999
        assert ListStorage(compilable=True)._compilable

    def test_tensor_storage_device_defaults(self):
        assert TensorStorage(torch.arange(4.0)).device == torch.device("cpu")
        meta = torch.arange(4.0, device="meta")
        assert TensorStorage(meta, device="auto").device == torch.device("meta")
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'storage'"):
            TensorStorage(max_size=3)
        assert len(TensorStorage(None, max_size=3)) == 0
        with pytest.raises(ValueError, match="device='auto' takes the device of the given"):
            TensorStorage(None, max_size=3, device="auto")


def _trajectories(n, ends, start=0):
    """``n`` transitions of a counter ``obs`` that restarts after each end step."""
    obs, nxt, value = [], [], 0.0
    done = torch.zeros(n, 1, dtype=torch.bool)
    for t in range(n):
        obs.append(value)
        nxt.append(value + 1)
        value += 1
        if t in ends:
            done[t] = True
            value = 100.0 * (t + 1)  # the next trajectory starts elsewhere
    obs = torch.tensor(obs).unsqueeze(-1) + start
    nxt = torch.tensor(nxt).unsqueeze(-1) + start
    return TensorDict(
        {
            "obs": obs,
            "pix": {"x": obs.expand(n, 2).clone()},
            "next": {"obs": nxt, "pix": {"x": nxt.expand(n, 2).clone()}, "done": done,
                     "reward": torch.rand(n, 1)},
        },
        batch_size=[n],
    )  # fmt: skip


class TestFlatStorageCheckpointer:
    def test_round_trip_is_exact_and_compact(self, tmp_path):
        data = _trajectories(8, ends={2, 5})
        storage = LazyTensorStorage(5)  # a ring: 8 writes into 5 slots
        rb = ReplayBuffer(storage=storage, checkpointer=FlatStorageCheckpointer())
        rb.extend(data[:4])
        rb.extend(data[4:])
        rb.dumps(tmp_path)
        flat = torch.load(tmp_path / "storage" / "storage_flat.pt", weights_only=True)
        # chronological items 3..7: next obs kept at the end of a trajectory (5) and the
        # last step (7) only, the other next values are the following root values
        keys = [tuple(k) for k in flat["sparse"]["keys"]]
        assert sorted(keys) == [("obs",), ("pix", "x")]
        index = flat["sparse"]["index"][keys.index(("obs",))]
        assert index.tolist() == [2, 4]
        rb2 = ReplayBuffer(storage=LazyTensorStorage(5), checkpointer=FlatStorageCheckpointer())
        rb2.loads(tmp_path)
        assert (rb2[:] == rb[:]).all() and rb2.storage._write_end == storage._write_end
        torch.manual_seed(0)
        a = rb.sample(4)
        torch.manual_seed(0)
        assert (rb2.sample(4) == a).all()

    def test_interleaved_data_stays_exact(self, tmp_path):
        # two environments written alternately: next obs never equals the following root
        a, b = _trajectories(3, ends=set()), _trajectories(3, ends=set(), start=50)
        data = torch.stack([a, b], 1).reshape(-1)
        storage = LazyTensorStorage(10)
        storage.set(slice(0, 6), data)
        ckpt = FlatStorageCheckpointer()
        ckpt.dumps(storage, tmp_path)
        restored = LazyTensorStorage(10)
        ckpt.loads(restored, tmp_path)
        assert (restored[:6] == data).all()

    def test_done_and_reward_keys(self, tmp_path):
        data = _trajectories(4, ends={1})
        data["obs_end"] = torch.zeros(4, 1, dtype=torch.bool)
        data["next", "obs_end"] = data["next", "done"].clone()  # a done entry at the root too
        storage = LazyTensorStorage(10)
        storage.set(slice(0, 4), data)
        ckpt = FlatStorageCheckpointer(done_keys=("obs_end",), reward_keys=("reward",))
        ckpt.dumps(storage, tmp_path)
        flat = torch.load(tmp_path / "storage_flat.pt", weights_only=True)
        # "obs_end" is a done entry: saved whole; "done" is then an ordinary entry
        assert ["obs_end"] not in flat["sparse"]["keys"] and ["done"] not in flat["sparse"]["keys"]
        restored = LazyTensorStorage(10)
        ckpt.loads(restored, tmp_path)
        assert (restored[:4] == data).all()
        with pytest.raises(ValueError, match="saves a storage of TensorDicts along one dim"):
            FlatStorageCheckpointer().dumps(ListStorage(3), tmp_path)


class TestListStorage:
    def test_set_get_in_order(self):
        s = ListStorage(5)
        s.set(0, "a")
        s.set(slice(1, 3), ["b", "c"])
        assert len(s) == 3
        assert s.get(1) == "b"
        assert s.get(torch.tensor([2, 0, 2])) == ["c", "a", "c"]
        s.set(torch.tensor([0, 1]), ["x", "y"])
        assert s.get(slice(None)) == ["x", "y", "c"]

    def test_hole_and_range_errors(self):
        s = ListStorage(3)
        with pytest.raises(IndexError, match="hole"):
            s.set(1, "a")
        with pytest.raises(IndexError, match="out of range"):
            s.set(3, "a")
        with pytest.raises(ValueError, match="2 items for 1 indices"):
            s.set(torch.tensor([0]), ["a", "b"])

    @pytest.mark.parametrize("bad", [0, -3])
    def test_bad_max_size(self, bad):
        with pytest.raises(ValueError, match="max_size must be positive"):
            ListStorage(bad)
        with pytest.raises(TypeError, match="max_size must be an int"):
            ListStorage(2.5)

    def test_state_dict_round_trip(self):
        s = ListStorage(10)
        items = [1, 2.5, "s", torch.arange(3), {"k": [1, 2]}, TensorDict({"a": torch.ones(2)}, [2])]
        s.set(slice(0, len(items)), items)
        state = s.state_dict()
        assert set(state) == {"max_size", "_storage"} and len(state["_storage"]) == 6
        t = ListStorage(10)
        t.load_state_dict(state)
        state["_storage"][3].zero_()  # the loaded items are copies
        assert t.get(slice(0, 5))[:3] == [1, 2.5, "s"]
        torch.testing.assert_close(t.get(3), torch.arange(3))
        assert t.get(4) == {"k": [1, 2]}
        assert (t.get(5) == items[5]).all()

    def test_state_dict_rejects_arbitrary_objects(self):
        s = ListStorage(2)
        s.set(0, object())
        with pytest.raises(TypeError, match="cannot checkpoint an item of type object"):
            s.state_dict()


class TestTensorStorage:
    def test_lazy_allocation_from_structure(self, make_transitions):
        s = LazyTensorStorage(10)
        assert not s.initialized and len(s) == 0
        s.set(slice(0, 4), make_transitions(4))
        assert s.initialized and len(s) == 4
        assert s._storage.batch_size == torch.Size([10])
        assert s._storage["next", "observation"].shape == (10, 3)
        out = s.get(torch.tensor([3, 0]))
        torch.testing.assert_close(out["id"], torch.tensor([3, 0]))
        torch.testing.assert_close(out["next", "reward"], torch.tensor([[6.0], [0.0]]))
        assert out.batch_size == torch.Size([2])

    def test_single_item_write(self, make_transitions):
        s = LazyTensorStorage(4)
        s.set(2, make_transitions(1, start=7)[0])
        assert len(s) == 3
        assert s.get(2)["id"].item() == 7

    def test_stepped_slice_write(self):
        s = LazyTensorStorage(6)
        s.set(slice(0, 6, 2), torch.tensor([1.0, 2.0, 3.0]))
        assert len(s) == 5
        torch.testing.assert_close(s.get(torch.arange(5)), torch.tensor([1.0, 0, 2.0, 0, 3.0]))
        with pytest.raises(ValueError, match="got 2 items for a slice of 3 positions"):
            s.set(slice(0, 6, 2), torch.zeros(2))

    def test_slice_reads_only_valid_items(self, make_transitions):
        s = LazyTensorStorage(10)
        s.set(slice(0, 3), make_transitions(3))
        assert s.get(slice(None))["id"].tolist() == [0, 1, 2]

    def test_plain_tensor_storage(self):
        s = LazyTensorStorage(5)
        s.set(slice(0, 3), torch.arange(3.0))
        torch.testing.assert_close(s.get(torch.tensor([2, 1])), torch.tensor([2.0, 1.0]))
        with pytest.raises(ValueError, match=r"item shape \(2,\) and dtype torch.float32"):
            s.set(slice(3, 5), torch.zeros(2, 2))

    def test_preallocated_storage(self):
        data = TensorDict({"x": torch.zeros(6, 2)}, [6])
        s = TensorStorage(data)
        # as TorchRL: the given items are stored (a dataset to sample from)
        assert s.max_size == 6 and len(s) == 6
        s.set(torch.tensor([4, 5]), TensorDict({"x": torch.ones(2, 2)}, [2]))
        assert len(s) == 6
        rb = ReplayBuffer(storage=TensorStorage(torch.arange(5)), batch_size=3)
        assert len(rb) == 5 and set(rb.sample().tolist()) <= set(range(5))
        assert rb.extend(torch.tensor([10, 11])).tolist() == [0, 1]  # writes start at 0
        assert rb[:].tolist() == [10, 11, 2, 3, 4]
        torch.testing.assert_close(data["x"][4:].sum(), torch.tensor(4.0))
        with pytest.raises(ValueError, match="shape mismatch: max_size=3 differs from the .* 6"):
            TensorStorage(data, max_size=3)
        with pytest.raises(ValueError, match="Expected storage to be non-null"):
            TensorStorage(None)
        with pytest.raises(
            TypeError, match="stores tensors, TensorDicts, tensorclasses and pytrees .* got int"
        ):
            TensorStorage([1, 2])

    def test_missing_key_names_the_key(self, make_transitions):
        s = LazyTensorStorage(10)
        s.set(slice(0, 2), make_transitions(2))
        bad = make_transitions(2).exclude(("next", "reward"))
        with pytest.raises(KeyError, match=r"missing the key \('next', 'reward'\)"):
            s.set(slice(2, 4), bad)

    def test_extra_key_names_the_key(self, make_transitions):
        s = LazyTensorStorage(10)
        s.set(slice(0, 2), make_transitions(2))
        bad = make_transitions(2)
        bad["extra"] = torch.zeros(2)
        with pytest.raises(KeyError, match="the key 'extra' that the storage does not hold"):
            s.set(slice(2, 4), bad)

    def test_shape_mismatch_names_the_key(self, make_transitions):
        s = LazyTensorStorage(10)
        s.set(slice(0, 2), make_transitions(2))
        with pytest.raises(ValueError, match=r"key 'observation' has item shape \(4,\), .* \(3,\)"):
            s.set(slice(2, 4), make_transitions(2, obs_dim=4))

    def test_dtype_mismatch_names_the_key(self, make_transitions):
        s = LazyTensorStorage(10)
        s.set(slice(0, 2), make_transitions(2))
        bad = make_transitions(2)
        bad["next", "done"] = torch.zeros(2, 1, dtype=torch.uint8)
        with pytest.raises(TypeError, match=r"key \('next', 'done'\) has dtype torch.uint8"):
            s.set(slice(2, 4), bad)

    def test_wrong_container_type(self):
        s = LazyTensorStorage(10)
        with pytest.raises(TypeError, match="use ListStorage"):
            s.set(slice(0, 2), [1, 2])
        s.set(slice(0, 2), TensorDict({"a": torch.zeros(2)}, [2]))
        with pytest.raises(TypeError, match="holds TensorDicts, got Tensor"):
            s.set(slice(2, 4), torch.zeros(2))

    def test_out_of_range_indices(self):
        s = LazyTensorStorage(4)
        with pytest.raises(IndexError, match=r"\[0, 4\)"):
            s.set(torch.tensor([1, 4]), torch.zeros(2))

    def test_empty_read_raises(self):
        with pytest.raises(RuntimeError, match="cannot read from an empty LazyTensorStorage"):
            LazyTensorStorage(4).get(torch.tensor([0]))

    def test_item_batch_dims_are_kept(self):
        s = LazyTensorStorage(5)
        s.set(slice(0, 2), TensorDict({"a": torch.arange(6.0).reshape(2, 3)}, [2, 3]))
        out = s.get(torch.tensor([1]))
        assert out.batch_size == torch.Size([1, 3])
        with pytest.raises(ValueError, match=r"item batch_size \[4\]"):
            s.set(slice(2, 4), TensorDict({"a": torch.zeros(2, 4)}, [2, 4]))

    def test_state_dict_round_trip(self, make_transitions):
        s = LazyTensorStorage(10)
        s.set(slice(0, 6), make_transitions(6))
        t = LazyTensorStorage(10)
        t.load_state_dict(s.state_dict())
        assert len(t) == 6
        assert (t.get(slice(None)) == s.get(slice(None))).all()
        with pytest.raises(ValueError, match="max_size 10, this storage 5"):
            LazyTensorStorage(5).load_state_dict(s.state_dict())

    def test_is_a_storage(self):
        assert isinstance(LazyTensorStorage(3), Storage)
        assert "LazyTensorStorage(max_size=3, len=0" in repr(LazyTensorStorage(3))

    @pytest.mark.gpu
    @requires_cuda
    def test_cuda_storage(self, make_transitions):
        s = LazyTensorStorage(10, device="cuda")
        s.set(slice(0, 4), make_transitions(4))
        out = s.get(torch.tensor([1, 2]))
        assert out["observation"].device.type == "cuda"
        assert out["id"].tolist() == [1, 2]


class TestLazyMemmapStorage:
    def test_files_on_disk(self, tmp_path, make_transitions):
        s = LazyMemmapStorage(100, scratch_dir=tmp_path)
        s.set(slice(0, 10), make_transitions(10))
        assert (tmp_path / "observation.memmap").exists()
        assert (tmp_path / "next" / "reward.memmap").exists()
        out = s.get(torch.tensor([9, 0]))
        assert out["id"].tolist() == [9, 0]
        assert type(out["observation"]) is torch.Tensor

    def test_reopen_in_a_new_process(self, tmp_path, make_transitions):
        s = LazyMemmapStorage(100, scratch_dir=tmp_path)
        s.set(slice(0, 30), make_transitions(30))
        del s
        code = textwrap.dedent(
            f"""
            import torch
            from rl.data import LazyMemmapStorage
            s = LazyMemmapStorage(100, scratch_dir={str(tmp_path)!r})
            assert len(s) == 30, len(s)
            out = s.get(torch.arange(30))
            assert out["id"].tolist() == list(range(30))
            assert out["next", "observation"][:, 0].tolist() == [float(i + 1) for i in range(30)]
            s.set(slice(30, 35), s.get(torch.arange(5)))
            print("ok")
            """
        )
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        again = LazyMemmapStorage(100, scratch_dir=tmp_path)
        assert len(again) == 35
        assert again.get(torch.tensor([34]))["id"].item() == 4

    def test_buffer_on_a_reopened_wrapped_storage(self, tmp_path, make_transitions):
        rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(10, scratch_dir=tmp_path))
        rb.extend(make_transitions(13))  # wraps: positions 0-2 hold items 10-12
        del rb
        again = TensorDictPrioritizedReplayBuffer(
            alpha=1.0, beta=0.5, storage=LazyMemmapStorage(10, scratch_dir=tmp_path)
        )
        assert len(again) == 10
        # the old items are known to the sampler (default priority) and can be sampled
        assert again.sampler._sum_tree.query(0, 10) == pytest.approx(10.0)
        assert set(again.sample(200)["id"].tolist()) == set(range(3, 13))
        # the next write continues after item 12, overwriting the oldest item (3)
        assert again.extend(make_transitions(1, start=13)).tolist() == [3]
        assert sorted(again[:]["id"].tolist()) == list(range(4, 14))

    def test_reopen_wrong_size_or_existsok(self, tmp_path):
        s = LazyMemmapStorage(10, scratch_dir=tmp_path)
        s.set(slice(0, 2), TensorDict({"a": torch.zeros(2)}, [2]))
        with pytest.raises(ValueError, match="max_size 10, got max_size=20"):
            LazyMemmapStorage(20, scratch_dir=tmp_path)
        with pytest.raises(FileExistsError, match="existsok=False"):
            LazyMemmapStorage(10, scratch_dir=tmp_path, existsok=False)

    def test_unwritable_scratch_dir(self, tmp_path):
        blocker = tmp_path / "a_file"
        blocker.write_text("x")
        with pytest.raises(PermissionError, match="scratch_dir '.*a_file/sub' cannot be created"):
            LazyMemmapStorage(10, scratch_dir=blocker / "sub")
        with pytest.raises(NotADirectoryError, match="is not a directory"):
            LazyMemmapStorage(10, scratch_dir=blocker)

    def test_read_only_directory(self):
        # /proc/self accepts no new files, even for root
        with pytest.raises(PermissionError, match="scratch_dir '/proc/self' is not writable"):
            LazyMemmapStorage(10, scratch_dir="/proc/self")

    def test_full_disk_is_an_error_at_allocation(self, tmp_path, monkeypatch):
        def no_space(fd, offset, length):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "posix_fallocate", no_space)
        s = LazyMemmapStorage(1000, scratch_dir=tmp_path)
        with pytest.raises(OSError, match=r"not enough free space for max_size=1000 items"):
            s.set(slice(0, 2), TensorDict({"a": torch.zeros(2, 4)}, [2]))

    def test_files_are_allocated_up_front(self, tmp_path):
        s = LazyMemmapStorage(1000, scratch_dir=tmp_path)
        s.set(slice(0, 1), TensorDict({"a": torch.zeros(1, 64)}, [1]))
        assert os.stat(tmp_path / "a.memmap").st_blocks * 512 >= 1000 * 64 * 4

    def test_temporary_dir_is_removed(self):
        s = LazyMemmapStorage(10)
        s.set(slice(0, 2), torch.arange(2.0))
        path = s.scratch_dir
        assert path.exists()
        del s
        assert not path.exists()

    @pytest.mark.parametrize(
        "user_dir, auto_cleanup, removed",
        [
            (False, None, True),
            (False, False, False),
            (True, None, False),
            (True, True, True),
            (True, False, False),
        ],
    )
    def test_auto_cleanup_on_collection(self, tmp_path, user_dir, auto_cleanup, removed):
        s = LazyMemmapStorage(
            4, scratch_dir=tmp_path / "s" if user_dir else None, auto_cleanup=auto_cleanup
        )
        s.set(slice(0, 2), torch.arange(2.0))
        path = s.scratch_dir
        assert any(path.iterdir())
        del s
        assert path.exists() is not removed
        if path.exists() and not user_dir:
            LazyMemmapStorage(4, scratch_dir=path, auto_cleanup=True).cleanup()

    @pytest.mark.parametrize("auto_cleanup, removed", [(None, False), (True, True)])
    def test_auto_cleanup_at_interpreter_exit(self, tmp_path, auto_cleanup, removed):
        # the storage stays referenced (a module global) until the interpreter exits
        code = textwrap.dedent(
            f"""
            import torch
            from rl.data import LazyMemmapStorage
            keep = LazyMemmapStorage(4, scratch_dir={str(tmp_path / "s")!r},
                                     auto_cleanup={auto_cleanup!r})
            keep.set(slice(0, 2), torch.arange(2.0))
            """
        )
        subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
        assert (tmp_path / "s").exists() is not removed

    def test_cleanup_removes_user_dir_once(self, tmp_path):
        s = LazyMemmapStorage(4, scratch_dir=tmp_path / "s")
        s.set(slice(0, 2), torch.arange(2.0))
        assert len(LazyMemmapStorage(4, scratch_dir=tmp_path / "s")) == 2
        assert s.cleanup() is True
        assert not (tmp_path / "s").exists()
        assert s.cleanup() is False

    def test_cleanup_cancels_removal_at_collection(self, tmp_path):
        s = LazyMemmapStorage(4, scratch_dir=tmp_path / "s", auto_cleanup=True)
        assert s.cleanup() is False  # never written: no files to remove
        assert not (tmp_path / "s").exists()
        # a new storage in the same place is not removed when the old one is collected
        t = LazyMemmapStorage(4, scratch_dir=tmp_path / "s", auto_cleanup=False)
        t.set(slice(0, 1), torch.ones(1))
        del s
        assert len(LazyMemmapStorage(4, scratch_dir=tmp_path / "s")) == 1

    def test_refused_reopen_keeps_the_existing_data(self, tmp_path):
        """A constructor that refuses an existing storage (existsok=False, another
        max_size) does not plan the removal of that storage's files."""
        s = LazyMemmapStorage(4, scratch_dir=tmp_path / "s")
        s.set(slice(0, 2), torch.arange(2.0))
        del s
        with pytest.raises(FileExistsError, match="existsok=False"):
            LazyMemmapStorage(4, scratch_dir=tmp_path / "s", existsok=False, auto_cleanup=True)
        with pytest.raises(ValueError, match="max_size"):
            LazyMemmapStorage(8, scratch_dir=tmp_path / "s", auto_cleanup=True)
        gc.collect()
        reopened = LazyMemmapStorage(4, scratch_dir=tmp_path / "s")
        assert len(reopened) == 2
        assert reopened.get(torch.arange(2)).tolist() == [0.0, 1.0]

    def test_auto_cleanup_rejects_non_bool(self):
        with pytest.raises(TypeError, match="auto_cleanup must be None, True or False, got 'yes'"):
            LazyMemmapStorage(4, auto_cleanup="yes")

    @pytest.mark.parametrize("user_dir", [True, False])
    def test_shared_init_first_writers_race(self, tmp_path, user_dir):
        ctx = multiprocessing.get_context("fork")
        storage = LazyMemmapStorage(
            8, scratch_dir=tmp_path / "s" if user_dir else None, shared_init=True
        )
        barrier, answers = ctx.Barrier(2), ctx.Queue()
        procs = [
            ctx.Process(target=_shared_init_writer, args=(storage, rank, barrier, answers))
            for rank in range(2)
        ]
        for p in procs:
            p.start()
        got = sorted(answers.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        # both processes ended on the same files, in the shared directory
        for _rank, rows, scratch_dir in got:
            assert rows == [0.0, 1.0, 10.0, 11.0] and scratch_dir == str(storage.scratch_dir)
        reopened = LazyMemmapStorage(8, scratch_dir=storage.scratch_dir)
        obs = reopened.get(torch.arange(4))["obs"]
        torch.testing.assert_close(
            obs, torch.tensor([[0.0, 0.0], [1.0, 1.0], [10.0, 10.0], [11.0, 11.0]])
        )

    def test_without_shared_init_second_allocation_fails(self, tmp_path):
        a = LazyMemmapStorage(4, scratch_dir=tmp_path)
        b = LazyMemmapStorage(4, scratch_dir=tmp_path)
        a.set(slice(0, 1), TensorDict({"obs": torch.zeros(1, 2)}, [1]))
        with pytest.raises(FileExistsError, match="already holds a storage written by another"):
            b.set(slice(1, 2), TensorDict({"obs": torch.ones(1, 2)}, [1]))
        c = LazyMemmapStorage(4, scratch_dir=tmp_path / "c", shared_init=True)
        d = LazyMemmapStorage(4, scratch_dir=tmp_path / "c", shared_init=True)
        c.set(slice(0, 1), TensorDict({"obs": torch.zeros(1, 2)}, [1]))
        d.set(slice(1, 2), TensorDict({"obs": torch.ones(1, 2)}, [1]))
        torch.testing.assert_close(c.get(torch.tensor([1]))["obs"], torch.ones(1, 2))

    def test_shared_init_copies_keep_the_temporary_dir(self):
        shared = LazyMemmapStorage(4, shared_init=True)
        own = LazyMemmapStorage(4)
        shared_copy, own_copy = pickle.loads(pickle.dumps((shared, own)))
        assert shared_copy.scratch_dir == shared.scratch_dir
        assert own_copy.scratch_dir != own.scratch_dir
        shared_copy.set(slice(0, 1), torch.full((1, 2), 3.0))
        shared.set(slice(1, 2), torch.full((1, 2), 4.0))
        torch.testing.assert_close(shared_copy.get(torch.tensor([1])), torch.full((1, 2), 4.0))
        own_copy.cleanup()

    def test_shared_init_not_compilable(self):
        with pytest.raises(ValueError, match="shared_init=True\\) cannot be compilable=True"):
            LazyMemmapStorage(4, shared_init=True, compilable=True)

    def test_plain_tensor_reopen(self, tmp_path):
        s = LazyMemmapStorage(8, scratch_dir=tmp_path)
        s.set(slice(0, 3), torch.arange(6, dtype=torch.int32).reshape(3, 2))
        t = LazyMemmapStorage(8, scratch_dir=tmp_path)
        assert len(t) == 3
        torch.testing.assert_close(
            t.get(torch.tensor([2])), torch.tensor([[4, 5]], dtype=torch.int32)
        )

    def test_checks_structure(self, tmp_path, make_transitions):
        s = LazyMemmapStorage(10, scratch_dir=tmp_path)
        s.set(slice(0, 2), make_transitions(2))
        with pytest.raises(KeyError, match="'observation'"):
            s.set(slice(2, 4), make_transitions(2).exclude("observation"))

    def test_state_dict_into_fresh_directory(self, tmp_path, make_transitions):
        s = LazyMemmapStorage(10, scratch_dir=tmp_path / "a")
        s.set(slice(0, 5), make_transitions(5))
        t = LazyMemmapStorage(10, scratch_dir=tmp_path / "b")
        t.load_state_dict(s.state_dict())
        assert len(t) == 5
        assert t.get(torch.arange(5))["id"].tolist() == list(range(5))
        assert len(LazyMemmapStorage(10, scratch_dir=tmp_path / "b")) == 5

    def test_counter_file_is_tiny(self, tmp_path):
        s = LazyMemmapStorage(10, scratch_dir=tmp_path)
        s.set(slice(0, 1), torch.zeros(1))
        assert os.path.getsize(tmp_path / "rl_storage_len.bin") == 5 * np.dtype(np.int64).itemsize


def _shared_init_writer(storage, rank, barrier, answers):
    barrier.wait()  # both make their first write at once
    rows = torch.arange(2.0) + 10 * rank
    data = TensorDict({"obs": rows[:, None].expand(2, 2).clone()}, [2])
    storage.set(slice(2 * rank, 2 * rank + 2), data)
    barrier.wait()  # each then reads the other's rows through its own mapping
    answers.put(
        (rank, storage.get(torch.arange(4))["obs"][:, 0].tolist(), str(storage.scratch_dir))
    )


@tensorclass
class _Inner:
    z: torch.Tensor


@tensorclass
class _Pair:
    x: torch.Tensor
    nested: TensorDict
    inner: _Inner


def _pytree(n: int, offset: int = 0) -> dict:
    i = torch.arange(offset, offset + n)
    return {"a": i, "b": {"c": [i[:, None] * 2.0, (-i[:, None, None].expand(n, 2, 3),)]}, 30: i}


@pytest.mark.parametrize("storage_cls", [LazyTensorStorage, LazyMemmapStorage])
class TestPytreeAndTensorclassItems:
    """As TorchRL: tensor storages keep pytrees of tensors and tensorclasses."""

    def test_pytree_set_get(self, storage_cls):
        storage = storage_cls(10)
        storage.set(range(3), _pytree(3))
        storage.set(torch.tensor([3, 4]), _pytree(2, offset=3))
        out = storage.get(torch.tensor([4, 0, 2]))
        assert set(out) == {"a", "b", 30}
        assert out["a"].tolist() == [4, 0, 2] and out[30].tolist() == [4, 0, 2]
        assert out["b"]["c"][0].tolist() == [[8.0], [0.0], [4.0]]
        assert isinstance(out["b"]["c"][1], tuple) and out["b"]["c"][1][0].shape == (3, 2, 3)
        torch.testing.assert_close(out["b"]["c"][1][0][:, 1, 2], torch.tensor([-4, 0, -2]))
        assert storage.get(1)["a"].item() == 1  # one item: no batch dim

    def test_pytree_structure_is_checked(self, storage_cls):
        storage = storage_cls(10)
        storage.set(range(3), _pytree(3))
        with pytest.raises(ValueError, match="the storage holds items of structure"):
            storage.set(range(3, 5), {"a": torch.zeros(2)})
        with pytest.raises(TypeError, match="pytrees .* of tensors, got str"):
            storage.set(range(3, 5), {"a": "text"})

    def test_pytree_state_dict(self, storage_cls):
        storage = storage_cls(10)
        storage.set(range(3), _pytree(3))
        other = storage_cls(10)  # not written to yet: the structure comes from the state
        other.load_state_dict(storage.state_dict())
        assert len(other) == 3
        assert other.get(torch.tensor([2]))["b"]["c"][0].tolist() == [[4.0]]

    def test_tensorclass(self, storage_cls):
        storage = storage_cls(10)
        data = _Pair(
            x=torch.arange(4),
            nested=TensorDict({"y": -torch.arange(4)}, [4]),
            inner=_Inner(z=10 * torch.arange(4), batch_size=[4]),
            batch_size=[4],
        )
        storage.set(range(4), data)
        out = storage.get(torch.tensor([3, 1]))
        assert type(out) is _Pair and out.batch_size == (2,)
        assert out.x.tolist() == [3, 1] and out.nested["y"].tolist() == [-3, -1]
        assert type(out.inner) is _Inner and out.inner.z.tolist() == [30, 10]
        other = storage_cls(10)
        with pytest.raises(RuntimeError, match="write one such item to the storage before"):
            other.load_state_dict(storage.state_dict())
        other.set(0, data[0])
        other.load_state_dict(storage.state_dict())
        assert other.get(torch.tensor([2])).x.tolist() == [2]

    def test_a_list_is_a_batch_to_stack(self, storage_cls):
        rb = ReplayBuffer(storage=storage_cls(20), sampler=SamplerWithoutReplacement())
        rb.extend([(torch.full((2,), i), {"a": torch.full((2,), i)}) for i in range(10)])
        assert len(rb) == 10
        first, second = rb.sample(10)
        assert sorted(first[:, 0].tolist()) == list(range(10))
        torch.testing.assert_close(first, second["a"])
        with pytest.raises(RuntimeError, match="Stacking the elements of the list"):
            rb.extend([torch.zeros(4), torch.zeros(1)])


def test_memmap_pytree_reopens_with_its_structure(tmp_path):
    storage = LazyMemmapStorage(10, scratch_dir=tmp_path)
    storage.set(range(3), _pytree(3))
    reopened = LazyMemmapStorage(10, scratch_dir=tmp_path)
    assert len(reopened) == 3
    out = reopened.get(torch.tensor([1, 2]))
    assert out["a"].tolist() == [1, 2] and isinstance(out["b"]["c"], list)


def _with_text(ids: list[int]) -> TensorDict:
    """Items with a tensor ``"id"`` and a string ``"name"`` (``"n<id>"``), nested too."""
    names = [f"n{i}" for i in ids]
    return TensorDict(
        {
            "id": torch.tensor(ids),
            "name": NonTensorStack(*names),
            ("meta", "tag"): NonTensorStack(*[name.upper() for name in names]),
        },
        batch_size=[len(ids)],
    )


class TestNonTensorEntries:
    @pytest.fixture(params=["tensor", "memmap"])
    def make(self, request, tmp_path):
        if request.param == "tensor":
            return lambda n: LazyTensorStorage(n)
        return lambda n: LazyMemmapStorage(n, scratch_dir=tmp_path / f"s{n}", existsok=False)

    def test_writes_and_reads(self, make):
        storage = make(4)
        storage.set(torch.arange(3), _with_text([0, 1, 2]))
        storage.set(3, _with_text([3])[0])
        storage.set(torch.tensor([0, 1]), _with_text([4, 5]))  # the ring wraps around
        out = storage.get(torch.tensor([3, 0, 2]))
        assert out["id"].tolist() == [3, 4, 2]
        assert out["name"] == ["n3", "n4", "n2"]
        assert out["meta", "tag"] == ["N3", "N4", "N2"]
        assert storage.get(slice(1, 3))["name"] == ["n5", "n2"]
        assert storage.get(1)["name"] == "n5"

    def test_state_dict_round_trip(self, make):
        storage = make(6)
        storage.set(torch.arange(4), _with_text([7, 8, 9, 10]))
        # a memory-mapped one into a temporary directory of its own
        restored = LazyMemmapStorage(6) if isinstance(storage, LazyMemmapStorage) else make(6)
        restored.load_state_dict(storage.state_dict())
        assert len(restored) == 4
        out = restored.get(torch.tensor([3, 1]))
        assert out["id"].tolist() == [10, 8]
        assert out["name"] == ["n10", "n8"] and out["meta", "tag"] == ["N10", "N8"]

    def test_state_dict_names_the_entry_it_cannot_save(self, make):
        storage = make(4)
        data = _with_text([0, 1])
        data["where"] = NonTensorStack(Path("/a"), Path("/b"))
        storage.set(torch.arange(2), data)
        with pytest.raises(TypeError, match=r"entry 'where'.*PosixPath"):
            storage.state_dict()

    def test_memmap_reopen_keeps_the_values(self, tmp_path):
        storage = LazyMemmapStorage(4, scratch_dir=tmp_path)
        storage.set(torch.arange(3), _with_text([0, 1, 2]))
        storage.set(1, _with_text([9])[0])
        reopened = LazyMemmapStorage(4, scratch_dir=tmp_path)
        assert len(reopened) == 3
        assert reopened.get(torch.arange(3))["name"] == ["n0", "n9", "n2"]

    def test_memmap_recovery_moves_the_values_with_their_rows(self, tmp_path):
        storage = LazyMemmapStorage(6, scratch_dir=tmp_path)
        storage.set(torch.arange(6), _with_text(list(range(6))))
        counter = np.memmap(tmp_path / "rl_storage_len.bin", dtype=np.int64, mode="r+")
        counter[2], counter[3] = 0, 2  # a write of rows 0 and 1 was in flight at a kill
        counter.flush()
        reopened = LazyMemmapStorage(6, scratch_dir=tmp_path)
        out = reopened.get(torch.arange(len(reopened)))
        assert len(reopened) == 4 and sorted(out["id"].tolist()) == [2, 3, 4, 5]
        assert out["name"] == [f"n{i}" for i in out["id"].tolist()]

    def test_slices_of_text(self, make):
        storage = make(8)
        rb = ReplayBuffer(
            storage=storage,
            sampler=SliceSampler(slice_len=2, traj_key="episode"),
            batch_size=4,
        )
        data = _with_text(list(range(8)))
        data["episode"] = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
        rb.extend(data)
        sample = rb.sample()
        ids = sample["id"].tolist()
        assert sample["name"] == [f"n{i}" for i in ids]
        for window in torch.tensor(ids).split(2):
            assert window[1] == window[0] + 1 and window[0] // 4 == window[1] // 4

    def test_buffer_rewrites_items_in_place(self, make):
        rb = TensorDictReplayBuffer(storage=make(6), batch_size=2)
        rb.extend(_with_text([1, 2, 3]))  # the storage also holds the buffer's "index"
        rb[0] = _with_text([7])[0]
        rb[torch.tensor([1, 2])] = _with_text([5, 6])
        assert rb[0:3]["name"] == ["n7", "n5", "n6"]
        assert rb[0:3]["id"].tolist() == [7, 5, 6]
        assert rb[0:3]["index"].tolist() == [0, 1, 2]

    def test_buffer_rewrites_part_of_the_entries_by_negative_positions(self, make):
        # positions count over the filled items, as for a storage of tensors only
        rb = ReplayBuffer(storage=make(6), batch_size=2)
        data = _with_text([1, 2, 3])
        data["x"] = torch.zeros(3)
        rb.extend(data)
        rb[-1:] = TensorDict({"x": torch.ones(1)}, [1])
        rb[-3] = TensorDict({"x": torch.tensor(2.0)}, [])
        rb[torch.tensor([-2])] = TensorDict({"x": torch.tensor([3.0])}, [1])
        assert len(rb) == 3
        assert rb[0:3]["x"].tolist() == [2.0, 3.0, 1.0]
        assert rb[0:3]["id"].tolist() == [1, 2, 3]
        assert rb[0:3]["name"] == ["n1", "n2", "n3"]

    def test_memmap_refuses_text_in_items_with_batch_dims(self, tmp_path):
        # tensordict cannot write the rows of a memory-mapped stack of stacks: refused
        # before anything is allocated, naming the entry (a plain storage keeps them)
        names = NonTensorStack(*[NonTensorStack(f"e{b}t0", f"e{b}t1") for b in range(2)])
        data = TensorDict({"id": torch.arange(4).view(2, 2), "name": names}, [2, 2])
        plain = LazyTensorStorage(8, ndim=2)
        plain.set(torch.arange(2), data)
        assert plain.get(torch.tensor([1]))["name"] == [["e1t0", "e1t1"]]
        storage = LazyMemmapStorage(8, ndim=2, scratch_dir=tmp_path / "m")
        with pytest.raises(NotImplementedError, match=r"entry 'name' .* batch_size \[2\]"):
            storage.set(torch.arange(2), data)
        assert not storage.initialized and os.listdir(tmp_path / "m") == []

    def test_errors_name_the_key(self, make):
        storage = make(4)
        storage.set(torch.arange(2), _with_text([0, 1]))
        with pytest.raises(KeyError, match=r"missing the key 'name' held by the storage"):
            storage.set(torch.arange(2), _with_text([0, 1]).exclude("name"))
        bad = _with_text([0, 1])
        bad["name"] = torch.zeros(2)
        with pytest.raises(
            TypeError, match=r"key 'name' holds Tensor, the storage holds non-tensor"
        ):
            storage.set(torch.arange(2), bad)


def _shared_tensor_writer(storage, rank, barrier, answers):
    rows = torch.arange(2.0) + 10 * rank
    data = TensorDict({"obs": rows[:, None].expand(2, 2).clone()}, [2])
    barrier.wait(timeout=60)  # both make their first write at once
    storage.set(torch.arange(2) + 2 * rank, data)
    barrier.wait(timeout=60)  # each then reads the other's rows
    other = 1 - rank
    answers.put((rank, storage.get(torch.arange(2) + 2 * other)["obs"][:, 0].tolist()))
    barrier.wait(timeout=60)  # the parent reads after both


class TestLazyTensorStorageSharedInit:
    def test_two_processes_share_one_storage(self):
        ctx = multiprocessing.get_context("fork")
        storage = LazyTensorStorage(8, shared_init=True, cleanup_memmap=True)
        scratch_dir = storage.scratch_dir
        assert scratch_dir.is_dir() and not storage.initialized
        barrier, answers = ctx.Barrier(3), ctx.Queue()
        procs = [
            ctx.Process(target=_shared_tensor_writer, args=(storage, rank, barrier, answers))
            for rank in range(2)
        ]
        try:
            for p in procs:
                p.start()
            # with timeouts: a child that fails breaks the barrier instead of hanging the
            # parent (and the children left waiting on it)
            barrier.wait(timeout=60)
            barrier.wait(timeout=60)
            got = dict(answers.get(timeout=60) for _ in procs)
            barrier.wait(timeout=60)
            for p in procs:
                p.join(timeout=60)
                assert p.exitcode == 0
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join()
        assert multiprocessing.active_children() == []
        assert got == {0: [10.0, 11.0], 1: [0.0, 1.0]}  # each read the other's rows
        # the parent never wrote: its first read opens the files the children made
        obs = storage.get(torch.arange(4))["obs"]
        torch.testing.assert_close(obs[:, 1], torch.tensor([0.0, 1.0, 10.0, 11.0]))
        assert scratch_dir.is_dir()  # the children's exit did not remove it
        del storage, obs
        gc.collect()
        assert not scratch_dir.exists()

    def test_pickled_copy_shares_the_rows(self):
        storage = LazyTensorStorage(4, shared_init=True)
        copy = pickle.loads(pickle.dumps(storage))
        assert copy.scratch_dir == storage.scratch_dir
        copy.set(torch.tensor([0, 1]), TensorDict({"x": torch.tensor([5, 6])}, [2]))
        storage.set(torch.tensor([2]), TensorDict({"x": torch.tensor([7])}, [1]))
        assert copy.get(torch.tensor([2]))["x"].tolist() == [7]
        assert storage.get(torch.tensor([1, 0]))["x"].tolist() == [6, 5]
        del copy
        gc.collect()
        assert storage.scratch_dir.is_dir()  # a copy never removes the directory

    def test_cleanup_memmap_false_keeps_the_directory(self):
        storage = LazyTensorStorage(4, shared_init=True, cleanup_memmap=False)
        storage.set(torch.tensor([0]), TensorDict({"x": torch.tensor([1])}, [1]))
        scratch_dir = storage.scratch_dir
        del storage
        gc.collect()
        assert scratch_dir.is_dir()
        assert LazyMemmapStorage(4, scratch_dir=scratch_dir).get(torch.tensor([0]))[
            "x"
        ].tolist() == [1]
        shutil.rmtree(scratch_dir)

    def test_read_before_any_write(self):
        storage = LazyTensorStorage(4, shared_init=True)
        with pytest.raises(RuntimeError, match="cannot read from an empty LazyTensorStorage"):
            storage.get(torch.tensor([0]))

    @pytest.mark.parametrize("kind", ["tensor", "memmap"])
    def test_non_tensor_entries_are_refused(self, kind):
        # each process would keep its own copy of the strings (the file holding the last
        # writer's): refused at the first write, naming the entry
        if kind == "tensor":
            storage = LazyTensorStorage(4, shared_init=True)
        else:
            storage = LazyMemmapStorage(4, shared_init=True)
        with pytest.raises(TypeError, match=r"entry 'name' holds non-tensor data"):
            storage.set(torch.arange(2), _with_text([0, 1]))
        assert not storage.initialized
        assert sorted(os.listdir(storage.scratch_dir)) == []  # nothing allocated

    def test_not_compilable_and_cpu_only(self):
        with pytest.raises(RuntimeError, match=r"shared_init=True\) cannot be compilable=True"):
            LazyTensorStorage(4, shared_init=True, compilable=True)
        storage = LazyTensorStorage(4, device="meta", shared_init=True)
        with pytest.warns(UserWarning, match="device='meta' cannot be honored"):
            storage.set(torch.tensor([1]), TensorDict({"x": torch.tensor([3])}, [1]))
        assert storage.device == torch.device("cpu")
        assert storage.get(torch.tensor([1]))["x"].tolist() == [3]
        plain = LazyTensorStorage(4)
        assert plain.scratch_dir is None and not plain.shared_init and plain.cleanup_memmap
