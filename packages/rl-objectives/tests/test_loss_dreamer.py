"""Dreamer (v1) modules and losses against hand computations on tiny sizes."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from rl.core import Unbounded
from rl.modules import (
    DreamerActor,
    ObsDecoder,
    ObsEncoder,
    RSSMPosterior,
    RSSMPrior,
    RSSMRollout,
)
from rl.objectives import DreamerActorLoss, DreamerModelLoss, DreamerValueLoss
from rl.objectives.value import ValueEstimators

S, H, A, E = 3, 5, 2, 4  # state, belief, action, embedding sizes


def test_encoder_decoder_shapes():
    enc = ObsEncoder(channels=2, in_channels=3)
    assert enc(torch.rand(2, 4, 3, 64, 64)).shape == (2, 4, 2 * 8 * 2 * 2)
    assert enc(torch.rand(3, 64, 64)).shape == (64,)
    dec = ObsDecoder(channels=2, latent_dim=S + H, out_channels=1)
    assert dec(torch.rand(2, 4, S), torch.rand(2, 4, H)).shape == (2, 4, 1, 64, 64)
    with pytest.raises(RuntimeError, match="num_layers"):
        ObsEncoder(num_layers=0)
    with pytest.raises(ValueError, match="pixels"):
        enc(torch.rand(5))


def test_prior_posterior_hand_and_errors():
    torch.manual_seed(0)
    prior = RSSMPrior(Unbounded(A), hidden_dim=6, rnn_hidden_dim=H, state_dim=S, action_dim=A)
    state, belief, action = torch.randn(4, S), torch.randn(4, H), torch.randn(4, A)
    noise = torch.randn(4, S)
    mean, std, new_state, new_belief = prior(state, belief, action, noise=noise)
    gru = nn.GRUCell(6, H)
    gru.load_state_dict(prior.rnn.state_dict())
    x = nn.functional.elu(prior.action_state_projector[0](torch.cat([state, action], -1)))
    torch.testing.assert_close(new_belief, gru(x, belief))
    torch.testing.assert_close(new_state, mean + noise * std)
    assert (std >= 0.1).all()
    with pytest.raises(ValueError, match="belief has last dimension 4"):
        prior(state, torch.randn(4, 4), action)
    with pytest.raises(ValueError, match="action"):
        prior(state, belief, torch.randn(4, 3))

    post = RSSMPosterior(hidden_dim=6, state_dim=S, rnn_hidden_dim=H, obs_embed_dim=E)
    pm, ps, ps_state = post(belief, torch.randn(4, E), noise=noise)
    torch.testing.assert_close(ps_state, pm + noise * ps)
    with pytest.raises(ValueError, match="obs_embedding"):
        post(belief, torch.randn(4, E + 1))


def test_actor_outputs():
    actor = DreamerActor(A, depth=1, num_cells=8)
    loc, scale = actor(torch.randn(7, S), torch.randn(7, H))
    assert loc.shape == scale.shape == (7, A) and (scale > 0).all()


def _rssm():
    prior = TensorDictModule(
        RSSMPrior(Unbounded(A), hidden_dim=6, rnn_hidden_dim=H, state_dim=S, action_dim=A),
        in_keys=["state", "belief", "action"],
        out_keys=[("next", "prior_mean"), ("next", "prior_std"), "_", ("next", "belief")],
    )
    post = TensorDictModule(
        RSSMPosterior(hidden_dim=6, state_dim=S, rnn_hidden_dim=H, obs_embed_dim=E),
        in_keys=[("next", "belief"), ("next", "encoded_latents")],
        out_keys=[("next", "posterior_mean"), ("next", "posterior_std"), ("next", "state")],
    )
    return prior, post


def test_rssm_rollout_matches_loop():
    torch.manual_seed(0)
    prior, post = _rssm()
    B, T = 2, 4
    td = TensorDict(
        {
            "state": torch.zeros(B, T, S),
            "belief": torch.zeros(B, T, H),
            "action": torch.randn(B, T, A),
            ("next", "encoded_latents"): torch.randn(B, T, E),
        },
        [B, T],
    )
    torch.manual_seed(1)
    out = RSSMRollout(prior, post)(td.clone())
    assert out.batch_size == (B, T)
    torch.manual_seed(1)
    state, belief = torch.zeros(B, S), torch.zeros(B, H)
    for t in range(T):
        _, _, _, belief = prior.module(state, belief, td["action"][:, t])
        _, _, state = post.module(belief, td["next", "encoded_latents"][:, t])
        torch.testing.assert_close(out["next", "state"][:, t], state)
        torch.testing.assert_close(out["next", "belief"][:, t], belief)
    # without a belief primer the GRU starts from zeros, as with a zero belief
    torch.manual_seed(1)
    no_belief = RSSMRollout(prior, post)(td.exclude("belief"))
    torch.testing.assert_close(no_belief["next", "belief"], out["next", "belief"])


class _Fixed(nn.Module):
    def __init__(self, *tensors):
        super().__init__()
        self.tensors = tensors

    def forward(self, x):
        return self.tensors


def _model_loss_setup(B=2, T=3, C=1, P=4):
    g = torch.Generator().manual_seed(0)
    pm, qm = torch.randn(B, T, S, generator=g), torch.randn(B, T, S, generator=g)
    ps, qs = torch.rand(B, T, S, generator=g) + 0.2, torch.rand(B, T, S, generator=g) + 0.2
    reco = torch.rand(B, T, C, P, P, generator=g)
    pred_r = torch.randn(B, T, 1, generator=g)
    latents = TensorDictModule(
        _Fixed(pm, ps, qm, qs),
        in_keys=[("next", "pixels")],
        out_keys=[
            ("next", k) for k in ("prior_mean", "prior_std", "posterior_mean", "posterior_std")
        ],
    )
    decoder = TensorDictModule(
        _Fixed(reco), in_keys=[("next", "pixels")], out_keys=[("next", "reco_pixels")]
    )
    reward = TensorDictModule(
        _Fixed(pred_r), in_keys=[("next", "pixels")], out_keys=[("next", "reward")]
    )
    world_model = TensorDictSequential(TensorDictSequential(latents, decoder), reward)
    data = TensorDict(
        {
            ("next", "pixels"): torch.rand(B, T, C, P, P, generator=g),
            ("next", "reward"): torch.randn(B, T, 1, generator=g),
        },
        [B, T],
    )
    return world_model, data, (pm, ps, qm, qs, reco, pred_r)


@pytest.mark.parametrize("free_nats", [0.0, 3.0])
@pytest.mark.parametrize("global_average", [False, True])
def test_model_loss_hand(free_nats, global_average):
    world_model, data, (pm, ps, qm, qs, reco, pred_r) = _model_loss_setup()
    loss = DreamerModelLoss(world_model, free_nats=free_nats, global_average=global_average)
    assert loss.decoder is world_model[0][-1] and loss.reward_model is world_model[1]
    out, wm_data = loss(data)
    kl = torch.distributions.kl_divergence(
        torch.distributions.Normal(qm, qs), torch.distributions.Normal(pm, ps)
    )
    if not global_average:
        kl = kl.sum(-1)
    torch.testing.assert_close(out["loss_model_kl"], kl.clamp_min(free_nats).mean().reshape(1))
    se = (data["next", "pixels"] - reco) ** 2
    reco_ref = se.mean() if global_average else se.sum((-3, -2, -1)).mean()
    torch.testing.assert_close(out["loss_model_reco"], reco_ref.reshape(1))
    torch.testing.assert_close(
        out["loss_model_reward"], ((data["next", "reward"] - pred_r) ** 2).mean().reshape(1)
    )
    assert out["loss_model_kl"].shape == (1,)
    torch.testing.assert_close(wm_data["next", "true_reward"], data["next", "reward"])


def test_model_loss_vector_observation_sums_features_only():
    # a state observation [B, T, F]: the squared error is summed over F, averaged over B, T
    B, T, F = 2, 3, 4
    obs = torch.arange(B * T * F, dtype=torch.float32).reshape(B, T, F) / 10
    mean, std = torch.zeros(B, T, S), torch.ones(B, T, S)
    key = ("next", "observation")
    world_model = TensorDictSequential(
        TensorDictSequential(
            TensorDictModule(
                _Fixed(mean, std, mean, std),
                in_keys=[key],
                out_keys=[
                    ("next", k)
                    for k in ("prior_mean", "prior_std", "posterior_mean", "posterior_std")
                ],
            ),
            TensorDictModule(_Fixed(torch.zeros(B, T, F)), [key], [("next", "reco_observation")]),
        ),
        TensorDictModule(_Fixed(torch.zeros(B, T, 1)), [key], [("next", "reward")]),
    )
    data = TensorDict({key: obs, ("next", "reward"): torch.zeros(B, T, 1)}, [B, T])
    loss = DreamerModelLoss(world_model, free_nats=0.0)
    loss.set_keys(pixels="observation", reco_pixels="reco_observation")
    out, _ = loss(data)
    torch.testing.assert_close(out["loss_model_reco"], (obs**2).sum(-1).mean().reshape(1))


def test_model_loss_delayed_clamp_and_missing_key():
    world_model, data, (pm, ps, qm, qs, *_r) = _model_loss_setup()
    loss = DreamerModelLoss(world_model, free_nats=100, delayed_clamp=True, lambda_kl=0.5)
    out, _ = loss(data)
    torch.testing.assert_close(out["loss_model_kl"], torch.tensor([50.0]))
    with pytest.raises(KeyError, match="reward"):
        loss(data.exclude(("next", "reward")))
    with pytest.raises(ValueError, match="latent"):
        loss.kl_loss(pm, ps, qm[..., :2], qs[..., :2])


class _LatentEnv(nn.Module):
    """A duck-typed imagination env: state' = state + mean(action), reward = state'.sum(-1)."""

    def reset(self, td):
        return td

    def rollout(self, max_steps, policy, auto_reset, tensordict):
        td, steps = tensordict, []
        for _ in range(max_steps):
            td = policy(td.clone())
            nxt_state = td["state"] + td["action"].mean(-1, keepdim=True)
            td.set(("next", "state"), nxt_state)
            td.set(("next", "belief"), td["belief"] * 0.5)
            td.set(("next", "reward"), nxt_state.sum(-1, keepdim=True))
            steps.append(td)
            td = TensorDict({"state": nxt_state, "belief": td["next", "belief"]}, td.batch_size)
        return torch.stack(steps, -1)


def _lambda_loop(r, v, gamma, lmbda):
    T = r.shape[-2]
    out = torch.empty_like(r)
    g = v[..., -1, :]
    for t in reversed(range(T)):
        nxt = v[..., t, :] if t == T - 1 else (1 - lmbda) * v[..., t, :] + lmbda * g
        g = r[..., t, :] + gamma * nxt
        out[..., t, :] = g
    return out


@pytest.mark.parametrize("discount_loss", [True, False])
def test_actor_and_value_loss_hand(discount_loss):
    torch.manual_seed(0)
    actor = TensorDictModule(_ActorNet(), in_keys=["state", "belief"], out_keys=["action"])
    value = TensorDictModule(_ValueNet(), in_keys=["state", "belief"], out_keys=["state_value"])
    loss = DreamerActorLoss(
        actor, value, _LatentEnv(), imagination_horizon=4, discount_loss=discount_loss
    )
    loss.make_value_estimator(ValueEstimators.TDLambda, gamma=0.9, lmbda=0.8)
    data = TensorDict({"state": torch.randn(3, S), "belief": torch.randn(3, H)}, [3])
    out, fake = loss(data)
    assert fake.batch_size == (3, 4)
    r = fake["next", "reward"]
    v = value.module(fake["next", "state"], fake["next", "belief"])
    ref = _lambda_loop(r, v, 0.9, 0.8)
    torch.testing.assert_close(fake["lambda_target"], ref)
    w = (0.9 ** torch.arange(4.0)).reshape(4, 1) if discount_loss else torch.ones(4, 1)
    torch.testing.assert_close(out["loss_actor"], -(ref * w).sum((-2, -1)).mean())
    out["loss_actor"].backward()
    assert actor.module.lin.weight.grad is not None
    assert all(p.grad is None for p in value.parameters())

    vloss = DreamerValueLoss(value, discount_loss=discount_loss, gamma=0.9)
    vout, _ = vloss(fake.detach())
    pred = value.module(fake["state"], fake["belief"])
    torch.testing.assert_close(
        vout["loss_value"], (w * (pred - ref.detach()) ** 2).sum((-2, -1)).mean()
    )
    with pytest.raises(KeyError, match="lambda_target"):
        vloss(fake.exclude("lambda_target"))
    with pytest.raises(KeyError, match="belief"):
        loss(data.exclude("belief"))
    with pytest.raises(TypeError):
        DreamerActorLoss(actor, value, _LatentEnv(), gamma=0.9)


class _ValueNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(S + H, 1)

    def forward(self, s, b):
        return self.lin(torch.cat([s, b], -1))


def test_actor_loss_td0_estimator():
    actor = TensorDictModule(_ActorNet(), in_keys=["state", "belief"], out_keys=["action"])
    value = TensorDictModule(_ValueNet(), in_keys=["state", "belief"], out_keys=["state_value"])
    loss = DreamerActorLoss(actor, value, _LatentEnv(), imagination_horizon=3)
    r, v = torch.randn(2, 3, 1), torch.randn(2, 3, 1)
    torch.testing.assert_close(loss.lambda_target(r, v), _lambda_loop(r, v, 0.99, 0.95))
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.5)
    torch.testing.assert_close(loss.lambda_target(r, v), r + 0.5 * v)
    with pytest.raises(ValueError, match="same shape"):
        loss.lambda_target(r, v[..., :2, :])
    with pytest.raises(NotImplementedError, match="GAE"):
        loss.make_value_estimator(ValueEstimators.GAE)


class _ActorNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(S + H, A)

    def forward(self, s, b):
        return self.lin(torch.cat([s, b], -1))


def test_reset_parameters_recursive():
    value = TensorDictModule(_ValueNet(), in_keys=["state", "belief"], out_keys=["state_value"])
    loss = DreamerValueLoss(value)
    with torch.no_grad():
        value.module.lin.weight.fill_(1000.0)
    loss.reset_parameters_recursive()
    assert (value.module.lin.weight.abs() < 1).all()
