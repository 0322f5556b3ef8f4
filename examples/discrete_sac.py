"""Discrete Soft Actor-Critic on CartPole-v1, from rl's pieces.

Christodoulou 2019, "Soft Actor-Critic for Discrete Action Settings",
https://arxiv.org/abs/1910.07207: SAC whose policy is a categorical distribution, so the
expectations over actions in the critics' target and the actor's loss are exact sums.
The loss settings are TorchRL's ``sota-implementations/discrete_sac`` config (twin
critics, l2 loss, batch 256, tau 0.005, target entropy 0.2 of the maximal entropy:
0.98 keeps a two-action policy near uniform); the collection and update rhythm are cut
to suit a 2-core CPU (one update per 4 frames, as CleanRL's discrete SAC), with 64x64
networks and lr 1e-3. Every 10k frames the deterministic (greedy) policy is evaluated
on 5 episodes and the script ends with the best weights found, as ``dqn.py`` does.

    uv run examples/discrete_sac.py                       # CartPole-v1
    uv run examples/discrete_sac.py --seed 1 --utd-ratio 1 --total-frames 50000

Writes CSV logs (or another logger), a learning-curve PNG and, with ``--video``, an
evaluation video under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch
from torch import nn

from rl.collectors import Collector
from rl.core import seed_everything
from rl.modules import MLP, OneHotCategorical, ProbabilisticActor, TensorDictModule
from rl.objectives import DiscreteSACLoss

sys.path.insert(0, str(Path(__file__).parent))
from _offpolicy import (  # noqa: E402
    BestWeights,
    Run,
    RunConfig,
    cli,
    collector_devices,
    compile_policy,
    make_env,
    make_replay_buffer,
    resolve_device,
    summed_update,
    transitions,
)


@dataclasses.dataclass
class Config(RunConfig):
    """Discrete SAC hyperparameters (TorchRL's config names where they exist)."""

    env_id: str = "CartPole-v1"
    """Gymnasium (or probe) environment id with discrete actions."""
    total_frames: int = 100_000
    """Environment steps to train for."""
    init_random_frames: int = 1_000
    """Frames of uniformly random actions before learning starts."""
    frames_per_batch: int = 100
    """Frames collected between two rounds of updates."""
    utd_ratio: float = 0.25
    """Gradient steps per collected frame."""
    buffer_size: int = 100_000
    """Replay buffer capacity."""
    batch_size: int = 256
    """Transitions per gradient step."""
    lr: float = 1e-3
    """Adam learning rate of actor, critics and temperature."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak averaging rate of the target critics."""
    target_entropy_weight: float = 0.2
    """Target entropy as a fraction of the maximal one, log(number of actions)."""
    alpha_init: float = 1.0
    """Initial entropy temperature (learned)."""
    hidden: int = 64
    """Width of the two hidden layers of actor and critics."""
    eval_interval: int = 10_000
    """Frames between two evaluations during training (``eval_interval_episodes``
    deterministic episodes each, on other seeds than the final evaluation's); 0: none."""
    eval_interval_episodes: int = 5
    """Episodes of each evaluation during training."""
    keep_best: bool = True
    """End with the actor weights that scored best in the evaluations during training
    (the last weights' return is logged as ``eval/last_weights_return``)."""


PRESETS = {"cartpole": ("CartPole-v1, discrete SAC", Config())}


def make_categorical_actor(env, hidden: int, device=None) -> ProbabilisticActor:
    """An MLP giving the logits of a one-hot categorical policy (deterministic mode:
    the most probable action); on ``device`` (default: the CPU)."""
    n_actions = env.action_spec.shape[-1]
    actor = ProbabilisticActor(
        TensorDictModule(
            MLP(out_features=n_actions, num_cells=[hidden] * 2, activation_class=nn.ReLU),
            in_keys=["observation"],
            out_keys=["logits"],
        ),
        in_keys=["logits"],
        spec=env.action_spec,
        distribution_class=OneHotCategorical,
    )
    with torch.no_grad():  # materialise the lazy first layer
        actor(env.fake_tensordict())
    return actor.to(device) if device is not None else actor


def make_action_values(env, hidden: int, device=None) -> TensorDictModule:
    """A Q-network writing the value of every action, ``"action_value"``; on ``device``
    (default: the CPU)."""
    n_actions = env.action_spec.shape[-1]
    qvalue = TensorDictModule(
        MLP(out_features=n_actions, num_cells=[hidden] * 2, activation_class=nn.ReLU),
        in_keys=["observation"],
        out_keys=["action_value"],
    )
    with torch.no_grad():
        qvalue(env.fake_tensordict())
    return qvalue.to(device) if device is not None else qvalue


def make_learner(cfg: Config, env, actor, qvalue):
    """The discrete SAC loss (twin critics, learned temperature) and its update: one
    gradient step of the summed losses (backward, Adam, the soft target update); one
    graph with ``cfg.compile``. The loss's own tensors (the temperature, the target
    entropy, the targets) and the optimizer's live on ``cfg.device``, with the networks.
    Returns ``(loss_module, update)``, ``update(sample)`` returning the step's losses,
    temperature and entropy."""
    with torch.device(resolve_device(cfg.device)):
        loss_module = DiscreteSACLoss(
            actor,
            qvalue,
            action_space=env.action_spec,
            num_actions=env.action_spec.shape[-1],
            num_qvalue_nets=2,
            loss_function="l2",
            alpha_init=cfg.alpha_init,
            target_entropy_weight=cfg.target_entropy_weight,
            gamma=cfg.gamma,
        )
        update = summed_update(
            cfg,
            loss_module,
            ("loss_actor", "loss_qvalue", "loss_alpha"),
            ("loss_actor", "loss_qvalue", "alpha", "entropy"),
        )
    return loss_module, update


def main(cfg: Config) -> dict:
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    env = make_env(cfg.env_id)
    env.set_seed(cfg.seed)

    # the pieces: actor, twin critics, collector, buffer, loss, optimiser, targets
    device = resolve_device(cfg.device)
    actor = make_categorical_actor(env, cfg.hidden, device=device)
    qvalue = make_action_values(env, cfg.hidden, device=device)
    collector = Collector(
        env,
        compile_policy(actor, compile=cfg.compile, cudagraphs=cfg.cudagraphs),
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.total_frames,
        init_random_frames=cfg.init_random_frames,
        **collector_devices(device),
    )
    buffer = make_replay_buffer(cfg.buffer_size, cfg.batch_size, device=device)
    # one gradient step (backward, Adam, target update); one graph with --compile
    loss_module, update = make_learner(cfg, env, actor, qvalue)
    run = Run("discrete_sac", cfg, cfg.total_frames)
    best = BestWeights(
        run,
        cfg.env_id,
        actor,
        actor,
        cfg.eval_interval if cfg.keep_best else 0,
        cfg.eval_interval_episodes,
    )

    # the loop: collect, store, update actor, critics and temperature; evaluate now and then
    updates_per_batch = max(int(cfg.utd_ratio * cfg.frames_per_batch), 1)
    for batch in collector:
        run.observe(batch)
        buffer.extend(transitions(batch))
        if run.frames >= cfg.init_random_frames:
            for _ in range(updates_per_batch):
                losses = update(buffer.sample())
            run.log(**{key: value.item() for key, value in losses.items()})
        best.step()
        run.step_bar(batch.numel())
    collector.shutdown()
    best.restore(cfg.eval_episodes)
    return run.finish(cfg.env_id, actor, actor=actor, qvalue=qvalue, loss_module=loss_module)


if __name__ == "__main__":
    main(cli(Config, PRESETS, "cartpole", __doc__))
