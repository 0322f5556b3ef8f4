"""A process SIGKILLed at any instant of ``extend`` leaves a ``LazyMemmapStorage`` whole.

Every item written carries one id in each of its fields (``id``, ``observation``,
``("next", "observation")``), so an item made of two transitions shows. A long-lived
child imports torch once and forks a writer per round (a fork costs milliseconds, an
interpreter start seconds); the writer reopens the directory, extends batches of random
sizes into the full ring, and is SIGKILLed at a random instant. The test then reopens the
directory and checks, after each kill, that

- every slot the storage counts as valid is whole (all fields carry one id);
- walked in ring order (oldest first, from ``write_end``), the ids are consecutive: a kill
  loses the oldest items that the interrupted write was overwriting and nothing else, and
  the order of the others is kept;
- the newest item is the last one the writer reported written, or the one after it.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import time
from functools import partial

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl.data import LazyMemmapStorage, TensorDictReplayBuffer

M = 400  # capacity
D = 1024  # floats per observation: copies dominate the writer's time, so kills land in them
K = M + 1  # ids count modulo K: an item and the one that overwrites it differ

ZYGOTE = textwrap.dedent(
    f"""
    import os, random, sys
    import torch
    from tensordict import TensorDict
    from rl.data import LazyMemmapStorage, TensorDictReplayBuffer

    M, D, K = {M}, {D}, {K}
    path = sys.argv[1]

    def write_forever(seed):
        torch.set_num_threads(1)
        rng = random.Random(seed)
        rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(M, scratch_dir=path))
        storage = rb.storage
        filled = len(storage)
        # the newest item sits just before write_end
        next_id = (int(storage[(storage._write_end - 1) % M]["id"]) + 1) % K if filled else 0
        # ids j % K for j < 2K: a slice from next_id carries the next ids
        ids = torch.arange(2 * K) % K
        obs = ids.float()[:, None].expand(2 * K, D).contiguous()
        pool = TensorDict({{"id": ids, "observation": obs, ("next", "observation"): obs.clone()}}, [2 * K])
        while True:
            batch = rng.randint(1, M // 2)
            rb.extend(pool[next_id : next_id + batch])
            next_id = (next_id + batch) % K
            filled += batch
            if filled >= M:  # wrapped: every write overwrites valid items
                os.write(1, f"wrote {{(next_id - 1) % K}}\\n".encode())

    for line in sys.stdin:
        seed = int(line)
        pid = os.fork()
        if pid == 0:
            try:
                write_forever(seed)
            finally:
                os._exit(1)
        os.write(1, f"pid {{pid}}\\n".encode())
        os.waitpid(pid, 0)
        os.write(1, b"reaped\\n")
    """
)


class _Lines:
    """Lines of a pipe, read with a deadline (never blocks past it)."""

    def __init__(self, stream):
        self.fd = stream.fileno()
        self.buffer = b""

    def next(self, deadline: float) -> str:
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, "the child process did not answer in time"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 65536)
                assert chunk, "the child process exited"
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


def _ring_order(storage: LazyMemmapStorage) -> torch.Tensor:
    """Slot indices from the oldest item to the newest."""
    n, end = len(storage), storage._write_end
    end = end if 0 < end <= n else n
    return torch.cat([torch.arange(end, n), torch.arange(0, end)])


def _check_whole(storage: LazyMemmapStorage, modulo: int = K) -> torch.Tensor:
    """Asserts that every valid item is whole and that their ids, oldest first, are
    consecutive (modulo ``modulo``); returns the ids in that order."""
    n = len(storage)
    assert 0 < n <= storage.max_size
    data = storage.get(_ring_order(storage))
    ids = data["id"]
    for key in ("observation", ("next", "observation")):
        torn = int((data[key] != ids[:, None].float()).any(-1).sum())
        assert torn == 0, f"{torn} of {n} valid slots hold {key!r} of another item than their id"
    expected = (torch.arange(n) + int(ids[0])) % modulo
    assert torch.equal(ids, expected), f"the ids of the valid items are not consecutive: {ids}"
    return ids


def _in_flight(path) -> bool:
    """Whether the storage's files record a write in flight (read before reopening)."""
    return bool(np.fromfile(path / "rl_storage_len.bin", dtype=np.int64)[3])


def test_sigkill_during_wrapped_extends_leaves_whole_items(tmp_path):
    """Kills until three of them landed in the middle of a write (about 4 in 10 do)."""
    path = tmp_path / "storage"
    rng = random.Random(0)
    proc = subprocess.Popen(
        [sys.executable, "-c", ZYGOTE, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    lines = _Lines(proc.stdout)
    writer = None
    kills = mid_write = 0
    try:
        while mid_write < 3:
            assert kills < 40, f"only {mid_write} of {kills} kills landed in a write"
            proc.stdin.write(f"{kills}\n".encode())
            proc.stdin.flush()
            deadline = time.monotonic() + 120  # the first round imports torch
            line = lines.next(deadline)
            assert line.startswith("pid "), line
            writer = int(line.split()[1])
            line = lines.next(deadline)
            assert line.startswith("wrote "), f"the writer failed before the ring wrapped: {line}"
            last = int(line.split()[1])
            time.sleep(rng.uniform(0.0, 0.05))  # a random instant, a few writes in
            os.kill(writer, signal.SIGKILL)
            while (line := lines.next(deadline)) != "reaped":
                last = int(line.split()[1])
            writer = None
            kills += 1
            mid_write += _in_flight(path)
            storage = LazyMemmapStorage(M, scratch_dir=path)
            ids = _check_whole(storage)
            # the last write reported, or one more that completed before the kill
            assert (int(ids[-1]) - last) % K <= M // 2
            rb = TensorDictReplayBuffer(storage=storage, batch_size=64)
            assert len(rb) == len(storage)
            sample = rb.sample()
            assert torch.equal(sample["observation"][:, 0], sample["id"].float())
            del rb, storage
    finally:
        if writer is not None:
            try:
                os.kill(writer, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


# -- the same states, made at chosen points: each way the recovery goes --------------------------


class _Killed(Exception):
    pass


class _DiesOnUse:
    """Stands for a stored tensor: the write stops when it reaches it (then, with
    ``once``, it is the tensor again)."""

    def __init__(self, tensor=None, once=False):
        self.tensor, self.once, self.used = tensor, once, False

    def __getattr__(self, name):
        if self.once and self.used:
            return getattr(self.tensor, name)
        self.used = True
        raise _Killed


def _items(ids: torch.Tensor) -> TensorDict:
    f = ids.float()[:, None].expand(len(ids), 4).contiguous()
    return TensorDict({"id": ids, "observation": f, ("next", "observation"): f.clone()}, [len(ids)])


def _kill_in_write(storage, monkeypatch, write) -> None:
    """Runs ``write`` and stops it after the first stored tensor, leaving the files as a
    kill there would (the in-process repair is switched off)."""
    leaves = list(storage._leaves)
    monkeypatch.setattr(storage, "_leaves", [leaves[0], (leaves[1][0], _DiesOnUse())] + leaves[2:])
    monkeypatch.setattr(storage, "_write_interrupted", lambda: None)
    with pytest.raises(_Killed):
        write()
    monkeypatch.undo()


class TestRecovery:
    """A write stopped after its first tensor (``id``): reopening drops the rows it was
    writing and keeps the others whole and in ring order."""

    @pytest.mark.parametrize(
        "before, batch, kept, write_end",
        [
            (13, 4, 6, 3),  # middle: rows 3-6 in flight, rows 7-9 move down to 3-5
            (18, 4, 6, 2),  # wraps: rows 8-9 and 0-1; rows 6-7 move to 0-1 (a rotation)
            (17, 4, 6, 1),  # wraps: rows 7-9 and 0; row 6 moves to row 0
            (10, 3, 7, 3),  # start: rows 0-2; rows 7-9 move there (a rotation)
            (10, 10, 0, 0),  # the whole ring
            (17, 2, 8, 7),  # rows 7-8: row 9 moves to row 7
            (19, 1, 9, 9),  # the last row: len shrinks
        ],
    )
    def test_round_robin_write(self, tmp_path, monkeypatch, before, batch, kept, write_end):
        rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(10, scratch_dir=tmp_path))
        rb.extend(_items(torch.arange(before)))
        storage = rb.storage
        _kill_in_write(storage, monkeypatch, lambda: rb.extend(_items(torch.arange(batch) + 100)))
        assert _in_flight(tmp_path)
        del rb, storage
        reopened = LazyMemmapStorage(10, scratch_dir=tmp_path)
        assert not _in_flight(tmp_path)
        assert len(reopened) == kept
        if kept:
            assert reopened._write_end == write_end
            # the oldest items were the ones overwritten: the newest `kept` are left
            ids = _check_whole(reopened, modulo=1 << 30)
            assert ids.tolist() == list(range(before - kept, before))
        # the buffer goes on from there: the next items overwrite the oldest
        rb = TensorDictReplayBuffer(storage=reopened)
        rb.extend(_items(torch.arange(before, before + 12)))
        assert _check_whole(reopened, modulo=1 << 30).tolist() == list(
            range(before + 2, before + 12)
        )

    def test_write_crossing_the_valid_rows(self, tmp_path, monkeypatch):
        storage = LazyMemmapStorage(10, scratch_dir=tmp_path)
        storage.set(slice(0, 6), _items(torch.arange(6)))
        _kill_in_write(
            storage, monkeypatch, lambda: storage.set(slice(4, 8), _items(torch.arange(4)))
        )
        reopened = LazyMemmapStorage(10, scratch_dir=tmp_path)
        assert len(reopened) == 4 and reopened._write_end == 4
        assert reopened.get(torch.arange(4))["observation"][:, 0].tolist() == [0.0, 1.0, 2.0, 3.0]

    def test_write_past_the_valid_rows_needs_no_record(self, tmp_path, monkeypatch):
        storage = LazyMemmapStorage(10, scratch_dir=tmp_path)
        storage.set(slice(0, 3), _items(torch.arange(3)))
        _kill_in_write(
            storage, monkeypatch, lambda: storage.set(slice(3, 6), _items(torch.arange(3)))
        )
        assert not _in_flight(tmp_path)
        assert len(LazyMemmapStorage(10, scratch_dir=tmp_path)) == 3

    def test_scattered_indices(self, tmp_path, monkeypatch):
        storage = LazyMemmapStorage(10, scratch_dir=tmp_path)
        storage.set(slice(0, 10), _items(torch.arange(10)))
        index = torch.tensor([5, 2, 6])
        _kill_in_write(storage, monkeypatch, lambda: storage.set(index, _items(index + 100)))
        reopened = LazyMemmapStorage(10, scratch_dir=tmp_path)
        # the rows between the first and the last index written count as in flight
        assert len(reopened) == 5
        assert reopened.get(torch.arange(5))["id"].tolist() == [0, 1, 7, 8, 9]

    def test_exception_in_a_write_repairs_in_process(self, tmp_path, monkeypatch):
        rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(10, scratch_dir=tmp_path))
        rb.extend(_items(torch.arange(13)))
        storage = rb.storage
        leaves = list(storage._leaves)
        dies = (leaves[1][0], _DiesOnUse(leaves[1][1], once=True))
        monkeypatch.setattr(storage, "_leaves", [leaves[0], dies] + leaves[2:])
        with pytest.raises(_Killed):
            rb.extend(_items(torch.arange(100, 104)))
        monkeypatch.undo()
        assert len(storage) == 6 and not _in_flight(tmp_path)
        assert _check_whole(storage, modulo=1 << 30).tolist() == list(range(7, 13))

    def test_kill_during_the_recovery(self, tmp_path, monkeypatch):
        """The recovery moves rows one in-flight range at a time: stopped after any
        move, the next reopening finishes it."""
        rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(10, scratch_dir=tmp_path))
        rb.extend(_items(torch.arange(11)))  # cursor at 1: rows 1-9 then 0 are in order
        _kill_in_write(rb.storage, monkeypatch, partial(rb.extend, _items(torch.tensor([100]))))
        del rb
        moves = []

        def move_then_die(self, source, dest, count):
            if len(moves) == 3:
                raise _Killed
            moves.append(source)
            original(self, source, dest, count)

        original = LazyMemmapStorage._move_rows
        monkeypatch.setattr(LazyMemmapStorage, "_move_rows", move_then_die)
        with pytest.raises(_Killed):
            LazyMemmapStorage(10, scratch_dir=tmp_path)
        monkeypatch.undo()
        assert moves == [2, 3, 4] and _in_flight(tmp_path)
        reopened = LazyMemmapStorage(10, scratch_dir=tmp_path)
        assert len(reopened) == 9 and reopened._write_end == 1
        assert _check_whole(reopened, modulo=1 << 30).tolist() == list(range(2, 11))

    def test_counter_of_an_older_version(self, tmp_path):
        storage = LazyMemmapStorage(10, scratch_dir=tmp_path)
        storage.set(slice(0, 4), _items(torch.arange(4)))
        del storage
        np.array([4, 4], dtype=np.int64).tofile(tmp_path / "rl_storage_len.bin")
        reopened = LazyMemmapStorage(10, scratch_dir=tmp_path)
        assert len(reopened) == 4 and reopened._write_end == 4
        assert os.path.getsize(tmp_path / "rl_storage_len.bin") == 5 * 8
