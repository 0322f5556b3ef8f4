"""Model-predictive control on Pendulum-v1: CEM or MPPI planning in a world model.

No policy network: at every step the planner (``rl.modules.CEMPlanner`` or
``MPPIPlanner``) draws candidate action sequences, rolls them out in a model of the
pendulum wrapped as an env (``rl.envs.WorldModelEnv`` around a ``rl.modules.WorldModel``),
and plays the first action of the best ones (receding horizon).

- ``--model true``: the model is the true dynamics, rl's native torch ``PendulumEnv``
  stepped from the planner's imagined states (Botev et al. 2013 for CEM; Williams et al.
  2015, https://arxiv.org/abs/1509.01149, for MPPI).
- ``--model learned``: PETS-style (Chua et al. 2018, https://arxiv.org/abs/1805.12114): an
  ensemble of MLPs learns the change of the observation from the planner's own
  transitions, refit after every episode; the planner plans in the ensemble's mean
  prediction. As in PETS, the reward is the task's known function of the state and action.

    uv run examples/mpc.py                                  # CEM, true dynamics
    uv run examples/mpc.py --planner mppi
    uv run examples/mpc.py --model learned --total-frames 10000

With ``--compile``, what the planner calls at each imagined step, the model of the
dynamics (the true pendulum or the learned ensemble) and the known reward, is compiled
once for the acting planner and once for the evaluation's (its batch of envs), and the
ensemble's gradient step (its loss, backward and Adam step) is one compiled graph
(``_common.UpdateStep``). ``--cudagraphs`` captures the gradient step in a CUDA graph
(with ``--device cuda``).

``--device cuda`` puts the model (the learned ensemble, or the true pendulum's simulator),
the planner's search, the ensemble's gradient step and the replay buffer on the GPU; the
gymnasium environments stay on the CPU, a ``DeviceCastTransform`` moving what they return
to the GPU and the planned actions back.

    uv run examples/mpc.py --model learned --device cuda --compile --cudagraphs   # on a GPU

Writes CSV logs (or another logger) and a learning-curve PNG under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Literal

import torch
import tyro
from tensordict.nn import TensorDictModule
from torch import nn

from rl.core import seed_everything
from rl.core.loggers import generate_exp_name, get_logger
from rl.data import LazyTensorStorage, TensorDictReplayBuffer
from rl.envs import (
    ActionScaling,
    DeviceCastTransform,
    GymEnv,
    TransformedEnv,
    WorldModelEnv,
)
from rl.modules import CEMPlanner, MPPIPlanner, ValueOperator, WorldModel
from rl.objectives.value import TDLambdaEstimator

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    ProgressBar,
    UpdateStep,
    check_cudagraphs,
    finish_run,
    own_compiled,
    resolve_device,
)
from _pendulum import TruePendulum, pendulum_reward  # noqa: E402


@dataclasses.dataclass
class Config:
    """Planner, model and budget."""

    planner: Literal["cem", "mppi"] = "cem"
    """Cross-entropy method or model-predictive path integral."""
    model: Literal["true", "learned"] = "true"
    """Plan in the true dynamics, or in an ensemble learned from the planner's data."""
    env_id: str = "Pendulum-v1"
    """The gymnasium task."""
    max_steps: int = 200
    """Steps per episode (Pendulum-v1's time limit)."""
    total_frames: int = 10_000
    """Environment steps with a learned model (data for the ensemble)."""
    eval_episodes: int = 5
    """Evaluation episodes (played side by side): with the true model the whole run,
    with a learned one played after the budget (no more training)."""
    planning_horizon: int = 30
    """Length of the imagined action sequences."""
    optim_steps: int = 4
    """Refits of the sampling distribution per action."""
    num_candidates: int = 300
    """Action sequences drawn per refit."""
    top_k: int = 30
    """Best sequences the distribution is refit to."""
    temperature: float = 0.5
    """MPPI's inverse temperature on the (discounted) returns of the top-k sequences."""
    gamma: float = 0.99
    """MPPI's discount of the imagined rewards."""
    ensemble_size: int = 5
    """Members of the learned dynamics ensemble."""
    hidden: int = 64
    """Width of each member's two hidden layers."""
    lr: float = 1e-3
    """Adam learning rate of the ensemble."""
    batch_size: int = 256
    """Transitions per member per gradient step."""
    updates_per_episode: int = 300
    """Gradient steps after each collected episode."""
    init_random_frames: int = 200
    """Uniformly random steps before planning with a learned model."""
    seed: int = 0
    """Seed of torch, numpy and python random."""
    logger: Literal["csv", "tensorboard", "wandb", "mlflow"] = "csv"
    """Logging back-end (CSV needs nothing extra)."""
    log_dir: str = "runs"
    """Where the logs go."""
    exp_name: str | None = None
    """Run name (default: generated from the planner, the model and the seed)."""
    progress: bool = True
    """Show a progress bar (only when attached to a terminal)."""
    compile: bool = False
    """torch.compile the model and the reward the planner calls, and the ensemble's
    gradient step, once."""
    cudagraphs: bool = False
    """Capture the ensemble's gradient step in a CUDA graph (needs ``--device cuda``)."""
    device: str = "cpu"
    """Where the model (the ensemble or the true pendulum's simulator), the planner's
    search, the ensemble's gradient step and the replay buffer live: ``cpu``, ``cuda``,
    ``cuda:N``, or ``auto`` (CUDA where visible). The environments stay on the CPU: a
    ``DeviceCastTransform`` moves what they return to the device and the actions back."""


