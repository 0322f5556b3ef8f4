"""Shared policies, env factories and a fake replay buffer of the collector tests."""

import contextlib
import threading
import time

import torch
from tensordict.nn import TensorDictModule

from rl.envs import GymEnv, SerialEnv


class PoleSign(torch.nn.Module):
    """A deterministic CartPole policy: push towards the side the pole leans to."""

    def forward(self, obs):
        return (obs[..., 2] > 0).long()


class Sampling(torch.nn.Module):
    """A stochastic CartPole policy drawing from torch's global generator."""

    def forward(self, obs):
        probs = torch.sigmoid(obs[..., 2:3] * 10)
        return (torch.rand(probs.shape) < probs).long().squeeze(-1)


def cartpole(num_envs: int = 1):
    """A categorical CartPole: a single env, or a gymnasium vector env of ``num_envs``."""
    if num_envs == 1:
        return GymEnv("CartPole-v1", categorical_action_encoding=True)
    return GymEnv("CartPole-v1", num_envs=num_envs, categorical_action_encoding=True)


def serial_cartpole(num_envs: int = 3):
    return SerialEnv(num_envs, lambda: GymEnv("CartPole-v1", categorical_action_encoding=True))


def pole_policy():
    return TensorDictModule(PoleSign(), in_keys=["observation"], out_keys=["action"])


def sampling_policy():
    return TensorDictModule(Sampling(), in_keys=["observation"], out_keys=["action"])


class FakeBuffer:
    """Records what a collector extends it with (the public ``extend`` only)."""

    def __init__(self):
        self.items = []

    def extend(self, data):
        self.items.append(data.clone())

    def __len__(self):
        return sum(item.numel() for item in self.items)


class FailingEnv(GymEnv):
    """A CartPole whose ``_step`` raises at its ``fail_at``-th step."""

    def __init__(self, fail_at: int = 5):
        super().__init__("CartPole-v1", categorical_action_encoding=True)
        self.fail_at = fail_at
        self.count = 0

    def _step(self, tensordict):
        self.count += 1
        if self.count >= self.fail_at:
            raise ValueError(f"simulator exploded at step {self.count}")
        return super()._step(tensordict)


def live_processes(pids) -> list[int]:
    """The pids of ``pids`` that still run (zombies excluded)."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as file:
                state = file.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def children_of(pid: int) -> list[int]:
    """The live child processes of ``pid`` (from /proc)."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as file:
                fields = file.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry))
    return found


@contextlib.contextmanager
def busy_compile_pool():
    """Inductor's C++ compile thread pool in this process as after compiling a graph of
    several kernels: both its threads have run jobs and wait, idle. A child forked now
    inherits the pool without its threads (see ``compile_job``)."""
    import torch._inductor.config as inductor_config  # noqa: PLC0415
    from torch._inductor.async_compile import AsyncCompile  # noqa: PLC0415

    with inductor_config.patch(compile_threads=2):
        AsyncCompile.pool.cache_clear()
        pool = AsyncCompile.pool()
        try:
            release = threading.Event()
            jobs = [AsyncCompile.submit(release.wait) for _ in range(2)]
            release.set()
            assert [job.result(10) for job in jobs] == [True, True]
            assert len(pool._threads) == pool._max_workers == 2
            # both threads back to waiting (each releases the idle semaphore once): a child
            # forked now sees two idle threads it does not have, and starts none
            deadline = time.monotonic() + 10
            while pool._idle_semaphore._value < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert pool._idle_semaphore._value == 2
            yield
        finally:
            pool.shutdown()
            AsyncCompile.pool.cache_clear()


def compile_job() -> None:
    """Runs a job on inductor's compile thread pool, as a compiled policy's first call
    does for each C++ kernel it builds (not found in the on-disk cache)."""
    from torch._inductor.async_compile import AsyncCompile  # noqa: PLC0415

    assert AsyncCompile.submit(lambda: 42).result() == 42


class CompilingEnv(GymEnv):
    """A CartPole that runs a :func:`compile_job` at its first step (in the worker that
    steps it), as a compiled policy does at its first call."""

    def __init__(self):
        super().__init__("CartPole-v1", categorical_action_encoding=True)
        self.compiled = False

    def _step(self, tensordict):
        if not self.compiled:
            compile_job()
            self.compiled = True
        return super()._step(tensordict)
