"""Diffusion-policy behaviour cloning on the Pendulum dataset that ``sac.py --save-buffer``
writes.

Chi et al. 2023, "Diffusion Policy: Visuomotor Policy Learning via Action Diffusion",
https://arxiv.org/abs/2303.04137: the policy (``DiffusionActor``) denoises an action from
Gaussian noise through a DDPM reverse chain conditioned on the observation; it is trained
(``DiffusionBCLoss``) to predict the noise added to the dataset's actions at a random step
of the forward chain. Actions are learnt in the unit box (the dataset's actions divided by
the action bounds) and the chain's output is clipped to it and scaled back; observations are
standardised by the data's mean and std.

Cloning copies whatever the data holds, and a whole SAC replay buffer also holds its
random start and its learning: ``--top-episodes N`` clones the ``N`` episodes of highest
return only (the "%BC" of Chen et al. 2021, https://arxiv.org/abs/2106.01345); the default,
25 of the 100 episodes of the 20k-frame dataset, keeps those of the trained policy.

    uv run examples/sac.py --save-buffer data/pendulum     # the dataset (once)
    uv run examples/diffusion_bc.py --dataset data/pendulum

The evaluation runs the chain from zeros without injected noise
(``ExplorationType.DETERMINISTIC``) and reports the return and the normalised score
``100 * (R - R_random) / (R_data - R_random)``, as ``offline.py`` does. Writes CSV logs (or
another logger), a learning-curve PNG of the periodic evaluations and, with ``--video``, an
evaluation video under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch
from tensordict import TensorDict
from torch import nn

from rl.core import seed_everything
from rl.modules import MLP, DiffusionActor, TensorDictModule, TensorDictSequential
from rl.objectives import DiffusionBCLoss

sys.path.insert(0, str(Path(__file__).parent))
from _common import UpdateStep  # noqa: E402
from _offline_data import best_episodes, observation_norms, report_score  # noqa: E402
from _offpolicy import (  # noqa: E402
    Run,
    RunConfig,
    cli,
    make_env,
    make_replay_buffer,
    open_dataset,
    resolve_device,
)


@dataclasses.dataclass
class Config(RunConfig):
    """Diffusion behaviour-cloning hyperparameters."""

    dataset: str = "data/pendulum"
    """Folder of the memmap replay buffer written by ``sac.py --save-buffer``."""
    top_episodes: int | None = 25
    """Clone the episodes of highest return only, this many (``None``: every transition)."""
    num_updates: int = 5_000
    """Gradient steps on the (selected) data."""
    batch_size: int = 256
    """Transitions per gradient step."""
    lr: float = 1e-3
    """AdamW learning rate."""
    weight_decay: float = 1e-6
    """AdamW weight decay."""
    num_steps: int = 50
    """Diffusion steps of the DDPM chain (each action costs this many network calls)."""
    hidden: int = 256
    """Width of the score network's hidden layers."""
    depth: int = 3
    """Hidden layers of the score network."""
    normalize_obs: bool = True
    """Standardise observations by the cloned data's mean and std."""
    log_interval: int = 500
    """Gradient steps between two log lines."""
    eval_interval: int = 1_000
    """Gradient steps between two evaluations (the learning curve)."""
    eval_interval_episodes: int = 3
    """Deterministic episodes of each periodic evaluation."""


PRESETS = {"diffusion_bc": ("diffusion-policy behaviour cloning on the saved dataset", Config())}