class Ensemble(nn.Module):
    """``E`` MLPs ``(obs, action) -> delta obs`` evaluated as batched matmuls, on inputs
    and targets standardised with the data's statistics; predicts the members' mean."""

    def __init__(self, size: int, obs_dim: int, act_dim: int, hidden: int) -> None:
        super().__init__()
        dims = [obs_dim + act_dim, hidden, hidden, obs_dim]
        self.weights = nn.ParameterList(
            nn.Parameter(torch.randn(size, i, o) / i**0.5) for i, o in zip(dims, dims[1:])
        )
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(size, 1, o)) for o in dims[1:])
        self.register_buffer("in_loc", torch.zeros(dims[0]))
        self.register_buffer("in_scale", torch.ones(dims[0]))
        self.register_buffer("out_loc", torch.zeros(obs_dim))
        self.register_buffer("out_scale", torch.ones(obs_dim))

    def members(self, x: torch.Tensor) -> torch.Tensor:
        """Standardised predictions of every member: ``[E, M, in] -> [E, M, out]``."""
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(b, x, w)
            if i < len(self.weights) - 1:
                x = nn.functional.silu(x)
        return x

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        batch = observation.shape[:-1]
        x = torch.cat([observation, action], -1).reshape(1, -1, self.in_loc.numel())
        x = ((x - self.in_loc) / self.in_scale).expand(len(self.weights[0]), -1, -1)
        delta = self.members(x).mean(0) * self.out_scale + self.out_loc
        return observation + delta.reshape(*batch, -1)


def make_fit_step(model: Ensemble, optim, cfg: Config) -> UpdateStep:
    """One gradient step of the ensemble on standardised minibatches ``[E, M, in]`` and
    their targets ``[E, M, out]`` (the squared error, backward, Adam); one graph with
    ``cfg.compile``."""

    def ensemble_loss(x, y):
        loss = (model.members(x) - y).square().mean()
        return loss, loss

    with torch.device(resolve_device(cfg.device)):
        return UpdateStep(ensemble_loss, optim, compile=cfg.compile, cudagraphs=cfg.cudagraphs)


def make_learner(cfg: Config, obs_dim: int, act_dim: int):
    """The ensemble, initialised on the CPU (the same weights on every device) and moved
    to ``cfg.device``, its Adam optimiser and its gradient step (:func:`make_fit_step`),
    whose tensors live there too. Returns ``(ensemble, optim, fit_step)``."""
    device = resolve_device(cfg.device)
    ensemble = Ensemble(cfg.ensemble_size, obs_dim, act_dim, cfg.hidden).to(device)
    with torch.device(device):
        optim = torch.optim.Adam(ensemble.parameters(), lr=cfg.lr)
    return ensemble, optim, make_fit_step(ensemble, optim, cfg)


def fit(
    model: Ensemble,
    optim,
    buffer: TensorDictReplayBuffer,
    cfg: Config,
    step: UpdateStep | None = None,
) -> float:
    """Refits the standardisation and runs ``updates_per_episode`` gradient steps
    (``step``, by default :func:`make_fit_step`'s); every member draws its own
    minibatches (a bootstrap of the data), drawn on the data's device."""
    step = step or make_fit_step(model, optim, cfg)
    data = buffer[:]
    x = torch.cat([data["observation"], data["action"]], -1)
    y = data["next", "observation"] - data["observation"]
    model.in_loc.copy_(x.mean(0))
    model.in_scale.copy_(x.std(0).clamp_min(1e-6))
    model.out_loc.copy_(y.mean(0))
    model.out_scale.copy_(y.std(0).clamp_min(1e-6))
    x = (x - model.in_loc) / model.in_scale
    y = (y - model.out_loc) / model.out_scale
    e = cfg.ensemble_size
    for _ in range(cfg.updates_per_episode):
        idx = torch.randint(len(x), (e, cfg.batch_size), device=x.device)
        loss = step(x[idx], y[idx])  # fixed shapes, whatever the data's size
    return loss.item()


