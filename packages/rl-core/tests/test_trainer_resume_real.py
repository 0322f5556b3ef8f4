"""Exact resume of real training runs: PPO on CartPole and SAC on Pendulum, in one env and
in a SerialEnv, built from rl.envs / rl.collectors / rl.data / rl.modules / rl.objectives
(``_rl_core_trainer_real.py``; checkpoints after every batch).

What is killed and when:

- ``test_sigkill_resumes_exactly[ppo-single]`` (PPO, CartPole-v1, 192 frames of 32) and
  ``[sac-serial]`` (SAC, a SerialEnv of 2 Pendulum-v1, 160 frames of 16, 32 random frames
  first, a replay buffer of LazyTensorStorage): the script is SIGKILLed after a random batch
  (seeded draw) plus a random fraction of a batch's duration, so anywhere in collection,
  GAE / buffer writes, optimization, target updates or a save. The same command run again
  resumes from the last checkpoint; its final parameters, Adam moments and torch RNG state
  equal an uninterrupted run's bit for bit. The two other combinations are killed the same
  way in ``-m slow``.
- ``test_resume_in_process_is_exact``: each of the four combinations stops at half the
  frames and a fresh trainer resumes from the file, in this process.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("rl.collectors")
pytest.importorskip("rl.objectives")

HERE = Path(__file__).parent
SCRIPT = HERE / "_rl_core_trainer_real.py"
sys.path.insert(0, str(HERE))
from _rl_core_trainer_real import MAKE, PER_BATCH, TOTAL, final_state  # noqa: E402

from rl.core.trainers import load_checkpoint  # noqa: E402

_REFERENCE: dict[tuple[str, str], dict] = {}


def _one_thread(fn):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng():
            return fn()
    finally:
        torch.set_num_threads(threads)


def _reference(algo, kind, tmp_path):
    """The uninterrupted run (in this process, one thread like the script)."""
    if (algo, kind) not in _REFERENCE:

        def run():
            trainer = MAKE[algo](tmp_path / f"ref_{algo}_{kind}.pt", kind)
            trainer.train()
            return final_state(trainer)

        _REFERENCE[algo, kind] = _one_thread(run)
    return _REFERENCE[algo, kind]


def _assert_same(a, b):
    assert a["frames"] == b["frames"] and a["optim_count"] == b["optim_count"]
    for k in a["loss"]:
        assert torch.equal(a["loss"][k], b["loss"][k]), f"{k} differs"
    for i in a["optim"]:
        for k in a["optim"][i]:
            assert torch.equal(a["optim"][i][k], b["optim"][i][k]), f"optimizer state {i}.{k}"
    assert torch.equal(a["torch_rng"], b["torch_rng"])


COMBOS = [
    pytest.param("ppo", "single", id="ppo-single"),
    pytest.param("sac", "serial", id="sac-serial"),
    pytest.param("ppo", "serial", id="ppo-serial", marks=pytest.mark.slow),
    pytest.param("sac", "single", id="sac-single", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("algo, kind", COMBOS)
def test_sigkill_resumes_exactly(algo, kind, tmp_path):
    reference = _reference(algo, kind, tmp_path)
    per_batch, total = PER_BATCH[algo], TOTAL[algo]
    rng = random.Random(f"{algo}-{kind}")
    kill_after = rng.randrange(2 * per_batch, total // 2 + 1, per_batch)
    cmd = [sys.executable, str(SCRIPT), algo, kind, str(tmp_path / "ckpt.pt")]
    cmd.append(str(tmp_path / "out.pt"))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        stamps = []
        for line in proc.stdout:
            stamps.append(time.perf_counter())
            if line.split() == ["batch", str(kill_after)]:
                per = (stamps[-1] - stamps[0]) / max(1, len(stamps) - 1)
                time.sleep(rng.uniform(0.0, per))
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "out.pt").exists(), "the run ended before the kill"
    saved = load_checkpoint(tmp_path / "ckpt.pt")["state"]["collected_frames"]
    # the kill lands within a batch or so of kill_after (later on a loaded machine)
    assert kill_after - per_batch <= saved < total
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    assert lines[0] == "resuming" and lines[1] == f"batch {saved + per_batch}"
    _assert_same(reference, torch.load(tmp_path / "out.pt", weights_only=True))


@pytest.mark.parametrize("algo", ["ppo", "sac"])
@pytest.mark.parametrize("kind", ["single", "serial"])
def test_resume_in_process_is_exact(algo, kind, tmp_path):
    reference = _reference(algo, kind, tmp_path)
    half = TOTAL[algo] // 2 // PER_BATCH[algo] * PER_BATCH[algo]
    path = tmp_path / "ckpt.pt"

    def run():
        MAKE[algo](path, kind, total_frames=half).train()
        torch.rand(10)  # the resumed run does not depend on what happened in between
        resumed = MAKE[algo](path, kind)
        resumed.train()
        return final_state(resumed)

    resumed = _one_thread(run)
    assert load_checkpoint(path)["state"]["collected_frames"] == TOTAL[algo]
    _assert_same(reference, resumed)
