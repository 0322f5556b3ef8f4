"""Trainer checkpoints: atomic writes, tensor-only loading, configuration checks, exact resume.

The kill tests run ``_rl_core_trainer_fakes.py`` (a trainer over a duck-typed collector,
loss, target updater, LR scheduler and replay buffer, saving every batch) in a subprocess
and SIGKILL it:

- ``test_sigkill_at_a_random_point_resumes_exactly`` (``-m slow``): killed after a random batch (drawn
  from a seeded generator) plus a random fraction of a batch's duration, so anywhere in the
  loop (collection, optimization, hooks, or inside a save); the same command run again resumes from the last checkpoint and its final
  parameters, optimizer state and RNG state equal an uninterrupted run's, bit for bit.
- ``test_sigkill_during_a_save_keeps_the_previous_checkpoint``: killed while writing the
  checkpoint of 48 frames (stalled after the data is written, before fsync and rename): the
  checkpoint of 32 frames is still there and loads.
"""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from rl.core.trainers import CheckpointError, _checkpoint, atomic_save, load_checkpoint
from rl.core.trainers._checkpoint import from_plain, get_rng_state, set_rng_state, to_plain

HERE = Path(__file__).parent
SCRIPT = HERE / "_rl_core_trainer_fakes.py"
sys.path.insert(0, str(HERE))
from _rl_core_trainer_fakes import final_state, make_trainer  # noqa: E402


def _reference_run(tmp_path, total=160, **kwargs):
    """The uninterrupted run, in this process, with one thread like the script."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng():
            trainer = make_trainer(tmp_path / "reference.pt", total_frames=total, **kwargs)
            trainer.train()
            return final_state(trainer)
    finally:
        torch.set_num_threads(threads)


def _assert_same(a, b):
    assert a["frames"] == b["frames"] and a["optim_count"] == b["optim_count"]
    for k in a["loss"]:
        assert torch.equal(a["loss"][k], b["loss"][k]), f"parameter {k} differs"
    for i in a["optim"]:
        for k in a["optim"][i]:
            assert torch.equal(a["optim"][i][k], b["optim"][i][k]), f"optimizer state {i}.{k}"
    assert torch.equal(a["torch_rng"], b["torch_rng"])


class _Evil:
    """Unpickling this object would create a file."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _full_disk_open(module, monkeypatch):
    """Makes ``module``'s ``open(path, "wb")`` create ``path`` but write to ``/dev/full``:
    the writes fail with the kernel's own ``ENOSPC``, as on a full disk."""
    real_open = open

    def open_on_full_disk(path, mode="r", *args, **kwargs):
        if "w" in mode:
            real_open(path, mode).close()
            return real_open("/dev/full", mode, *args, **kwargs)
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(module, "open", open_on_full_disk, raising=False)


