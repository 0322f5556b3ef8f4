"""Trainer checkpoint size and save / load time with a 100k-transition replay buffer.

A Trainer holding a SAC-sized loss (actor, twin critics, their targets; 256x256 MLPs), its
Adam state and a ``TensorDictReplayBuffer`` with 100,000 MuJoCo-sized transitions
(observation [17], action [6], next observation [17], reward, done, terminated) is saved
with ``Trainer.save_trainer`` (state_dict -> atomic write: temporary file, fsync, rename)
and loaded with ``Trainer.load_from_file`` (``weights_only=True``):

- ``LazyTensorStorage``: the buffer's contents are in the checkpoint.
- ``LazyMemmapStorage``: the buffer is saved by reference to its directory (its files are
  already on disk); the checkpoint holds the length, write position, sampler and writer.

Floor: writing the same number of bytes with numpy ``tofile`` + ``fsync`` (the disk's
durable sequential write), measured in the same run; the ratio is floor / save time.

Run: ``.venv/bin/python benchmarks/bench_checkpoint.py`` (``--quick`` for a smoke run).
Prints a markdown table and writes it to ``benchmarks/results/checkpoint.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDict
from torch import nn

from rl.core.trainers import ReplayBufferTrainer, Trainer
from rl.data import LazyMemmapStorage, LazyTensorStorage, TensorDictReplayBuffer

OBS, ACT = 17, 6


class SACSizedLoss(nn.Module):
    def __init__(self, hidden: int = 256) -> None:
        super().__init__()

        def mlp(i, o):
            return nn.Sequential(
                nn.Linear(i, hidden),
                nn.ReLU(),
                nn.Linear(hidden, hidden),
                nn.ReLU(),
                nn.Linear(hidden, o),
            )

        self.actor = mlp(OBS, 2 * ACT)
        self.qvalue = nn.ModuleList([mlp(OBS + ACT, 1) for _ in range(2)])
        self.target_qvalue = nn.ModuleList([mlp(OBS + ACT, 1) for _ in range(2)])
        self.log_alpha = nn.Parameter(torch.zeros(()))

    def forward(self, td):
        obs, act = td["observation"], td["action"]
        q = sum(q(torch.cat([obs, act], -1)).mean() for q in self.qvalue)
        return TensorDict(
            loss_q=q, loss_actor=self.actor(obs).pow(2).mean(), loss_alpha=self.log_alpha**2
        )


def transitions(n: int) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        {
            "observation": torch.randn(n, OBS, generator=g),
            "action": torch.rand(n, ACT, generator=g) * 2 - 1,
            ("next", "observation"): torch.randn(n, OBS, generator=g),
            ("next", "reward"): torch.randn(n, 1, generator=g),
            ("next", "done"): torch.zeros(n, 1, dtype=torch.bool),
            ("next", "terminated"): torch.zeros(n, 1, dtype=torch.bool),
        },
        batch_size=[n],
    )


def build(storage, ckpt: Path, data: TensorDict) -> Trainer:
    torch.manual_seed(0)
    loss = SACSizedLoss()
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3)
    trainer = Trainer(
        collector=[],
        total_frames=1,
        frame_skip=1,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=optim,
        progress_bar=False,
        save_trainer_file=ckpt,
    )
    buffer = TensorDictReplayBuffer(storage=storage, batch_size=256)
    ReplayBufferTrainer(buffer).register(trainer)
    if data is not None:
        for start in range(0, data.shape[0], 10_000):
            buffer.extend(data[start : start + 10_000])
        for _ in range(3):  # Adam moments in the optimizer state
            out = loss(buffer.sample())
            sum(out.values()).backward()
            optim.step()
            optim.zero_grad()
    return trainer


def floor_write(nbytes: int, folder: Path) -> float:
    array = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    path = folder / "floor.bin"
    start = time.perf_counter()
    with open(path, "wb") as f:
        array.tofile(f)
        f.flush()
        os.fsync(f.fileno())
    elapsed = time.perf_counter() - start
    path.unlink()
    return elapsed


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10k transitions, one repeat")
    args = parser.parse_args()
    n = 10_000 if args.quick else 100_000
    repeats = 1 if args.quick else 3
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", UserWarning)  # no collector here: "not exact" is expected
    data = transitions(n)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, make_storage in (
            ("LazyTensorStorage", lambda: LazyTensorStorage(n)),
            ("LazyMemmapStorage", lambda: LazyMemmapStorage(n, scratch_dir=tmp / "memmap")),
        ):
            ckpt = tmp / f"{name}.pt"
            trainer = build(make_storage(), ckpt, data)
            save = best_of(lambda t=trainer: t.save_trainer(force_save=True), repeats)
            size = ckpt.stat().st_size
            fresh = build(make_storage(), ckpt, None)
            load = best_of(lambda f=fresh, c=ckpt: f.load_from_file(c), repeats)
            assert len(fresh._modules["replay_buffer"].replay_buffer) == n
            floor = floor_write(size, tmp)
            rows.append((name, size, save, load, floor))
    params = sum(p.numel() for p in SACSizedLoss().parameters())
    lines = [
        f"Trainer checkpoint with a {n:,}-transition buffer (obs {OBS}, action {ACT}; float32) "
        f"and a SAC-sized loss ({params:,} parameters + Adam state).",
        "",
        "| buffer storage | checkpoint size | save (atomic, fsync) | load (weights_only) | "
        "floor: write+fsync same bytes | floor / save |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, size, save, load, floor in rows:
        lines.append(
            f"| {name} | {size / 1e6:.2f} MB | {save * 1e3:.1f} ms | {load * 1e3:.1f} ms | "
            f"{floor * 1e3:.1f} ms | {floor / save:.2f} |"
        )
    lines += [
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
        f"1 thread; best of {repeats}. The memmap buffer's data ({n * (2 * OBS + ACT + 1) * 4 / 1e6:.1f} MB "
        "of float32 plus flags) stays in its directory and is not rewritten by a save.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.quick:
        out = Path(__file__).parent / "results" / "checkpoint.md"
        out.write_text(text)


if __name__ == "__main__":
    main()
