"""VecNorm: running statistics, sharing, state_dict."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.envs import PendulumEnv, check_env_specs
from rl.envs.transforms import (
    ObservationNorm,
    RunningMeanStd,
    TransformedEnv,
    VecNorm,
    VecNormV2,
)


def _reference(xs: torch.Tensor, decay: float, eps: float):
    """Plain loop: decayed sums over a sequence of batches ``xs[t]`` ``[B, F]``."""
    s = torch.zeros(xs.shape[-1])
    ssq = torch.zeros(xs.shape[-1])
    count = torch.zeros(())
    outs = []
    for x in xs:
        s = s * decay + x.sum(0)
        ssq = ssq * decay + (x * x).sum(0)
        count = count * decay + x.shape[0]
        mean = s / count
        var = (ssq / count - mean**2).clamp_min(eps)
        outs.append((x - mean) / var.sqrt().clamp_min(eps))
    return torch.stack(outs), s, ssq, count


class TestVecNormValues:
    @pytest.mark.parametrize("decay", [1.0, 0.9])
    def test_matches_plain_loop(self, decay):
        torch.manual_seed(0)
        xs = torch.randn(6, 4, 2) * 3 + 1
        t = VecNorm(in_keys=["observation"], decay=decay)
        outs = [t(TensorDict(observation=x, batch_size=[4]))["observation"] for x in xs]
        ref, s, ssq, count = _reference(xs, decay, t.eps)
        torch.testing.assert_close(torch.stack(outs), ref)
        torch.testing.assert_close(t.stats["observation_sum"], s)
        torch.testing.assert_close(t.stats["observation_count"], count)

    def test_frozen_does_not_update(self):
        t = VecNorm(in_keys=["observation"], decay=1.0)
        t(TensorDict(observation=torch.tensor([[1.0], [3.0]]), batch_size=[2]))
        t.freeze()
        out = t(TensorDict(observation=torch.tensor([[5.0]]), batch_size=[1]))["observation"]
        torch.testing.assert_close(out, torch.tensor([[3.0]]))  # (5 - 2) / 1
        assert float(t.stats["observation_count"]) == 2.0
        norm = t.to_observation_norm()
        assert isinstance(norm, ObservationNorm)
        torch.testing.assert_close(
            norm(TensorDict(observation=torch.tensor([5.0])))["observation"], torch.tensor([3.0])
        )

    def test_errors(self):
        with pytest.raises(ValueError, match=r"decay must be in \(0, 1\]"):
            VecNorm(decay=0.0)
        with pytest.raises(ValueError, match="eps must be positive"):
            VecNorm(eps=0)
        with pytest.raises(KeyError, match="shared_td lacks 'reward_sum'"):
            VecNorm(in_keys=["reward"], shared_td=TensorDict({}, []))


class TestVecNormEnv:
    def test_env_normalises_and_checks_specs(self):
        torch.manual_seed(0)
        env = TransformedEnv(PendulumEnv(batch_size=[8]), VecNorm(decay=1.0))
        env.set_seed(0)
        r = env.rollout(200)
        obs = r["next", "observation"][:, 100:]
        assert obs.mean().abs() < 0.3 and (obs.std() - 1).abs() < 0.3
        assert float(env.transform[0].stats["observation_count"]) == 8 * 201  # reset + steps
        check_env_specs(env)

    @pytest.mark.parametrize("memmap", [True, False])
    def test_state_dict_round_trip_keeps_shared_storage(self, memmap):
        env = TransformedEnv(PendulumEnv(batch_size=[2]), VecNorm())
        env.rollout(5)
        sd = env.state_dict()
        assert "transforms.0._extra_state" in sd
        shared = VecNorm.build_td_for_shared_vecnorm(PendulumEnv(batch_size=[2]), memmap=memmap)
        assert shared.is_memmap() if memmap else shared.is_shared()
        env2 = TransformedEnv(PendulumEnv(batch_size=[2]), VecNorm(shared_td=shared))
        env2.load_state_dict(sd)
        stats = env.transform[0].stats
        torch.testing.assert_close(shared["observation_sum"], stats["observation_sum"])
        torch.testing.assert_close(shared["reward_ssq"], stats["reward_ssq"])
        # loaded in place: the env still uses the shared storage
        assert env2.transform[0].stats is shared

    def test_shared_between_envs(self):
        shared = VecNorm.build_td_for_shared_vecnorm(PendulumEnv(), keys=["observation"])
        env_a = TransformedEnv(PendulumEnv(), VecNorm(in_keys=["observation"], shared_td=shared))
        env_b = TransformedEnv(PendulumEnv(), VecNorm(in_keys=["observation"], shared_td=shared))
        env_a.rollout(3)
        env_b.rollout(4)
        assert float(shared["observation_count"]) > 8.99 - 1e-3  # 4 + 5 updates, decayed


def _hammer(shared, n: int, barrier) -> None:
    t = VecNorm(in_keys=["observation"], shared_td=shared, decay=1.0)
    td = TensorDict({"observation": torch.ones(4, 3)}, [4])
    barrier.wait()
    for _ in range(n):
        t(td.clone())


@pytest.mark.parametrize("memmap", [False, True])
def test_concurrent_updates_are_not_lost(memmap):
    """Processes updating one shared statistics TensorDict serialise on its lock."""
    import multiprocessing as mp

    shared = VecNorm.build_td_for_shared_vecnorm(PendulumEnv(), keys=["observation"], memmap=memmap)
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(3)
    procs = [ctx.Process(target=_hammer, args=(shared, 3000, barrier)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    # 3 processes x 3000 calls x 4 rows, none lost to an interleaved read-modify-write
    assert float(shared["observation_count"]) == 36000.0
    torch.testing.assert_close(shared["observation_sum"], torch.full((3,), 36000.0))


def _obs(*rows) -> TensorDict:
    return TensorDict(obs=torch.tensor(rows), batch_size=[len(rows)])


class TestVecNormAffine:
    # TorchRL 0.14.1, VecNorm(in_keys=["obs"], decay=0.9, eps=1e-4) on these three steps
    STEPS = ([1.0, 2.0], [1.001, 2.5], [0.999, 3.0])

    def _fed(self) -> VecNorm:
        t = VecNorm(in_keys=["obs"], decay=0.9, eps=1e-4)
        for row in self.STEPS:
            t(_obs(row))
        return t

    def test_small_variance_floored_at_eps(self):
        t = VecNorm(in_keys=["obs"], decay=0.9, eps=1e-4)
        outs = torch.cat([t(_obs(row))["obs"] for row in self.STEPS])
        expected = torch.tensor([[0.0, 0.0], [0.0474, 0.9487], [-0.0963, 1.1420]])
        torch.testing.assert_close(outs, expected, atol=1e-4, rtol=0)
        # std of the first coordinate is below sqrt(eps): the scale is sqrt(eps) = 0.01
        torch.testing.assert_close(
            t.scale["obs"], torch.tensor([0.0100, 0.4071]), atol=1e-4, rtol=0
        )
        torch.testing.assert_close(t.loc["obs"], torch.tensor([1.0000, 2.5351]), atol=1e-4, rtol=0)

    def test_denorm_inverts_the_normalisation(self):
        t = self._fed()
        assert t.standard_normal
        denormed = t.denorm(_obs([0.5, -0.5]))["obs"]
        torch.testing.assert_close(denormed, torch.tensor([[1.0050, 2.3315]]), atol=1e-4, rtol=0)
        x = _obs([1.2, 2.2])
        frozen = t.frozen_copy()
        back = frozen.denorm(frozen(x.clone()))
        torch.testing.assert_close(back["obs"], x["obs"])

    def test_uninitialized_errors(self):
        t = VecNorm(in_keys=["obs"])
        with pytest.raises(RuntimeError, match="initialized before calling denorm"):
            t.denorm(_obs([1.0]))
        with pytest.raises(RuntimeError, match="Make sure the VecNorm has been initialized"):
            t.frozen_copy()
        with pytest.raises(RuntimeError, match="Make sure the VecNorm has been initialized"):
            _ = t.loc

    def test_frozen_copy_reads_but_never_updates(self):
        t = self._fed()
        frozen = t.frozen_copy()
        x = _obs([2.0, 1.0])
        torch.testing.assert_close(frozen(x.clone())["obs"], t.clone().freeze()(x.clone())["obs"])
        before = t.stats["obs_count"].clone()
        frozen(x.clone())
        torch.testing.assert_close(t.stats["obs_count"], before)
        # the original keeps updating, and the frozen copy reads its new statistics
        t(x.clone())
        torch.testing.assert_close(frozen.loc["obs"], t.loc["obs"])

    def test_clone_shares_statistics(self):
        t = self._fed()
        other = t.clone()
        assert other.stats["obs_sum"].data_ptr() == t.stats["obs_sum"].data_ptr()

    def test_state_dict_of_uninitialized(self):
        t = VecNorm(in_keys=["obs"])
        with pytest.warns(UserWarning, match="Querying state_dict on an uninitialized"):
            empty = t.state_dict()
        fed = self._fed()
        with pytest.raises(KeyError, match="Could not find a tensordict"):
            fed.load_state_dict(empty)
        fresh = VecNorm(in_keys=["obs"])
        with pytest.warns(UserWarning, match="VecNorm wasn't initialized"):
            fresh.load_state_dict(fed.state_dict())
        assert fresh.stats.is_shared()
        torch.testing.assert_close(fresh.loc["obs"], fed.loc["obs"])


class TestVecNormNewApi:
    def test_v2_arguments_pass_through(self):
        t = VecNorm(in_keys=["obs"], stateful=False, new_api=True)
        assert type(t) is VecNormV2 and not t.stateful
        t = VecNorm(in_keys=["obs"], reduce_batch_dims=True, new_api=True)
        assert t.reduce_batch_dims
        with pytest.raises(TypeError, match="both shared_td and shared_data"):
            VecNorm(in_keys=["obs"], shared_td=TensorDict(), shared_data=TensorDict(), new_api=True)

    def test_stateless_stack_carries_reward_statistics_from_reset(self):
        env = PendulumEnv()
        env = env.append_transform(VecNorm(in_keys=["observation"], stateful=False, new_api=True))
        env = env.append_transform(VecNorm(in_keys=["reward"], stateful=False, new_api=True))
        check_env_specs(env)
        r = env.rollout(3)
        prefix = env.transform[1].prefix
        assert prefix != env.transform[0].prefix
        # zero statistics from the specs at reset, one update per step afterwards
        assert r[0][f"{prefix}_count", "reward"].item() == 0
        assert r["next", f"{prefix}_count", "reward"].flatten().tolist() == [1, 2, 3]
        # element-wise counts; the reset observation was counted too
        assert r["next", "_vecnorm_count", "observation"].tolist() == [[2] * 3, [3] * 3, [4] * 3]

    def test_v2_state_dict_warnings(self):
        t = VecNormV2(in_keys=["obs"], decay=0.9)
        with pytest.warns(UserWarning, match="Querying state_dict on an uninitialized"):
            empty = t.state_dict()
        t(TensorDict(obs=torch.ones(2)))
        with pytest.raises(RuntimeError, match="void state-dict while the instance is initialized"):
            t.load_state_dict(empty)
        fresh = VecNormV2(in_keys=["obs"], decay=0.9)
        with pytest.warns(UserWarning, match="VecNorm wasn't initialized"):
            fresh.load_state_dict(t.state_dict())
        torch.testing.assert_close(fresh.loc["obs"], t.loc["obs"])
        assert VecNormV2(in_keys=["obs"], stateful=False).state_dict()["_extra_state"] == {}


def _vecnorm(kind: str):
    if kind == "v1":
        return VecNorm(in_keys=["observation", "reward"], decay=0.9)
    if kind == "v2":
        return VecNormV2(in_keys=["observation", "reward"], decay=0.9)
    if kind == "v2-reduce":
        return VecNormV2(in_keys=["observation"], decay=0.9, reduce_batch_dims=True)
    return VecNormV2(in_keys=["observation"], decay=0.9, stateful=False)


def _statistics(transform, rollout) -> dict:
    """The statistics tensors of ``transform`` (carried in ``rollout`` when stateless)."""
    if isinstance(transform, VecNorm):
        return dict(transform.stats.items(True, True))
    if transform.stateful:
        return {
            (name, *key): value
            for name, stats in (("loc", transform._loc), ("var", transform._var))
            for key, value in stats.items(True, True)
        }
    prefix = transform.prefix
    return {
        key: value
        for key, value in rollout["next"].items(True, True)
        if isinstance(key, tuple) and key[0].startswith(prefix)
    }


class TestVecNormUnderGrad:
    """A rollout with gradients enabled and a policy with parameters acting on a
    differentiable env (PendulumEnv is pure torch): the observations carry autograd
    history, the statistics must not."""

    def _rollout(self, kind: str, grad: bool):
        torch.manual_seed(0)
        transform = _vecnorm(kind)
        env = TransformedEnv(PendulumEnv(batch_size=[2]), transform)
        env.set_seed(0)
        policy = TensorDictModule(
            torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"]
        )
        with torch.set_grad_enabled(grad):
            rollout = env.rollout(6, policy)
        return env, transform, rollout

    @pytest.mark.parametrize("kind", ["v1", "v2", "v2-reduce", "v2-stateless"])
    def test_statistics_carry_no_autograd_history(self, kind):
        env, transform, rollout = self._rollout(kind, grad=True)
        assert rollout["next", "observation"].requires_grad  # the data does
        stats = _statistics(transform, rollout)
        assert stats
        for key, value in stats.items():
            assert not value.requires_grad, key
            assert value.grad_fn is None, key
        # a second rollout's loss backpropagates on its own (with leaked statistics it
        # would reach into the first rollout's freed graph)
        rollout["next", "observation"].sum().backward()
        policy = TensorDictModule(
            torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"]
        )
        env.rollout(3, policy)["next", "observation"].sum().backward()
        assert policy.module.weight.grad is not None

    @pytest.mark.parametrize("kind", ["v1", "v2", "v2-reduce", "v2-stateless"])
    def test_values_are_those_of_a_rollout_without_grad(self, kind):
        _, with_grad, rollout = self._rollout(kind, grad=True)
        _, without, reference = self._rollout(kind, grad=False)
        torch.testing.assert_close(
            rollout["next", "observation"].detach(), reference["next", "observation"]
        )
        expected = _statistics(without, reference)
        got = _statistics(with_grad, rollout)
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            torch.testing.assert_close(got[key], value, msg=str(key))

    def test_running_mean_std_update_records_no_history(self):
        weight = torch.nn.Parameter(torch.tensor([2.0, -1.0]))
        x = torch.tensor([[1.0, 2.0], [3.0, 6.0]]) * weight
        rms = RunningMeanStd(shape=(2,), epsilon=0.0)
        rms.update(x)
        for name in ("mean", "var", "count"):
            value = getattr(rms, name)
            assert not value.requires_grad and value.grad_fn is None, name
        # the values of the same samples without grad: samples [[2, -2], [6, -6]]: mean [4, -4], var [4, 4]
        torch.testing.assert_close(rms.mean, torch.tensor([4.0, -4.0]))
        torch.testing.assert_close(rms.var, torch.tensor([4.0, 4.0]))
