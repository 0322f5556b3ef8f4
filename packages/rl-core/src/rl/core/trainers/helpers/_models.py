"""Model builders of a config-driven script (TorchRL's ``trainers.helpers.models``).

The networks and actors come from rl-objectives (``rl.modules``), the model-based env
from rl-envs (``pip install "rl-core[helpers]"``), imported when a builder runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tensordict.nn import InteractionType
from torch import nn

from ..._exploration import ExplorationType, set_exploration_type
from ..._specs import Categorical, Composite, Unbounded
from ._config import field, require
from ._envs import transformed_env_constructor

__all__ = [
    "ContinuousModelConfig",
    "DiscreteModelConfig",
    "DreamerConfig",
    "REDQModelConfig",
    "make_dqn_actor",
    "make_dreamer",
]

#: the support of the distributional Q-values: ``atoms`` values evenly spread in [-3, 3]
_SUPPORT_RANGE = (-3.0, 3.0)


def make_dqn_actor(proof_environment: Any, cfg: Any, device: torch.device | str) -> Any:
    """A (dueling) DQN policy for ``proof_environment``, read from ``cfg``.

    With ``cfg.from_pixels`` a ``DuelingCnnDQNet`` reads ``"pixels"`` (convolutions of
    32, 64, 64 channels, kernels 8, 4, 3, strides 4, 2, 1; a 512-unit head); otherwise a
    ``DuelingMlpDQNet`` (512-unit head) reads the env's first observation. The heads use
    ``NoisyLinear`` layers with ``cfg.noisy``. With ``cfg.distributional`` the actor is a
    ``DistributionalQValueActor`` over ``cfg.atoms`` values evenly spread in [-3, 3];
    otherwise a ``QValueActor``. A ``Categorical`` action spec gives integer actions, a
    one-hot spec one-hot actions. The lazy layers are initialised with a call on the
    env's fake data.

    Args:
        proof_environment: an env with the specs of the training envs.
        cfg: a config with :class:`DiscreteModelConfig` fields and ``from_pixels``.
        device: the device of the actor.

    Returns:
        The actor: it writes ``"action"``, ``"action_value"`` and (not distributional)
        ``"chosen_action_value"``.

    Raises:
        ValueError: the env's action is not discrete, or ``cfg.atoms`` is not a positive
            integer with ``cfg.distributional``.

    Examples:
        >>> from types import SimpleNamespace
        >>> from rl.envs import CartPoleEnv
        >>> env = CartPoleEnv()
        >>> cfg = SimpleNamespace(from_pixels=False, noisy=False, distributional=False, atoms=51)
        >>> actor = make_dqn_actor(env, cfg, "cpu")
        >>> actor(env.reset())["action_value"].shape
        torch.Size([2])
    """
    needed = "make_dqn_actor"
    decl = "DiscreteModelConfig"
    modules = require("rl.modules", needed)
    distributional = field(cfg, "distributional", needed, decl)
    noisy = field(cfg, "noisy", needed, decl)
    from_pixels = field(cfg, "from_pixels", needed, "EnvConfig")
    action_spec = proof_environment.full_action_spec["action"]
    if action_spec.domain != "discrete":
        raise ValueError(
            f"make_dqn_actor needs a discrete action, got {action_spec} "
            f"(domain {action_spec.domain!r})"
        )
    layer_class = modules.NoisyLinear if noisy else nn.Linear
    if from_pixels:
        net_class = modules.DuelingCnnDQNet
        net_kwargs = {
            "cnn_kwargs": {
                "bias_last_layer": True,
                "depth": None,
                "num_cells": [32, 64, 64],
                "kernel_sizes": [8, 4, 3],
                "strides": [4, 2, 1],
            },
            "mlp_kwargs": {"num_cells": 512, "layer_class": layer_class},
        }
        in_key = "pixels"
    else:
        net_class = modules.DuelingMlpDQNet
        net_kwargs = {
            "mlp_kwargs_feature": {},
            "mlp_kwargs_output": {"num_cells": 512, "layer_class": layer_class},
        }
        in_key = next(iter(proof_environment.full_observation_spec.keys()))
    actor_kwargs: dict[str, Any] = {}
    if isinstance(action_spec, Categorical):
        actor_kwargs["action_space"] = "categorical"
        out_features = action_spec.space.n
    else:
        out_features = action_spec.shape[-1]
    actor_class = modules.QValueActor
    if distributional:
        atoms = field(cfg, "atoms", needed, decl)
        if isinstance(atoms, bool) or not isinstance(atoms, int) or atoms < 1:
            raise ValueError(
                f"cfg.atoms must be a positive integer with cfg.distributional, got {atoms!r}"
            )
        out_features = (atoms, out_features)
        net_kwargs["out_features_value"] = (atoms, 1)
        actor_class = modules.DistributionalQValueActor
        actor_kwargs["support"] = torch.linspace(*_SUPPORT_RANGE, atoms)
    net = net_class(out_features=out_features, **net_kwargs)
    actor = actor_class(
        module=net,
        spec=Composite(action=action_spec),
        in_keys=[in_key],
        safe=True,
        **actor_kwargs,
    ).to(device)
    with torch.no_grad():  # materialises the lazy layers
        actor(proof_environment.fake_tensordict().unsqueeze(-1).to(device))
    return actor


def make_dreamer(
    cfg: Any,
    proof_environment: Any = None,
    device: torch.device | str = "cpu",
    action_key: str = "action",
    value_key: str = "state_value",
    use_decoder_in_env: bool = False,
    obs_norm_state_dict: dict | None = None,
) -> tuple[Any, Any, Any, Any, Any]:
    """The five parts of a Dreamer agent (`Hafner et al. 2020 <https://arxiv.org/abs/1912.01603>`_).

    An ``ObsEncoder``/``ObsDecoder`` pair over ``"pixels"``, an RSSM prior and
    posterior (``cfg.state_dim`` stochastic, ``cfg.rssm_hidden_dim`` deterministic
    units) and a reward MLP (``cfg.mlp_num_units``) make the world model; the model-based
    env imagines with the prior and the reward model; a ``DreamerActor`` (tanh-normal
    actions) acts in imagination and, through the posterior, in the real env; a value MLP
    scores the imagined states. The lazy layers are initialised with the fake data of the
    envs.

    Args:
        cfg: a config with :class:`DreamerConfig` fields (and the :class:`EnvConfig`
            fields when ``proof_environment`` is None).
        proof_environment: an env with the specs of the training envs (pixels under
            ``"pixels"``); ``None`` builds one from ``cfg``.
        device: the device of the modules.
        action_key: where the actors write the action.
        value_key: where the value model writes the value.
        use_decoder_in_env: the model-based env also decodes its states to
            ``"reco_pixels"``.
        obs_norm_state_dict: the ``ObservationNorm`` state of the env built from ``cfg``.

    Returns:
        ``(world_model, model_based_env, actor_simulator, value_model, actor_realworld)``.
    """
    needed = "make_dreamer"
    decl = "DreamerConfig"
    modules = require("rl.modules", needed)
    envs = require("rl.envs", needed)
    state_dim = field(cfg, "state_dim", needed, decl)
    hidden_dim = field(cfg, "rssm_hidden_dim", needed, decl)
    mlp_units = field(cfg, "mlp_num_units", needed, decl)
    built_here = proof_environment is None
    if built_here:
        proof_environment = transformed_env_constructor(
            cfg=cfg, use_env_creator=False, obs_norm_state_dict=obs_norm_state_dict
        )()
    action_spec = proof_environment.action_spec
    obs_encoder = modules.ObsEncoder()
    obs_decoder = modules.ObsDecoder()
    rssm_prior = modules.RSSMPrior(
        hidden_dim=hidden_dim,
        rnn_hidden_dim=hidden_dim,
        state_dim=state_dim,
        action_spec=action_spec,
    )
    rssm_posterior = modules.RSSMPosterior(hidden_dim=hidden_dim, state_dim=state_dim)
    reward_module = modules.MLP(
        out_features=1, depth=2, num_cells=mlp_units, activation_class=nn.ELU
    )
    world_model = _world_model(
        modules, obs_encoder, obs_decoder, rssm_prior, rssm_posterior, reward_module
    ).to(device)
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        world_model(proof_environment.fake_tensordict().unsqueeze(-1).to(device))
    model_based_env = _model_based_env(
        modules,
        envs,
        reward_module,
        rssm_prior,
        obs_decoder if use_decoder_in_env else None,
        proof_environment,
        state_dim,
        hidden_dim,
    ).to(device)
    actor_module = modules.DreamerActor(
        out_features=action_spec.shape[-1],
        depth=3,
        num_cells=mlp_units,
        activation_class=nn.ELU,
    )
    actor_simulator = _tanh_normal_actor(
        modules, actor_module, action_key, action_spec, InteractionType.RANDOM
    ).to(device)
    # the real-world actor encodes the observation, infers the state with the
    # posterior, acts, and advances the belief with the prior
    actor_realworld = modules.SafeSequential(
        modules.SafeModule(obs_encoder, in_keys=["pixels"], out_keys=["encoded_latents"]),
        modules.SafeModule(
            rssm_posterior,
            in_keys=["belief", "encoded_latents"],
            out_keys=["_", "_", "state"],
        ),
        _tanh_normal_actor(
            modules, actor_module, action_key, action_spec.to("cpu"), InteractionType.DETERMINISTIC
        ),
        modules.SafeModule(
            rssm_prior,
            in_keys=["state", "belief", action_key],
            out_keys=["_", "_", "_", ("next", "belief")],
        ),
    ).to(device)
    value_model = modules.SafeModule(
        modules.MLP(out_features=1, depth=3, num_cells=mlp_units, activation_class=nn.ELU),
        in_keys=["state", "belief"],
        out_keys=[value_key],
    ).to(device)
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        imagined = model_based_env.fake_tensordict().unsqueeze(-1).to(device)
        value_model(actor_simulator(imagined))
    if built_here:
        proof_environment.close()
    return world_model, model_based_env, actor_simulator, value_model, actor_realworld


def _world_model(modules, obs_encoder, obs_decoder, rssm_prior, rssm_posterior, reward_module):
    """Encoder, RSSM rollout over time and decoder, with the reward model beside them."""
    rollout = modules.RSSMRollout(
        modules.SafeModule(
            rssm_prior,
            in_keys=["state", "belief", "action"],
            out_keys=[("next", "prior_mean"), ("next", "prior_std"), "_", ("next", "belief")],
        ),
        modules.SafeModule(
            rssm_posterior,
            in_keys=[("next", "belief"), ("next", "encoded_latents")],
            out_keys=[("next", "posterior_mean"), ("next", "posterior_std"), ("next", "state")],
        ),
    )
    transition_model = modules.SafeSequential(
        modules.SafeModule(
            obs_encoder, in_keys=[("next", "pixels")], out_keys=[("next", "encoded_latents")]
        ),
        rollout,
        modules.SafeModule(
            obs_decoder,
            in_keys=[("next", "state"), ("next", "belief")],
            out_keys=[("next", "reco_pixels")],
        ),
    )
    reward_model = modules.SafeModule(
        reward_module,
        in_keys=[("next", "state"), ("next", "belief")],
        out_keys=[("next", "reward")],
    )
    return modules.WorldModelWrapper(transition_model, reward_model)


def _tanh_normal_actor(modules, actor_module, action_key, action_spec, interaction_type):
    """``actor_module``'s loc and scale, then a tanh-normal action."""
    return modules.SafeProbabilisticTensorDictSequential(
        modules.SafeModule(
            actor_module,
            in_keys=["state", "belief"],
            out_keys=["loc", "scale"],
            spec=Composite(
                loc=Unbounded(action_spec.shape, device=action_spec.device),
                scale=Unbounded(action_spec.shape, device=action_spec.device),
            ),
        ),
        modules.SafeProbabilisticModule(
            in_keys=["loc", "scale"],
            out_keys=[action_key],
            default_interaction_type=interaction_type,
            distribution_class=modules.TanhNormal,
            distribution_kwargs={"tanh_loc": True},
            spec=Composite(**{action_key: action_spec}),
        ),
    )


