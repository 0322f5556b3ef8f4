"""Shared policies, env factories and a fake replay buffer of the collector tests."""

import contextlib
import threading
import time

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.core import Bounded, Categorical, Composite, Unbounded
from rl.envs import EnvBase, GymEnv, SerialEnv


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


class ReachEnv(EnvBase):
    """A deterministic walk: the observation is the position (starting at 0), the action
    (in ``[0, 2]``) is added to it and is the reward; an episode terminates once the
    position reaches ``goal``. A constant action ``a`` thus gives episodes of
    ``ceil(goal / a)`` steps returning ``a`` times that."""

    def __init__(self, goal: float = 3.0, batch_size=()):
        super().__init__(batch_size=batch_size)
        bs = self.batch_size
        self.goal = goal
        self.observation_spec = Composite(observation=Unbounded(shape=(*bs, 1)), shape=bs)
        self.action_spec = Bounded(0.0, 2.0, shape=(*bs, 1))
        self.reward_spec = Unbounded(shape=(*bs, 1))
        flag = Categorical(2, shape=(*bs, 1), dtype=torch.bool)
        self.full_done_spec = Composite(
            done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=bs
        )
        self.position = torch.zeros(*bs, 1)

    def _reset(self, tensordict):
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            mask = torch.ones(*self.batch_size, 1, dtype=torch.bool)
        self.position = torch.where(mask.reshape(self.position.shape), 0.0, self.position)
        flag = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        return TensorDict(
            observation=self.position.clone(),
            done=flag,
            terminated=flag.clone(),
            truncated=flag.clone(),
            batch_size=self.batch_size,
        )

    def _step(self, tensordict):
        action = tensordict["action"]
        self.position = self.position + action
        terminated = self.position >= self.goal
        return TensorDict(
            observation=self.position.clone(),
            reward=action.clone(),
            done=terminated.clone(),
            terminated=terminated,
            truncated=torch.zeros_like(terminated),
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        return seed


def constant_policy(action: float = 1.0) -> TensorDictModule:
    """A policy whose action is its bias (``action``) plus 0 times the observation."""
    linear = torch.nn.Linear(1, 1)
    with torch.no_grad():
        linear.weight.zero_()
        linear.bias.fill_(action)
    return TensorDictModule(linear, in_keys=["observation"], out_keys=["action"])
