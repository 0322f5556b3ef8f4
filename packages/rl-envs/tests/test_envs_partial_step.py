"""Partial steps (the ``"_step"`` mask): EnvBase, TransformedEnv, batched envs,
ConditionalSkip and MultiAction.

Expected values were computed by TorchRL 0.14.1 on the same envs and inputs (written
here as literals). The envs write TorchRL's default done flags (``done``, ``terminated``).
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.core import Bounded, Composite, Unbounded
from rl.envs import EnvBase, ParallelEnv, SerialEnv, TransformedEnv
from rl.envs.transforms import Compose, ConditionalSkip, MultiAction, StepCounter


class Counter(EnvBase):
    """count += action; reward = action; terminates once count >= limit; counts _step calls."""

    def __init__(self, limit=100.0, batch_size=()):
        super().__init__(batch_size=batch_size)
        bs = self.batch_size
        self.limit = limit
        self.observation_spec = Composite(observation=Unbounded(shape=(*bs, 1)), shape=bs)
        self.action_spec = Bounded(-2.0, 4.0, shape=(*bs, 1))
        self.reward_spec = Unbounded(shape=(*bs, 1))
        self.count = torch.zeros(*bs, 1)
        self.nsteps = 0

    def _reset(self, td):
        mask = None if td is None else td.get("_reset", None)
        fresh = torch.zeros(*self.batch_size, 1)
        self.count = fresh if mask is None else torch.where(mask, fresh, self.count)
        flag = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        return TensorDict(
            observation=self.count.clone(), done=flag, terminated=flag.clone(),
            batch_size=self.batch_size,
        )  # fmt: skip

    def _step(self, td):
        self.nsteps += 1
        action = td["action"]
        self.count = self.count + action
        term = self.count >= self.limit
        return TensorDict(
            observation=self.count.clone(), reward=action.clone(), done=term.clone(),
            terminated=term, batch_size=self.batch_size,
        )  # fmt: skip

    def _set_seed(self, seed):
        pass


class Stateless(EnvBase):
    """next observation = observation + action (read from the input); not batch-locked."""

    batch_locked = False

    def __init__(self):
        super().__init__(batch_size=())
        self.observation_spec = Composite(observation=Unbounded(shape=(1,)))
        self.action_spec = Bounded(-2.0, 4.0, shape=(1,))
        self.reward_spec = Unbounded(shape=(1,))

    def _reset(self, td):
        shape = td.shape if td is not None else ()
        flag = torch.zeros(*shape, 1, dtype=torch.bool)
        return TensorDict(
            observation=torch.zeros(*shape, 1), done=flag, terminated=flag.clone(),
            batch_size=shape,
        )  # fmt: skip

    def _step(self, td):
        obs = td["observation"] + td["action"]
        term = obs >= 3
        return TensorDict(
            observation=obs, reward=td["action"].clone(), done=term.clone(), terminated=term,
            batch_size=td.shape,
        )  # fmt: skip

    def _set_seed(self, seed):
        pass


def _flat(td, key):
    return td[key].squeeze(-1).tolist()


def _const(value, n=None):
    shape = (1,) if n is None else (n, 1)
    return lambda td: td.set("action", torch.full(shape, float(value)))


class TestStepMask:
    def test_batched_env_steps_selected_workers(self):
        env = SerialEnv(3, Counter)
        td = env.reset()
        td["action"] = torch.ones(3, 1)
        td["_step"] = torch.tensor([True, False, True])
        out = env.step(td)
        assert "_step" not in out.keys()
        assert _flat(out, ("next", "observation")) == [1.0, 0.0, 1.0]
        assert _flat(out, ("next", "reward")) == [1.0, 0.0, 1.0]
        assert [e.nsteps for e in env.envs] == [1, 0, 1]
        td = env.step_mdp(out)
        td["action"] = torch.full((3, 1), 2.0)
        td["_step"] = torch.zeros(3, dtype=torch.bool)  # nothing stepped: current values
        out = env.step(td)
        assert _flat(out, ("next", "observation")) == [1.0, 0.0, 1.0]
        assert _flat(out, ("next", "reward")) == [0.0, 0.0, 0.0]
        assert [e.nsteps for e in env.envs] == [1, 0, 1]

    @pytest.mark.timeout(60)
    def test_parallel_env(self):
        env = ParallelEnv(2, Counter, mp_start_method="fork")
        try:
            td = env.reset()
            td["action"] = torch.ones(2, 1)
            td["_step"] = torch.tensor([False, True])
            out = env.step(td)
            assert _flat(out, ("next", "observation")) == [0.0, 1.0]
            td = env.step_mdp(out)
            td["action"] = torch.ones(2, 1)
            out = env.step(td)  # no mask: both step
            assert _flat(out, ("next", "observation")) == [1.0, 2.0]
        finally:
            env.close()

    def test_single_env_skipped_and_stepped(self):
        env = Counter()
        td = env.reset()
        td["action"] = torch.ones(1)
        td["_step"] = torch.tensor(False)
        out = env.step(td)
        assert env.nsteps == 0 and out["next", "observation"].tolist() == [0.0]
        assert out["next", "reward"].tolist() == [0.0] and "_step" not in out.keys()
        td = env.step_mdp(out)
        td["action"] = torch.ones(1)
        td["_step"] = torch.tensor(True)
        assert env.step(td)["next", "observation"].tolist() == [1.0] and env.nsteps == 1

    def test_policy_written_mask_in_rollout(self):
        env = SerialEnv(2, Counter)

        def policy(td):
            td.set("action", torch.ones(2, 1))
            return td.set("_step", torch.tensor([True, False]))

        r = env.rollout(3, policy)
        assert "_step" not in r.keys()
        assert r["next", "observation"].squeeze(-1).tolist() == [[1.0, 2.0, 3.0], [0.0] * 3]

    def test_not_batch_locked_env_steps_selected_entries(self):
        env = Stateless()
        td = TensorDict(observation=torch.tensor([[0.0], [1.0], [0.5]]), batch_size=[3])
        td["action"] = torch.ones(3, 1)
        td["_step"] = torch.tensor([True, False, True])
        out = env.step(td)
        assert _flat(out, ("next", "observation")) == [1.0, 1.0, 1.5]
        assert _flat(out, ("next", "reward")) == [1.0, 0.0, 1.0]

    def test_errors(self):
        env = SerialEnv(2, lambda: Counter(batch_size=(2,)))
        td = env.reset()
        td["action"] = torch.ones(2, 2, 1)
        td["_step"] = torch.tensor([[True, False], [True, True]])
        with pytest.raises(ValueError, match="must select whole workers"):
            env.step(td)
        td = Counter(batch_size=(2,)).reset()
        td["action"] = torch.ones(2, 1)
        td["_step"] = torch.ones(2, 3, dtype=torch.bool)
        with pytest.raises(ValueError, match=r"'_step' has shape \(2, 3\), expected the batch"):
            Counter(batch_size=(2,)).step(td)
        td["_step"] = torch.ones(2)
        with pytest.raises(TypeError, match="'_step' must be a bool tensor of shape"):
            Counter(batch_size=(2,)).step(td)


class TestConditionalSkip:
    def test_inv_writes_step_mask(self):
        t = ConditionalSkip(cond=lambda td: td["step_count"].squeeze(-1) % 2 == 1)
        td = TensorDict({"step_count": torch.tensor([[0], [1]])}, [2])
        assert t.inv(td)["_step"].tolist() == [True, False]
        td["_step"] = torch.tensor([False, True])
        assert t.inv(td)["_step"].tolist() == [False, False]

    def test_nested_envs_skip_every_other_step(self):
        # TorchRL's docstring example, on a deterministic env
        inner = TransformedEnv(Counter(), StepCounter(step_count_key="inner_count"))
        skip = ConditionalSkip(cond=lambda td: td["step_count"] % 2 == 1)
        middle = TransformedEnv(
            inner, Compose(StepCounter(step_count_key="middle_count"), skip), auto_unwrap=False
        )
        env = TransformedEnv(middle, StepCounter(), auto_unwrap=False)
        r = env.rollout(6, _const(1))
        assert _flat(r, "inner_count") == [0, 1, 1, 2, 2, 3]
        assert _flat(r, "middle_count") == [0, 1, 1, 2, 2, 3]
        assert _flat(r, "step_count") == [0, 1, 2, 3, 4, 5]
        assert _flat(r, ("next", "reward")) == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
        assert _flat(r, ("next", "observation")) == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
        assert inner.base_env.nsteps == 3

    def test_all_skipped_runs_no_transform(self):
        env = TransformedEnv(
            Counter(), Compose(StepCounter(), ConditionalSkip(lambda td: td["observation"] >= 0))
        )
        td = env.reset()
        td["action"] = torch.ones(1)
        out = env.step(td)
        assert env.base_env.nsteps == 0
        assert out["next", "step_count"].tolist() == [0]
        assert out["next", "reward"].tolist() == [0.0]

    def test_batched_env_skips_some_workers(self):
        cond = lambda td: td["observation"].squeeze(-1) > torch.tensor([0.5, 100.0])  # noqa: E731
        env = TransformedEnv(SerialEnv(2, Counter), Compose(StepCounter(), ConditionalSkip(cond)))
        r = env.rollout(4, _const(1, 2))
        assert r["next", "observation"].squeeze(-1).tolist() == [[1.0] * 4, [1.0, 2.0, 3.0, 4.0]]
        assert r["next", "reward"].squeeze(-1).tolist() == [[1.0, 0, 0, 0], [1.0] * 4]
        # a partial step still runs the transforms on every entry (as TorchRL)
        assert r["next", "step_count"].squeeze(-1).tolist() == [[1, 2, 3, 4]] * 2
        assert [e.nsteps for e in env.base_env.envs] == [1, 4]

    def test_stateless_env(self):
        cond = lambda td: td["observation"].squeeze(-1) >= 1  # noqa: E731
        env = TransformedEnv(Stateless(), Compose(StepCounter(), ConditionalSkip(cond)))
        td = env.reset(TensorDict(batch_size=[3]))
        td["observation"] = torch.tensor([[0.0], [1.0], [0.5]])
        td["action"] = torch.ones(3, 1)
        out = env.step(td)
        assert _flat(out, ("next", "observation")) == [1.0, 1.0, 1.5]
        assert _flat(out, ("next", "step_count")) == [1, 0, 1]
        assert _flat(out, ("next", "reward")) == [1.0, 0.0, 1.0]

    def test_forward_raises(self):
        with pytest.raises(NotImplementedError, match="only acts inside an env"):
            ConditionalSkip(lambda td: True)(TensorDict({}, []))
        with pytest.raises(ValueError, match="cond must be callable"):
            ConditionalSkip(cond=3)


class TestMultiActionPartial:
    def test_batched_env_stops_the_done_worker(self):
        env = TransformedEnv(SerialEnv(2, lambda: Counter(limit=3)), MultiAction())
        td = env.reset()
        td["action"] = torch.tensor([[[1.0], [2.0], [3.0], [1.0]], [[1.0], [1.0], [1.0], [1.0]]])
        out = env.step(td)["next"]
        assert _flat(out, "observation") == [3.0, 3.0]
        assert _flat(out, "reward") == [[1.0, 2.0, 2.0, 0.0], [1.0, 1.0, 1.0, 0.0]]
        assert [e.nsteps for e in env.base_env.envs] == [2, 3]

    def test_single_env_done_inside_chunk(self):
        env = TransformedEnv(Counter(limit=2), MultiAction(stack_observations=True))
        td = env.reset()
        td["action"] = torch.tensor([[1.0], [2.0], [3.0], [1.0]])
        out = env.step(td)["next"]
        assert _flat(out, "observation") == [1.0, 3.0, 3.0]
        assert _flat(out, "reward") == [1.0, 2.0, 0.0]
        assert env.base_env.nsteps == 2

    def test_stateless_env(self):
        env = TransformedEnv(Stateless(), MultiAction())
        td = env.reset(TensorDict(batch_size=[2]))
        td["observation"] = torch.tensor([[0.0], [1.0]])
        td["action"] = torch.tensor([[[1.0], [1.0], [1.0], [1.0]], [[2.0], [1.0], [1.0], [1.0]]])
        out = env.step(td)["next"]
        assert _flat(out, "observation") == [4.0, 3.0]
        assert _flat(out, "reward") == [[1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 0.0, 0.0]]
        assert _flat(out, "done") == [True, True]
