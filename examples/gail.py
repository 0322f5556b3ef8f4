"""Generative adversarial imitation learning (GAIL) on Pendulum-v1, from the expert
transitions that ``sac.py --save-buffer`` writes.

Ho & Ermon 2016, "Generative Adversarial Imitation Learning",
https://arxiv.org/abs/1606.03476: a discriminator ``D(s, a)`` learns to tell the expert's
transitions from the learner's (``GAILLoss``; ``--use-grad-penalty`` adds the gradient
penalty of Gulrajani et al. 2017), and the learner is trained on the reward
``-log(1 - D(s, a))`` alone: the environment's reward is never used for learning (it is
logged, as ``train/episode_return``). The expert data is the ``--expert-episodes``
episodes of highest return of the dataset (a SAC replay buffer also holds its random
start).

TorchRL's GAIL trains PPO on MuJoCo for millions of frames. Here the learner is SAC
(``sac.py``'s settings), off-policy as in Kostrikov et al. 2019, "Discriminator-Actor-
Critic", https://arxiv.org/abs/1809.02925: the discriminator tells expert transitions from
those of the replay buffer, and each sampled batch's reward is computed by the current
discriminator when it is sampled: 10k frames suffice on Pendulum (the 100k-frame budget
of the target is not needed).

    uv run examples/sac.py --save-buffer data/pendulum     # the expert data (once)
    uv run examples/gail.py --dataset data/pendulum

The evaluation reports the return and the normalised score
``100 * (R - R_random) / (R_expert - R_random)``, ``R_expert`` the evaluation return of the
policy that wrote the dataset (saved with it). Writes CSV logs (or another logger), a
learning-curve PNG and, with ``--video``, an evaluation video under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch
from tensordict import TensorDict
from torch import nn

from rl.collectors import Collector
from rl.core import seed_everything
from rl.modules import MLP, TensorDictModule
from rl.objectives import GAILLoss, SACLoss, SoftUpdate

sys.path.insert(0, str(Path(__file__).parent))
from _common import UpdateStep  # noqa: E402
from _offline_data import best_episodes, report_score  # noqa: E402
from _offpolicy import (  # noqa: E402
    Run,
    RunConfig,
    cli,
    collector_devices,
    compile_policy,
    make_env,
    make_qvalue,
    make_replay_buffer,
    make_tanh_normal_actor,
    open_dataset,
    resolve_device,
    transitions,
)


@dataclasses.dataclass
class Config(RunConfig):
    """GAIL hyperparameters (the learner's are ``sac.py``'s)."""

    dataset: str = "data/pendulum"
    """Folder of the memmap replay buffer written by ``sac.py --save-buffer`` (the env
    is the one it was collected in)."""
    expert_episodes: int = 25
    """Episodes of highest return taken from the dataset as the expert's."""
    total_frames: int = 10_000
    """Environment steps to train for."""
    init_random_frames: int = 1_000
    """Frames of uniformly random actions before learning starts."""
    frames_per_batch: int = 10
    """Frames collected between two rounds of updates."""
    utd_ratio: float = 1.0
    """Learner gradient steps per collected frame."""
    buffer_size: int = 100_000
    """Replay buffer capacity."""
    batch_size: int = 256
    """Transitions per learner gradient step (and per half of a discriminator step)."""
    lr: float = 1e-3
    """Adam learning rate of the actor, critics and temperature."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak averaging rate of the target critics."""
    alpha_init: float = 1.0
    """Initial entropy temperature (learned; target entropy -dim(action))."""
    hidden: int = 64
    """Width of the two hidden layers of the actor and critics."""
    disc_hidden: int = 64
    """Width of the two hidden layers of the discriminator."""
    disc_lr: float = 3e-4
    """Adam learning rate of the discriminator."""
    disc_updates: int = 1
    """Discriminator gradient steps per collected batch."""
    use_grad_penalty: bool = False
    """Add the gradient penalty to the discriminator's loss. Off by default, unlike TorchRL's
    GAIL config: it pulls the gradient of a probability towards norm 1, and on the probe env
    the discriminator then rated the expert's action below its opposite (the learner
    scored -110 with it, 99 without)."""
    gp_lambda: float = 10.0
    """Weight of the gradient penalty."""


PRESETS = {"pendulum": ("GAIL with a SAC learner on the saved Pendulum data", Config())}


class Discriminator(nn.Module):
    """``D(s, a)``: the probability that ``(s, a)`` is the expert's (an MLP and a sigmoid)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.mlp = MLP(out_features=1, num_cells=[hidden] * 2, activation_class=nn.Tanh)

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.mlp(torch.cat([observation, action], -1)))


def discriminator_batch(expert, buffer) -> TensorDict:
    """A batch of the discriminator: a sample of the ``expert`` buffer (``"observation"``,
    ``"action"``) and one of the replay ``buffer`` (``"collector_observation"``,
    ``"collector_action"``), on the buffers' device."""
    demo, own = expert.sample(), buffer.sample()
    return TensorDict(
        observation=demo["observation"],
        action=demo["action"],
        collector_observation=own["observation"],
        collector_action=own["action"],
        batch_size=demo.batch_size,
    )


