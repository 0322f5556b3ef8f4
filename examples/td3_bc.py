"""TD3+BC on the Pendulum dataset that ``sac.py --save-buffer`` writes.

Fujimoto & Gu 2021, "A Minimalist Approach to Offline Reinforcement Learning",
https://arxiv.org/abs/2106.06860: TD3 (twin critics, target policy smoothing, delayed
actor updates) whose actor loss adds a behaviour-cloning term,
``-lmbd * Q(s, mu(s)) + (mu(s) - a)^2`` with ``lmbd = alpha / mean|Q|`` (``TD3BCLoss``),
on observations standardised by the dataset's mean and std. No environment step is taken
while learning: the replay buffer a SAC run kept on disk is the whole dataset.

The defaults are the paper's (lr 3e-4, 256x256 networks, batch 256, policy noise 0.2
clipped at 0.5, actor every 2 critic updates, target rate 0.005, gamma 0.99) with 10k
gradient steps instead of 1M (the Pendulum dataset is 20k transitions) and alpha 10: the
paper's 2.5 scaled to Pendulum's action range (the cloning term is a squared error in
action units, and Pendulum's actions span [-2, 2] where D4RL's span [-1, 1]).

    uv run examples/sac.py --save-buffer data/pendulum     # the dataset (once)
    uv run examples/td3_bc.py --dataset data/pendulum

The evaluation reports the return and the normalised score
``100 * (R - R_random) / (R_data - R_random)``, as ``offline.py`` does. Writes CSV logs (or
another logger), a learning-curve PNG of the periodic evaluations and, with ``--video``,
an evaluation video under ``runs/<exp_name>/``. The trained actor (``summary["actor"]``)
reads standardised observations: run it in an env with ``summary["obs_norm"]`` appended.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

from rl.core import seed_everything
from rl.objectives import SoftUpdate, TD3BCLoss

sys.path.insert(0, str(Path(__file__).parent))
from _common import UpdateStep  # noqa: E402
from _offline_data import observation_norms, report_score  # noqa: E402
from _offpolicy import (  # noqa: E402
    Run,
    RunConfig,
    cli,
    make_deterministic_actor,
    make_env,
    make_qvalue,
    open_dataset,
    resolve_device,
)


@dataclasses.dataclass
class Config(RunConfig):
    """TD3+BC hyperparameters (the paper's names in parentheses where they differ)."""

    dataset: str = "data/pendulum"
    """Folder of the memmap replay buffer written by ``sac.py --save-buffer``."""
    num_updates: int = 10_000
    """Critic gradient steps on the dataset (max_timesteps)."""
    batch_size: int = 256
    """Transitions per gradient step."""
    lr: float = 3e-4
    """Adam learning rate of the actor and of the critics."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak averaging rate of the target actor and critics."""
    alpha: float = 10.0
    """Weight of the Q term against behaviour cloning (lmbd = alpha / mean|Q|). The paper's
    2.5 is for actions in [-1, 1]; Pendulum's span [-2, 2], which makes the cloning term 4
    times larger, so 4 x 2.5 keeps the paper's balance (2.5 scored 78.6 on seed 0)."""
    policy_noise: float = 0.2
    """Std of the target policy smoothing noise (action units)."""
    noise_clip: float = 0.5
    """Clip of the target policy smoothing noise (action units)."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update (policy_freq)."""
    hidden: int = 256
    """Width of the two hidden layers of the actor and critics."""
    normalize_obs: bool = True
    """Standardise observations by the dataset's mean and std (as the paper does)."""
    log_interval: int = 500
    """Gradient steps between two log lines."""
    eval_interval: int = 2_000
    """Gradient steps between two evaluations (the learning curve)."""
    eval_interval_episodes: int = 3
    """Deterministic episodes of each periodic evaluation."""


PRESETS = {"td3_bc": ("TD3+BC on the saved dataset", Config())}


def make_learner(cfg: Config, env, actor, qvalue):
    """The TD3+BC loss (twin critics, target policy smoothing, the cloning term) and its
    two gradient steps, the critics' and the actor's (with the soft target update); one
    graph each with ``cfg.compile``. The loss's own tensors and the optimizers' live on
    ``cfg.device``, with the networks. Returns ``(loss_module, update_critic,
    update_actor)``: the critics' step returns its loss, the actor's its loss and the
    cloning term."""
    with torch.device(resolve_device(cfg.device)):
        loss_module = TD3BCLoss(
            actor,
            qvalue,
            action_spec=env.action_spec,
            num_qvalue_nets=2,
            policy_noise=cfg.policy_noise,
            noise_clip=cfg.noise_clip,
            alpha=cfg.alpha,
            loss_function="l2",
            gamma=cfg.gamma,
        )
        target_update = SoftUpdate(loss_module, tau=cfg.tau)
        actor_optim = torch.optim.Adam(loss_module.actor_network_params.parameters(), cfg.lr)
        critic_optim = torch.optim.Adam(loss_module.qvalue_network_params.parameters(), cfg.lr)

        def critic_loss(sample):
            loss_qvalue, _ = loss_module.qvalue_loss(sample)
            return loss_qvalue, loss_qvalue

        def actor_loss(sample):
            loss_actor, metadata = loss_module.actor_loss(sample)
            return loss_actor, {"loss_actor": loss_actor, "bc_loss": metadata["bc_loss"]}

        flags = {"compile": cfg.compile, "cudagraphs": cfg.cudagraphs}
        update_critic = UpdateStep(critic_loss, critic_optim, **flags)
        update_actor = UpdateStep(actor_loss, actor_optim, target_update=target_update, **flags)
    return loss_module, update_critic, update_actor


def main(cfg: Config) -> dict:
    cfg = dataclasses.replace(cfg)
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    buffer, info = open_dataset(cfg.dataset, cfg.batch_size)
    cfg.env_id = info["env_id"]
    env = make_env(cfg.env_id)  # for the specs and the evaluation only
    obs_norm = None
    if cfg.normalize_obs:
        batch_norm, obs_norm = observation_norms(buffer)
        buffer.append_transform(batch_norm)

    # the pieces: deterministic actor, twin critics, loss, two optimisers, targets; the
    # two gradient steps (the actor's with the target update), one graph each with
    # --compile
    device = resolve_device(cfg.device)
    actor = make_deterministic_actor(env, cfg.hidden, device=device)
    qvalue = make_qvalue(env, cfg.hidden, device=device)
    loss_module, update_critic, update_actor = make_learner(cfg, env, actor, qvalue)
    run = Run("td3_bc", cfg, cfg.num_updates, eval_transform=obs_norm)

    # the loop: sample the dataset, update the critics; every policy_delay steps the
    # actor (Q term + behaviour cloning) and the targets
    for step in range(1, cfg.num_updates + 1):
        # sampled (and standardised) on the CPU, where the dataset is, then moved
        sample = buffer.sample().to(device)
        loss_qvalue = update_critic(sample)
        if step % cfg.policy_delay == 0:
            actor_logs = update_actor(sample)
        run.frames = step  # the x axis of the logs: gradient steps
        if step % cfg.log_interval == 0:
            run.log(loss_qvalue=loss_qvalue.item(), **{k: v.item() for k, v in actor_logs.items()})
        if step % cfg.eval_interval == 0 and step < cfg.num_updates:
            returns = run.evaluate(cfg.env_id, actor, cfg.eval_interval_episodes, seed_offset=2000)
            run.logger.log_scalar("eval/return", sum(returns) / len(returns), step)
        run.step_bar(1)

    summary = run.finish(
        cfg.env_id,
        actor,
        curve_key="eval/return",
        actor=actor,
        qvalue=qvalue,
        loss_module=loss_module,
        obs_norm=obs_norm,
    )
    return report_score(summary, info)


def cli_config() -> Config:
    return cli(Config, PRESETS, "td3_bc", __doc__)


if __name__ == "__main__":
    main(cli_config())
