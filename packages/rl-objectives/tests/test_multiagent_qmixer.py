"""QMixerLoss against a hand computation of the QMIX / VDN target, on synthetic group data."""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict

from rl.core import Categorical, Composite
from rl.modules import (
    MultiAgentMLP,
    QMixer,
    QValueModule,
    TensorDictModule,
    TensorDictSequential,
    VDNMixer,
)
from rl.objectives import HardUpdate, QMixerLoss, SoftUpdate, ValueEstimators

B, N_AGENTS, OBS, N_ACTIONS, STATE = 6, 3, 4, 5, 7
GAMMA = 0.9


def _qnet(share_params: bool = False) -> TensorDictSequential:
    mlp = MultiAgentMLP(
        OBS, N_ACTIONS, N_AGENTS, centralized=False, share_params=share_params, depth=1, num_cells=8
    )
    return TensorDictSequential(
        TensorDictModule(mlp, [("agents", "observation")], [("agents", "action_value")]),
        QValueModule(
            action_space="categorical",
            action_value_key=("agents", "action_value"),
            out_keys=[
                ("agents", "action"),
                ("agents", "action_value"),
                ("agents", "chosen_action_value"),
            ],
        ),
    )


def _mixer(kind: str) -> TensorDictModule:
    if kind == "vdn":
        return TensorDictModule(
            VDNMixer(N_AGENTS, device="cpu"),
            [("agents", "chosen_action_value")],
            ["chosen_action_value"],
        )
    mixer = QMixer(state_shape=(STATE,), mixing_embed_dim=8, n_agents=N_AGENTS, device="cpu")
    return TensorDictModule(
        mixer, [("agents", "chosen_action_value"), "state"], ["chosen_action_value"]
    )


def _data(one_hot: bool = False, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)

    def agents(**extra):
        return TensorDict(
            observation=torch.randn(B, N_AGENTS, OBS, generator=g),
            batch_size=[B, N_AGENTS],
            **extra,
        )

    action = torch.randint(N_ACTIONS, (B, N_AGENTS), generator=g)
    if one_hot:
        action = torch.nn.functional.one_hot(action, N_ACTIONS)
    terminated = torch.zeros(B, 1, dtype=torch.bool)
    terminated[1] = True
    return TensorDict(
        agents=agents(action=action),
        state=torch.randn(B, STATE, generator=g),
        next=TensorDict(
            agents=agents(),
            state=torch.randn(B, STATE, generator=g),
            reward=torch.randn(B, 1, generator=g),
            done=terminated.clone(),
            terminated=terminated,
            batch_size=[B],
        ),
        batch_size=[B],
    )


def _expected(qnet, mixer, target_qnet, target_mixer, data, one_hot=False):
    """Hand computation: (Q_tot(s, a), r + gamma * (1 - term) * Q_tot'(s', greedy))."""
    mlp, mix = qnet[0].module, mixer.module
    q = mlp(data["agents", "observation"])  # [B, n, A]
    action = data["agents", "action"]
    index = action.argmax(-1) if one_hot else action
    chosen = q.gather(-1, index.unsqueeze(-1))  # [B, n, 1]
    state = (data["state"],) if isinstance(mix, QMixer) else ()
    pred = mix(chosen, *state).squeeze(-1)
    with torch.no_grad():
        q_next = target_qnet[0].module(data["next", "agents", "observation"])
        best = q_next.max(-1, keepdim=True).values
        next_state = (data["next", "state"],) if isinstance(mix, QMixer) else ()
        q_tot_next = target_mixer.module(best, *next_state)
        not_term = (~data["next", "terminated"]).float()
        target = (data["next", "reward"] + GAMMA * not_term * q_tot_next).squeeze(-1)
    return pred, target


