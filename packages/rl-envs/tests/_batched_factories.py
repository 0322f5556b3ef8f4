"""Env factories for the batched-env tests, importable by ``spawn`` worker processes.

The tests put this folder on ``sys.path``; spawned workers inherit it, so the classes
below are pickled by reference.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rl.core import Bounded, Composite, Unbounded
from rl.envs import EnvBase
from rl.envs._done import default_done_spec


class CounterEnv(EnvBase):
    """A counter the action (in ``[0, 1]``) is added to; deterministic.

    Terminates when the count reaches ``limit``, truncates after ``truncate_at`` steps
    (when it has not terminated). ``"observation"`` is ``[count, steps, resets]``, so a
    test can see which entries were reset, and when. The seed (``set_seed``) is added
    to the reset count, so that seeding shows in the observations.
    """

    def __init__(self, limit: float = 1e9, truncate_at: int | None = None, batch_size=()):
        super().__init__(batch_size=batch_size)
        bs = self.batch_size
        self.limit = limit
        self.truncate_at = truncate_at
        self.observation_spec = Composite(observation=Unbounded(shape=(*bs, 3)), shape=bs)
        self.action_spec = Bounded(0.0, 1.0, shape=(*bs, 1))
        self.reward_spec = Unbounded(shape=(*bs, 1))
        self.full_done_spec = default_done_spec(bs, truncated=True)  # it truncates
        self.count = torch.zeros(*bs, 1)
        self.steps = torch.zeros(*bs, 1)
        self.resets = torch.zeros(*bs, 1)
        self.offset = 0.0

    def _obs(self) -> torch.Tensor:
        return torch.cat([self.count, self.steps, self.resets + self.offset], -1)

    def _reset(self, tensordict):
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            mask = torch.ones(*self.batch_size, 1, dtype=torch.bool)
        self.count = torch.where(mask, 0.0, self.count)
        self.steps = torch.where(mask, 0.0, self.steps)
        self.resets = self.resets + mask.float()
        flag = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        return TensorDict(
            observation=self._obs(),
            done=flag,
            terminated=flag.clone(),
            truncated=flag.clone(),
            batch_size=self.batch_size,
        )

    def _step(self, tensordict):
        self.count = self.count + tensordict["action"]
        self.steps = self.steps + 1
        terminated = self.count >= self.limit
        truncated = torch.zeros_like(terminated)
        if self.truncate_at is not None:
            truncated = (self.steps >= self.truncate_at) & ~terminated
        return TensorDict(
            observation=self._obs(),
            reward=self.count.clone(),
            done=terminated | truncated,
            terminated=terminated,
            truncated=truncated,
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        self.offset = 0.0 if seed is None else float(seed % 1000)


class RaisingEnv(CounterEnv):
    """A ``CounterEnv`` whose ``_step`` raises ``ValueError`` at step ``fail_at``."""

    def __init__(self, fail_at: int = 2):
        super().__init__()
        self.fail_at = fail_at
        self.calls = 0

    def _step(self, tensordict):
        self.calls += 1
        if self.calls == self.fail_at:
            raise ValueError(f"boom at step {self.fail_at}")
        return super()._step(tensordict)


class WideCounterEnv(CounterEnv):
    """A ``CounterEnv`` whose observation has 5 entries (specs differ from CounterEnv)."""

    def __init__(self):
        super().__init__()
        self.observation_spec = Composite(observation=Unbounded(shape=(5,)), shape=())


def failing_factory():
    """A factory that raises while building the env."""
    raise OSError("cannot open the simulator")


def not_an_env():
    """A factory that returns something else than an env."""
    return object()


class NestedObsEnv(CounterEnv):
    """A ``CounterEnv`` that also writes its count under the nested key ``("agent", "count")``."""

    def __init__(self, limit: float = 3.0):
        super().__init__(limit=limit)
        self.observation_spec = Composite(
            observation=Unbounded(shape=(3,)),
            agent=Composite(count=Unbounded(shape=(1,)), shape=()),
            shape=(),
        )

    def _reset(self, tensordict):
        td = super()._reset(tensordict)
        td["agent", "count"] = self.count.clone()
        return td

    def _step(self, tensordict):
        td = super()._step(tensordict)
        td["agent", "count"] = self.count.clone()
        return td


class ThreadCountEnv(CounterEnv):
    """A ``CounterEnv`` whose ``set_seed`` returns the process's torch thread count."""

    def set_seed(self, seed=None, static_seed=False):
        return torch.get_num_threads()


class SlowEnv(CounterEnv):
    """A ``CounterEnv`` whose step takes ``delay`` seconds."""

    def __init__(self, delay: float = 5.0):
        super().__init__()
        self.delay = delay

    def _step(self, tensordict):
        import time

        time.sleep(self.delay)
        return super()._step(tensordict)


def make_shared_state_env(truncate_at: int | None = None, counter=None):
    """A CounterEnv whose observations a ``VecNorm`` (new API) normalises and whose
    trajectories a ``TrajCounter`` numbers (a clone of ``counter`` when given, which
    shares its counter): the state an ``EnvCreator`` shares."""
    from rl.envs import Compose, TrajCounter, TransformedEnv, VecNorm

    return TransformedEnv(
        CounterEnv(truncate_at=truncate_at),
        Compose(
            VecNorm(in_keys=["observation"], new_api=True),
            TrajCounter() if counter is None else counter.clone(),
        ),
    )
