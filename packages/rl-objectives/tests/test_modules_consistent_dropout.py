"""ConsistentDropout / ConsistentDropoutModule: masks drawn once, reused, and reset by the primer."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule as Mod
from tensordict.nn import TensorDictSequential as Seq

from rl.modules import ConsistentDropout, ConsistentDropoutModule, get_primers_from_module


class TestConsistentDropout:
    @pytest.mark.parametrize("p", [0.0, 0.25, 0.5])
    def test_mask_values_and_output(self, p):
        torch.manual_seed(0)
        x = torch.randn(64, 8)
        y, mask = ConsistentDropout(p)(x)
        assert mask.shape == x.shape
        kept = mask != 0
        torch.testing.assert_close(mask[kept], torch.full_like(mask[kept], 1 / (1 - p)))
        torch.testing.assert_close(y, x * mask)
        if p == 0.0:
            assert kept.all()
        else:
            # the share of zeros is close to p (512 draws)
            assert abs((~kept).float().mean().item() - p) < 0.08

    def test_given_mask_is_reused(self):
        x = torch.randn(3, 4)
        dropout = ConsistentDropout(0.5)
        _, mask = dropout(x)
        for _ in range(3):
            y, again = dropout(x, mask)
            assert again is mask
            torch.testing.assert_close(y, x * mask)

    def test_eval_is_identity(self):
        x = torch.randn(3, 4)
        dropout = ConsistentDropout(0.5).eval()
        assert dropout(x) is x

    def test_make_mask(self):
        dropout = ConsistentDropout(0.5)
        assert dropout.make_mask(shape=(2, 3)).shape == (2, 3)
        assert dropout.make_mask(shape=(2,), dtype=torch.float64).dtype == torch.float64
        with pytest.raises(RuntimeError, match="input= or shape="):
            dropout.make_mask()

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match=r"p must be in \[0, 1\), got 1.0"):
            ConsistentDropout(1.0)
        with pytest.raises(ValueError, match="mask has shape"):
            ConsistentDropout(0.5)(torch.randn(3, 4), torch.ones(3, 5))


class TestConsistentDropoutModule:
    def test_keys(self):
        module = ConsistentDropoutModule(p=0.1, in_keys="x")
        assert module.in_keys == ["x", f"mask_{id(module)}"]
        assert module.out_keys == module.in_keys
        module = ConsistentDropoutModule(p=0.1, in_keys=["x", "m"], out_keys="y")
        assert module.out_keys == ["y", f"mask_{id(module)}"]

    def test_writes_and_reuses_mask(self):
        torch.manual_seed(0)
        module = ConsistentDropoutModule(p=0.5, in_keys=["x", "m"], out_keys=["y", "m"])
        x = torch.randn(6, 4)
        td = module(TensorDict(x=x, batch_size=[6]))
        torch.testing.assert_close(td["y"], x * td["m"])
        # a stored mask gives the same output again (the update sees the rollout's network)
        replay = module(TensorDict(x=x, m=td["m"], batch_size=[6]))
        torch.testing.assert_close(replay["y"], td["y"])

    def test_eval_passes_through(self):
        module = ConsistentDropoutModule(p=0.5, in_keys=["x", "m"], out_keys=["y", "m"]).eval()
        x = torch.randn(6, 4)
        td = module(TensorDict(x=x, batch_size=[6]))
        torch.testing.assert_close(td["y"], x)
        assert "m" not in td.keys()

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="two in_keys and two out_keys"):
            ConsistentDropoutModule(p=0.1, in_keys=["a", "b", "c"])
        with pytest.raises(ValueError, match="p must be in"):
            ConsistentDropoutModule(p=-0.1, in_keys="x")
        with pytest.raises(RuntimeError, match="input_shape="):
            ConsistentDropoutModule(p=0.1, in_keys="x").make_tensordict_primer()

    def test_primer_draws_a_mask_per_episode(self):
        envs = pytest.importorskip("rl.envs")
        torch.manual_seed(0)
        policy = Seq(
            Mod(torch.nn.Linear(3, 4), in_keys=["observation"], out_keys=["hidden"]),
            ConsistentDropoutModule(p=0.5, input_shape=(2, 4), in_keys="hidden"),
            Mod(torch.nn.Linear(4, 1), in_keys=["hidden"], out_keys=["action"]),
        )
        primer = get_primers_from_module(policy)
        env0 = envs.PendulumEnv().append_transform(envs.StepCounter(5))
        env1 = envs.PendulumEnv().append_transform(envs.StepCounter(6))
        env = envs.SerialEnv(2, [lambda: env0, lambda: env1]).append_transform(primer)
        with torch.no_grad():
            r = env.rollout(12, policy, break_when_any_done=False)
        (mask_key,) = [k for k in r.keys() if isinstance(k, str) and k.startswith("mask")]
        mask = r[mask_key]
        assert mask.shape == (2, 12, 4)
        # one mask per episode: constant within, redrawn at each reset (episodes of 5 and 6)
        for env_idx, length in ((0, 5), (1, 6)):
            for start in range(0, 12, length):
                episode = mask[env_idx, start : start + length]
                assert (episode == episode[:1]).all()
        # 8 entries, each 0 or 2: two draws are equal with probability 2 ** -8
        assert not torch.equal(mask[0, 0], mask[0, 5]) or not torch.equal(mask[1, 0], mask[1, 6])
        # the stored mask replays the rollout's outputs
        replay = policy(r.exclude("action", "hidden"))
        torch.testing.assert_close(replay["action"], r["action"])