class TestQMixerLoss:
    @pytest.mark.parametrize("kind", ["qmix", "vdn"])
    @pytest.mark.parametrize("one_hot", [False, True])
    @pytest.mark.parametrize("share_params", [False, True])
    def test_loss_matches_hand_computation(self, kind, one_hot, share_params):
        torch.manual_seed(0)
        qnet, mixer = _qnet(share_params), _mixer(kind)
        space = "one-hot" if one_hot else "categorical"
        loss = QMixerLoss(qnet, mixer, gamma=GAMMA, action_space=space)
        data = _data(one_hot)
        out = loss(data)
        pred, target = _expected(qnet, mixer, qnet, mixer, data, one_hot)
        torch.testing.assert_close(out["loss"], (pred - target).pow(2).mean())
        torch.testing.assert_close(data["td_error"], (pred - target).detach().pow(2).unsqueeze(-1))
        # gradients reach the local network and the mixer's parameters
        out["loss"].backward()
        assert all(p.grad is not None for p in qnet.parameters())
        assert all(p.grad is not None for p in mixer.parameters())

    def test_target_networks_lag_and_follow_updates(self):
        torch.manual_seed(0)
        qnet, mixer = _qnet(), _mixer("qmix")
        loss = QMixerLoss(qnet, mixer, gamma=GAMMA, action_space="categorical")
        old_qnet, old_mixer = copy.deepcopy(qnet), copy.deepcopy(mixer)
        optim = torch.optim.SGD(loss.parameters(), lr=0.5)
        loss(_data(seed=1))["loss"].backward()
        optim.step()
        data = _data(seed=2)
        out = loss(data)
        # online prediction from the updated nets, target from the frozen copies
        pred, target = _expected(qnet, mixer, old_qnet, old_mixer, data)
        torch.testing.assert_close(out["loss"], (pred - target).pow(2).mean())
        # a soft update moves the target by tau towards the online parameters
        updater = SoftUpdate(loss, tau=0.25)
        w = ("module", "0", "module", "params", "0", "weight")
        online = loss.local_value_network_params.get(w).detach().clone()
        before = loss.target_local_value_network_params.get(w).clone()
        updater.step()
        torch.testing.assert_close(
            loss.target_local_value_network_params.get(w), 0.75 * before + 0.25 * online
        )
        HardUpdate(loss, value_network_update_interval=1).step()
        out = loss(data)
        pred, target = _expected(qnet, mixer, qnet, mixer, data)
        torch.testing.assert_close(out["loss"], (pred - target).pow(2).mean())

    def test_parameters_and_state_dict_round_trip(self):
        torch.manual_seed(0)
        loss = QMixerLoss(_qnet(), _mixer("qmix"), action_space="categorical")
        n_params = sum(p.numel() for p in loss.parameters())
        expected = sum(p.numel() for p in loss.local_value_network.parameters()) + sum(
            p.numel() for p in loss.mixer_network.parameters()
        )
        assert n_params == expected  # targets are buffers, not trained
        other = QMixerLoss(_qnet(), _mixer("qmix"), action_space="categorical")
        other.load_state_dict(loss.state_dict())
        data = _data()
        torch.testing.assert_close(other(data.clone())["loss"], loss(data.clone())["loss"])

    def test_set_keys_and_td_lambda(self):
        torch.manual_seed(0)
        qnet, mixer = _qnet(), _mixer("vdn")
        loss = QMixerLoss(qnet, mixer, action_space="categorical", priority_key="prio")
        loss.set_keys(reward="team_reward")
        data = _data()
        data["next", "team_reward"] = data["next"].pop("reward")
        loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
        out = loss(data)
        data["next", "reward"] = data["next", "team_reward"]
        pred, target = _expected(qnet, mixer, qnet, mixer, data)
        torch.testing.assert_close(out["loss"], (pred - target).pow(2).mean())
        assert "prio" in data.keys()
        assert ("next", "team_reward") in loss.in_keys
        # TD(lambda) over a [B, T] batch: T = 1 with lambda = 1 is the TD(0) target
        loss.make_value_estimator(ValueEstimators.TDLambda, gamma=GAMMA, lmbda=1.0)
        torch.testing.assert_close(loss(data.unsqueeze(-1))["loss"], out["loss"])

    def test_action_space_from_spec(self):
        spec = Composite(
            agents=Composite(action=Categorical(N_ACTIONS, shape=(N_AGENTS,)), shape=(N_AGENTS,))
        )
        assert QMixerLoss(_qnet(), _mixer("vdn"), action_space=spec).action_space == "categorical"

    def test_errors(self):
        with pytest.raises(TypeError, match="TensorDict module as local_value_network"):
            QMixerLoss(torch.nn.Linear(3, 3), _mixer("vdn"))
        with pytest.raises(ValueError, match="unknown loss_function 'l3'"):
            QMixerLoss(_qnet(), _mixer("vdn"), loss_function="l3")
        with pytest.raises(ValueError, match="unknown action_space 'binary'"):
            QMixerLoss(_qnet(), _mixer("vdn"), action_space="binary")
        loss = QMixerLoss(_qnet(), _mixer("vdn"), action_space="categorical")
        data = _data()
        data["next", "reward"] = torch.zeros(B, N_AGENTS, 1)
        with pytest.raises(ValueError, match="global reward 'reward' of shape"):
            loss(data)
        with pytest.raises(KeyError, match=r"needs key \('agents', 'action'\)"):
            loss(_data().exclude(("agents", "action")))
        bad = TensorDictModule(
            lambda q: q, [("agents", "chosen_action_value")], ["chosen_action_value"]
        )
        with pytest.raises(ValueError, match=r"mixer must write 'chosen_action_value' of shape"):
            QMixerLoss(_qnet(), bad, action_space="categorical")(_data())