class TestFiles:
    def test_atomic_save_replaces_and_cleans_temporaries(self, tmp_path):
        path = tmp_path / "ckpt.pt"
        atomic_save({"a": torch.ones(2)}, path)
        dead = _dead_pid()
        stale = tmp_path / f".ckpt.pt.tmp-{dead}-0123abcd"
        stale.write_bytes(b"half a checkpoint")
        # the temporary of a live writer (here, this process) is its own to rename
        live = tmp_path / f".ckpt.pt.tmp-{os.getpid()}-0123abcd"
        live.write_bytes(b"being written")
        atomic_save({"a": torch.zeros(2)}, path)
        assert not stale.exists() and live.exists()
        live.unlink()
        assert torch.equal(load_checkpoint(path)["a"], torch.zeros(2))
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]

    @pytest.mark.parametrize("size", [10, 1_000_000])  # one buffered write; many records
    def test_full_disk_names_the_file_and_removes_the_partial_one(
        self, tmp_path, monkeypatch, size
    ):
        path = tmp_path / "ckpt.pt"
        atomic_save({"a": torch.ones(2)}, path)
        _full_disk_open(_checkpoint, monkeypatch)
        with pytest.raises(
            OSError,
            match=r"cannot write '.*ckpt.pt': no space left on device "
            r"\(the disk is full; .* [kMG]B free",
        ) as info:
            atomic_save({"a": torch.zeros(size)}, path)
        assert info.value.errno == errno.ENOSPC
        monkeypatch.undo()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
        assert torch.equal(load_checkpoint(path)["a"], torch.ones(2))

    def test_full_disk_found_by_fsync(self, tmp_path, monkeypatch):
        """Some file systems accept the writes and report the full disk at fsync."""

        def fsync(fd):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "fsync", fsync)
        with pytest.raises(OSError, match=r"cannot write '.*c.pt': no space left on device"):
            atomic_save({"a": torch.zeros(3)}, tmp_path / "c.pt")
        assert list(tmp_path.iterdir()) == []

    def test_other_errors_are_left_alone(self, tmp_path):
        with pytest.raises(AttributeError, match="Can't pickle local object"):
            atomic_save({"fn": lambda: 0}, tmp_path / "c.pt")
        assert list(tmp_path.iterdir()) == []

    def test_pickled_callable_is_refused_and_not_run(self, tmp_path):
        marker = tmp_path / "pwned"
        path = tmp_path / "crafted.pt"
        torch.save({"format": "rl.trainer/1", "hook": _Evil(marker)}, path)
        with pytest.raises(
            CheckpointError, match="refusing to load .*crafted.pt.*tensors and plain"
        ):
            load_checkpoint(path)
        assert not marker.exists()
        torch.save({"fn": print}, path)
        with pytest.raises(CheckpointError, match="refusing to load"):
            load_checkpoint(path)

    def test_not_a_checkpoint(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="no checkpoint at"):
            load_checkpoint(tmp_path / "missing.pt")
        (tmp_path / "junk.pt").write_bytes(b"not a zip")
        with pytest.raises(CheckpointError, match="not a readable checkpoint"):
            load_checkpoint(tmp_path / "junk.pt")
        torch.save([1, 2], tmp_path / "list.pt")
        with pytest.raises(CheckpointError, match="holds a list"):
            load_checkpoint(tmp_path / "list.pt")

    def test_numpy_and_rng_states_round_trip(self, tmp_path):
        state = {"a": np.arange(5, dtype=np.int16), "b": (np.float32(1.5), [np.ones((2, 2))])}
        atomic_save(to_plain(state), tmp_path / "s.pt")
        back = from_plain(load_checkpoint(tmp_path / "s.pt"))
        assert back["a"].dtype == np.int16 and (back["a"] == np.arange(5)).all()
        assert back["b"][0] == 1.5 and (back["b"][1][0] == 1).all()

        rng = get_rng_state()
        atomic_save(rng, tmp_path / "rng.pt")
        first = (torch.rand(3), np.random.rand(3), random.random())
        set_rng_state(load_checkpoint(tmp_path / "rng.pt"))
        second = (torch.rand(3), np.random.rand(3), random.random())
        assert torch.equal(first[0], second[0]) and (first[1] == second[1]).all()
        assert first[2] == second[2]


class TestConfiguration:
    def test_other_shapes_are_refused_naming_the_parameter(self, tmp_path):
        path = tmp_path / "ckpt.pt"
        with torch.random.fork_rng():
            make_trainer(path, total_frames=16, hidden=8).train()
            other = make_trainer(path, total_frames=32, hidden=16)
        with pytest.raises(
            CheckpointError,
            match=r"loss_module\['actor.0.weight'\] has shape \(8, 3\) .* \(16, 3\) here",
        ):
            other.load_from_file(path)

    def test_other_hooks_are_refused(self, tmp_path):
        path = tmp_path / "ckpt.pt"
        with torch.random.fork_rng():
            make_trainer(path, total_frames=16).train()
            other = make_trainer(path, total_frames=32)
        other.register_module(
            "extra_hook", other._modules["update_weights"].__class__(other.collector, 1)
        )
        with pytest.raises(CheckpointError, match="hook 'extra_hook' is registered here but not"):
            other.load_from_file(path)

    def test_checkpoint_holds_every_stateful_part(self, tmp_path):
        path = tmp_path / "ckpt.pt"
        with torch.random.fork_rng():
            trainer = make_trainer(path, total_frames=32)
            trainer.train()
        state = load_checkpoint(path)
        assert set(state) >= {"format", "state", "rng", "hooks", "loss_module", "collector"}
        assert set(state["hooks"]) == {
            "optimizer",
            "replay_buffer",
            "target_net_updater",
            "lr_scheduler",
            "update_weights",
            "log_r_training",
            "count_frames_log",
        }
        assert "target_critic.0.weight" in state["loss_module"]
        assert state["hooks"]["optimizer"]["optimizer"]["state"]  # Adam moments
        assert state["hooks"]["lr_scheduler"]["scheduler"]["last_epoch"] == 2
        assert state["hooks"]["target_net_updater"]["counter"] == 8
        assert state["state"]["collected_frames"] == 32
        assert set(state["rng"]) >= {"torch", "numpy", "python"}


