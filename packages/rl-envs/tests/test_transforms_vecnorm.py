"""VecNorm: running statistics, sharing, state_dict."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl.envs import PendulumEnv, check_env_specs
from rl.envs.transforms import ObservationNorm, TransformedEnv, VecNorm


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
        var = (ssq / count - mean**2).clamp_min(eps**2)
        outs.append((x - mean) / var.sqrt())
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
