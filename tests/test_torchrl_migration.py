"""TorchRL 0.14 code run with ``torchrl.`` -> ``rl.``, one snippet per item of issue #20.

Every snippet here was run against TorchRL 0.14.1 and against ``rl`` with only the import
path changed (``torchrl.data`` specs come from ``rl.core``, as DESIGN.md maps them); the
asserted values are TorchRL's outputs. The per-package migration tests
(``packages/*/tests/test_*_torchrl_migration*.py``) hold the documentation examples;
this file holds the audit of the issue's bullets across the three packages.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

import rl.core as S
import rl.data as D
import rl.envs as E
from rl.envs import utils as U


def _keys(td) -> list[str]:
    return sorted("/".join(k) if isinstance(k, tuple) else k for k in td.keys(True, True))


class CountingEnv(E.EnvBase):
    """A TorchRL-style custom env: a buffer, specs set in __init__, done after 3 steps."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.register_buffer("scale", torch.ones(1))
        bs = tuple(self.batch_size)
        self.observation_spec = S.Composite(obs=S.Unbounded(shape=(*bs, 2)), shape=bs)
        self.action_spec = S.Bounded(-1, 1, shape=(*bs, 1))
        self.reward_spec = S.Unbounded(shape=(*bs, 1))
        self.t = 0

    def _reset(self, td):
        self.t = 0
        return TensorDict(
            obs=torch.zeros(*self.batch_size, 2),
            done=torch.zeros(*self.batch_size, 1, dtype=torch.bool),
            batch_size=self.batch_size,
        )

    def _step(self, td):
        self.t += 1
        done = torch.full((*self.batch_size, 1), self.t >= 3)
        return TensorDict(
            obs=td["obs"] + td["action"] * self.scale,
            reward=torch.ones(*self.batch_size, 1),
            done=done,
            terminated=done.clone(),
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass


def ones(td):
    return td.set("action", torch.ones(*td.batch_size, 1))


# ----------------------------------------------------------------------------- rl-core
class TestCore:
    def test_choice(self):
        spec = S.Choice([S.Bounded(0, 1, shape=(2,)), S.Bounded(5, 6, shape=(2,))])
        values = spec.rand((100,))
        assert spec.shape == (2,) and values.shape == (100, 2)
        assert bool(((values <= 1) | (values >= 5)).all())
        assert spec.is_in(torch.tensor([0.5, 0.5])) and not spec.is_in(torch.tensor([3.0, 3.0]))

    def test_composite_shape_setter(self):
        spec = S.Composite(a=S.Unbounded(shape=(3, 4)), shape=(3,))
        with pytest.raises(ValueError):
            spec.shape = (4,)
        spec.shape = ()
        assert spec.shape == ()
        nested = S.Composite(a=S.Unbounded(shape=(3, 4)), b=S.Composite(shape=(3,)), shape=(3,))
        nested.shape = (3, 4)
        assert nested.shape == (3, 4) and nested["b"].shape == (3, 4)

    def test_attribute_named_entries(self):
        spec = S.Composite()
        for name, size in (("dtype", 1), ("shape", 2), ("device", 3)):
            spec[name] = S.Unbounded(shape=(size,))
        assert spec["shape"].shape == (2,) and spec["device"].shape == (3,)
        assert spec.shape == () and _keys(spec.zero()) == ["device", "dtype", "shape"]

    def test_project_type_check(self):
        assert S.Bounded(-1.0, 1.0, shape=(2,)).project(torch.tensor([3.0, -5.0])).tolist() == [
            1.0,
            -1.0,
        ]
        assert int(S.Categorical(4).project(torch.tensor(7))) == 3
        assert S.OneHot(3).project(torch.tensor([0.2, 0.9, 0.1])).tolist() == [False, True, False]
        with pytest.raises(TypeError):
            S.Bounded(-1.0, 1.0, shape=(2,)).type_check(torch.zeros(2, dtype=torch.float64))

    def test_clear_device_memoize_lock(self):
        spec = S.Composite(a=S.Unbounded(shape=(1,)), device="cpu")
        spec.clear_device_()
        assert spec.device is None
        leaf = S.Unbounded(shape=(2,))
        leaf.memoize_encode()
        assert leaf.encode([1.0, 2.0]).tolist() == [1.0, 2.0]
        spec.lock_()
        with pytest.raises(RuntimeError):
            spec["b"] = S.Unbounded(shape=(1,))
        spec.unlock_()
        spec["b"] = S.Unbounded(shape=(1,))
        assert sorted(spec.keys()) == ["a", "b"] and spec.is_locked is False

    def test_dynamic_dims(self):
        leaf = S.Unbounded(shape=(-1, 3))
        spec = S.Composite(a=leaf, shape=(-1,))
        assert leaf.rand().shape == (1, 3) and leaf.is_in(torch.zeros(7, 3))
        assert spec.zero().batch_size == (1,)
        assert spec.is_in(TensorDict(a=torch.zeros(5, 3), batch_size=[5]))
        data = TensorDict(obs=torch.zeros(5, 3), count=torch.zeros(4, dtype=torch.long))
        dynamic = U.make_composite_from_td(data, dynamic_shape=True)
        assert dynamic["obs"].shape == (5, -1) and dynamic["count"].shape == (-1,)
        assert dynamic.zero()["obs"].shape == (5, 1)
        other = TensorDict(obs=torch.zeros(5, 7), count=torch.zeros(2, dtype=torch.long))
        assert dynamic.is_in(data) and dynamic.is_in(other)


# ----------------------------------------------------------------------------- rl-envs
class TestEnvs:
    def test_env_is_a_module(self):
        env = CountingEnv()
        assert isinstance(env, nn.Module)
        assert sorted(env.state_dict()) == ["scale"] and env.to("cpu") is env

    def test_constructor_arguments(self):
        env = CountingEnv(
            device="cpu",
            batch_size=[2],
            run_type_checks=False,
            allow_done_after_reset=True,
            spec_locked=True,
        )
        assert env.batch_size == (2,) and env.device == torch.device("cpu")

    def test_rollout_stops_at_done(self):
        rollout = CountingEnv().rollout(10)
        assert rollout.batch_size == (3,)
        assert rollout["next", "done"].squeeze(-1).tolist() == [False, False, True]

    def test_auto_reset(self):
        torch.manual_seed(0)
        rollout = CountingEnv(auto_reset=True).rollout(7, break_when_any_done=False)
        assert rollout.batch_size == (7,)
        # TorchRL 0.14.1, same seed: done from the third step on (the counter keeps going)
        assert rollout["next", "done"].squeeze(-1).tolist() == [False, False] + [True] * 5
        torch.testing.assert_close(
            rollout["obs"][:, 0],
            torch.tensor(
                [0.0, -0.0074868, 0.5289568, -0.2940884, -1.0300274, -1.4151818, -1.1470244]
            ),
        )

    def test_auto_reset_transform_needs_an_auto_reset_env(self):
        env = E.TransformedEnv(CountingEnv(auto_reset=True), E.AutoResetTransform())
        with pytest.raises(RuntimeError, match="AutoResetEnv"):
            env.rollout(3)

    def test_step_mdp_arguments(self):
        td = TensorDict(
            obs=torch.zeros(2, 3),
            action=torch.zeros(2, 1),
            other=torch.ones(2),
            next=TensorDict(
                obs=torch.ones(2, 3),
                reward=torch.ones(2, 1),
                done=torch.zeros(2, 1, dtype=torch.bool),
                batch_size=[2],
            ),
            batch_size=[2],
        )
        cases = [
            ({}, ["done", "obs", "other"]),
            ({"keep_other": False}, ["done", "obs"]),
            ({"exclude_reward": False}, ["done", "obs", "other", "reward"]),
            ({"exclude_done": True}, ["obs", "other"]),
            ({"exclude_action": False}, ["action", "done", "obs", "other"]),
            (
                {"reward_keys": "reward", "done_keys": ["done"], "action_keys": "action"},
                ["done", "obs", "other"],
            ),
        ]
        for kwargs, expected in cases:
            assert _keys(U.step_mdp(td.clone(), **kwargs)) == expected, kwargs

    def test_step_mdp_keeps_nested_batch(self):
        td = TensorDict(
            agents=TensorDict(obs=torch.zeros(4, 3, 2), batch_size=[4, 3]),
            next=TensorDict(
                agents=TensorDict(
                    obs=torch.ones(4, 3, 2), reward=torch.ones(4, 3, 1), batch_size=[4, 3]
                ),
                done=torch.zeros(4, 1, dtype=torch.bool),
                batch_size=[4],
            ),
            batch_size=[4],
        )
        out = U.step_mdp(td, reward_keys=[("agents", "reward")])
        assert out["agents"].batch_size == (4, 3) and _keys(out) == ["agents/obs", "done"]

    def test_env_helpers(self):
        env = CountingEnv()
        assert type(env.append_transform(E.StepCounter())).__name__ == "TransformedEnv"
        # TorchRL 0.14.1: the default done spec is done + terminated (no truncated)
        base = ["action", "done", "next/done", "next/obs", "next/reward", "next/terminated"]
        assert _keys(env.fake_tensordict()) == sorted([*base, "obs", "terminated"])
        assert _keys(env.rand_step(env.reset())) == sorted([*base, "obs", "terminated"])
        data = TensorDict(
            next=TensorDict(done=torch.tensor([[True], [False]]), batch_size=[2]), batch_size=[2]
        )
        assert U.terminated_or_truncated(data["next"]).item() is True
        assert data["next", "_reset"].squeeze(-1).tolist() == [True, False]
        spec = U.make_composite_from_td(
            TensorDict(a=torch.zeros(3), b=torch.zeros(2, dtype=torch.long), batch_size=[])
        )
        assert spec["a"].shape == (3,) and spec["b"].dtype == torch.int64

    def test_default_done_spec(self):
        # an env that sets no done spec, as in TorchRL's docs; values from TorchRL 0.14.1
        env = CountingEnv(batch_size=[2])
        assert env.done_keys == ["done", "terminated"] and env.reset_keys == ["_reset"]
        for key in env.done_keys:
            spec = env.full_done_spec[key]
            assert isinstance(spec, S.Categorical)
            assert spec.shape == (2, 1) and spec.dtype == torch.bool
        rollout = env.rollout(5, ones)
        assert rollout.batch_size == (2, 3)
        assert rollout["next", "done"][0, :, 0].tolist() == [False, False, True]
        assert rollout["next", "terminated"][0, :, 0].tolist() == [False, False, True]
        assert "truncated" not in rollout["next"].keys()
        assert _keys(U.step_mdp(rollout[:, -1])) == ["done", "obs", "terminated"]
        assert _keys(U.step_mdp(rollout[:, -1], exclude_done=True)) == ["obs", "terminated"]
        assert U.terminated_or_truncated(rollout[:, -1]["next"].clone())
        U.check_env_specs(env)
        with pytest.raises(RuntimeError, match="add_truncated_keys"):
            env.rollout(2, ones, set_truncated=True)
        env.add_truncated_keys()
        assert env.done_keys == ["done", "terminated", "truncated"]
        rollout = env.rollout(2, ones, set_truncated=True)
        assert rollout["next", "truncated"][0, :, 0].tolist() == [False, True]
        assert rollout["next", "done"][0, :, 0].tolist() == [False, True]
        assert rollout["next", "terminated"][0, :, 0].tolist() == [False, False]

    def test_done_spec_completion(self):
        # TorchRL 0.14.1: a done leaf gets a terminated twin; a group with done alone too
        class LeafDone(CountingEnv):
            def __init__(self):
                super().__init__()
                self.done_spec = S.Categorical(2, (1,), dtype=torch.int64)

        assert LeafDone().done_keys == ["done", "terminated"]
        assert LeafDone().full_done_spec["terminated"].dtype == torch.int64

        class GroupDone(CountingEnv):
            def __init__(self):
                super().__init__()
                self.full_done_spec = S.Composite(
                    agents=S.Composite(done=S.Categorical(2, (3, 1), dtype=torch.bool), shape=(3,))
                )

        assert GroupDone().done_keys == [("agents", "done"), ("agents", "terminated")]

    def test_multi_agent_mlp_use_td_params(self):
        from rl.modules import MultiAgentMLP

        # TorchRL 0.14.1's docstring network, with both parameter layouts
        kwargs = dict(n_agent_inputs=3, n_agent_outputs=2, n_agents=6, centralized=False)
        kwargs.update(share_params=True, depth=2)
        in_td = MultiAgentMLP(**kwargs)
        in_net = MultiAgentMLP(**kwargs, use_td_params=False)
        assert type(in_td.params).__name__ == "TensorDictParams"
        assert next(iter(in_td.state_dict())) == "params.0.weight"
        assert next(iter(in_net.state_dict())) == "_empty_net.0.weight"
        with pytest.raises(RuntimeError):  # "not interchangeable", as TorchRL documents
            in_net.load_state_dict(in_td.state_dict())
        assert in_net(torch.randn(4, 6, 3)).shape == (4, 6, 2)

    def test_gym_backend(self):
        with E.set_gym_backend("gymnasium"):
            assert E.gym_backend().__name__ == "gymnasium"

    def test_serial_env_arguments_and_custom_step(self):
        env = E.SerialEnv(2, CountingEnv, use_buffers=True, serial_for_single=True)
        try:
            rollout = env.rollout(5, ones)
            assert rollout.batch_size == (2, 3)
            # the sub-env's _step reads the root "obs" (TorchRL hands it the whole root)
            assert rollout["next", "obs"][0, :, 0].tolist() == [1.0, 2.0, 3.0]
        finally:
            env.close()

    def test_parallel_env_arguments(self):
        env = E.ParallelEnv(
            2,
            E.EnvCreator(lambda: E.GymEnv("Pendulum-v1")),
            use_buffers=True,
            serial_for_single=True,
            mp_start_method="fork",
            share_individual_td=False,
            num_threads=1,
            non_blocking=False,
            daemon=False,
        )
        assert env.batch_size == (2,) and env.is_closed  # lazy: no worker started yet

    def test_primer_before_reset(self):
        env = E.TransformedEnv(
            CountingEnv(),
            E.TensorDictPrimer(
                goal=S.Unbounded(shape=(2,)), default_value=3.0, call_before_env_reset=True
            ),
        )
        seen = []
        original = env.base_env._reset

        def spy(td):
            seen.append(None if td is None else sorted(td.keys()))
            return original(td)

        env.base_env._reset = spy
        env.reset()
        assert seen == [["goal"]]


def _td():
    return TensorDict(
        obs=torch.arange(6).float().reshape(2, 3),
        reward=torch.tensor([[1.5], [-2.0]]),
        done=torch.tensor([[False], [True]]),
        batch_size=[2],
    )


class TestTransforms:
    def test_elementwise(self):
        assert E.Hash(in_keys=["obs"], out_keys=["h"], hash_fn=lambda x: x.sum(-1, keepdim=True))(
            _td()
        )["h"].flatten().tolist() == [3.0, 12.0]
        assert E.SignTransform(in_keys=["reward"])(_td())["reward"].flatten().tolist() == [1, -1]
        assert E.BinarizeReward()(_td())["reward"].flatten().tolist() == [1, 0]
        assert E.UnaryTransform(in_keys=["obs"], out_keys=["o2"], fn=lambda x: x * 2)(_td())[
            "o2"
        ].flatten().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        module = TensorDictModule(lambda x: x + 1, in_keys=["obs"], out_keys=["o1"])
        assert E.ModuleTransform(module=module)(_td())["o1"].flatten().tolist() == [
            1.0,
            2.0,
            3.0,
            4.0,
            5.0,
            6.0,
        ]
        out = E.ExpandAs(in_key="reward", ref_key="obs", out_key="r2")(_td())
        assert out["r2"].flatten().tolist() == [1.5, 1.5, 1.5, -2.0, -2.0, -2.0]

    def test_shapes(self):
        img = TensorDict(img=torch.arange(6).float().reshape(1, 2, 3), batch_size=[1])
        assert E.PermuteTransform((-1, -2), in_keys=["img"])(img)["img"].flatten().tolist() == [
            0.0,
            3.0,
            1.0,
            4.0,
            2.0,
            5.0,
        ]
        pair = TensorDict(a=torch.zeros(2, 3), b=torch.ones(2, 3), batch_size=[2])
        # TorchRL stacks along the last dim by default
        assert E.Stack(in_keys=["a", "b"], out_key="ab")(pair)["ab"].shape == (2, 3, 2)
        rewards = TensorDict(r=torch.tensor([[1.0, 3.0]]), batch_size=[1])
        assert E.LineariseRewards(in_keys=["r"], weights=[1.0, 2.0])(rewards)["r"].tolist() == [
            [7.0]
        ]
        seq = TensorDict(x=torch.arange(10).reshape(2, 5), batch_size=[2, 5])
        crop = E.RandomCropTensorDict(sub_seq_len=3, sample_dim=-1)(seq)
        assert crop.shape == (2, 3) and bool((crop["x"].diff(dim=-1) == 1).all())

    def test_checks_and_actions(self):
        bad = _td()
        bad["obs"][0, 0] = float("nan")
        with pytest.raises(ValueError):
            E.FiniteTensorDictCheck()(bad)
        action = TensorDict(action=torch.tensor([[1.0], [-1.0]]), batch_size=[2])
        assert E.ActionScaling(loc=1.0, scale=2.0).inv(action)["action"].flatten().tolist() == [
            3.0,
            -1.0,
        ]
        one_hot = TensorDict(action=torch.tensor([[0, 0, 0, 1]]), batch_size=[1])
        projection = E.DiscreteActionProjection(num_actions_effective=2, max_actions=4)
        torch.manual_seed(0)  # an action beyond the effective ones is redrawn at random
        assert projection.inv(one_hot)["action"].tolist() == [[1, 0]]

    def test_end_of_life_transform(self):
        # TorchRL 0.14.1's names and keys; the values on a gym env with lives are checked
        # against TorchRL's in packages/rl-envs/tests/test_transforms_parity_b.py
        t = E.EndOfLifeTransform()
        assert t.in_keys == ["done"] and t.out_keys == ["end-of-life", "lives"]
        assert t.in_keys_inv == [] and t.out_keys_inv == []
        t2 = E.EndOfLifeTransform(eol_key="eol", lives_key=("g", "lives"), done_key="terminated")
        assert t2.in_keys == ["terminated"] and t2.out_keys == ["eol", ("g", "lives")]

        class Loss:
            def set_keys(self, **keys):
                self.keys = keys

        loss = Loss()
        t.register_keys(loss)
        assert loss.keys == {"done": "end-of-life", "terminated": "end-of-life"}

    def test_env_transforms(self):
        env = E.TransformedEnv(CountingEnv(), E.RemoveEmptySpecs())
        assert sorted(env.observation_spec.keys()) == ["obs"]
        timed = E.TransformedEnv(CountingEnv(), E.Timer()).rollout(3)
        assert [k for k in _keys(timed) if "time" in k] == [
            "next/time_policy",
            "next/time_reset",
            "next/time_step",
            "time_policy",
            "time_reset",
            "time_step",
        ]
        counted = E.TransformedEnv(CountingEnv(), E.TrajCounter())
        assert counted.rollout(3)["traj_count"].flatten().tolist() == [0, 0, 0]
        assert counted.rollout(3)["traj_count"].flatten().tolist() == [1, 1, 1]
        stop = E.TransformedEnv(
            CountingEnv(), E.TerminateTransform(lambda td: td["obs"][..., :1] > 0.0)
        )
        stopped = stop.rollout(5, ones)
        assert stopped.batch_size == (1,) and stopped["next", "done"].flatten().tolist() == [True]
        skip = E.TransformedEnv(
            CountingEnv(), E.ConditionalSkip(lambda td: td["obs"][..., :1] > 0.5)
        )
        assert skip.rollout(4, ones, break_when_any_done=False)["next", "obs"][:, 0].tolist() == [
            1.0,
            1.0,
            1.0,
            1.0,
        ]
        truncating = E.TransformedEnv(
            CountingEnv(), E.Compose(E.StepCounter(), E.RandomTruncationTransform(1, 2, prob=1.0))
        )
        torch.manual_seed(0)  # TorchRL 0.14.1 with this seed: truncated after one step
        truncated = truncating.rollout(5)
        assert truncated.batch_size == (1,)
        assert truncated["next", "truncated"].flatten().tolist() == [True]

    def test_reward_and_steps(self):
        data = TensorDict(
            next=TensorDict(
                success=torch.tensor([[True], [False]]), reward=torch.zeros(2, 1), batch_size=[2]
            ),
            batch_size=[2],
        )
        assert E.SuccessReward()._step(data, data["next"])["reward"].flatten().tolist() == [
            1.0,
            0.0,
        ]
        delta = TensorDict(
            obs=torch.zeros(1, 2),
            next=TensorDict(obs=torch.ones(1, 2), batch_size=[1]),
            batch_size=[1],
        )
        out = E.NextObservationDelta(in_keys=["obs"])(delta)
        assert out["next", "obs"].tolist() == [[1.0, 1.0]]
        multistep = E.MultiStepTransform(n_steps=2, gamma=0.9)
        assert (multistep.n_steps, multistep.gamma) == (2, 0.9)
        assert type(E.VecNorm(in_keys=["obs"], new_api=True)).__name__ == "VecNormV2"

    def test_burn_in_docstring(self):
        from rl.modules import GRUModule

        torch.manual_seed(0)
        gru = GRUModule(
            input_size=10,
            hidden_size=10,
            in_keys=["observation", "hidden"],
            out_keys=["intermediate", ("next", "hidden")],
            default_recurrent_mode=True,
        )
        torch.manual_seed(1)
        burn_in = E.BurnInTransform(modules=[gru], burn_in=5)
        # TorchRL's example has a float is_init; rl's GRUModule needs it boolean
        td = TensorDict(
            {
                "observation": torch.randn(2, 10, 10),
                "hidden": torch.randn(2, 10, gru.gru.num_layers, 10),
                "is_init": torch.zeros(2, 10, 1, dtype=torch.bool),
            },
            batch_size=[2, 10],
        )
        out = burn_in(td)
        assert out.shape == (2, 5) and sorted(out.keys()) == ["hidden", "is_init", "observation"]
        assert round(float(out["hidden"].abs().sum()), 3) == 73.168  # TorchRL 0.14.1
        buffer = D.TensorDictReplayBuffer(storage=D.LazyTensorStorage(2), batch_size=1)
        buffer.append_transform(burn_in)
        buffer.extend(td)
        sample = buffer.sample(1)
        assert sample.shape == (1, 5)

    def test_catframes_over_stored_trajectories(self):
        obs = torch.arange(5).float().reshape(1, 5, 1)
        td = TensorDict(
            obs=obs,
            next=TensorDict(
                obs=obs + 1, done=torch.zeros(1, 5, 1, dtype=torch.bool), batch_size=[1, 5]
            ),
            batch_size=[1, 5],
        )
        cat = E.CatFrames(
            N=3, dim=-1, in_keys=["obs", ("next", "obs")], out_keys=["cobs", ("next", "cobs")]
        )
        assert cat(td)["cobs"].squeeze(0).tolist() == [
            [0.0, 0.0, 0.0],
            [0.0, 0.0, 1.0],
            [0.0, 1.0, 2.0],
            [1.0, 2.0, 3.0],
            [2.0, 3.0, 4.0],
        ]


# ----------------------------------------------------------------------------- rl-data
def _items(n, start=0):
    return TensorDict(obs=torch.arange(start, start + n).float().unsqueeze(-1), batch_size=[n])


class TestData:
    def test_buffer_arguments(self):
        rb = D.ReplayBuffer(
            storage=D.LazyTensorStorage(10),
            batch_size=4,
            generator=torch.Generator().manual_seed(0),
            compilable=False,
            shared=False,
            dim_extend=0,
        )
        rb.extend(_items(6))
        sample, info = rb.sample(return_info=True)
        assert sample.shape == (4,) and sorted(info) == ["index"] and len(rb) == 6

    def test_two_dim_storage(self):
        rb = D.ReplayBuffer(storage=D.LazyTensorStorage(20, ndim=2), batch_size=4)
        rb.extend(TensorDict(obs=torch.arange(10).reshape(2, 5).float(), batch_size=[2, 5]))
        assert len(rb) == 10 and rb.storage.shape == (5, 2) and rb.sample().shape == (4,)

    def test_state_dict_dumps_loads(self, tmp_path: pathlib.Path):
        rb = D.ReplayBuffer(storage=D.LazyTensorStorage(10))
        rb.extend(_items(4))
        restored = D.LazyTensorStorage(10)
        restored.load_state_dict(rb.storage.state_dict())
        assert restored[:]["obs"].squeeze(-1).tolist() == [0.0, 1.0, 2.0, 3.0]
        rb.storage.dumps(tmp_path)
        loaded = D.LazyTensorStorage(10)
        loaded.loads(tmp_path)
        assert len(loaded) == 4
        writer = D.RoundRobinWriter()
        rb.writer.dumps(tmp_path / "w")
        writer.loads(tmp_path / "w")
        assert writer._cursor == 4

    def test_writer_and_prioritized(self):
        rb = D.ReplayBuffer(
            storage=D.LazyTensorStorage(4), writer=D.RoundRobinWriter(track_generations=True)
        )
        rb.extend(_items(6))
        assert rb.write_count == 6
        sampler = D.PrioritizedSampler(10, alpha=0.7, beta=0.5, max_priority_within_buffer=True)
        prb = D.TensorDictReplayBuffer(storage=D.LazyTensorStorage(10), sampler=sampler)
        index = prb.extend(_items(5))
        prb.update_priority(index, torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]))
        sampler.alpha, sampler.beta = 0.9, 0.6
        assert (sampler.alpha, sampler.beta) == (0.9, 0.6)

    def test_schedulers(self):
        from rl.data.replay_buffers.scheduler import LinearScheduler, SchedulerList, StepScheduler

        sampler = D.PrioritizedSampler(10, alpha=0.7, beta=0.4)
        rb = D.ReplayBuffer(storage=D.LazyTensorStorage(10), sampler=sampler)
        schedulers = SchedulerList(
            [
                LinearScheduler(rb, param_name="beta", final_value=1.0, num_steps=4),
                StepScheduler(rb, param_name="alpha", gamma=0.5, n_steps=2),
            ]
        )
        seen = []
        for _ in range(5):
            schedulers.step()
            seen.append((round(float(sampler.beta), 4), round(float(sampler.alpha), 4)))
        assert seen == [(0.55, 0.7), (0.7, 0.35), (0.85, 0.35), (1.0, 0.175), (1.0, 0.175)]

    def test_other_storages_and_ensembles(self):
        stack = D.ReplayBuffer(storage=D.LazyStackStorage(10))
        stack.extend([TensorDict(obs=torch.zeros(i + 1)) for i in range(3)])
        assert type(stack[:]).__name__ == "LazyStackedTensorDict" and len(stack) == 3
        compressed = D.ReplayBuffer(storage=D.CompressedListStorage(10), batch_size=2)
        compressed.extend(TensorDict(obs=torch.arange(12).reshape(3, 4).float(), batch_size=[3]))
        assert compressed[1]["obs"].tolist() == [4.0, 5.0, 6.0, 7.0]
        first = D.ReplayBuffer(storage=D.LazyTensorStorage(10), batch_size=2)
        second = D.ReplayBuffer(storage=D.LazyTensorStorage(10), batch_size=2)
        first.extend(_items(3))
        second.extend(_items(3, 100))
        ensemble = D.ReplayBufferEnsemble(first, second, batch_size=4, sample_from_all=True)
        batch = ensemble.sample()
        assert batch.shape == (2, 2) and _keys(batch) == ["index/buffer_ids", "index/index", "obs"]

    def test_buffer_transforms(self):
        rb = D.ReplayBuffer(
            storage=D.LazyTensorStorage(10),
            batch_size=3,
            transform=E.RenameTransform(["obs"], ["o"]),
        )
        rb.extend(_items(5))
        rb.append_transform(E.UnsqueezeTransform(-1, in_keys=["o"]))
        batch = rb.sample()
        assert _keys(batch) == ["o"] and batch["o"].shape == (3, 1, 1)

    def test_trajectories(self):
        end = torch.tensor([False, False, True, False, True, False])
        start, stop, length = D.find_start_stop_traj(end=end, at_capacity=False)
        assert (start.tolist(), stop.tolist(), length.tolist()) == (
            [[0], [3], [5]],
            [[2], [4], [5]],
            [3, 2, 1],
        )
        sampler = D.SliceSampler(
            num_slices=2, end_key=("next", "done"), traj_key="episode", strict_length=False
        )
        rb = D.TensorDictReplayBuffer(
            storage=D.LazyTensorStorage(20), sampler=sampler, batch_size=4
        )
        rb.extend(
            TensorDict(
                episode=torch.tensor([0, 0, 0, 1, 1, 1, 2, 2]),
                obs=torch.arange(8),
                next=TensorDict(done=torch.zeros(8, 1, dtype=torch.bool), batch_size=[8]),
                batch_size=[8],
            )
        )
        assert rb.sample().shape == (4,)

    def test_multistep(self):
        done = torch.tensor([[0, 0, 1, 0, 0]]).bool().unsqueeze(-1)
        td = TensorDict(
            obs=torch.arange(5).float().reshape(1, 5, 1),
            next=TensorDict(
                obs=torch.arange(1, 6).float().reshape(1, 5, 1),
                reward=torch.ones(1, 5, 1),
                done=done,
                terminated=done.clone(),
                batch_size=[1, 5],
            ),
            batch_size=[1, 5],
        )
        out = D.MultiStep(gamma=0.9, n_steps=2)(td)
        assert _keys(out) == [
            "gamma",
            "next/done",
            "next/obs",
            "next/original_reward",
            "next/reward",
            "next/terminated",
            "nonterminal",
            "obs",
            "steps_to_next_obs",
        ]
        torch.testing.assert_close(
            out["next", "reward"].flatten(), torch.tensor([1.9, 1.9, 1.0, 1.9, 1.0])
        )
        assert out["steps_to_next_obs"].flatten().tolist() == [2, 2, 1, 2, 1]
        torch.testing.assert_close(
            out["gamma"].flatten(), torch.tensor([0.81, 0.81, 0.9, 0.81, 0.9])
        )

    def test_sum_tree_takes_float64(self):
        from rl.cpp import SumSegmentTree

        tree = SumSegmentTree(8)
        tree.update(np.arange(4, dtype=np.int64), np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float64))
        tree.update(5, 2.5)
        assert float(tree.query(0, 8)) == 12.5
        assert int(tree.scan_lower_bound(3.5)) == 2
        assert np.asarray(tree.scan_lower_bound(np.array([0.5, 6.5]))).tolist() == [0, 3]
