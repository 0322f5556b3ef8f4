"""The agent of examples/dreamer.py: its networks, world model, imagination env and losses.

DreamerV3's (categorical latents, a block-GRU RSSM, symlog inputs, two-hot reward and
value heads, percentile-normalised returns, a slow critic) or Dreamer v1's (Gaussian
latents, MSE heads), from the state observation or from pixels: ``rl.modules`` networks
and ``rl.objectives`` losses, put together, and the agent's acting step (the RSSM filter
and the actor). The episodes, the update and the training loop stay in the script.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tensordict import TensorDict
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
)
from torch import nn

from rl.core import Composite, Unbounded
from rl.envs import DreamerEnv
from rl.modules import (
    MLP,
    DreamerActor,
    DreamerV3ImageDecoder,
    DreamerV3ImageEncoder,
    DreamerV3MLP,
    ObsDecoder,
    ObsEncoder,
    RSSMPosterior,
    RSSMPosteriorV3,
    RSSMPrior,
    RSSMPriorV3,
    RSSMRollout,
    RSSMRolloutV3,
    SymExpTwoHot,
    TanhNormal,
    symlog,
)
from rl.objectives import (
    DreamerActorLoss,
    DreamerModelLoss,
    DreamerV3ActorLoss,
    DreamerV3ModelLoss,
    DreamerV3ValueLoss,
    DreamerValueLoss,
    SoftUpdate,
)
from rl.objectives.value import ValueEstimators

sys.path.insert(0, str(Path(__file__).parent))
from _common import own_compiled, resolve_device  # noqa: E402


class Symlog(nn.Module):
    """``symlog`` as a module: DreamerV3 squashes vector observations before encoding."""

    def forward(self, x):
        return symlog(x)


class V3Actor(nn.Module):
    """DreamerV3's continuous actor: a normal whose std is squashed into ``[0.1, 1]``."""

    def __init__(self, in_features: int, action_dim: int, num_cells: int) -> None:
        super().__init__()
        self.mlp = DreamerV3MLP(in_features, 2 * action_dim, depth=2, num_cells=num_cells)

    def forward(self, state, belief):
        loc, scale = self.mlp(state, belief).chunk(2, -1)
        return loc, 0.9 * torch.sigmoid(scale + 2.0) + 0.1


