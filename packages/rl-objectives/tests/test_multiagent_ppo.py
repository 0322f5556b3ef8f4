"""Group keys through GAE and ClipPPOLoss (MAPPO / IPPO as TorchRL sets them up).

Synthetic ``[B, T]`` rollouts whose agents' entries sit under ``"agents"`` (batch
``[B, T, n_agents]``): reward, done and value ``[B, T, n_agents, 1]``, compared with a
plain per-agent loop and a hand computation of the clipped objective.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl.modules import (
    MultiAgentMLP,
    NormalParamExtractor,
    ProbabilisticActor,
    TanhNormal,
    TensorDictModule,
)
from rl.objectives import ClipPPOLoss, ValueEstimators
from rl.objectives.value import GAE

B, T, N_AGENTS, OBS, ACT = 3, 6, 2, 4, 2
GAMMA, LMBDA = 0.9, 0.8
GROUP_KEYS = {
    "reward": ("agents", "reward"),
    "action": ("agents", "action"),
    "value": ("agents", "state_value"),
    "done": ("agents", "done"),
    "terminated": ("agents", "terminated"),
}


def _critic(centralized: bool, share_params: bool = True) -> TensorDictModule:
    mlp = MultiAgentMLP(
        OBS, 1, N_AGENTS, centralized=centralized, share_params=share_params, depth=1, num_cells=8
    )
    return TensorDictModule(mlp, [("agents", "observation")], [("agents", "state_value")])


def _actor(share_params: bool = True) -> ProbabilisticActor:
    net = nn.Sequential(
        MultiAgentMLP(
            OBS,
            2 * ACT,
            N_AGENTS,
            centralized=False,
            share_params=share_params,
            depth=1,
            num_cells=8,
        ),
        NormalParamExtractor(),
    )
    module = TensorDictModule(
        net, [("agents", "observation")], [("agents", "loc"), ("agents", "scale")]
    )
    return ProbabilisticActor(
        module,
        in_keys=[("agents", "loc"), ("agents", "scale")],
        out_keys=[("agents", "action")],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": -torch.ones(ACT), "high": torch.ones(ACT)},
        return_log_prob=True,
    )


def _rollout(seed: int = 0) -> TensorDict:
    """A ``[B, T]`` batch; done at the root ``[B, T, 1]`` and copied per agent, as TorchRL's MAPPO."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(B, T + 1, N_AGENTS, OBS, generator=g)
    done = torch.zeros(B, T, 1, dtype=torch.bool)
    done[0, 2] = done[1, 4] = True
    terminated = done.clone()
    terminated[1, 4] = False  # a truncation: bootstrap there
    agent_shape = (B, T, N_AGENTS, 1)
    data = TensorDict(
        agents=TensorDict(observation=obs[:, :-1], batch_size=[B, T, N_AGENTS]),
        next=TensorDict(
            agents=TensorDict(
                observation=obs[:, 1:],
                reward=torch.randn(agent_shape, generator=g),
                done=done.unsqueeze(-1).expand(agent_shape),
                terminated=terminated.unsqueeze(-1).expand(agent_shape),
                batch_size=[B, T, N_AGENTS],
            ),
            done=done,
            terminated=terminated,
            batch_size=[B, T],
        ),
        batch_size=[B, T],
    )
    return data


def _gae_loop(reward, value, next_value, done, terminated):
    """Plain backward loop over time for one trajectory batch ``[T]``."""
    adv = torch.zeros_like(reward)
    running = torch.zeros(())
    for t in reversed(range(reward.shape[0])):
        delta = reward[t] + GAMMA * (1 - terminated[t].float()) * next_value[t] - value[t]
        running = delta + GAMMA * LMBDA * (1 - done[t].float()) * running
        adv[t] = running
    return adv


