"""A tiny duck-typed training setup for the trainer tests, and a script entry point.

The collector, loss, target updater and replay buffer below implement only what the
trainer calls, so the trainer's loop and checkpoints are tested without the other packages.
Run as a script (``python _rl_core_trainer_fakes.py CKPT OUT TOTAL_FRAMES``), it trains with
checkpoints every batch, prints ``batch <frames>`` after each one and writes the final
parameters to OUT: the kill / resume tests run it in a subprocess.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn


class FakeCollector:
    """Rolls a noisy linear system for ``n_envs`` envs, ``[n_envs, T]`` batches (time last).

    Actions come from the policy plus noise from torch's global generator (so the trainer's
    RNG checkpoint matters); the env noise comes from the collector's own generator (so the
    collector's state matters). Episodes end every ``episode_len`` steps.
    """

    def __init__(
        self,
        policy: nn.Module,
        frames_per_batch: int = 16,
        total_frames: int = 160,
        n_envs: int = 2,
        episode_len: int = 5,
        init_random_frames: int = 0,
    ) -> None:
        self.policy = policy
        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.n_envs = n_envs
        self.episode_len = episode_len
        self.init_random_frames = init_random_frames
        self.gen = torch.Generator().manual_seed(0)
        self.obs = torch.zeros(n_envs, 3)
        self.t = torch.zeros(n_envs, dtype=torch.long)
        self.frames = 0
        self.weight_updates = 0

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        self.gen.manual_seed(seed)
        self.obs = torch.randn(self.n_envs, 3, generator=self.gen)
        return seed + 1

    def _step(self) -> TensorDict:
        obs = self.obs
        with torch.no_grad():
            action = self.policy(obs) + 0.1 * torch.randn(self.n_envs, 1)
        nxt = 0.9 * obs + 0.1 * action + 0.05 * torch.randn(obs.shape, generator=self.gen)
        reward = -(nxt.pow(2).sum(-1, keepdim=True))
        self.t += 1
        done = (self.t % self.episode_len == 0).unsqueeze(-1)
        td = TensorDict(
            {
                "observation": obs,
                "action": action,
                ("next", "observation"): nxt,
                ("next", "reward"): reward,
                ("next", "done"): done,
                ("next", "terminated"): done,
            },
            batch_size=[self.n_envs],
        )
        self.obs = torch.where(done, torch.randn(obs.shape, generator=self.gen), nxt)
        return td

    def __iter__(self):
        steps = self.frames_per_batch // self.n_envs
        while self.frames < self.total_frames:
            batch = torch.stack([self._step() for _ in range(steps)], dim=1)
            self.frames += batch.numel()
            yield batch

    def update_policy_weights_(self) -> None:
        self.weight_updates += 1

    def state_dict(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "obs": self.obs.clone(),
            "t": self.t.clone(),
            "gen": self.gen.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.frames = state["frames"]
        self.obs = state["obs"].clone()
        self.t = state["t"].clone()
        self.gen.set_state(state["gen"])

    def shutdown(self) -> None:
        pass


class FakeLoss(nn.Module):
    """A deterministic-policy-gradient-like loss with a target critic (DDPG-shaped)."""

    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(3, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.critic = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.target_critic = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.target_critic.load_state_dict(self.critic.state_dict())
        self.target_critic.requires_grad_(False)

    def forward(self, td: TensorDictBase) -> TensorDict:
        obs, act = td["observation"], td["action"]
        nobs = td["next", "observation"]
        with torch.no_grad():
            target = td["next", "reward"] + 0.9 * self.target_critic(
                torch.cat([nobs, self.actor(nobs)], -1)
            ) * (~td["next", "done"])
        q = self.critic(torch.cat([obs, act], -1))
        loss_value = (q - target).pow(2).mean()
        loss_actor = -self.critic(torch.cat([obs, self.actor(obs)], -1)).mean()
        return TensorDict(loss_value=loss_value, loss_actor=loss_actor)


class FakeSoftUpdate:
    """``target <- (1 - tau) target + tau source`` with a step counter."""

    def __init__(self, loss: FakeLoss, tau: float = 0.1) -> None:
        self.loss = loss
        self.tau = tau
        self._counter = 0

    @torch.no_grad()
    def step(self) -> None:
        self._counter += 1
        for t, s in zip(self.loss.target_critic.parameters(), self.loss.critic.parameters()):
            t.lerp_(s, self.tau)


class FakeReplayBuffer:
    """A circular buffer of TensorDicts with random sampling from torch's generator."""

    def __init__(self, size: int = 64, batch_size: int = 8) -> None:
        self.size = size
        self.batch_size = batch_size
        self.data: TensorDictBase | None = None
        self.cursor = 0
        self.len = 0

    def extend(self, batch: TensorDictBase) -> None:
        batch = batch.reshape(-1)
        if self.data is None:
            self.data = batch[:1].expand(self.size).clone().zero_()
        idx = (torch.arange(batch.shape[0]) + self.cursor) % self.size
        self.data[idx] = batch
        self.cursor = int(idx[-1] + 1) % self.size
        self.len = min(self.size, self.len + batch.shape[0])

    def sample(self, batch_size: int | None = None) -> TensorDictBase:
        n = batch_size or self.batch_size
        return self.data[torch.randint(self.len, (n,))]

    def state_dict(self) -> dict[str, Any]:
        return {
            "data": None if self.data is None else self.data.to_dict(),
            "cursor": self.cursor,
            "len": self.len,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.data = None if state["data"] is None else TensorDict(state["data"], [self.size])
        self.cursor = state["cursor"]
        self.len = state["len"]


def make_trainer(
    ckpt: str | os.PathLike | None,
    total_frames: int = 160,
    resume: bool = True,
    hidden: int = 8,
    logger: Any = None,
    **kwargs: Any,
):
    """An off-policy trainer over the fakes with the stateful hooks registered."""
    from rl.core.trainers import (
        CountFramesLog,
        LogScalar,
        LRSchedulerHook,
        ReplayBufferTrainer,
        TargetNetUpdaterHook,
        Trainer,
        UpdateWeights,
    )

    torch.manual_seed(0)
    loss = FakeLoss(hidden)
    collector = FakeCollector(loss.actor, total_frames=total_frames)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    trainer = Trainer(
        collector=collector,
        total_frames=total_frames,
        frame_skip=1,
        optim_steps_per_batch=4,
        loss_module=loss,
        optimizer=optim,
        logger=logger,
        clip_norm=10.0,
        progress_bar=False,
        seed=1,
        save_trainer_interval=16,
        log_interval=0,
        save_trainer_file=ckpt,
        resume=resume,
        **kwargs,
    )
    ReplayBufferTrainer(FakeReplayBuffer(), batch_size=8, flatten_tensordicts=True).register(
        trainer
    )
    TargetNetUpdaterHook(FakeSoftUpdate(loss)).register(trainer)
    LRSchedulerHook(torch.optim.lr_scheduler.StepLR(optim, 3, gamma=0.9)).register(trainer)
    UpdateWeights(collector, 2).register(trainer)
    LogScalar(logname="r_training").register(trainer)
    CountFramesLog(frame_skip=1).register(trainer)
    return trainer


def final_state(trainer) -> dict[str, Any]:
    """What must match bit for bit between an interrupted and an uninterrupted run."""
    return {
        "loss": trainer.loss_module.state_dict(),
        "optim": trainer.optimizer.state_dict()["state"],
        "frames": trainer.collected_frames,
        "optim_count": trainer._optim_count,
        "torch_rng": torch.get_rng_state(),
    }


def main(argv: list[str]) -> None:
    ckpt, out, total = argv[0], argv[1], int(argv[2])
    torch.set_num_threads(1)
    trainer = make_trainer(ckpt, total_frames=total)
    if os.environ.get("RL_TEST_SLOW_SAVE_AFTER"):
        # Makes the save after N frames stall inside the write (after the data, before the
        # fsync and rename), so that the test can kill the process in the middle of it.
        stall_at = int(os.environ["RL_TEST_SLOW_SAVE_AFTER"])
        real_fsync = os.fsync

        def slow_fsync(fd: int) -> None:
            if trainer.collected_frames >= stall_at:
                print("in-save", trainer.collected_frames, flush=True)
                time.sleep(60)
            real_fsync(fd)

        os.fsync = slow_fsync

    def report(batch):
        print("batch", trainer.collected_frames, flush=True)

    trainer.register_op("post_steps_log", report)
    if trainer.resume and trainer.save_trainer_file.exists():
        print("resuming", flush=True)
    trainer.train()
    torch.save(final_state(trainer), out)
    print("done", trainer.collected_frames, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