def _models(cfg, env) -> dict:
    """The networks, the world model on replayed sequences and the imagination env of
    ``cfg`` (examples/dreamer.py's ``Config``) for ``env``'s observation and actions.

    The networks are initialised on the CPU (the same weights on every device), then
    moved to ``cfg.device``, where the imagination env is built.

    Returns:
        a dict: ``obs_key`` (``"pixels"`` or ``"observation"``), the networks
        ``encoder``, ``prior``, ``posterior``, ``actor`` and ``value``, the
        ``world_model`` (encode, filter through the RSSM, decode, reward: a
        ``TensorDictSequential`` over ``[B, T]`` sequences), the imagination env
        ``model_env`` (a ``DreamerEnv`` stepping the prior and the reward head), the size
        ``stoch`` of the stochastic latent and the ``device``.
    """
    device = resolve_device(cfg.device)
    obs_key = "pixels" if cfg.from_pixels else "observation"
    obs_shape = env.observation_spec[obs_key].shape
    act_dim = env.action_spec.shape[-1]
    nx = lambda key: ("next", key)  # noqa: E731
    elu_mlp = lambda i, o: MLP(i, o, depth=2, num_cells=cfg.hidden, activation_class=nn.ELU)  # noqa: E731
    v3 = cfg.version == 3
    stoch = cfg.num_categoricals * cfg.num_classes if v3 else cfg.state_dim
    latent = stoch + cfg.rnn_hidden

    # encoder / decoder of the observation
    if cfg.from_pixels and v3:
        encoder = DreamerV3ImageEncoder(depth=cfg.depth, mults=(1, 2, 4, 8))
        embed = encoder.output_features(obs_shape)
        decoder = DreamerV3ImageDecoder(
            latent, image_shape=obs_shape, depth=cfg.depth, mults=(1, 2, 4, 8)
        )
    elif cfg.from_pixels:
        encoder = ObsEncoder(channels=cfg.depth)
        embed = encoder(torch.zeros(1, *obs_shape)).shape[-1]
        decoder = ObsDecoder(channels=cfg.depth)
    elif v3:  # vector observations enter the encoder in symlog space
        encoder = nn.Sequential(
            Symlog(), DreamerV3MLP(obs_shape[-1], None, depth=2, num_cells=cfg.hidden)
        )
        embed = cfg.hidden
        decoder = DreamerV3MLP(latent, obs_shape[-1], depth=2, num_cells=cfg.hidden)
    else:
        encoder, embed = elu_mlp(obs_shape[-1], cfg.hidden), cfg.hidden
        decoder = elu_mlp(latent, obs_shape[-1])

    # the RSSM, the reward head, the actor and the critic
    if v3:
        prior = RSSMPriorV3(
            action_shape=(act_dim,),
            hidden_dim=cfg.hidden,
            rnn_hidden_dim=cfg.rnn_hidden,
            num_categoricals=cfg.num_categoricals,
            num_classes=cfg.num_classes,
            action_dim=act_dim,
            recurrent_model="block_gru",
            unimix=cfg.unimix,
        )
        posterior = RSSMPosteriorV3(
            hidden_dim=cfg.hidden,
            num_categoricals=cfg.num_categoricals,
            num_classes=cfg.num_classes,
            rnn_hidden_dim=cfg.rnn_hidden,
            obs_embed_dim=embed,
            use_rms_norm=True,
            unimix=cfg.unimix,
        )

        def two_hot_head():  # the reward's and the value's: logits of 255 bins, zero at first
            return DreamerV3MLP(latent, 255, depth=2, num_cells=cfg.hidden, outscale=0.0)

        reward_net, two_hot = two_hot_head(), SymExpTwoHot(255)
        value = TensorDictSequential(
            TensorDictModule(two_hot_head(), ["state", "belief"], ["state_value_logits"]),
            TensorDictModule(two_hot, ["state_value_logits"], ["state_value"]),
        )
        actor_net = V3Actor(latent, act_dim, cfg.hidden)
        prior_out = ["prior_logits", "state", "belief"]
        posterior_out = ["posterior_logits", "state"]
    else:
        prior = RSSMPrior(
            env.action_spec,
            hidden_dim=cfg.hidden,
            rnn_hidden_dim=cfg.rnn_hidden,
            state_dim=cfg.state_dim,
            action_dim=act_dim,
        )
        posterior = RSSMPosterior(
            hidden_dim=cfg.hidden,
            state_dim=cfg.state_dim,
            rnn_hidden_dim=cfg.rnn_hidden,
            obs_embed_dim=embed,
        )
        reward_net = elu_mlp(latent, 1)
        value = TensorDictModule(elu_mlp(latent, 1), ["state", "belief"], ["state_value"])
        actor_net = DreamerActor(act_dim, depth=2, num_cells=cfg.hidden)
        actor_net(torch.zeros(1, stoch), torch.zeros(1, cfg.rnn_hidden))  # lazy layers
        if cfg.from_pixels:
            decoder(torch.zeros(1, stoch), torch.zeros(1, cfg.rnn_hidden))
        prior_out = ["prior_mean", "prior_std", "state", "belief"]
        posterior_out = ["posterior_mean", "posterior_std", "state"]
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(actor_net, ["state", "belief"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(["loc", "scale"], ["action"], distribution_class=TanhNormal),
    )

    def reward_head(key):
        """The reward head on the latents under ``key(...)`` (the root or ``"next"``)."""
        if not v3:
            return [TensorDictModule(reward_net, [key("state"), key("belief")], [key("reward")])]
        return [
            TensorDictModule(reward_net, [key("state"), key("belief")], [key("reward_logits")]),
            TensorDictModule(two_hot, [key("reward_logits")], [key("reward")]),
        ]

    # the world model on replayed sequences: encode, filter through the RSSM, decode
    rollout_cls = RSSMRolloutV3 if v3 else RSSMRollout
    world_model = TensorDictSequential(
        TensorDictModule(encoder, [nx(obs_key)], [nx("encoded_latents")]),
        rollout_cls(
            TensorDictModule(prior, ["state", "belief", "action"], [nx(k) for k in prior_out]),
            TensorDictModule(
                posterior, [nx("belief"), nx("encoded_latents")], [nx(k) for k in posterior_out]
            ),
        ),
        TensorDictModule(decoder, [nx("state"), nx("belief")], [nx("reco_" + obs_key)]),
        *reward_head(nx),
    )

    # the networks on the device; there the imagination env makes its tensors
    for net in (world_model, actor, value):
        net.to(device)
    with torch.device(device):
        # imagination: the prior and the reward head stepped from posterior latents
        unused = ["_" + k for k in prior_out[:-2]]
        model_env = DreamerEnv(
            TensorDictSequential(
                TensorDictModule(
                    prior, ["state", "belief", "action"], [*unused, "state", "belief"]
                ),
                *reward_head(lambda k: k),
            ),
            prior_shape=(stoch,),
            belief_shape=(cfg.rnn_hidden,),
            device=device,
        )
        latents = dict(state=Unbounded(stoch), belief=Unbounded(cfg.rnn_hidden))
        model_env.observation_spec = Composite(**latents)
        model_env.state_spec = Composite(**latents)
        model_env.action_spec = Unbounded(act_dim)
        model_env.reward_spec = Unbounded(1)
    return dict(
        obs_key=obs_key,
        encoder=encoder,
        prior=prior,
        posterior=posterior,
        actor=actor,
        value=value,
        world_model=world_model,
        model_env=model_env,
        stoch=stoch,
        device=device,
    )


def make_agent(cfg, env) -> dict:
    """The agent of ``cfg`` (examples/dreamer.py's ``Config``) for ``env``: the models
    (:func:`_models`: the networks, the world model and the imagination env, on
    ``cfg.device``) and, built there, the three losses and the slow critic.

    Returns:
        :func:`_models`'s dict with ``model_loss``, ``actor_loss``, ``value_loss`` and
        ``slow_critic`` (a ``SoftUpdate`` of the critic, or ``None``).
    """
    agent = _models(cfg, env)
    world_model, actor, value = agent["world_model"], agent["actor"], agent["value"]
    v3 = cfg.version == 3
    with torch.device(agent["device"]):
        if v3:
            model_loss = DreamerV3ModelLoss(
                world_model,
                kl_mode="separate",
                lambda_dynamic=cfg.kl_dynamic,
                lambda_representation=cfg.kl_representation,
                unimix=cfg.unimix,
                free_bits=cfg.free_bits,
                reco_symlog=not cfg.from_pixels,
            )
            actor_loss = DreamerV3ActorLoss(
                actor,
                value,
                agent["model_env"],
                imagination_horizon=cfg.imagination_horizon,
                entropy_bonus=cfg.entropy_bonus,
            )
            value_loss = DreamerV3ValueLoss(
                value,
                value_loss="two_hot",
                actor_loss=actor_loss,
                slow_critic_regularization=cfg.slow_critic_regularization,
            )
        else:
            model_loss = DreamerModelLoss(world_model, free_nats=cfg.free_bits)
            actor_loss = DreamerActorLoss(
                actor, value, agent["model_env"], imagination_horizon=cfg.imagination_horizon
            )
            value_loss = DreamerValueLoss(value, gamma=cfg.gamma)
        obs_key = agent["obs_key"]
        model_loss.set_keys(pixels=obs_key, reco_pixels="reco_" + obs_key)
        actor_loss.make_value_estimator(ValueEstimators.TDLambda, gamma=cfg.gamma, lmbda=cfg.lmbda)
        slow = v3 and cfg.slow_critic_regularization > 0
        agent.update(
            model_loss=model_loss,
            actor_loss=actor_loss,
            value_loss=value_loss,
            slow_critic=SoftUpdate(value_loss, tau=cfg.slow_critic_tau) if slow else None,
        )
    return agent


def make_act(agent: dict, compile: bool) -> dict:
    """The acting step ``(state, belief, action, obs) -> (state, belief, action)``: the
    belief from the previous latent and action, the posterior of the new observation, the
    actor's action on that latent; one per mode (dreamer.py's ``play`` runs it under that
    mode's exploration type: sampled when exploring, the mode in evaluation), each
    compiled once with ``compile``."""
    prior, posterior = agent["prior"], agent["posterior"]
    encoder, actor = agent["encoder"], agent["actor"]

    def act(state, belief, action, obs):
        belief = prior(state, belief, action)[-1]
        state = posterior(belief, encoder(obs.unsqueeze(0)).squeeze(0))[-1]
        action = actor(TensorDict(state=state, belief=belief))["action"]
        return state, belief, action

    return {mode: own_compiled(act, compile) if compile else act for mode in ("explore", "eval")}
