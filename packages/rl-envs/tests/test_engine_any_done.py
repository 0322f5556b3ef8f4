"""The rollout engine and an env's declared constant ``any_done``
(:func:`rl.envs.engine.declared_any_done`): asked once instead of reading each step's done
flags (no host read: none on a ``meta`` device, none inside a CUDA graph capture), with
the values, resets and early stops of the loop that reads them."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.core import Composite, Unbounded
from rl.envs import EnvBase
from rl.envs.engine import RolloutKernel, declared_any_done, run_rollout

META = torch.device("meta")


class Counter(EnvBase):
    """``[n]`` counters adding the action at each step; row ``i`` is done (terminated) once
    its count of steps reaches ``limits[i]``, and restarts from zero at its reset."""

    def __init__(self, limits, device="cpu") -> None:
        super().__init__(batch_size=[len(limits)], device=device, allow_done_after_reset=True)
        n = len(limits)
        self.limits = torch.tensor(limits, dtype=torch.float32, device=device)[:, None]
        self.observation_spec = Composite(
            count=Unbounded((n, 1)), total=Unbounded((n, 1)), shape=(n,), device=device
        )
        self.action_spec = Unbounded((n, 1), device=device)
        self.reward_spec = Unbounded((n, 1), device=device)

    def _reset(self, td):
        zeros = torch.zeros(*self.batch_size, 1, device=self.device)
        return TensorDict(count=zeros, total=zeros.clone(), batch_size=self.batch_size)

    def _step(self, td):
        count = td["count"] + 1
        done = count >= self.limits
        return TensorDict(
            count=count,
            total=td["total"] + td["action"],
            reward=td["action"] * 2,
            done=done,
            terminated=done.clone(),
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass


class NeverDone(Counter):
    """A :class:`Counter` whose limits are never reached, which declares it: its
    ``any_done`` is the constant ``False`` (as an imagination env's)."""

    _constant_any_done = True

    def __init__(self, n: int, device="cpu") -> None:
        super().__init__([10**6] * n, device=device)

    def any_done(self, tensordict):
        return False


class AlwaysAsked(NeverDone):
    """Declares a constant any_done but answers with a tensor: a broken declaration."""

    def any_done(self, tensordict):
        return torch.zeros((), dtype=torch.bool)


class _Half(nn.Module):
    def forward(self, count):
        return torch.full_like(count, 0.5)


def half_policy():
    return TensorDictModule(_Half(), ["count"], ["action"])


class CounterKernel(RolloutKernel):
    """A kernel of a :class:`Counter` that reads no root (the engine's loop without a
    root per step): it writes each step into the ``"next"`` buffers and returns the
    step's done flags (a tensor on the env's device)."""

    reads_root = False
    root_inputs = ()

    def __init__(self, env: Counter) -> None:
        self.env = env

    def start(self, buffers, tensordict, actions, *, eager, stops):
        self.actions = dict(actions)["action"]
        self.count = tensordict["count"].clone()
        self.bufs = {
            key: buffers.next_buffer(key, (1,), dtype)
            for key, dtype in (
                ("count", torch.float32),
                ("reward", torch.float32),
                ("done", torch.bool),
                ("terminated", torch.bool),
                ("truncated", torch.bool),
            )
        }

    def step(self, t, tensordict):
        self.count = self.count + 1
        done = self.count >= self.env.limits
        values = dict(count=self.count, reward=self.actions[:, t] * 2, done=done, terminated=done)
        values["truncated"] = torch.zeros_like(done)
        for key, value in values.items():
            self.bufs[key][:, t] = value
        return done

    def reset(self, t, done, tensordict):
        self.count = torch.where(done, torch.zeros_like(self.count), self.count)
        return {"count": self.count.clone(), "done": torch.zeros_like(done)}


def assert_equal(out, expected):
    assert out.batch_size == expected.batch_size
    assert set(out.keys(True, True)) == set(expected.keys(True, True))
    for key in expected.keys(True, True):
        assert out[key].device == expected[key].device
        if out[key].device.type != "meta":
            assert torch.equal(out[key], expected[key]), key


def undeclared(env: NeverDone) -> Counter:
    """The same env read as an ordinary env: its loop reads every step's done flags."""
    env.__dict__["_constant_any_done"] = False
    return env


class TestDeclaredAnyDone:
    def test_asked_for_declaring_envs_only(self):
        env = NeverDone(3)
        assert declared_any_done(env, env.reset()) is False
        assert declared_any_done(Counter([2, 3]), Counter([2, 3]).reset()) is None

    def test_reset_mask_stays_out_of_the_root(self):
        class AnswersTrue(NeverDone):
            def any_done(self, tensordict):
                tensordict.set("_reset", torch.ones(*tensordict.shape, 1, dtype=torch.bool))
                return True

        env = AnswersTrue(2)
        root = env.reset()
        assert declared_any_done(env, root) is True
        assert "_reset" not in root.keys()

    def test_a_declared_tensor_answer_raises(self):
        env = AlwaysAsked(2)
        with pytest.raises(TypeError, match="AlwaysAsked declares a constant any_done .* Tensor"):
            env.rollout(3, break_when_any_done=False)

    @pytest.mark.parametrize("policy", [None, half_policy()], ids=["random", "policy"])
    @pytest.mark.parametrize("break_when_any_done", [True, False])
    def test_no_done_flag_read_on_meta(self, policy, break_when_any_done):
        """On ``meta`` a host read of a tensor raises: the rollout of a declaring env runs
        its ``max_steps`` (never done), with every entry on the device."""
        env = NeverDone(4, device=META)
        out = env.rollout(5, policy, break_when_any_done=break_when_any_done)
        assert out.batch_size == (4, 5)
        assert {v.device for v in out.values(True, True)} == {META}
        assert "_reset" not in out.keys()

    def test_an_ordinary_env_on_meta_still_reads_its_flags(self):
        env = Counter([2, 3], device=META)
        with pytest.raises(RuntimeError, match="meta"):
            env.rollout(3, half_policy(), break_when_any_done=False)

    @pytest.mark.parametrize("break_when_any_done", [True, False])
    def test_lean_loop_reads_no_done_flag_on_meta(self, break_when_any_done):
        """A kernel that reads no root, no policy: the loop without a root per step."""
        env = NeverDone(3, device=META)
        out = run_rollout(
            env,
            4,
            env.reset(),
            policy=None,
            break_when_any_done=break_when_any_done,
            break_when_all_done=False,
            kernel=CounterKernel(env),
        )
        assert out.batch_size == (3, 4)
        assert out["next", "done"].device == META

    @pytest.mark.parametrize("policy", [None, half_policy()], ids=["random", "policy"])
    @pytest.mark.parametrize(
        "stops", [(True, False), (False, False), (False, True)], ids=["any", "none", "all"]
    )
    def test_values_as_the_loop_reading_the_flags(self, policy, stops):
        """The declaring env's rollout equals the one of the same env read step by step."""
        outs = []
        for env in (NeverDone(3), undeclared(NeverDone(3))):
            torch.manual_seed(0)
            outs.append(
                env.rollout(6, policy, break_when_any_done=stops[0], break_when_all_done=stops[1])
            )
        assert outs[0].batch_size == (3, 6)
        assert_equal(*outs)

    @pytest.mark.parametrize("any_done", [True, False])
    def test_lean_loop_values_as_the_loop_reading_the_flags(self, any_done):
        outs = []
        for env in (NeverDone(2), undeclared(NeverDone(2))):
            torch.manual_seed(0)
            kernel = CounterKernel(env)
            outs.append(
                run_rollout(
                    env,
                    5,
                    env.reset(),
                    policy=None,
                    break_when_any_done=any_done,
                    break_when_all_done=False,
                    kernel=kernel,
                )
            )
        assert outs[0].batch_size == (2, 5)
        assert_equal(*outs)


class TestOrdinaryEnvResets:
    """An env that declares nothing: the loop reads each step's flags, resets the done
    rows (partial resets) and stops as it did."""

    @pytest.mark.parametrize("policy", [None, half_policy()], ids=["random", "policy"])
    def test_partial_resets(self, policy):
        env = Counter([2, 3])
        torch.manual_seed(0)
        out = env.rollout(7, policy, break_when_any_done=False)
        counts = [[0, 1, 0, 1, 0, 1, 0], [0, 1, 2, 0, 1, 2, 0]]
        assert out["count"].squeeze(-1).tolist() == counts
        done = [[c + 1 >= limit for c in row] for row, limit in zip(counts, (2, 3))]
        assert out["next", "done"].squeeze(-1).tolist() == done
        assert out["next", "terminated"].squeeze(-1).tolist() == done
        assert not out["done"].any()  # each done row restarted from its reset
        torch.testing.assert_close(out["next", "reward"], out["action"] * 2)
        for t in range(6):  # a reset row's total restarts from zero
            for row in range(2):
                carried = 0.0 if done[row][t] else out["next", "total"][row, t].item()
                assert out["total"][row, t + 1].item() == carried
        assert "_reset" not in out.keys()

    def test_stops(self):
        env = Counter([2, 3])
        assert env.rollout(7, break_when_any_done=True).batch_size == (2, 2)
        out = env.rollout(7, break_when_any_done=False, break_when_all_done=True)
        assert out.batch_size == (2, 3)
