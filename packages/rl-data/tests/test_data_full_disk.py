"""A full disk while saving a buffer or creating a memory-mapped storage: the error names
the file (or directory) and the full disk, and nothing half-written stays behind.

``TestRealFullDisk`` runs the three cases on a real 256 KiB tmpfs, mounted in a private
user and mount namespace (``unshare -Urm``, no root needed where the kernel allows user
namespaces; skipped elsewhere). The other tests make the kernel's ``ENOSPC`` appear where
a file system reports it (``fsync``, block reservation).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from tensordict import TensorDict

from rl.data import LazyMemmapStorage, LazyTensorStorage, PrioritizedSampler, ReplayBuffer


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


class TestDumps:
    def test_full_disk_at_fsync_names_the_file(self, tmp_path, monkeypatch):
        rb = ReplayBuffer(storage=LazyTensorStorage(100))
        rb.extend(torch.arange(3))
        rb.dumps(tmp_path)
        rb.extend(torch.arange(3, 50))
        monkeypatch.setattr(os, "fsync", _no_space)
        with pytest.raises(
            OSError,
            match=r"cannot write '.*replay_buffer.pt': no space left on device \(the disk is "
            r"full; .* [kMG]B free once the partial file was removed\)",
        ) as info:
            rb.dumps(tmp_path)
        assert info.value.errno == errno.ENOSPC
        monkeypatch.undo()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["replay_buffer.pt"]
        again = ReplayBuffer(storage=LazyTensorStorage(100))
        again.loads(tmp_path)
        assert again[:].tolist() == [0, 1, 2]  # the previous checkpoint

    def test_full_disk_in_a_component_dump(self, tmp_path, monkeypatch):
        sampler = PrioritizedSampler(10, alpha=0.5, beta=0.5)
        monkeypatch.setattr(os, "fsync", _no_space)
        with pytest.raises(OSError, match=r"cannot write '.*state.pt': no space left on device"):
            sampler.dumps(tmp_path)
        assert list(tmp_path.iterdir()) == []


class TestMemmapAllocation:
    def test_files_are_removed_and_the_error_names_the_directory(self, tmp_path, monkeypatch):
        (tmp_path / "notes.txt").write_text("the user's own file")
        monkeypatch.setattr(os, "posix_fallocate", _no_space)
        s = LazyMemmapStorage(1000, scratch_dir=tmp_path)
        data = TensorDict({"a": torch.zeros(2, 4), ("next", "b"): torch.zeros(2, 8)}, [2])
        with pytest.raises(
            OSError,
            match=rf"scratch_dir '{tmp_path}' has not enough free space for max_size=1000 "
            r"items: 48.0 kB needed, .* [kMG]B free \(the disk is full\); the files created for "
            r"them were removed",
        ) as info:
            s.set(slice(0, 2), data)
        assert info.value.errno == errno.ENOSPC
        assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
        # with space again, the same storage allocates
        monkeypatch.undo()
        s.set(slice(0, 2), data)
        assert len(LazyMemmapStorage(1000, scratch_dir=tmp_path)) == 2

    def test_other_errors_also_remove_the_files(self, tmp_path, monkeypatch):
        def broken(fd, offset, length):
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "posix_fallocate", broken)
        s = LazyMemmapStorage(10, scratch_dir=tmp_path)
        with pytest.raises(OSError, match="Input/output error"):
            s.set(slice(0, 2), torch.zeros(2, 3))
        assert list(tmp_path.iterdir()) == []


CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import torch
    from tensordict import TensorDict
    from rl.data import LazyMemmapStorage, LazyTensorStorage, ReplayBuffer

    root = Path(sys.argv[1])
    out = {}

    def run(name, fn, where):
        try:
            fn()
            out[name] = {"errno": None, "error": None}
        except OSError as err:
            out[name] = {"errno": err.errno, "error": str(err)}
        out[name]["left"] = sorted(str(p.relative_to(root)) for p in where.rglob("*"))

    rb = ReplayBuffer(storage=LazyTensorStorage(100_000))
    rb.extend(torch.arange(3))
    rb.dumps(root / "rb")  # fits
    rb.extend(torch.zeros(100_000 - 3, dtype=torch.int64))  # 800 KB: does not
    run("dumps", lambda: rb.dumps(root / "rb"), root / "rb")
    again = ReplayBuffer(storage=LazyTensorStorage(100_000))
    again.loads(root / "rb")
    out["dumps"]["kept"] = again[:].tolist()

    def allocate():
        s = LazyMemmapStorage(100_000, scratch_dir=root / "mm")
        s.set(slice(0, 2), TensorDict({"a": torch.zeros(2, 4), ("n", "b"): torch.zeros(2)}, [2]))

    run("memmap", allocate, root / "mm")
    print(json.dumps(out))
    """
)


class TestRealFullDisk:
    def test_on_a_full_tmpfs(self, tmp_path):
        if shutil.which("unshare") is None:
            pytest.skip("needs unshare (util-linux)")
        disk = tmp_path / "disk"
        disk.mkdir()
        script = 'mount -t tmpfs -o size=256k none "$1" || exit 77; exec "$2" -c "$3" "$1"'
        res = subprocess.run(
            ["unshare", "-Urm", "sh", "-c", script, "sh", str(disk), sys.executable, CHILD],
            capture_output=True,
            text=True,
            timeout=240,
        )
        if res.returncode == 77 or (res.returncode and "unshare" in res.stderr):
            pytest.skip(f"cannot mount a tmpfs in a user namespace here: {res.stderr.strip()}")
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout.strip().splitlines()[-1])

        dumps = out["dumps"]
        assert dumps["errno"] == errno.ENOSPC
        assert (
            f"cannot write '{disk}/rb/replay_buffer.pt': no space left on device"
            in (dumps["error"])
        )
        assert "unexpected pos" not in dumps["error"]
        assert dumps["left"] == ["rb/replay_buffer.pt"] and dumps["kept"] == [0, 1, 2]

        memmap = out["memmap"]
        assert memmap["errno"] == errno.ENOSPC
        assert (
            f"scratch_dir '{disk}/mm' has not enough free space for max_size=100000"
            in (memmap["error"])
        )
        assert "(the disk is full)" in memmap["error"]
        assert memmap["left"] == []  # 2 MB of files were being reserved