class TestResume:
    def test_resume_in_process_is_exact(self, tmp_path):
        reference = _reference_run(tmp_path)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with torch.random.fork_rng():
                first = make_trainer(tmp_path / "ckpt.pt", total_frames=80)
                first.train()
                assert load_checkpoint(tmp_path / "ckpt.pt")["state"]["collected_frames"] == 80
                torch.rand(100)  # whatever happens in between does not matter
                second = make_trainer(tmp_path / "ckpt.pt", total_frames=160)
                second.collector.total_frames = 160
                second.train()
                resumed = final_state(second)
        finally:
            torch.set_num_threads(threads)
        _assert_same(reference, resumed)

    @pytest.mark.slow  # the real PPO / SAC kill tests (test_trainer_resume_real.py) run by default
    def test_sigkill_at_a_random_point_resumes_exactly(self, tmp_path):
        reference = _reference_run(tmp_path)
        rng = random.Random(0)
        kill_after = rng.randrange(32, 112, 16)  # frames of the batch after which we kill
        cmd = [sys.executable, str(SCRIPT), str(tmp_path / "ckpt.pt"), str(tmp_path / "out.pt")]
        cmd.append("160")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=tmp_path)
        try:
            stamps = []
            for line in proc.stdout:
                stamps.append(time.perf_counter())
                if line.split() == ["batch", str(kill_after)]:
                    # somewhere within the next batch: a random fraction of a batch's duration
                    per_batch = (stamps[-1] - stamps[1]) / max(1, len(stamps) - 2)
                    time.sleep(rng.uniform(0.0, per_batch))
                    proc.send_signal(signal.SIGKILL)
                    break
        finally:
            proc.kill()
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        assert not (tmp_path / "out.pt").exists(), "the run ended before the kill"
        saved = load_checkpoint(tmp_path / "ckpt.pt")["state"]["collected_frames"]
        assert kill_after - 16 <= saved < 160  # the kill may land inside a save, or later
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        assert res.stdout.startswith("resuming")
        first_batch = int(res.stdout.splitlines()[1].split()[1])
        assert first_batch == saved + 16  # continued after the checkpoint, not from 0
        _assert_same(reference, torch.load(tmp_path / "out.pt", weights_only=True))

    def test_sigkill_during_a_save_keeps_the_previous_checkpoint(self, tmp_path):
        cmd = [sys.executable, str(SCRIPT), str(tmp_path / "ckpt.pt"), str(tmp_path / "out.pt")]
        cmd.append("160")
        env = {**os.environ, "RL_TEST_SLOW_SAVE_AFTER": "48"}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
        try:
            for line in proc.stdout:
                if line.startswith("in-save"):
                    proc.send_signal(signal.SIGKILL)
                    break
        finally:
            proc.kill()
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".ckpt.pt.tmp-")]
        assert len(leftovers) == 1  # the interrupted write, never renamed
        assert (tmp_path / leftovers[0]).stat().st_size > 0
        state = load_checkpoint(tmp_path / "ckpt.pt")
        assert state["state"]["collected_frames"] == 32
        with torch.random.fork_rng():
            trainer = make_trainer(tmp_path / "ckpt.pt", total_frames=160)
            trainer.load_from_file(tmp_path / "ckpt.pt")
        assert trainer.collected_frames == 32

    def test_checkpoint_names_no_class(self, tmp_path):
        """Nothing in the file refers to a class or function of the run: only tensors and
        plain containers, which is what lets weights_only=True read it."""
        with torch.random.fork_rng():
            make_trainer(tmp_path / "ckpt.pt", total_frames=16).train()
        data = (tmp_path / "ckpt.pt").read_bytes()
        assert b"_rl_core_trainer_fakes" not in data and b"FakeCollector" not in data