def _model_based_env(
    modules, envs, reward_module, rssm_prior, obs_decoder, proof_environment, state_dim, hidden_dim
):
    """The imagination env: the prior steps the state, the reward model scores it."""
    transition_model = modules.SafeSequential(
        modules.SafeModule(
            rssm_prior,
            in_keys=["state", "belief", "action"],
            out_keys=["_", "_", "state", "belief"],
        )
    )
    reward_model = modules.SafeModule(
        reward_module, in_keys=["state", "belief"], out_keys=["reward"]
    )
    decoder = None
    if obs_decoder is not None:
        decoder = modules.SafeModule(
            obs_decoder,
            in_keys=[("next", "state"), ("next", "belief")],
            out_keys=[("next", "reco_pixels")],
        )
    env = envs.DreamerEnv(
        world_model=modules.WorldModelWrapper(transition_model, reward_model),
        prior_shape=torch.Size([state_dim]),
        belief_shape=torch.Size([hidden_dim]),
        obs_decoder=decoder,
    )
    env.set_specs_from_env(proof_environment)
    env = envs.TransformedEnv(env)
    env.append_transform(
        envs.TensorDictPrimer(
            random=False,
            default_value=0,
            state=Unbounded(state_dim),
            belief=Unbounded(hidden_dim),
        )
    )
    return env