class TestGroupGAE:
    @pytest.mark.parametrize("centralized", [True, False])
    @pytest.mark.parametrize("shifted", [False, True])
    def test_matches_per_agent_loop(self, centralized, shifted):
        torch.manual_seed(0)
        critic = _critic(centralized)
        # a budget of 2 slots: row 1's inner truncation keeps its last step (TorchRL's
        # default budget of 1 would drop it)
        gae = GAE(gamma=GAMMA, lmbda=LMBDA, value_network=critic, shifted=shifted, shifted_budget=2)
        gae.set_keys(**{k: v for k, v in GROUP_KEYS.items() if k != "action"})
        data = gae(_rollout())
        adv = data["advantage"]
        assert adv.shape == (B, T, N_AGENTS, 1)
        with torch.no_grad():
            value = critic.module(data["agents", "observation"])
            next_value = critic.module(data["next", "agents", "observation"])
        nxt = data["next", "agents"]
        for b in range(B):
            for i in range(N_AGENTS):
                expected = _gae_loop(
                    nxt["reward"][b, :, i, 0],
                    value[b, :, i, 0],
                    next_value[b, :, i, 0],
                    nxt["done"][b, :, i, 0],
                    nxt["terminated"][b, :, i, 0],
                )
                torch.testing.assert_close(adv[b, :, i, 0], expected)
        torch.testing.assert_close(data["value_target"], adv + value)

    def test_loss_estimator_with_params(self):
        """TorchRL's MAPPO calls the estimator with the loss's critic parameters."""
        torch.manual_seed(0)
        loss = ClipPPOLoss(_actor(), _critic(True))
        loss.set_keys(**GROUP_KEYS)
        loss.make_value_estimator(ValueEstimators.GAE, gamma=GAMMA, lmbda=LMBDA)
        plain = GAE(gamma=GAMMA, lmbda=LMBDA, value_network=loss.critic_network)
        plain.set_keys(**{k: v for k, v in GROUP_KEYS.items() if k != "action"})
        expected = plain(_rollout())["advantage"]
        data = loss.value_estimator(
            _rollout(),
            params=loss.critic_network_params,
            target_params=loss.target_critic_network_params,
        )
        torch.testing.assert_close(data["advantage"], expected)


class TestGroupClipPPO:
    @pytest.mark.parametrize("share_params", [True, False])
    def test_objective_matches_hand_computation(self, share_params):
        torch.manual_seed(0)
        actor, critic = _actor(share_params), _critic(not share_params, share_params)
        loss = ClipPPOLoss(actor, critic, clip_epsilon=0.1, entropy_coeff=0.0, critic_coeff=0.5)
        loss.set_keys(**GROUP_KEYS)
        loss.make_value_estimator(ValueEstimators.GAE, gamma=GAMMA, lmbda=LMBDA)
        data = _rollout()
        with torch.no_grad():
            actor(data)
            loss.value_estimator(data)
        flat = data.exclude("next").reshape(-1)
        # move the policy so that the ratios are not all 1
        with torch.no_grad():
            for p in actor.parameters():
                p.add_(0.3 * torch.randn_like(p))
        out = loss(flat)
        dist = actor.get_dist(flat.copy())
        log_prob = dist.log_prob(flat["agents", "action"])  # [N, n_agents]
        ratio = (log_prob - flat["agents", "action_log_prob"]).exp().unsqueeze(-1)
        adv = flat["advantage"]  # [N, n_agents, 1]
        gain = torch.minimum(ratio * adv, ratio.clamp(0.9, 1.1) * adv)
        torch.testing.assert_close(out["loss_objective"], -gain.mean())
        value = critic.module(flat["agents", "observation"])
        smooth_l1 = nn.functional.smooth_l1_loss(value, flat["value_target"])
        torch.testing.assert_close(out["loss_critic"], 0.5 * smooth_l1)
        assert out["explained_variance"].shape == (N_AGENTS, 1)  # per agent, as TorchRL
        total = out["loss_objective"] + out["loss_critic"]
        total.backward()
        assert all(p.grad is not None for p in loss.parameters())

    def test_missing_group_key_is_named(self):
        loss = ClipPPOLoss(_actor(), _critic(True))
        loss.set_keys(**GROUP_KEYS)
        data = _rollout().exclude(("agents", "observation"))
        data["advantage"] = torch.zeros(B, T, N_AGENTS, 1)
        data["value_target"] = torch.zeros(B, T, N_AGENTS, 1)
        match = r"needs key \('agents', 'action_log_prob'\).*set_keys\(sample_log_prob=\.\.\.\)"
        with pytest.raises(KeyError, match=match):
            loss(data)
