"""Trajectories of envs whose done flags live in a nested group, and heterogeneous actions."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.collectors import Collector
from rl.core import Composite, StackedComposite, Unbounded
from rl.envs import EnvBase


class GroupDoneEnv(EnvBase):
    """Counts steps; the only done flags are the ``("agents", ...)`` group's
    ``[*B, n_agents, 1]``. Agent ``i`` is done after ``horizon + i`` steps of an episode,
    and the env resets where the group's ``"_reset"`` says so."""

    def __init__(self, horizon: int = 3, n_agents: int = 2, batch_size=()):
        super().__init__(batch_size=batch_size)
        bs, n = self.batch_size, n_agents
        self.horizon, self.n_agents = horizon, n
        self.observation_spec = Composite(
            count=Unbounded(shape=(*bs, 1), dtype=torch.int64), shape=bs
        )
        self.action_spec = Unbounded(shape=(*bs, 1))
        self.reward_spec = Unbounded(shape=(*bs, 1))
        flag = Unbounded(shape=(*bs, n, 1), dtype=torch.bool)
        self.done_spec = Composite(
            agents=Composite(done=flag, terminated=flag.clone(), shape=(*bs, n)), shape=bs
        )
        self.count = torch.zeros(*bs, 1, dtype=torch.int64)
        self.limit = horizon + torch.arange(n).reshape(n, 1)

    def _flags(self) -> TensorDict:
        done = self.count.unsqueeze(-2) >= self.limit  # [*B, n, 1]
        group = TensorDict(
            done=done, terminated=done.clone(), batch_size=(*self.batch_size, self.n_agents)
        )
        return TensorDict(agents=group, batch_size=self.batch_size)

    def _reset(self, tensordict):
        reset = None if tensordict is None else tensordict.get(("agents", "_reset"), None)
        if reset is None:
            self.count.zero_()
        else:
            self.count[reset.any(-2)] = 0
        out = self._flags()
        out.set("count", self.count.clone())
        return out

    def _step(self, tensordict):
        self.count += 1
        out = self._flags()
        out.set("count", self.count.clone())
        out.set("reward", torch.zeros(*self.batch_size, 1))
        return out

    def _set_seed(self, seed):
        return seed


def _zero_policy(td):
    return td.set("action", torch.zeros(*td.batch_size, 1))


class TestNestedDone:
    @pytest.mark.parametrize("batch_size", [(), (2,)])
    def test_traj_ids_end_where_any_agent_is_done(self, batch_size):
        # agent 0 is done after 3 steps: each episode lasts 3 steps, the ids change there
        env = GroupDoneEnv(horizon=3, batch_size=batch_size)
        n = max(torch.Size(batch_size).numel(), 1)
        collector = Collector(env, _zero_policy, frames_per_batch=8 * n, total_frames=16 * n)
        batches = [b.clone() for b in collector]
        collector.shutdown()
        data = torch.cat(batches, -1).reshape(n, 16)
        counts = data["next", "count"].reshape(n, 16)
        ids = data["collector", "traj_ids"]
        # a plain loop: a new id after each step where the count reached 3
        expected = torch.empty(n, 16, dtype=torch.int64)
        current, next_id = list(range(n)), n
        for t in range(16):
            for i in range(n):
                expected[i, t] = current[i]
            for i in range(n):
                if counts[i, t] >= 3:
                    current[i], next_id = next_id, next_id + 1
        torch.testing.assert_close(ids, expected)
        assert counts[0].tolist() == [1, 2, 3] * 5 + [1]
        assert data["agents"].batch_size == (n, 16, 2)

    def test_group_reset_mask(self):
        # the collector resets through the group's own "_reset" (the env reads it there)
        env = GroupDoneEnv(horizon=2)
        collector = Collector(env, _zero_policy, frames_per_batch=2, total_frames=6)
        first_counts = [batch["count"][0].item() for batch in collector]
        collector.shutdown()
        assert first_counts == [0, 0, 0]


class HeteroActionEnv(EnvBase):
    """Two envs, each with two agents whose actions have different shapes (a
    ``StackedComposite`` group stacked after the env batch dim). (A correct policy on
    such a group is covered by TorchRL's suite, HeterogeneousCountingEnv.)"""

    def __init__(self):
        super().__init__(batch_size=(2,))
        self.observation_spec = Composite(obs=Unbounded(shape=(2, 1)), shape=(2,))
        self.action_spec = Composite(agents=_agents_spec(3, 2), shape=(2,))
        self.reward_spec = Unbounded(shape=(2, 1))

    def _reset(self, tensordict):
        return TensorDict(
            obs=torch.zeros(2, 1), done=torch.zeros(2, 1, dtype=torch.bool), batch_size=(2,)
        )

    def _step(self, tensordict):
        return TensorDict(
            obs=torch.zeros(2, 1),
            reward=torch.zeros(2, 1),
            done=torch.zeros(2, 1, dtype=torch.bool),
            batch_size=(2,),
        )

    def _set_seed(self, seed):
        return seed


def _agents_spec(*sizes: int) -> StackedComposite:
    members = [Composite(action=Unbounded(shape=(2, n)), shape=(2,)) for n in sizes]
    return StackedComposite(*members, dim=1)


class TestHeterogeneousActions:
    def test_heterogeneous_action_of_wrong_shape_raises(self):
        env = HeteroActionEnv()
        wrong = _agents_spec(2, 2)

        def policy(td):
            return td.set("agents", wrong.one())

        collector = Collector(env, policy, frames_per_batch=8, total_frames=8)
        with pytest.raises(ValueError, match="action group \\('agents',\\)"):
            next(iter(collector))
        collector.shutdown()