def make_env(cfg: Config, **kwargs):
    """The task (``GymEnv(cfg.env_id, **kwargs)``), the planner acting in ``[-1, 1]``
    (``ActionScaling`` gives the env ``_pendulum.MAX_TORQUE * action``); on another device than the
    CPU, what it returns is moved to ``cfg.device`` (the actions back to the CPU), where
    the planner plans."""
    env = TransformedEnv(GymEnv(cfg.env_id, **kwargs), ActionScaling())
    device = resolve_device(cfg.device)
    if device.type != "cpu":
        env.append_transform(DeviceCastTransform(device))
    return env


def make_planner(cfg: Config, base_env, dynamics: nn.Module):
    """The planner, planning in ``WorldModelEnv(WorldModel(dynamics, known reward))`` on
    ``base_env``'s device; with ``cfg.compile``, the dynamics and the reward are compiled
    for this planner alone (each planner sees one batch shape)."""
    reward = pendulum_reward
    if cfg.compile:
        # the first call eager: the true model builds its simulator for the batch there
        dynamics = own_compiled(dynamics.forward, cfg.compile, warmup=1)
        reward = own_compiled(reward, cfg.compile)
    world_model = WorldModel(
        TensorDictModule(nn.Identity(), ["observation"], ["observation"]),
        TensorDictModule(dynamics, ["observation", "action"], [("next", "observation")]),
        TensorDictModule(reward, ["observation", "action"], [("next", "reward")]),
    )
    model_env = WorldModelEnv(world_model, base_env, batch_size=[], latent_key="observation")
    search = dict(
        planning_horizon=cfg.planning_horizon,
        optim_steps=cfg.optim_steps,
        num_candidates=cfg.num_candidates,
        top_k=cfg.top_k,
    )
    if cfg.planner == "cem":
        return CEMPlanner(model_env, **search)
    # MPPI scores a candidate by its discounted imagined return: TD(1) with a zero value
    zero_value = ValueOperator(lambda obs: torch.zeros_like(obs[..., :1]), in_keys=["observation"])
    returns = TDLambdaEstimator(gamma=cfg.gamma, lmbda=1.0, value_network=zero_value)
    return MPPIPlanner(model_env, returns, temperature=cfg.temperature, **search)


def play(env, planner, max_steps: int) -> list[float]:
    """One episode in each of ``env``'s sub-envs; their returns."""
    episode = env.rollout(max_steps, planner, break_when_any_done=True)
    return episode["next", "reward"].sum(-2).reshape(-1).tolist()


def main(cfg: Config) -> dict:
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    seed_everything(cfg.seed)
    torch.set_num_threads(1)
    check_cudagraphs(cfg.cudagraphs)
    exp_name = cfg.exp_name or generate_exp_name(
        f"mpc-{cfg.planner}-{cfg.model}", f"{cfg.env_id}-s{cfg.seed}"
    )
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))
    env = make_env(cfg)
    env.set_seed(cfg.seed)
    # evaluation episodes run side by side, planned as one batch
    eval_env = make_env(cfg, num_envs=cfg.eval_episodes)
    eval_env.set_seed(cfg.seed + 1000)

    obs_dim = env.observation_spec["observation"].shape[-1]
    act_dim = env.action_spec.shape[-1]
    start = time.perf_counter()
    frames, returns = 0, []
    if cfg.model == "true":
        planner = make_planner(cfg, env, TruePendulum())
        with torch.no_grad():
            evals = play(eval_env, planner, cfg.max_steps)
        for i, ret in enumerate(evals):
            logger.log_scalar("train/episode_return", ret, cfg.max_steps * (i + 1))
        frames = cfg.max_steps * len(evals)
        return finish_run(logger, evals, frames, time.perf_counter() - start)

    ensemble, optim, fit_step = make_learner(cfg, obs_dim, act_dim)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(cfg.total_frames, device=device))
    planner = make_planner(cfg, env, ensemble)
    progress = ProgressBar(cfg.progress, total=cfg.total_frames)
    while frames < cfg.total_frames:
        random = frames < cfg.init_random_frames
        with torch.no_grad():
            policy = None if random else planner
            episode = env.rollout(cfg.max_steps, policy, break_when_any_done=True)
        frames += episode.numel()
        returns.append(episode["next", "reward"].sum().item())
        buffer.extend(episode)
        loss = fit(ensemble, optim, buffer, cfg, fit_step)
        logger.log_scalar("train/episode_return", returns[-1], frames)
        logger.log_scalar("train/model_loss", loss, frames)
        progress.values.update(model_loss=loss, episode_return=returns[-1])
        progress.update(episode.numel())
    progress.close()
    with torch.no_grad():  # the planner on the final model, no more training
        evals = play(eval_env, make_planner(cfg, env, ensemble), cfg.max_steps)
    summary = finish_run(logger, evals, frames, time.perf_counter() - start)
    summary["ensemble"] = ensemble
    return summary


if __name__ == "__main__":
    main(tyro.cli(Config, description=__doc__))
