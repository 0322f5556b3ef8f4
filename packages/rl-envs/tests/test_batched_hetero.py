"""Batched envs over sub-envs whose specs vary in shape (a heterogeneous group of agents,
as a PettingZoo env whose agents have different spaces), the worker pool's exit hooks,
and ``TransformedEnv.batch_size``."""

from __future__ import annotations

import gc
import multiprocessing.util
import os

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from rl.core import Bounded, Composite, StackedComposite, Unbounded
from rl.envs import (
    EnvBase,
    ParallelEnv,
    PendulumEnv,
    SerialEnv,
    StepCounter,
    TransformedEnv,
    check_env_specs,
)

SIZES = (3, 5, 3)
HORIZON = 4


class HeteroEnv(EnvBase):
    """One env holding a group of three agents whose observations / actions differ in size.

    Agent ``j`` observes ``[*cumulated actions (n_j - 1), t + j + seed]``; the reward is
    the sum of all actions; the episode ends after ``HORIZON`` steps. ``extra_key``: all
    agents observe 3 values, and agent 1 alone has the extra entry ``"b"``.
    """

    created = 0

    def __init__(self, extra_key: bool = False):
        super().__init__()
        type(self).created += 1
        self.sizes = (3, 3, 3) if extra_key else SIZES
        members = []
        for j, n in enumerate(self.sizes):
            entries = {"observation": Unbounded(shape=(n,))}
            if extra_key and j == 1:
                entries["b"] = Unbounded(shape=(2,))
            members.append(Composite(entries))
        self.extra_key = extra_key
        self.observation_spec = Composite(agents=torch.stack(members, 0))
        actions = [Composite(action=Bounded(-1.0, 1.0, shape=(n - 1,))) for n in self.sizes]
        self.action_spec = Composite(agents=torch.stack(actions, 0))
        self.reward_spec = Unbounded(shape=(1,))
        self.offset = 0.0
        self.t = 0
        self.acc = [torch.zeros(n - 1) for n in self.sizes]

    def _obs(self) -> LazyStackedTensorDict:
        tds = []
        for j, acc in enumerate(self.acc):
            td = TensorDict(observation=torch.cat([acc, torch.tensor([self.t + j + self.offset])]))
            if self.extra_key and j == 1:
                td["b"] = torch.full((2,), float(self.t))
            tds.append(td)
        return LazyStackedTensorDict(*tds, stack_dim=0)

    def _flags(self, value: bool) -> dict:
        flag = torch.tensor([value])
        return {"done": flag, "terminated": flag.clone()}

    def _reset(self, tensordict):
        self.t = 0
        self.acc = [torch.zeros(n - 1) for n in self.sizes]
        return TensorDict(agents=self._obs(), **self._flags(False))

    def _step(self, tensordict):
        agents = tensordict["agents"]
        actions = [agents[j]["action"] for j in range(len(self.sizes))]
        self.acc = [acc + action for acc, action in zip(self.acc, actions)]
        self.t += 1
        reward = torch.stack([action.sum() for action in actions]).sum().reshape(1)
        return TensorDict(agents=self._obs(), reward=reward, **self._flags(self.t >= HORIZON))

    def _set_seed(self, seed):
        self.offset = float(seed % 7)
        return seed + 1


def _replay_alone(env: EnvBase, seed: int, actions: list[list[torch.Tensor]]) -> list:
    """Steps ``env`` alone on ``actions`` (per step, one per agent); returns what each step
    gives: the agents' next observations, the reward and the done flag."""
    env.set_seed(seed)
    td = env.reset()
    out = []
    for step_actions in actions:
        for j, action in enumerate(step_actions):
            td["agents"].tensordicts[j]["action"] = action
        td, root = env.step_and_maybe_reset(td)
        nxt = td["next"]
        observations = [nxt["agents"][j]["observation"] for j in range(len(SIZES))]
        out.append((observations, nxt["reward"], nxt["done"]))
        td = root
    return out