@dataclass
class DreamerConfig:
    """The model fields of a Dreamer script's config."""

    batch_length: int = 50
    """Length of the sequences the world model trains on."""
    state_dim: int = 30
    """Size of the stochastic state."""
    rssm_hidden_dim: int = 200
    """Size of the deterministic belief (and of the RSSM's hidden layers)."""
    mlp_num_units: int = 400
    """Units of the reward, actor and value MLPs."""
    grad_clip: int = 100
    """Gradient-norm clipping."""
    world_model_lr: float = 6e-4
    """Learning rate of the world model."""
    actor_value_lr: float = 8e-5
    """Learning rate of the actor and the value model."""
    imagination_horizon: int = 15
    """Steps imagined from each state."""
    model_device: str = ""
    """Device of the models ("" : the default one)."""
    exploration: str = "additive_gaussian"
    """Exploration noise: ``"additive_gaussian"``, ``"ou_exploration"`` or ""."""


@dataclass
class _PolicyExplorationFields:
    """The exploration and policy-distribution fields REDQ's and the continuous-control
    scripts' model configs share (first in both, in this order)."""

    annealing_frames: int = 1000000
    """Frames over which the exploration noise is annealed."""
    noisy: bool = False
    """Noisy linear layers in the value network."""
    ou_exploration: bool = False
    """Wrap the policy in Ornstein-Uhlenbeck exploration."""
    ou_sigma: float = 0.2
    """Ornstein-Uhlenbeck sigma."""
    ou_theta: float = 0.15
    """Ornstein-Uhlenbeck theta."""
    distributional: bool = False
    """Distributional value loss."""
    atoms: int = 51
    """Atoms of the distributional value."""
    gSDE: bool = False
    """Explore with generalized state-dependent exploration (gSDE)."""
    tanh_loc: bool = False
    """Squash the policy location with ``upscale * tanh(loc / upscale)``."""
    default_policy_scale: float = 1.0
    """Default scale of the policy."""
    distribution: str = "tanh_normal"
    """Policy distribution."""


