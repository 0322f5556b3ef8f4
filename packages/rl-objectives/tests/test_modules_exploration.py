"""Exploration modules of rl.modules: epsilon-greedy, Gaussian, Ornstein-Uhlenbeck, random."""

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictSequential
from torch import nn

from rl.core import (
    Bounded,
    Categorical,
    Composite,
    ExplorationType,
    MultiCategorical,
    OneHot,
    Unbounded,
    set_exploration_type,
)
from rl.modules import (
    Actor,
    AdditiveGaussianModule,
    AdditiveGaussianWrapper,
    EGreedyModule,
    EGreedyWrapper,
    OrnsteinUhlenbeckProcessModule,
    OrnsteinUhlenbeckProcessWrapper,
    QValueActor,
    RandomPolicy,
    set_exploration_modules_spec_from_env,
)


def _actions(n=2000, value=0):
    return TensorDict(action=torch.full((n,), value, dtype=torch.long), batch_size=[n])


class TestEGreedy:
    def test_annealing_values(self):
        module = EGreedyModule(Categorical(3), eps_init=1.0, eps_end=0.1, annealing_num_steps=10)
        torch.testing.assert_close(module.eps, torch.tensor(1.0))
        module.step()
        torch.testing.assert_close(module.eps, torch.tensor(0.91))
        module.step(2)
        torch.testing.assert_close(module.eps, torch.tensor(0.73))
        module.step(100)
        torch.testing.assert_close(module.eps, torch.tensor(0.1))

    def test_annealing_matches_one_step_loop(self):
        a = EGreedyModule(Categorical(3), 0.9, 0.05, annealing_num_steps=7)
        b = EGreedyModule(Categorical(3), 0.9, 0.05, annealing_num_steps=7)
        a.step(5)
        for _ in range(5):
            b.step()
        torch.testing.assert_close(a.eps, b.eps)

    def test_eps_one_randomizes_and_eps_zero_keeps(self):
        module = EGreedyModule(Categorical(4), eps_init=1.0, eps_end=1.0)
        out = module(_actions())["action"]
        frac_changed = (out != 0).float().mean().item()
        assert abs(frac_changed - 0.75) < 0.06
        assert ((out >= 0) & (out < 4)).all()
        module = EGreedyModule(Categorical(4), eps_init=0.0, eps_end=0.0)
        assert (module(_actions())["action"] == 0).all()

    def test_random_vs_deterministic(self):
        module = EGreedyModule(Categorical(4), eps_init=1.0, eps_end=1.0)
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            assert (module(_actions())["action"] == 0).all()
        with set_exploration_type(ExplorationType.RANDOM):
            assert (module(_actions())["action"] != 0).any()

    def test_fraction_follows_eps(self):
        module = EGreedyModule(Categorical(2), eps_init=0.5, eps_end=0.5)
        out = module(_actions(n=20000))["action"]
        # half the actions are resampled, half of those land on 1
        assert abs((out == 1).float().mean().item() - 0.25) < 0.02

    @pytest.mark.parametrize(
        "spec,action",
        [
            (Categorical(4), torch.zeros(6, dtype=torch.long)),
            (OneHot(3), torch.zeros(2, 5, 3, dtype=torch.long)),
            (Categorical(4, shape=(2,)), torch.zeros(6, 2, dtype=torch.long)),
            (Categorical(4, shape=(6,)), torch.zeros(6, dtype=torch.long)),
            (MultiCategorical([4]), torch.zeros(6, 1, dtype=torch.long)),
            (MultiCategorical([4, 3]), torch.zeros(6, 2, dtype=torch.long)),
        ],
        ids=["categorical", "onehot-2d", "categorical-feature", "same-shape", "multi-1", "multi-2"],
    )
    def test_draws_for_the_leading_dims_without_copying_the_spec(self, spec, action, monkeypatch):
        """A spec whose shape ends the action's draws for the action's leading dims: the
        draws of the spec expanded to the action's shape, with no copy of the spec per
        call."""
        module = EGreedyModule(spec, eps_init=1.0, eps_end=1.0)
        td = TensorDict(action=action, batch_size=action.shape[: action.ndim - spec.ndim])
        torch.manual_seed(3)
        cond = torch.rand(td.batch_size) < 1.0  # the module's draw of who explores
        want = spec.expand(action.shape).rand()
        with monkeypatch.context() as patch:
            for name in ("expand", "clone"):
                patch.setattr(type(spec), name, lambda *a, **k: pytest.fail("spec copied"))
            torch.manual_seed(3)
            out = module(td.clone())["action"]
        assert cond.all() and out.shape == action.shape and out.dtype == action.dtype
        assert torch.equal(out, want)
        # a spec that must be broadcast to the action still is (a copy, as before)
        wide = EGreedyModule(Categorical(4, shape=(1,)), eps_init=1.0, eps_end=1.0)
        out = wide(TensorDict(action=torch.zeros(6, dtype=torch.long), batch_size=[6]))
        assert out["action"].shape == (6,) and ((out["action"] >= 0) & (out["action"] < 4)).all()

    @pytest.mark.parametrize("spec", [Categorical(4), OneHot(4)])
    def test_mask_respected(self, spec):
        n = 500
        mask = torch.zeros(n, 4, dtype=torch.bool)
        mask[:, 2] = True
        mask[: n // 2, 3] = True
        if isinstance(spec, OneHot):
            action = torch.zeros(n, 4, dtype=torch.bool)
            action[:, 2] = True
        else:
            action = torch.full((n,), 2)
        td = TensorDict(action=action, mask=mask, batch_size=[n])
        module = EGreedyModule(spec, eps_init=1.0, eps_end=1.0, action_mask_key="mask")
        out = module(td)["action"]
        index = out.long().argmax(-1) if isinstance(spec, OneHot) else out
        allowed = mask.gather(-1, index.unsqueeze(-1)).squeeze(-1)
        assert allowed.all()
        assert (index[: n // 2] == 3).any()
        assert spec.mask is None and module.spec["action"].mask is None  # the spec is untouched

    def test_errors(self):
        with pytest.raises(ValueError, match="eps must decrease"):
            EGreedyModule(Categorical(3), eps_init=0.1, eps_end=0.5)
        module = EGreedyModule(Categorical(3), action_mask_key="mask")
        with pytest.raises(
            KeyError, match="Action mask key mask not found.*EGreedyModule.*Keys present.*action"
        ):
            module(_actions(n=3))
        with pytest.raises(KeyError, match="'action'.*Keys present.*obs"):
            module(TensorDict(obs=torch.zeros(3), batch_size=[3]))
        with pytest.raises(RuntimeError, match="the spec has not been set"):
            EGreedyModule(None)(_actions(n=3))

    def test_state_dict_round_trip(self):
        a = EGreedyModule(Categorical(3), annealing_num_steps=10)
        a.step(4)
        b = EGreedyModule(Categorical(3), annealing_num_steps=10)
        b.load_state_dict(a.state_dict())
        torch.testing.assert_close(b.eps, a.eps)

    def test_wrapper_equals_sequence(self):
        policy = QValueActor(nn.Linear(4, 3), spec=Categorical(3))
        wrapped = EGreedyWrapper(policy, eps_init=0.5, eps_end=0.5)
        seq = TensorDictSequential(policy, EGreedyModule(Categorical(3), 0.5, 0.5))
        td = TensorDict(observation=torch.randn(100, 4), batch_size=[100])
        torch.manual_seed(0)
        a = wrapped(td.clone())["action"]
        torch.manual_seed(0)
        b = seq(td.clone())["action"]
        torch.testing.assert_close(a, b)
        wrapped.step(500)
        torch.testing.assert_close(wrapped.module[-1].eps, torch.tensor(0.5))


class TestAdditiveGaussian:
    def test_noise_statistics(self):
        spec = Bounded(-100.0, 100.0, shape=(2,))
        module = AdditiveGaussianModule(
            spec, sigma_init=0.5, sigma_end=0.5, mean=1.0, std=2.0, annealing_num_steps=1
        )
        td = TensorDict(action=torch.zeros(20000, 2), batch_size=[20000])
        noise = module(td)["action"]
        assert abs(noise.mean().item() - 0.5) < 0.03  # sigma * mean
        assert abs(noise.std().item() - 1.0) < 0.03  # sigma * std

    def test_projects_and_switches(self):
        module = AdditiveGaussianModule(Bounded(-1.0, 1.0, shape=(2,)), sigma_init=5.0)
        td = TensorDict(action=torch.zeros(100, 2), batch_size=[100])
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            assert (module(td.clone())["action"] == 0).all()
        out = module(td.clone())["action"]
        assert out.abs().max() <= 1.0 and (out != 0).any()

    def test_annealing(self):
        module = AdditiveGaussianModule(
            Unbounded(1), sigma_init=1.0, sigma_end=0.0, annealing_num_steps=4
        )
        module.step(3)
        torch.testing.assert_close(module.sigma, torch.tensor(0.25))

    def test_spec_from_env(self):
        class FakeEnv:
            action_spec_unbatched = Bounded(-2.0, 2.0, shape=(1,))

        policy = TensorDictSequential(Actor(nn.Linear(3, 1)), AdditiveGaussianModule())
        with pytest.raises(RuntimeError, match="set_exploration_modules_spec_from_env"):
            policy(TensorDict(observation=torch.zeros(2, 3), batch_size=[2]))
        set_exploration_modules_spec_from_env(policy, FakeEnv())
        assert policy.module[1].spec["action"] == FakeEnv.action_spec_unbatched
        out = policy(TensorDict(observation=torch.zeros(2, 3), batch_size=[2]))
        assert out["action"].shape == (2, 1)

    def test_wrapper(self):
        actor = Actor(nn.Linear(3, 2), spec=Bounded(-1.0, 1.0, shape=(2,)))
        wrapped = AdditiveGaussianWrapper(actor, sigma_init=10.0)
        out = wrapped(TensorDict(observation=torch.zeros(50, 3), batch_size=[50]))["action"]
        assert out.abs().max() <= 1.0 and out.std() > 0.3


class TestOrnsteinUhlenbeck:
    def test_matches_plain_loop_with_reset(self):
        theta, mu, sigma, dt = 0.15, 0.0, 0.2, 0.01
        ou = OrnsteinUhlenbeckProcessModule(
            Bounded(-10.0, 10.0, shape=(2,)), eps_init=1.0, theta=theta, sigma=sigma, dt=dt
        )
        batch, steps = 3, 6
        is_init = torch.zeros(steps, batch, 1, dtype=torch.bool)
        is_init[0] = True
        is_init[3, 1] = True  # env 1 resets at step 3
        torch.manual_seed(0)
        td = TensorDict(batch_size=[batch])
        outputs = []
        for t in range(steps):
            td["action"] = torch.zeros(batch, 2)
            td["is_init"] = is_init[t]
            outputs.append(ou(td)["action"].clone())
        torch.manual_seed(0)
        x = torch.zeros(batch, 2)
        for t in range(steps):
            x = torch.where(is_init[t], torch.zeros_like(x), x)
            x = x + theta * (mu - x) * dt + sigma * math.sqrt(dt) * torch.randn(batch, 2)
            torch.testing.assert_close(outputs[t], x)
        assert td["_ou_steps"].tolist() == [6, 3, 6]

    def test_deterministic_adds_nothing(self):
        ou = OrnsteinUhlenbeckProcessModule(Bounded(-1.0, 1.0, shape=(2,)))
        td = TensorDict(action=torch.zeros(4, 2), batch_size=[4])
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            out = ou(td)
        assert (out["action"] == 0).all() and "_ou_prev_noise" not in out.keys()

    def test_sigma_annealing_and_spec(self):
        ou = OrnsteinUhlenbeckProcessModule(
            Bounded(-1.0, 1.0, shape=(1,)), sigma=0.5, sigma_min=0.1, n_steps_annealing=4
        )
        torch.testing.assert_close(
            ou.current_sigma(torch.tensor([0.0, 2.0, 10.0])), torch.tensor([0.5, 0.3, 0.1])
        )
        assert set(ou.spec.keys()) == {"action", "_ou_prev_noise", "_ou_steps"}
        with pytest.raises(ValueError, match="eps must decrease"):
            OrnsteinUhlenbeckProcessModule(Unbounded(1), eps_init=0.1, eps_end=0.2)

    def test_wrapper(self):
        actor = Actor(nn.Linear(3, 2), spec=Bounded(-1.0, 1.0, shape=(2,)))
        wrapped = OrnsteinUhlenbeckProcessWrapper(actor)
        out = wrapped(TensorDict(observation=torch.zeros(5, 3), batch_size=[5]))
        assert out["_ou_steps"].tolist() == [1] * 5


class TestRandomPolicy:
    def test_leaf_spec(self):
        spec = Bounded(-1.0, 1.0, shape=(3,))
        out = RandomPolicy(spec)(TensorDict(batch_size=[7]))
        assert out["action"].shape == (7, 3) and spec.is_in(out["action"])

    def test_batched_and_composite_spec(self):
        spec = Composite(action=Categorical(4, shape=(5,)), shape=(5,))
        out = RandomPolicy(spec)(TensorDict(batch_size=[5]))
        assert out["action"].shape == (5,) and ((out["action"] >= 0) & (out["action"] < 4)).all()

    def test_needs_spec(self):
        with pytest.raises(RuntimeError, match="action_spec is not set"):
            RandomPolicy()(TensorDict(batch_size=[2]))