def to_unit_box(action: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """Maps actions in ``[low, high]`` to ``[-1, 1]``."""
    return 2 * (action - low) / (high - low) - 1


def from_unit_box(unit: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """Clips ``unit`` to ``[-1, 1]`` and maps it to ``[low, high]``."""
    return low + (unit.clamp(-1, 1) + 1) * (high - low) / 2


class FromUnitBox(nn.Module):
    """:func:`from_unit_box` with the action bounds as buffers: they move with the policy
    (to the training device, and back to the CPU for the evaluations)."""

    def __init__(self, low: torch.Tensor, high: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("low", low.clone())
        self.register_buffer("high", high.clone())

    def forward(self, unit: torch.Tensor) -> torch.Tensor:
        return from_unit_box(unit, self.low, self.high)


def make_learner(cfg: Config, env):
    """The diffusion actor (in the unit box), the acting policy (the actor, then its
    action scaled to the action spec's bounds), the loss and its update step (backward,
    AdamW); one graph with ``cfg.compile``. The networks, the loss's own tensors and the
    optimizer's live on ``cfg.device``. Returns ``(actor, policy, loss_module, update)``,
    ``update(batch)`` returning the loss of a batch of ``"observation"`` and
    ``"action_unit"``."""
    device = resolve_device(cfg.device)
    spec = env.action_spec
    action_dim, obs_dim = spec.shape[-1], env.observation_spec["observation"].shape[-1]
    score_network = MLP(
        in_features=action_dim + obs_dim + 1,
        out_features=action_dim,
        num_cells=[cfg.hidden] * cfg.depth,
        activation_class=nn.SiLU,
    )
    actor = DiffusionActor(
        action_dim,
        obs_dim,
        score_network=score_network,
        num_steps=cfg.num_steps,
        out_keys=["action_unit"],
    ).to(device)
    rescale = TensorDictModule(
        FromUnitBox(spec.space.low, spec.space.high), ["action_unit"], ["action"]
    ).to(device)
    policy = TensorDictSequential(actor, rescale)
    with torch.device(device):  # the loss's own tensors and the optimizer's
        loss_module = DiffusionBCLoss(actor)
        loss_module.set_keys(action="action_unit")
        optimizer = torch.optim.AdamW(actor.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

        def diffusion_loss(batch: TensorDict):
            loss = loss_module(batch)["loss_diffusion_bc"]
            return loss, loss

        update = UpdateStep(
            diffusion_loss, optimizer, compile=cfg.compile, cudagraphs=cfg.cudagraphs
        )
    return actor, policy, loss_module, update


def main(cfg: Config) -> dict:
    cfg = dataclasses.replace(cfg)
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    dataset, info = open_dataset(cfg.dataset, cfg.batch_size)
    cfg.env_id = info["env_id"]
    env = make_env(cfg.env_id)  # for the specs and the evaluation only
    buffer = dataset
    if cfg.top_episodes is not None:  # an in-memory buffer of the best episodes
        data, returns = best_episodes(dataset, cfg.top_episodes)
        buffer = make_replay_buffer(len(data), cfg.batch_size)
        buffer.extend(data)
        print(
            f"cloning the {len(returns)} best episodes ({len(data)} transitions, returns "
            f"{returns[-1]:.1f} to {returns[0]:.1f})"
        )
    obs_norm = None
    if cfg.normalize_obs:
        batch_norm, obs_norm = observation_norms(buffer)
        buffer.append_transform(batch_norm)

    # the pieces: the diffusion actor, the acting policy, loss, optimiser; one gradient
    # step (backward, AdamW), one graph with --compile
    device = resolve_device(cfg.device)
    actor, policy, loss_module, update = make_learner(cfg, env)
    low, high = env.action_spec.space.low, env.action_spec.space.high
    run = Run("diffusion_bc", cfg, cfg.num_updates, eval_transform=obs_norm)

    # the loop: sample the data, noise its actions, learn to predict the noise
    for step in range(1, cfg.num_updates + 1):
        sample = buffer.sample()
        batch = TensorDict(
            observation=sample["observation"],
            action_unit=to_unit_box(sample["action"], low, high),
            batch_size=sample.batch_size,
        )
        # made (and standardised) on the CPU, where the data is, then moved
        loss = update(batch.to(device))
        run.frames = step  # the x axis of the logs: gradient steps
        if step % cfg.log_interval == 0:
            run.log(loss_diffusion_bc=loss.item())
        if step % cfg.eval_interval == 0 and step < cfg.num_updates:
            returns = run.evaluate(cfg.env_id, policy, cfg.eval_interval_episodes, seed_offset=2000)
            run.logger.log_scalar("eval/return", sum(returns) / len(returns), step)
        run.step_bar(1)

    summary = run.finish(
        cfg.env_id,
        policy,
        curve_key="eval/return",
        actor=actor,
        acting_policy=policy,
        loss_module=loss_module,
        obs_norm=obs_norm,
    )
    return report_score(summary, info)


def cli_config() -> Config:
    return cli(Config, PRESETS, "diffusion_bc", __doc__)


if __name__ == "__main__":
    main(cli_config())
