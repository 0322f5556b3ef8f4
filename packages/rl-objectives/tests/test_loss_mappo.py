"""MAPPOLoss, IPPOLoss, MultiAgentGAE and the actor-critic losses' advantage_norm.

Synthetic ``[B, T]`` batches in the multi-agent layout: the agents' entries under
``"agents"`` (``[B, T, n_agents, ...]``), team reward and done flags at the root
(``[B, T, 1]``). Values are compared with a plain per-agent GAE loop and a hand
computation of the clipped objective and the normalised critic loss.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl.modules import (
    MultiAgentMLP,
    NormalParamExtractor,
    PercentileValueNorm,
    PopArtValueNorm,
    ProbabilisticActor,
    RunningValueNorm,
    TanhNormal,
    TensorDictModule,
)
from rl.objectives import ClipPPOLoss, IPPOLoss, MAPPOLoss, ValueEstimators, default_value_kwargs
from rl.objectives import multiagent as ma_path
from rl.objectives.value import GAE, MultiAgentGAE

B, T, N, OBS, ACT = 2, 6, 3, 4, 2
GAMMA, LMBDA = 0.9, 0.8
KEYS = {"value": ("agents", "state_value"), "action": ("agents", "action")}


def _actor(share_params: bool = True) -> ProbabilisticActor:
    net = nn.Sequential(
        MultiAgentMLP(
            OBS, 2 * ACT, N, centralized=False, share_params=share_params, depth=1, num_cells=8
        ),
        NormalParamExtractor(),
    )
    module = TensorDictModule(
        net, [("agents", "observation")], [("agents", "loc"), ("agents", "scale")]
    )
    return ProbabilisticActor(
        module,
        in_keys={"loc": ("agents", "loc"), "scale": ("agents", "scale")},
        out_keys=[("agents", "action")],
        distribution_class=TanhNormal,
        return_log_prob=True,
    )


def _critic(centralized: bool = True, share_params: bool = True) -> TensorDictModule:
    mlp = MultiAgentMLP(
        OBS, 1, N, centralized=centralized, share_params=share_params, depth=1, num_cells=8
    )
    return TensorDictModule(mlp, [("agents", "observation")], [("agents", "state_value")])


def _data(per_agent_reward: bool = False, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(B, T + 1, N, OBS, generator=g)
    done = torch.zeros(B, T, 1, dtype=torch.bool)
    done[0, 2] = done[1, 4] = True
    terminated = done.clone()
    terminated[1, 4] = False  # a truncation: bootstrapped
    reward = torch.randn((B, T, N, 1) if per_agent_reward else (B, T, 1), generator=g)
    return TensorDict(
        agents=TensorDict(observation=obs[:, :-1], batch_size=[B, T, N]),
        next=TensorDict(
            agents=TensorDict(observation=obs[:, 1:], batch_size=[B, T, N]),
            reward=reward,
            done=done,
            terminated=terminated,
            batch_size=[B, T],
        ),
        batch_size=[B, T],
    )


def _gae_loop(reward, value, next_value, done, terminated):
    """Plain backward loop over ``[T]``."""
    adv = torch.zeros_like(value)
    running = torch.zeros(())
    for t in reversed(range(value.shape[0])):
        delta = reward[t] + GAMMA * (1 - terminated[t].float()) * next_value[t] - value[t]
        running = delta + GAMMA * LMBDA * (1 - done[t].float()) * running
        adv[t] = running
    return adv


class TestMultiAgentGAE:
    @pytest.mark.parametrize("per_agent_reward", [False, True])
    def test_matches_per_agent_loop(self, per_agent_reward):
        torch.manual_seed(0)
        critic = _critic()
        gae = MultiAgentGAE(gamma=GAMMA, lmbda=LMBDA, value_network=critic)
        gae.set_keys(value=("agents", "state_value"))
        data = gae(_data(per_agent_reward))
        adv = data["advantage"]
        assert adv.shape == data["value_target"].shape == (B, T, N, 1)
        with torch.no_grad():
            value = critic.module(data["agents", "observation"])
            next_value = critic.module(data["next", "agents", "observation"])
        nxt = data["next"]
        for b in range(B):
            for i in range(N):
                reward = nxt["reward"][b, :, i, 0] if per_agent_reward else nxt["reward"][b, :, 0]
                expected = _gae_loop(
                    reward,
                    value[b, :, i, 0],
                    next_value[b, :, i, 0],
                    nxt["done"][b, :, 0],
                    nxt["terminated"][b, :, 0],
                )
                torch.testing.assert_close(adv[b, :, i, 0], expected)
        torch.testing.assert_close(data["value_target"], adv + value)

    def test_average_gae_standardizes_each_agent(self):
        torch.manual_seed(0)
        gae = MultiAgentGAE(gamma=GAMMA, lmbda=LMBDA, value_network=_critic(), average_gae=True)
        gae.set_keys(value=("agents", "state_value"))
        adv = gae(_data())["advantage"]
        torch.testing.assert_close(adv.mean((0, 1, 3)), torch.zeros(N), atol=1e-5, rtol=0)
        torch.testing.assert_close(adv.std((0, 1, 3)), torch.ones(N), atol=1e-4, rtol=0)

    def test_bad_reward_shape_is_named(self):
        gae = MultiAgentGAE(gamma=GAMMA, lmbda=LMBDA, value_network=None)
        with pytest.raises(
            ValueError, match=r"reward/done/terminated.*shape \(4, 5\).*\(4, 5, 3, 1\)"
        ):
            gae._broadcast_to_agents(torch.zeros(4, 5), torch.zeros(4, 5, 3, 1), agent_dim=-2)

    def test_enum_and_defaults(self):
        assert ValueEstimators.MAGAE.value == "Multi-agent generalized advantage estimate"
        assert default_value_kwargs(ValueEstimators.MAGAE) == {
            "gamma": 0.99,
            "lmbda": 0.95,
            "differentiable": True,
        }
        loss = ClipPPOLoss(_actor(), _critic())
        loss.set_keys(**KEYS)
        loss.make_value_estimator(ValueEstimators.MAGAE, gamma=GAMMA, lmbda=LMBDA)
        assert isinstance(loss.value_estimator, MultiAgentGAE)
        assert float(loss.value_estimator.gamma) == pytest.approx(GAMMA)


class TestMAPPOLoss:
    def test_defaults(self):
        loss = MAPPOLoss(_actor(), _critic())
        assert loss.normalize_advantage and loss.normalize_advantage_exclude_dims == (-2,)
        assert float(loss.entropy_coeff) == pytest.approx(0.01)
        assert loss.value_norm is None
        loss.set_keys(**KEYS)
        loss.make_value_estimator()
        assert loss.value_type is ValueEstimators.MAGAE
        assert isinstance(loss.value_estimator, MultiAgentGAE)
        loss.make_value_estimator(ValueEstimators.GAE)
        assert type(loss.value_estimator) is GAE
        assert isinstance(loss, ClipPPOLoss)
        assert issubclass(IPPOLoss, MAPPOLoss)
        assert ma_path.MAPPOLoss is MAPPOLoss and ma_path.IPPOLoss is IPPOLoss

    @pytest.mark.parametrize("cls", [MAPPOLoss, IPPOLoss])
    @pytest.mark.parametrize("share_params", [True, False])
    def test_matches_hand_computation(self, cls, share_params):
        torch.manual_seed(0)
        actor = _actor(share_params)
        critic = _critic(cls is MAPPOLoss, share_params)
        vn = RunningValueNorm(shape=1)
        loss = cls(actor, critic, value_norm=vn, clip_epsilon=0.1, critic_coeff=0.5)
        loss.set_keys(**KEYS)
        loss.make_value_estimator(gamma=GAMMA, lmbda=LMBDA)
        data = _data()
        with torch.no_grad():
            actor(data)
        with torch.no_grad():  # move the policy so that the ratios are not all 1
            for p in actor.parameters():
                p.add_(0.3 * torch.randn_like(p))
        ref_norm = RunningValueNorm(shape=1)
        out = loss(data)

        expected_data = data.clone()
        gae = MultiAgentGAE(gamma=GAMMA, lmbda=LMBDA, value_network=critic)
        gae.set_keys(value=("agents", "state_value"))
        with torch.no_grad():
            gae(expected_data)
        adv = expected_data["advantage"]  # [B, T, N, 1]
        adv = (adv - adv.mean((0, 1, 3), keepdim=True)) / adv.std((0, 1, 3), keepdim=True)
        dist = actor.get_dist(expected_data.copy())
        log_prob = dist.log_prob(expected_data["agents", "action"])
        ratio = (log_prob - expected_data["agents", "action_log_prob"]).exp().unsqueeze(-1)
        gain = torch.minimum(ratio * adv, ratio.clamp(0.9, 1.1) * adv)
        torch.testing.assert_close(out["loss_objective"], -gain.mean())

        target = expected_data["value_target"]
        ref_norm.update(target)
        value = critic.module(expected_data["agents", "observation"])
        critic_loss = nn.functional.smooth_l1_loss(
            ref_norm.normalize(value), ref_norm.normalize(target)
        )
        torch.testing.assert_close(out["loss_critic"], 0.5 * critic_loss)
        torch.testing.assert_close(vn.mean, target.mean().reshape(1))
        (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()
        assert all(p.grad is not None for p in loss.actor_network_params.values(True, True))
        assert all(p.grad is not None for p in loss.critic_network_params.values(True, True))

    def test_value_norm_bounds_the_critic_loss(self):
        torch.manual_seed(0)
        actor = _actor()
        losses = {}
        for vn in (None, PopArtValueNorm(shape=1, beta=0.9)):
            loss = MAPPOLoss(actor, _critic(), value_norm=vn, loss_critic_type="l2")
            loss.set_keys(**KEYS)
            data = _data()
            data["next", "reward"] *= 1000.0
            with torch.no_grad():
                actor(data)
            losses[vn is None] = loss(data)["loss_critic"].item()
        assert losses[True] > 1e4  # the raw returns' scale
        assert losses[False] < 10.0

    def test_value_norm_is_one_submodule(self):
        loss = MAPPOLoss(_actor(), _critic(), value_norm=PopArtValueNorm(shape=1))
        keys = sorted(k for k in loss.state_dict() if "value_norm" in k)
        assert keys == [
            "value_norm.debiasing_term",
            "value_norm.running_mean",
            "value_norm.running_mean_sq",
        ]
        loss.value_norm.update(torch.randn(16, 1) + 3.0)
        other = MAPPOLoss(_actor(), _critic(), value_norm=PopArtValueNorm(shape=1))
        other.load_state_dict(loss.state_dict())
        torch.testing.assert_close(other.value_norm.running_mean, loss.value_norm.running_mean)

    def test_value_norm_with_clip_value_and_separate_losses(self):
        torch.manual_seed(0)
        actor = _actor()
        loss = MAPPOLoss(
            actor,
            _critic(),
            value_norm=PopArtValueNorm(shape=1),
            clip_value=0.2,
            separate_losses=True,
        )
        loss.set_keys(**KEYS)
        data = _data()
        with torch.no_grad():
            actor(data)
        out = loss(data)
        assert "value_clip_fraction" in out.keys()
        out["loss_critic"].backward()
        for p in loss.actor_network_params.values(True, True):
            assert p.grad is None or not p.grad.any()

    def test_missing_value_key_is_named(self):
        loss = MAPPOLoss(_actor(), _critic())
        loss.set_keys(**KEYS)
        data = _data()
        with torch.no_grad():
            loss.actor_network(data)
        data["advantage"] = torch.zeros(B, T, N, 1)
        with pytest.raises(KeyError, match="value_target"):
            loss(data)


class TestAdvantageNorm:
    """``advantage_norm`` (TorchRL's PPOLoss / A2CLoss argument): advantage / scale()."""

    def test_scales_the_computed_advantage(self):
        torch.manual_seed(0)
        actor, critic = _actor(), _critic()
        vn = PercentileValueNorm(shape=1, rate=1.0, min_scale=1e-3)
        loss = ClipPPOLoss(actor, critic, advantage_norm=vn, entropy_bonus=False)
        loss.set_keys(**KEYS)
        loss.make_value_estimator(ValueEstimators.MAGAE, gamma=GAMMA, lmbda=LMBDA)
        data = _data()
        with torch.no_grad():
            actor(data)
        out = loss(data)
        expected = data.clone()
        gae = MultiAgentGAE(gamma=GAMMA, lmbda=LMBDA, value_network=critic)
        gae.set_keys(value=("agents", "state_value"))
        with torch.no_grad():
            gae(expected)
        target = expected["value_target"].reshape(-1, 1)
        q = torch.quantile(target, torch.tensor([0.05, 0.95]), dim=0)
        torch.testing.assert_close(vn.scale(), q[1] - q[0])
        # the policy has not moved: ratios are 1, the objective is -mean(advantage / scale)
        adv = expected["advantage"] / (q[1] - q[0])
        torch.testing.assert_close(out["loss_objective"], -adv.mean())

    def test_given_advantage_leaves_the_statistics(self):
        vn = RunningValueNorm(shape=1)
        loss = ClipPPOLoss(_actor(), _critic(), advantage_norm=vn)
        loss.set_keys(**KEYS)
        data = _data()
        with torch.no_grad():
            loss.actor_network(data)
        data["advantage"] = torch.ones(B, T, N, 1)
        data["value_target"] = torch.zeros(B, T, N, 1)
        loss(data)
        assert float(vn.count) == 0

    def test_excludes_normalize_advantage(self):
        with pytest.raises(ValueError, match="normalize_advantage=True and advantage_norm"):
            MAPPOLoss(_actor(), _critic(), advantage_norm=RunningValueNorm())
        loss = MAPPOLoss(
            _actor(), _critic(), advantage_norm=RunningValueNorm(), normalize_advantage=False
        )
        assert isinstance(loss.advantage_norm, RunningValueNorm)