@dataclass
class REDQModelConfig(_PolicyExplorationFields):
    """The model fields of a REDQ script's config."""

    actor_cells: int = 256
    """Units of the actor."""
    qvalue_cells: int = 256
    """Units of the Q-value network."""
    scale_lb: float = 0.1
    """Lower bound of the policy scale."""
    value_cells: int = 256
    """Units of the value network."""
    activation: str = "tanh"
    """Activation: ``"relu"``, ``"elu"`` or ``"tanh"``."""


@dataclass
class ContinuousModelConfig(_PolicyExplorationFields):
    """The model fields of a continuous-control script's config."""

    lstm: bool = False
    """An LSTM policy."""
    shared_mapping: bool = False
    """The actor and the critic share their first layers."""
    actor_cells: int = 256
    """Units of the actor."""
    qvalue_cells: int = 256
    """Units of the Q-value network."""
    scale_lb: float = 0.1
    """Lower bound of the policy scale."""
    value_cells: int = 256
    """Units of the value network."""
    activation: str = "tanh"
    """Activation: ``"relu"``, ``"elu"`` or ``"tanh"``."""


@dataclass
class DiscreteModelConfig:
    """The model fields of a discrete-action (DQN) script's config."""

    annealing_frames: int = 1000000
    """Frames over which the epsilon-greedy exploration is annealed."""
    noisy: bool = False
    """Noisy linear layers in the value network."""
    distributional: bool = False
    """Distributional value network and loss."""
    atoms: int = 51
    """Atoms of the distributional value."""