def make_discriminator(cfg: Config, expert_data) -> TensorDictModule:
    """``D(s, a)`` reading ``"observation"`` and ``"action"``, writing ``"d_logits"``; its
    lazy first layer materialised on the CPU on ``expert_data``, then moved to
    ``cfg.device``."""
    discriminator = TensorDictModule(
        Discriminator(cfg.disc_hidden), in_keys=["observation", "action"], out_keys=["d_logits"]
    )
    with torch.no_grad():
        discriminator(expert_data[:2])  # materialise the lazy first layer
    return discriminator.to(resolve_device(cfg.device))


def make_learner(cfg: Config, env, discriminator, actor, qvalue):
    """The discriminator's loss (``GAILLoss``) and the learner's (SAC's), and their
    gradient steps: the discriminator's on a batch of expert (``"observation"``,
    ``"action"``) and collected (``"collector_observation"``, ``"collector_action"``)
    transitions; the learner's (with the soft target update) on a replay sample whose
    reward it replaces by the current discriminator's ``-log(1 - D(s, a))``. One graph
    each with ``cfg.compile``. The losses' own tensors and the optimizers' live on
    ``cfg.device``, with the networks. Returns ``(gail_loss, sac_loss,
    update_discriminator, update_learner)``."""
    with torch.device(resolve_device(cfg.device)):
        gail_loss = GAILLoss(
            discriminator, use_grad_penalty=cfg.use_grad_penalty, gp_lambda=cfg.gp_lambda
        )
        disc_optim = torch.optim.Adam(discriminator.parameters(), lr=cfg.disc_lr)
        sac_loss = SACLoss(
            actor,
            qvalue,
            num_qvalue_nets=2,
            loss_function="l2",
            alpha_init=cfg.alpha_init,
            action_spec=env.action_spec,
            gamma=cfg.gamma,
        )
        target_update = SoftUpdate(sac_loss, tau=cfg.tau)
        optimizer = torch.optim.Adam(sac_loss.parameters(), lr=cfg.lr)

        def discriminator_loss(batch):
            losses = gail_loss(batch)
            return losses["loss"], losses

        def learner_loss(sample):
            with torch.no_grad():  # the imitation reward, from the current discriminator
                d = discriminator(sample.select("observation", "action"))["d_logits"]
                sample["next", "reward"] = -torch.log1p(-d.clamp(max=1 - 1e-6))
            losses = sac_loss(sample)
            loss = losses["loss_actor"] + losses["loss_qvalue"] + losses["loss_alpha"]
            losses["gail_reward"] = sample["next", "reward"].mean()
            return loss, losses.select("loss_actor", "loss_qvalue", "alpha", "gail_reward")

        flags = {"compile": cfg.compile, "cudagraphs": cfg.cudagraphs}
        update_discriminator = UpdateStep(discriminator_loss, disc_optim, **flags)
        update_learner = UpdateStep(learner_loss, optimizer, target_update=target_update, **flags)
    return gail_loss, sac_loss, update_discriminator, update_learner


def main(cfg: Config) -> dict:
    cfg = dataclasses.replace(cfg)
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    dataset, info = open_dataset(cfg.dataset, cfg.batch_size)
    cfg.env_id = info["env_id"]
    env = make_env(cfg.env_id)
    env.set_seed(cfg.seed)
    device = resolve_device(cfg.device)
    expert_data, returns = best_episodes(dataset, cfg.expert_episodes)
    expert = make_replay_buffer(len(expert_data), cfg.batch_size, device=device)
    expert.extend(expert_data.select("observation", "action"))
    print(
        f"expert: the {len(returns)} best episodes of the dataset ({len(expert_data)} "
        f"transitions, returns {returns[-1]:.1f} to {returns[0]:.1f})"
    )

    # the pieces: discriminator; actor, critics, collector, buffer; the discriminator's
    # loss and the learner's (SAC's), their gradient steps (one graph each with --compile)
    discriminator = make_discriminator(cfg, expert_data)
    actor = make_tanh_normal_actor(env, cfg.hidden, device=device)
    qvalue = make_qvalue(env, cfg.hidden, device=device)
    collector = Collector(
        env,
        compile_policy(actor, compile=cfg.compile, cudagraphs=cfg.cudagraphs),
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.total_frames,
        init_random_frames=cfg.init_random_frames,
        **collector_devices(device),
    )
    buffer = make_replay_buffer(cfg.buffer_size, cfg.batch_size, device=device)
    gail_loss, sac_loss, update_discriminator, update_learner = make_learner(
        cfg, env, discriminator, actor, qvalue
    )
    run = Run("gail", cfg, cfg.total_frames)

    # the loop: collect, store; update the discriminator, then the learner on its reward
    updates_per_batch = max(int(cfg.utd_ratio * cfg.frames_per_batch), 1)
    for batch in collector:
        run.observe(batch)
        buffer.extend(transitions(batch))
        if run.frames >= cfg.init_random_frames:
            for _ in range(cfg.disc_updates):
                disc_losses = update_discriminator(discriminator_batch(expert, buffer))
            for _ in range(updates_per_batch):
                losses = update_learner(buffer.sample())
            run.log(
                loss_discriminator=disc_losses["loss"].item(),
                **{key: value.item() for key, value in losses.items()},
            )
        run.step_bar(batch.numel())
    collector.shutdown()
    summary = run.finish(
        cfg.env_id,
        actor,
        actor=actor,
        qvalue=qvalue,
        discriminator=discriminator,
        loss_module=gail_loss,
    )
    summary["expert_returns"] = returns
    return report_score(summary, info)


def cli_config() -> Config:
    return cli(Config, PRESETS, "pendulum", __doc__)


if __name__ == "__main__":
    main(cli_config())