class TestSerialEnvHeterogeneous:
    def test_default_turns_buffers_off_and_matches_the_env_alone(self):
        HeteroEnv.created = 0
        env = SerialEnv(2, HeteroEnv)
        assert isinstance(env, SerialEnv)
        assert HeteroEnv.created == 2  # the sub-env probed for its specs is worker 0
        spec = env.full_observation_spec["agents"]
        assert isinstance(spec, StackedComposite) and spec.shape == (2, 3)
        env.set_seed(3)
        seeds = [3, HeteroEnv().set_seed(3)]  # worker i gets the i-th seed of the chain
        torch.manual_seed(0)
        steps = 6  # one auto-reset at HORIZON
        rollout = env.rollout(steps, break_when_any_done=False)
        assert rollout.batch_size == (2, steps)
        assert rollout["next", "agents"].batch_size == (2, steps, 3)
        for worker in range(2):
            agents = rollout["agents"][worker]
            actions = [[agents[t][j]["action"] for j in range(3)] for t in range(steps)]
            expected = _replay_alone(HeteroEnv(), seeds[worker], actions)
            nxt = rollout["next"][worker]
            for t, (observations, reward, done) in enumerate(expected):
                for j, n in enumerate(SIZES):
                    value = nxt["agents"][t][j]["observation"]
                    assert value.shape == (n,)
                    torch.testing.assert_close(value, observations[j])
                torch.testing.assert_close(nxt["reward"][t], reward)
                torch.testing.assert_close(nxt["done"][t], done)
        # the episode counter restarts after the auto-reset: t + j + seed offset
        obs = rollout["next", "agents"][0, :, 1]["observation"][:, -1]
        assert obs.tolist() == [5.0, 6.0, 7.0, 8.0, 5.0, 6.0]
        env.close()

    def test_check_env_specs(self):
        env = SerialEnv(2, HeteroEnv)
        check_env_specs(env, seed=0)
        env.close()

    def test_members_with_different_entries(self):
        env = SerialEnv(2, lambda: HeteroEnv(extra_key=True))
        agents = env.reset()["agents"]
        assert agents.batch_size == (2, 3)
        torch.testing.assert_close(agents[0][1]["b"], torch.zeros(2))
        assert "b" not in agents[0][0].keys()
        env.close()

    def test_use_buffers_true_warns_and_turns_them_off(self):
        with pytest.warns(UserWarning, match=r"use_buffers=True.*'agents', 'observation'"):
            env = SerialEnv(2, HeteroEnv, use_buffers=True)
        assert env.rollout(2)["next", "agents"].batch_size == (2, 2, 3)
        env.close()

    def test_static_specs_keep_the_buffers(self):
        calls = []

        def make():
            calls.append(1)
            return PendulumEnv()

        env = SerialEnv(3, make)
        assert type(env) is SerialEnv and len(calls) == 3
        assert env._shm_buffers is not None
        assert env.rollout(2).batch_size == (3, 2)
        env.close()


class TestParallelEnvHeterogeneous:
    @pytest.mark.parametrize("use_buffers", [None, True, False])
    def test_raises_naming_the_entry(self, use_buffers):
        match = (
            r"ParallelEnv cannot hold the entry \('agents', 'observation'\) of the sub-envs' "
            r"full_observation_spec in shared memory.*shape \(3, -1\).*use SerialEnv"
        )
        with pytest.raises(ValueError, match=match):
            ParallelEnv(2, HeteroEnv, use_buffers=use_buffers, mp_start_method="fork")

    def test_raises_on_members_with_different_entries(self):
        with pytest.raises(ValueError, match=r"entry 'agents' of .*use SerialEnv"):
            ParallelEnv(2, lambda: HeteroEnv(extra_key=True), mp_start_method="fork")


class TestPoolExitHooks:
    @pytest.mark.timeout(120)
    def test_registry_does_not_grow(self):
        gc.collect()  # pools other tests left to the collector go first
        registry = multiprocessing.util._finalizer_registry
        sizes = []
        for _ in range(3):
            env = ParallelEnv(2, PendulumEnv, mp_start_method="fork", daemon=False)
            env.reset()
            assert len(registry) > 0
            env.close()
            sizes.append(len(registry))
        assert sizes[0] == sizes[1] == sizes[2]
        # a pool collected without close() leaves nothing behind either
        env = ParallelEnv(2, PendulumEnv, mp_start_method="fork", daemon=False)
        env.reset()
        pids = env.worker_pids
        del env
        gc.collect()
        assert len(registry) == sizes[0]
        assert len(pids) == 2 and not any(os.path.exists(f"/proc/{pid}") for pid in pids)


class TestTransformedEnvBatchSize:
    def test_setting_the_batch_size_raises(self):
        env = TransformedEnv(PendulumEnv(), StepCounter())
        with pytest.raises(RuntimeError, match="Cannot modify the batch-size of a transformed env"):
            env.batch_size = torch.Size([2])
        assert env.batch_size == torch.Size([])
        assert env.rollout(2).batch_size == (2,)
