"""TorchRL parity of the env core: EnvBase as an nn.Module, its constructor arguments,
stateless (non batch-locked) envs, step_mdp, auto-resetting envs, heterogeneous data,
batched-env arguments and the ``torchrl.envs.utils`` helpers.

Reference values marked "TorchRL 0.14.1" were produced by running the same env code
with ``torchrl`` imports in a scratch TorchRL 0.14.1 install.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np
import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule

from rl.core import Bounded, Composite, Unbounded
from rl.envs import (
    AutoResetEnv,
    AutoResetTransform,
    CatTensors,
    EnvBase,
    ParallelEnv,
    PendulumEnv,
    SerialEnv,
    StepCounter,
    TransformedEnv,
    UnsqueezeTransform,
    auto_unwrap_transformed_env,
    check_env_specs,
    gym_backend,
    set_auto_unwrap_transformed_env,
    set_gym_backend,
)
from rl.envs._batched._options import TORCHRL_BATCHED_OPTIONS
from rl.envs.utils import make_composite_from_td, step_mdp, terminated_or_truncated


def _is_bool_scalar(value, expected: bool) -> bool:
    """Whether ``value`` is a 0-d bool tensor equal to ``expected`` (TorchRL's return type)."""
    return (
        isinstance(value, torch.Tensor)
        and value.shape == ()
        and value.dtype == torch.bool
        and value.item() is expected
    )


def _path(key) -> tuple:
    return key if isinstance(key, tuple) else (key,)


# ------------------------------------------------------------------ test environments
def _angle_normalize(x):
    return ((x + torch.pi) % (2 * torch.pi)) - torch.pi


class StatelessPendulum(EnvBase):
    """An env laid out as TorchRL's Pendulum tutorial: ``gen_params``, ``_make_spec``,
    a stateless static ``_step`` reading its parameters from the tensordict."""

    batch_locked = False

    def __init__(self, td_params=None, seed=None, device="cpu"):
        if td_params is None:
            td_params = self.gen_params()
        super().__init__(device=device, batch_size=[])
        self._make_spec(td_params)
        if seed is None:
            seed = torch.empty((), dtype=torch.int64).random_().item()
        self.set_seed(seed)

    @staticmethod
    def gen_params(g=10.0, batch_size=None) -> TensorDictBase:
        params = TensorDict(
            {"max_speed": 8, "max_torque": 2.0, "dt": 0.05, "g": g, "m": 1.0, "l": 1.0}, []
        )
        td = TensorDict({"params": params}, [])
        if batch_size:
            td = td.expand(batch_size).contiguous()
        return td

    def _make_spec(self, td_params):
        self.observation_spec = Composite(
            th=Bounded(low=-torch.pi, high=torch.pi, shape=(), dtype=torch.float32),
            thdot=Bounded(
                low=-td_params["params", "max_speed"],
                high=td_params["params", "max_speed"],
                shape=(),
                dtype=torch.float32,
            ),
            params=make_composite_from_td(td_params["params"], unsqueeze_null_shapes=False),
            shape=(),
        )
        self.state_spec = self.observation_spec.clone()
        self.action_spec = Bounded(
            low=-td_params["params", "max_torque"],
            high=td_params["params", "max_torque"],
            shape=(1,),
            dtype=torch.float32,
        )
        self.reward_spec = Unbounded(shape=(*td_params.shape, 1))

    def _reset(self, tensordict):
        if tensordict is None or tensordict.is_empty():
            tensordict = self.gen_params(batch_size=self.batch_size)
        shape = tensordict.shape
        th = torch.rand(shape, generator=self.rng, device=self.device) * 2 * np.pi - np.pi
        thdot = torch.rand(shape, generator=self.rng, device=self.device) * 2 - 1
        return TensorDict({"th": th, "thdot": thdot, "params": tensordict["params"]}, shape)

    @staticmethod
    def _step(tensordict):
        th, thdot, p = tensordict["th"], tensordict["thdot"], tensordict["params"]
        u = tensordict["action"].squeeze(-1).clamp(-p["max_torque"], p["max_torque"])
        costs = _angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
        gravity = 3 * p["g"] / (2 * p["l"]) * th.sin()
        new_thdot = thdot + (gravity + 3.0 / (p["m"] * p["l"] ** 2) * u) * p["dt"]
        new_thdot = new_thdot.clamp(-p["max_speed"], p["max_speed"])
        new_th = th + new_thdot * p["dt"]
        reward = -costs.view(*tensordict.shape, 1)
        done = torch.zeros_like(reward, dtype=torch.bool)
        return TensorDict(
            {"th": new_th, "thdot": new_thdot, "params": p, "reward": reward, "done": done},
            tensordict.shape,
        )

    def _set_seed(self, seed):
        self.rng = torch.manual_seed(seed)


class Counter(EnvBase):
    """Counts to ``n`` and starts again by itself (an auto-resetting env)."""

    def __init__(self, n=3, batch_size=()):
        super().__init__(batch_size=batch_size)
        bs = self.batch_size
        self.n = n
        self.observation_spec = Composite(count=Unbounded(shape=(*bs, 1)), shape=bs)
        self.action_spec = Unbounded(shape=(*bs, 1))
        self.reward_spec = Unbounded(shape=(*bs, 1))
        self.count = torch.zeros(*bs, 1)

    def _reset(self, td):
        self.count = torch.zeros(*self.batch_size, 1)
        return TensorDict(count=self.count.clone(), batch_size=self.batch_size)

    def _step(self, td):
        self.count = self.count + 1
        done = self.count >= self.n
        reward = self.count.clone()
        self.count = torch.where(done, torch.zeros_like(self.count), self.count)
        return TensorDict(
            count=self.count.clone(), reward=reward, done=done, batch_size=self.batch_size
        )

    def _set_seed(self, seed):
        pass


class Sized(EnvBase):
    """An observation of ``size`` entries (sub-envs of different sizes: heterogeneous)."""

    def __init__(self, size=3):
        super().__init__()
        self.size = size
        self.observation_spec = Composite(obs=Unbounded(shape=(size,)))
        self.action_spec = Unbounded(shape=(1,))
        self.t = 0

    def _reset(self, td):
        self.t = 0
        return TensorDict(obs=torch.zeros(self.size))

    def _step(self, td):
        self.t += 1
        return TensorDict(
            obs=torch.full((self.size,), float(self.t)),
            reward=td["action"].clone(),
            done=torch.tensor([self.t >= 3]),
        )

    def _set_seed(self, seed):
        pass


class Agents(EnvBase):
    """A group ``("agents", ...)`` of batch ``[*B, n_agents]``."""

    def __init__(self, n_agents=3, batch_size=(2,)):
        super().__init__(batch_size=batch_size)
        bs, self.n = self.batch_size, n_agents
        group = (*bs, n_agents)
        self.observation_spec = Composite(
            agents=Composite(obs=Unbounded(shape=(*group, 2)), shape=group), shape=bs
        )
        self.action_spec = Composite(
            agents=Composite(action=Unbounded(shape=(*group, 1)), shape=group), shape=bs
        )
        self.state = torch.zeros(*group, 2)

    def _group(self):
        return TensorDict(obs=self.state.clone(), batch_size=(*self.batch_size, self.n))

    def _reset(self, td):
        self.state = torch.zeros(*self.batch_size, self.n, 2)
        return TensorDict(agents=self._group(), batch_size=self.batch_size)

    def _step(self, td):
        self.state = self.state + td["agents", "action"]
        return TensorDict(
            agents=self._group(),
            reward=torch.ones(*self.batch_size, 1),
            done=torch.zeros(*self.batch_size, 1, dtype=torch.bool),
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass


# ------------------------------------------------------------------------ EnvBase
class TestEnvBaseModule:
    def test_is_module_with_buffers_parameters_state_dict(self):
        class Scaled(Counter):
            def __init__(self):
                super().__init__()
                self.register_buffer("scale", torch.tensor([2.0]))
                self.gain = torch.nn.Parameter(torch.ones(1))

        env = Scaled()
        assert isinstance(env, torch.nn.Module)
        assert set(env.state_dict()) == {"scale", "gain"}
        assert [n for n, _ in env.named_parameters()] == ["gain"]
        state = {"scale": torch.tensor([5.0]), "gain": torch.tensor([3.0])}
        env.load_state_dict(state)
        torch.testing.assert_close(env.scale, torch.tensor([5.0]))
        assert env.to(torch.float64) is env and env.scale.dtype == torch.float64
        assert env.to("cpu").device == torch.device("cpu")
        assert env.observation_spec["count"].device == torch.device("cpu")
        assert env.rollout(2)["next", "count"].flatten().tolist() == [1.0, 2.0]

    def test_plain_attributes_stay_plain_and_module_rules_hold(self):
        env = Counter()
        env.rollout(4, break_when_any_done=False)  # _step assigns self.count each step
        assert "count" in env.__dict__ and "count" not in env._buffers
        env.count = torch.nn.Parameter(torch.zeros(1))  # a Parameter still registers
        assert "count" in env._parameters and "count" not in env.__dict__
        assert PendulumEnv(batch_size=[2]).state_dict() == {}

    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    def test_to_cuda_moves_specs_buffers_and_state(self):
        env = PendulumEnv(batch_size=[2]).to("cuda")
        assert env.device.type == "cuda" and env.action_spec.device.type == "cuda"
        assert env.rollout(3)["next", "observation"].device.type == "cuda"

    def test_forward_raises(self):
        with pytest.raises(NotImplementedError, match="env.step"):
            Counter()(TensorDict())

    def test_constructor_arguments(self):
        env = Counter(spec_locked=False)
        assert env.is_spec_locked is False and Counter().is_spec_locked is True

        class Args(Counter):
            def __init__(self, **kwargs):
                EnvBase.__init__(self, **kwargs)
                self.n = 3
                self.observation_spec = Composite(count=Unbounded(shape=(1,)))
                self.action_spec = Unbounded(shape=(1,))
                self.count = torch.zeros(1)

        env = Args(run_type_checks=True, allow_done_after_reset=True, device="cpu")
        assert env.run_type_checks and env.allow_done_after_reset
        assert isinstance(Args(auto_reset=True), AutoResetEnv)
        assert isinstance(Counter(auto_reset=True), AutoResetEnv)

    def test_new_override_as_torchrl_subclasses_write_it(self):
        class Free(StatelessPendulum):
            batch_locked = EnvBase.batch_locked  # from __new__ only

            @classmethod
            def __new__(cls, *args, **kwargs):
                return super().__new__(cls, *args, _batch_locked=False, **kwargs)

        env = Free(seed=0)
        assert env.batch_locked is False
        assert env.reset(env.gen_params(batch_size=[5])).batch_size == (5,)
        assert Counter().batch_locked is True
        with pytest.raises(ValueError, match=r"expected the env batch_size \(\)"):
            Counter().reset(TensorDict(batch_size=[2]))

    def test_append_transform_returns_transformed_env(self):
        base = PendulumEnv()
        env = base.append_transform(StepCounter())
        assert isinstance(env, TransformedEnv) and env.base_env is base
        assert env.append_transform(StepCounter(step_count_key="c")) is env
        with pytest.raises(TypeError, match="expects a Transform or a callable"):
            base.append_transform(5)
        scaled = PendulumEnv().append_transform(
            lambda td: td.set("observation", td["observation"] * 0)
        )
        assert scaled.rollout(2)["next", "observation"].abs().sum() == 0
        assert scaled.append_transform(lambda td: None).rollout(2).batch_size == (2,)

    def test_rand_step_and_fake_tensordict(self):
        env = PendulumEnv(batch_size=[2])
        td = env.rand_step()
        assert td["next", "observation"].shape == (2, 3) and td["action"].shape == (2, 1)
        fake = env.fake_tensordict()
        rollout = env.rollout(1)
        assert set(fake.keys(True, True)) == set(rollout[..., 0].keys(True, True))
        assert fake["next", "reward"].abs().sum() == 0

    def test_rollout_arguments(self):
        env = Counter(n=10)
        actions = [torch.ones(1) * i for i in range(4)]
        r = env.rollout(4, actions=actions)
        assert r["action"][:, 0].tolist() == [0.0, 1.0, 2.0, 3.0]
        with pytest.raises(ValueError, match="fewer actions than max_steps"):
            env.rollout(5, actions=actions)
        with pytest.raises(ValueError, match="a policy or actions"):
            env.rollout(2, policy=lambda td: td, actions=actions)
        out = env.rollout(3).zero_()
        assert env.rollout(3, out=out) is out and out["next", "count"][:, 0].tolist() == [1, 2, 3]
        assert env.rollout(3, storing_device="cpu").device == torch.device("cpu")
        assert env.rollout(20, break_when_any_done=None).batch_size == (10,)
        with pytest.raises(NotImplementedError, match="set_state=True"):
            env.rollout(2, set_state=True)
        module = torch.nn.Linear(1, 1)  # trusted: called with the tensordict as is
        with pytest.raises((TypeError, AttributeError, RuntimeError)):
            env.rollout(2, policy=module, trust_policy=True)
        assert env.rollout(2, policy=module, auto_cast_to_device=True).batch_size == (2,)

    def test_shape_and_key_helpers(self):
        env = Agents()
        assert env.shape == (2,) and env.batch_dims == env.ndim == env.ndimension() == 1
        assert env.numel() == 2
        assert env.reset_keys == ["_reset"] and env.done_keys_groups == [env.done_keys]
        td = env.rand_step(env.reset())
        td["next", "done"][0] = True
        root = env.step_mdp(td)
        assert _is_bool_scalar(env.any_done(root), True)
        assert root["_reset"][:, 0].tolist() == [True, False]
        root = env.maybe_reset(root)
        assert "_reset" not in root.keys() and root["agents", "obs"][0].abs().sum() == 0
        none_done = TensorDict(done=torch.zeros(2, 1, dtype=torch.bool), batch_size=[2])
        assert _is_bool_scalar(env.any_done(none_done), False)
        assert env.set_spec_lock_(False).is_spec_locked is False

    def test_missing_done_entries_are_completed(self):
        env = Counter()
        assert env.done_keys == ["done", "terminated"]  # TorchRL 0.14.1's default
        r = env.rollout(3)  # done at the third step: terminated follows done
        assert r["next", "done"][:, 0].tolist() == [False, False, True]
        assert r["next", "terminated"][:, 0].tolist() == [False, False, True]
        assert "truncated" not in r["next"].keys()
        td = env.rand_step(env.reset())
        assert td["next", "terminated"].tolist() == [False]
        check_env_specs(env)


class TestStatelessTutorialEnv:
    """TorchRL's Pendulum tutorial layout runs unchanged; values from TorchRL 0.14.1."""

    def test_specs_reset_step(self):
        env = StatelessPendulum(seed=0)
        check_env_specs(env)
        env.set_seed(0)
        td = env.reset()
        torch.testing.assert_close(td["th"], torch.tensor(-0.023520469665527344))
        td["action"] = torch.tensor([0.5])
        td = env.step(td)
        torch.testing.assert_close(td["next", "th"], torch.tensor(0.006169771775603294))
        torch.testing.assert_close(td["next", "reward"], torch.tensor([-0.029580386355519295]))
        assert set(step_mdp(td, keep_other=True).keys()) >= {"th", "thdot", "params", "done"}

    def test_batched_rollout_from_params(self):
        env = StatelessPendulum(seed=0)
        init = env.gen_params(batch_size=[4])
        init["th"] = torch.tensor([0.1, 1.0, -2.0, 3.0])
        init["thdot"] = torch.tensor([0.0, 0.5, -0.5, 0.9])

        def policy(td):
            td["action"] = (-2.0 * td["th"].sin() - 0.3 * td["thdot"]).unsqueeze(-1).clamp(-2, 2)
            return td

        rollout = env.rollout(6, policy, tensordict=init, auto_reset=False)
        assert rollout.batch_size == (4, 6)
        expected_th0 = [0.10224625, 0.10668796, 0.11332572, 0.12220915, 0.13343570, 0.14715044]
        expected_th3 = [3.04615021, 3.09236789, 3.13761282, 3.18091130, 3.22137690, 3.25822830]
        expected_r2 = [-4.02887535, -4.26192331, -4.60091591, -5.04254818, -5.57912731, -6.19790363]
        torch.testing.assert_close(rollout["next", "th"][0], torch.tensor(expected_th0))
        torch.testing.assert_close(rollout["next", "th"][3], torch.tensor(expected_th3))
        torch.testing.assert_close(rollout["next", "reward"][2, :, 0], torch.tensor(expected_r2))
        td = env.rand_step(env.reset(env.gen_params(batch_size=[10])))
        assert td["action"].shape == (10, 1) and td["next", "reward"].shape == (10, 1)

    def test_transformed_training_step_backpropagates(self):
        env = StatelessPendulum(seed=0)
        env = TransformedEnv(
            env, UnsqueezeTransform(dim=-1, in_keys=["th", "thdot"], in_keys_inv=["th", "thdot"])
        )
        env.append_transform(
            CatTensors(in_keys=["th", "thdot"], dim=-1, out_key="observation", del_keys=False)
        )
        check_env_specs(env)
        torch.manual_seed(3)
        env.set_seed(3)
        init = env.reset(env.gen_params(batch_size=[4]))
        expected_init = [-3.11480427, -2.47828078, -1.34559143, -2.97223043]
        torch.testing.assert_close(init["th"].squeeze(-1), torch.tensor(expected_init))
        net = torch.nn.Linear(2, 1)
        torch.nn.init.constant_(net.weight, 0.1)
        torch.nn.init.zeros_(net.bias)
        policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
        rollout = env.rollout(10, policy, tensordict=init, auto_reset=False)
        loss = -rollout["next", "reward"].mean()
        loss.backward()
        torch.testing.assert_close(loss.detach(), torch.tensor(8.029623031616211))
        torch.testing.assert_close(net.weight.grad, torch.tensor([[0.49579096, 0.35940883]]))


# ----------------------------------------------------------------------- step_mdp
def _transition():
    flag = dict(dtype=torch.bool)
    nxt = TensorDict(
        obs=torch.ones(2, 3),
        reward=torch.ones(2, 1),
        done=torch.ones(2, 1, **flag),
        terminated=torch.ones(2, 1, **flag),
        truncated=torch.zeros(2, 1, **flag),
        agents=TensorDict(obs=torch.ones(2, 5, 3), reward=torch.ones(2, 5, 1), batch_size=[2, 5]),
        batch_size=[2],
    )
    return TensorDict(
        obs=torch.zeros(2, 3),
        action=torch.ones(2, 1),
        done=torch.zeros(2, 1, **flag),
        hidden=torch.ones(2, 4),
        agents=TensorDict(obs=torch.zeros(2, 5, 3), action=torch.zeros(2, 5, 1), batch_size=[2, 5]),
        next=nxt,
        batch_size=[2],
    )


def _keys(td):
    return sorted(k if isinstance(k, str) else "/".join(k) for k in td.keys(True, True))


_COMMON = ["agents/obs", "done", "obs", "terminated", "truncated"]


class TestStepMDP:
    # expected keys: TorchRL 0.14.1's step_mdp on the same transition ("_reset" aside)
    @pytest.mark.parametrize(
        "kwargs, expected",
        [
            ({}, ["agents/action", "agents/reward", "hidden", *_COMMON]),
            ({"exclude_done": True}, ["agents/action", "agents/reward", "hidden", *_COMMON[:1], *_COMMON[2:]]),
            ({"keep_other": False}, ["agents/reward", *_COMMON]),
            ({"exclude_action": False}, ["action", "agents/action", "agents/reward", "hidden", *_COMMON]),
            ({"exclude_reward": False}, ["agents/action", "agents/reward", "hidden", "reward", *_COMMON]),
            ({"reward_keys": ("agents", "reward")}, ["agents/action", "hidden", "reward", *_COMMON]),
            ({"action_keys": [("agents", "action")]}, ["action", "agents/reward", "hidden", *_COMMON]),
            (
                {"done_keys": ["done", "terminated"], "exclude_done": True},
                ["agents/action", "agents/reward", "hidden", "agents/obs", "obs", "truncated"],
            ),
        ],
    )  # fmt: skip
    def test_arguments_match_torchrl(self, kwargs, expected):
        td = _transition()
        out = step_mdp(td, **kwargs)
        assert _keys(out) == sorted(expected)
        assert out["agents"].batch_size == (2, 5)
        assert _keys(td["next"]) == sorted(  # the input is left as it was
            ["agents/obs", "agents/reward", "done", "obs", "reward", "terminated", "truncated"]
        )

    def test_values_are_shared_and_next_wins(self):
        td = _transition()
        out = step_mdp(td)
        assert out["obs"].data_ptr() == td["next", "obs"].data_ptr()
        assert out["agents", "obs"].sum() == 30 and out["hidden"].sum() == 8

    def test_lazy_stacked_heterogeneous(self):
        a = TensorDict(
            obs=torch.zeros(3),
            h=torch.ones(1),
            next=TensorDict(obs=torch.ones(3), reward=torch.ones(1)),
        )
        b = TensorDict(
            obs=torch.zeros(4),
            h=torch.ones(1),
            next=TensorDict(obs=torch.ones(4), reward=torch.ones(1)),
        )
        out = step_mdp(LazyStackedTensorDict.lazy_stack([a, b]))
        assert isinstance(out, LazyStackedTensorDict) and out.batch_size == (2,)
        assert [t["obs"].shape for t in out.tensordicts] == [(3,), (4,)]
        assert sorted(out.keys()) == ["h", "obs"] and out.tensordicts[1]["obs"].sum() == 4

    def test_missing_next_raises(self):
        with pytest.raises(KeyError, match="needs a 'next' entry"):
            step_mdp(TensorDict(obs=torch.zeros(1)))


# --------------------------------------------------------------- td helpers, switches
class TestTensorDictHelpers:
    def test_terminated_or_truncated_nested(self):
        spec = Composite(
            done=Bounded(0, 1, shape=(1,), dtype=torch.bool),
            truncated=Bounded(0, 1, shape=(1,), dtype=torch.bool),
            nested=Composite(
                done=Bounded(0, 1, shape=(1,), dtype=torch.bool),
                truncated=Bounded(0, 1, shape=(1,), dtype=torch.bool),
            ),
        )
        data = TensorDict(
            done=torch.tensor([True]),
            truncated=torch.tensor([False]),
            nested=TensorDict(done=torch.tensor([False]), truncated=torch.tensor([True])),
        )
        assert _is_bool_scalar(terminated_or_truncated(data, spec), True)
        assert data["_reset"].tolist() == [True] and data["nested", "_reset"].tolist() == [True]

    def test_terminated_or_truncated_all_false(self):
        data = TensorDict(done=torch.tensor([False]), terminated=torch.tensor([False]))
        assert _is_bool_scalar(terminated_or_truncated(data), False)
        assert "_reset" not in data.keys()
        assert _is_bool_scalar(terminated_or_truncated(data, write_full_false=True), False)
        assert data["_reset"].tolist() == [False]
        assert _is_bool_scalar(terminated_or_truncated(data, key=None), False)

    # Type, value and written keys of TorchRL 0.14.1's terminated_or_truncated on the same
    # inputs (a root and an "agents" group, each with done + truncated, batch [2]).
    @pytest.mark.parametrize("use_spec", [False, True])
    @pytest.mark.parametrize("key", ["_reset", None])
    @pytest.mark.parametrize("write_full_false", [False, True])
    @pytest.mark.parametrize(
        "root_done, group_truncated", [(True, False), (False, True), (False, False)]
    )
    def test_terminated_or_truncated_returns_torchrl_tensor(
        self, use_spec, key, write_full_false, root_done, group_truncated
    ):
        def flags(done, truncated):
            return {
                "done": torch.full((2, 1), done),
                "truncated": torch.full((2, 1), truncated),
            }

        def flag_specs():
            flag = Bounded(0, 1, shape=(2, 1), dtype=torch.bool)
            return {"done": flag, "truncated": flag.clone()}

        data = TensorDict(
            **flags(root_done, False),
            agents=TensorDict(flags(False, group_truncated), batch_size=[2]),
            obs=torch.zeros(2, 3),
            batch_size=[2],
        )
        spec = Composite(**flag_specs(), agents=Composite(flag_specs(), shape=(2,)), shape=(2,))
        out = terminated_or_truncated(
            data, spec if use_spec else None, key=key, write_full_false=write_full_false
        )
        expected = root_done or group_truncated
        assert _is_bool_scalar(out, expected)
        written = expected or write_full_false
        reset_keys = {k for k in data.keys(True, True) if "_reset" in _path(k)}
        assert reset_keys == ({"_reset", ("agents", "_reset")} if written and key else set())
        if reset_keys:
            assert data["_reset"].squeeze(-1).tolist() == [root_done] * 2
            assert data["agents", "_reset"].squeeze(-1).tolist() == [group_truncated] * 2

    def test_terminated_or_truncated_group_only(self):
        # flags only in a nested group: still a 0-d tensor (TorchRL 0.14.1)
        data = TensorDict(
            agents=TensorDict(done=torch.tensor([[True], [False]]), batch_size=[2]),
            batch_size=[2],
        )
        assert _is_bool_scalar(terminated_or_truncated(data), True)
        assert data["agents", "_reset"].squeeze(-1).tolist() == [True, False]
        data["agents", "done"].zero_()
        del data["agents", "_reset"]
        assert _is_bool_scalar(terminated_or_truncated(data), False)
        assert "_reset" not in data["agents"].keys()

    def test_terminated_or_truncated_without_flags_is_python_false(self):
        # no done flag anywhere: TorchRL 0.14.1 returns the Python False, not a tensor
        data = TensorDict(obs=torch.zeros(2, 3), batch_size=[2])
        assert terminated_or_truncated(data) is False
        assert terminated_or_truncated(data, write_full_false=True) is False
        assert terminated_or_truncated(data, Composite(shape=(2,))) is False
        assert list(data.keys()) == ["obs"]

    def test_make_composite_from_td(self):
        data = TensorDict(
            obs=torch.randn(3),
            action=torch.zeros(2, dtype=torch.int32),
            next={"obs": torch.randn(3), "reward": torch.randn(1), "count": torch.tensor(2)},
        )
        spec = make_composite_from_td(data)
        assert spec["action"].dtype == torch.int32 and spec["next", "count"].shape == (1,)
        assert (
            make_composite_from_td(data, unsqueeze_null_shapes=False)["next", "count"].shape == ()
        )
        plain = data.exclude(("next", "count"))
        assert (make_composite_from_td(plain).zero() == plain.zero_()).all()

    def test_gym_backend(self):
        with set_gym_backend("gymnasium"):
            assert gym_backend().__name__ == "gymnasium"
        assert gym_backend("spaces").__name__ == "gymnasium.spaces"
        with pytest.raises(ValueError, match="wraps the gymnasium API only"):
            set_gym_backend("gym")

        @set_gym_backend("gymnasium")
        def inner():
            return gym_backend().__name__

        assert inner() == "gymnasium"

    def test_auto_unwrap_transformed_env(self):
        inner = TransformedEnv(PendulumEnv(), StepCounter())
        assert auto_unwrap_transformed_env() is False
        assert isinstance(
            TransformedEnv(inner, StepCounter(step_count_key="c")).base_env, TransformedEnv
        )
        with set_auto_unwrap_transformed_env(True):
            env = TransformedEnv(inner, StepCounter(step_count_key="c"))
            assert auto_unwrap_transformed_env() is True
        assert isinstance(env.base_env, PendulumEnv) and len(env.transform) == 2
        assert env.rollout(3)["next", "c"][:, 0].tolist() == [1, 2, 3]
        env = TransformedEnv(base_env=inner, auto_unwrap=True)
        assert isinstance(env.base_env, PendulumEnv)


# ------------------------------------------------------------------------- auto reset
class TestAutoReset:
    # expected values: TorchRL 0.14.1 on the same Counter env
    def test_rollout_matches_torchrl(self):
        r = Counter(auto_reset=True).rollout(7, break_when_any_done=False)
        nan = float("nan")
        assert r["count"][:, 0].tolist() == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0]
        torch.testing.assert_close(
            r["next", "count"][:, 0],
            torch.tensor([1.0, 2.0, nan, 1.0, 2.0, nan, 1.0]),
            equal_nan=True,
        )
        assert r["next", "reward"][:, 0].tolist() == [1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0]
        r = Counter(auto_reset=True, auto_reset_replace=False).rollout(5, break_when_any_done=False)
        assert r["next", "count"][:, 0].tolist() == [1.0, 2.0, 0.0, 1.0, 2.0]

    def test_step_and_maybe_reset_matches_torchrl(self):
        env = Counter(auto_reset=True)
        td, seen = env.reset(), []
        for _ in range(4):
            td["action"] = torch.zeros(1)
            td, root = env.step_and_maybe_reset(td)
            seen.append((td["next", "count"].item(), root["count"].item()))
            td = root
        assert str(seen) == str([(1.0, 1.0), (2.0, 2.0), (float("nan"), 0.0), (1.0, 1.0)])

    def test_batched_partial_and_fill_values(self):
        env = AutoResetEnv(Counter(n=2, batch_size=(2,)), AutoResetTransform(fill_float=-5.0))
        td = env.reset()
        env.base_env.count = torch.tensor([[0.0], [1.0]])
        td["count"] = env.base_env.count.clone()
        r = env.rollout(4, break_when_any_done=False, auto_reset=False, tensordict=td)
        assert r["next", "count"][..., 0].tolist() == [
            [1.0, -5.0, 1.0, -5.0],
            [-5.0, 1.0, -5.0, 1.0],
        ]
        assert r["count"][..., 0].tolist() == [[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]]

    def test_errors(self):
        env = TransformedEnv(Counter(), AutoResetTransform())
        with pytest.raises(RuntimeError, match="must sit in an AutoResetEnv"):
            env.rollout(3)
        with pytest.raises(RuntimeError, match="runs inside an AutoResetEnv"):
            AutoResetTransform()(TensorDict())
        with pytest.raises(RuntimeError, match="cannot insert a transform"):
            Counter(auto_reset=True).insert_transform(0, StepCounter())


# --------------------------------------------------------------- heterogeneous, batched
class TestHeterogeneousAndBatched:
    def test_nested_group_batch_size_in_rollout(self):
        env = Agents()
        check_env_specs(env)
        r = env.rollout(4)
        assert r["agents"].batch_size == (2, 4, 3) and r["next", "agents"].batch_size == (2, 4, 3)
        assert step_mdp(env.rand_step(env.reset()))["agents"].batch_size == (2, 3)

    def test_serial_env_without_buffers_heterogeneous(self):
        env = SerialEnv(2, [lambda: Sized(3), lambda: Sized(4)], use_buffers=False)
        assert isinstance(env, SerialEnv) and env.batch_size == (2,)
        td = env.reset()
        assert isinstance(td, LazyStackedTensorDict)
        r = env.rollout(5, break_when_any_done=False)
        assert r.batch_size == (2, 5)
        assert [t["next", "obs"].shape for t in r.tensordicts] == [(5, 3), (5, 4)]
        assert r[1]["next", "obs"][:, 0].tolist() == [1.0, 2.0, 3.0, 1.0, 2.0]
        assert r[0]["obs"][:, 0].tolist() == [0.0, 1.0, 2.0, 0.0, 1.0]
        td, root = env.step_and_maybe_reset(env.rand_action(env.reset()))
        assert [t["obs"].shape for t in root.tensordicts] == [(3,), (4,)]
        env.close()

    def test_serial_env_without_buffers_matches_buffered(self):
        def policy(td):
            return td.set("action", -td["observation"][..., 2:3].clamp(-2, 2))

        lazy = SerialEnv(2, PendulumEnv, use_buffers=False)
        lazy.set_seed(0)
        buffered = SerialEnv(2, PendulumEnv)
        buffered.set_seed(0)
        torch.testing.assert_close(
            lazy.rollout(4, policy)["next", "observation"],
            buffered.rollout(4, policy)["next", "observation"],
        )

    def test_torchrl_batched_arguments(self):
        with pytest.warns(UserWarning, match=r"SerialEnv ignores .*daemon=True.*mp_start_method"):
            env = SerialEnv(
                2, PendulumEnv, num_threads=1, non_blocking=True, share_individual_td=True,
                daemon=True, mp_start_method="fork", use_buffers=True, serial_for_single=True,
            )  # fmt: skip
        assert env.batched_options["non_blocking"] is True and env.rollout(2).batch_size == (2, 2)
        assert env.to("cpu") is env
        with pytest.raises(NotImplementedError, match="build the env with device='meta'"):
            env.to("meta")
        assert type(ParallelEnv(1, PendulumEnv, serial_for_single=True)) is SerialEnv
        with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
            SerialEnv(2, PendulumEnv, bogus=1)
        # TorchRL's keyword arguments, by name with TorchRL's defaults
        for cls in (SerialEnv, ParallelEnv):
            params = inspect.signature(cls.__init__).parameters
            for name, default in TORCHRL_BATCHED_OPTIONS.items():
                assert params[name].default == default, (cls, name)
                assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
        with pytest.raises(TypeError, match="num_threads must be a positive int"):
            SerialEnv(2, PendulumEnv, num_threads=0)

    def test_parallel_env_without_buffers_heterogeneous(self):
        fns = [functools.partial(Sized, 3), functools.partial(Sized, 4)]
        env = ParallelEnv(2, fns, use_buffers=False, mp_start_method="fork")
        assert isinstance(env, ParallelEnv) and env.batch_size == (2,)
        r = env.rollout(5, break_when_any_done=False)
        assert [t["next", "obs"].shape for t in r.tensordicts] == [(5, 3), (5, 4)]
        assert r[1]["next", "obs"][:, 0].tolist() == [1.0, 2.0, 3.0, 1.0, 2.0]
        assert r[0]["obs"][:, 0].tolist() == [0.0, 1.0, 2.0, 0.0, 1.0]
        assert len(set(env.worker_pids)) == 2
        env.close()
        assert env.worker_pids == []

    def test_parallel_env_accepts_torchrl_arguments(self):
        env = ParallelEnv(
            2, PendulumEnv, mp_start_method="fork", daemon=True, non_blocking=False,
            shared_memory=True, pin_memory=False, consolidate=True,
        )  # fmt: skip
        env.set_seed(0)
        serial = SerialEnv(2, PendulumEnv)
        serial.set_seed(0)
        torch.manual_seed(0)
        a = env.rollout(3)
        torch.manual_seed(0)
        b = serial.rollout(3)
        env.close()
        torch.testing.assert_close(a["next", "observation"], b["next", "observation"])
