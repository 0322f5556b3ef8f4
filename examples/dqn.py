"""Double DQN on CartPole-v1 (optionally dueling and with prioritized replay), from rl's pieces.

van Hasselt et al. 2016, "Deep Reinforcement Learning with Double Q-learning",
https://arxiv.org/abs/1509.06461; Wang et al. 2016 (dueling networks),
https://arxiv.org/abs/1511.06581; Schaul et al. 2016 (prioritized experience replay),
https://arxiv.org/abs/1511.05952. The defaults are RL-Zoo's tuned CartPole-v1 DQN
(256x256 network, lr 2.3e-3, batch 64, 128 gradient steps every 256 frames, the target
copied after each round, epsilon 1 -> 0.04 over the first 16% of the frames), run for
100k frames instead of 50k with the learning rate decayed linearly to 0. Every 5k frames
the greedy policy is evaluated on 5 episodes, and the script ends with the best weights
found (SB3's EvalCallback keeps its best model the same way), because DQN on CartPole
often forgets a solved policy late in training.

    uv run examples/dqn.py                          # CartPole-v1, double DQN
    uv run examples/dqn.py --dueling --prioritized  # dueling head, prioritized replay
    uv run examples/dqn.py --seed 1 --total-frames 30000 --logger tensorboard

Writes CSV logs (or another logger), a learning-curve PNG and, with ``--video``, an
evaluation video under ``runs/<exp_name>/``.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from pathlib import Path

import torch
from torch import nn

from rl.collectors import Collector
from rl.core import seed_everything
from rl.modules import MLP, DuelingMlpDQNet, QValueActor, TensorDictSequential
from rl.objectives import DQNLoss, HardUpdate

sys.path.insert(0, str(Path(__file__).parent))
from _common import UpdateStep  # noqa: E402
from _offpolicy import (  # noqa: E402
    Run,
    RunConfig,
    cli,
    collector_devices,
    compile_policy,
    make_egreedy,
    make_env,
    make_replay_buffer,
    resolve_device,
    set_lr,
    transitions,
)


@dataclasses.dataclass
class Config(RunConfig):
    """DQN hyperparameters (RL-Zoo's names in parentheses where they differ)."""

    env_id: str = "CartPole-v1"
    """Gymnasium (or probe) environment id with discrete actions."""
    total_frames: int = 100_000
    """Environment steps to train for (n_timesteps)."""
    init_random_frames: int = 1_000
    """Frames of uniformly random actions before learning starts (learning_starts)."""
    frames_per_batch: int = 256
    """Frames collected between two rounds of updates (train_freq)."""
    updates_per_batch: int = 128
    """Gradient steps after each batch (gradient_steps)."""
    buffer_size: int = 100_000
    """Replay buffer capacity."""
    batch_size: int = 64
    """Transitions per gradient step."""
    lr: float = 2.3e-3
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor."""
    target_update_interval: int = 128
    """Gradient steps between two copies of the online network into the target."""
    eps_start: float = 1.0
    """Initial epsilon of the epsilon-greedy exploration."""
    eps_end: float = 0.04
    """Final epsilon (exploration_final_eps)."""
    exploration_fraction: float = 0.16
    """Fraction of total_frames over which epsilon decays linearly."""
    hidden: int = 256
    """Width of the two hidden layers."""
    max_grad_norm: float = 10.0
    """Gradient clipping norm."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over total_frames."""
    eval_interval: int = 5_000
    """Frames between two evaluations during training (``eval_interval_episodes``
    deterministic episodes each, on other seeds than the final evaluation's); 0: none."""
    eval_interval_episodes: int = 5
    """Episodes of each evaluation during training."""
    keep_best: bool = True
    """End with the weights that scored best in the evaluations during training (as SB3's
    EvalCallback keeps its best model): DQN on CartPole can forget a solved policy late
    in training. The final evaluation then runs on its own episodes; the last weights'
    return is logged as ``eval/last_weights_return``."""
    dueling: bool = False
    """Dueling head (separate value and advantage streams)."""
    prioritized: bool = False
    """Prioritized experience replay (proportional, by TD error)."""
    alpha: float = 0.6
    """Prioritized replay: priority exponent."""
    beta: float = 0.4
    """Prioritized replay: importance-sampling exponent."""


PRESETS = {"cartpole": ("CartPole-v1, RL-Zoo's tuned double DQN", Config())}


def make_qnet(cfg: Config, env) -> QValueActor:
    n_actions = env.action_spec.shape[-1]
    if cfg.dueling:
        mlp = {"num_cells": [cfg.hidden], "activation_class": nn.ReLU}
        net = DuelingMlpDQNet(
            n_actions,
            mlp_kwargs_feature={**mlp, "out_features": cfg.hidden, "activate_last_layer": True},
            mlp_kwargs_output=mlp,
        )
    else:
        net = MLP(out_features=n_actions, num_cells=[cfg.hidden] * 2, activation_class=nn.ReLU)
    qnet = QValueActor(net, in_keys=["observation"], spec=env.action_spec)
    with torch.no_grad():  # materialise the lazy first layer
        qnet(env.fake_tensordict())
    return qnet


def make_learner(cfg: Config, env, qnet):
    """The double-DQN loss, its optimizer and its update: one clipped gradient step and
    the target's counter (a copy every ``cfg.target_update_interval`` steps); the gradient
    step is one graph with ``cfg.compile``. The loss's own tensors and the optimizer's
    (its learning rate, a tensor annealed in place when compiled) live on ``cfg.device``,
    with the network. Returns ``(loss_module, optimizer, update)``."""
    with torch.device(resolve_device(cfg.device)):
        loss_module = DQNLoss(
            qnet,
            double_dqn=True,
            delay_value=True,
            loss_function="smooth_l1",
            gamma=cfg.gamma,
            action_space=env.action_spec,
        )
        target_update = HardUpdate(
            loss_module, value_network_update_interval=cfg.target_update_interval
        )
        lr = torch.tensor(cfg.lr) if cfg.compile else cfg.lr  # a tensor: annealed in place
        optimizer = torch.optim.Adam(loss_module.parameters(), lr=lr)

        def dqn_loss(sample):
            loss = loss_module(sample)["loss"]
            return loss, loss

        update = UpdateStep(
            dqn_loss,
            optimizer,
            max_grad_norm=cfg.max_grad_norm,
            target_update=target_update,
            compile=cfg.compile,
            cudagraphs=cfg.cudagraphs,
        )
    return loss_module, optimizer, update


def main(cfg: Config) -> dict:
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    env = make_env(cfg.env_id)
    env.set_seed(cfg.seed)

    # the pieces: Q-network, epsilon-greedy policy, collector, buffer, loss, optimiser
    device = resolve_device(cfg.device)
    qnet = make_qnet(cfg, env).to(device)
    egreedy = make_egreedy(
        env, cfg.eps_start, cfg.eps_end, cfg.exploration_fraction * cfg.total_frames, cfg.device
    )
    policy = TensorDictSequential(qnet, egreedy)
    collector = Collector(
        env,
        compile_policy(policy, compile=cfg.compile, cudagraphs=cfg.cudagraphs),
        frames_per_batch=cfg.frames_per_batch,
        total_frames=cfg.total_frames,
        init_random_frames=cfg.init_random_frames,
        **collector_devices(device),
    )
    buffer = make_replay_buffer(
        cfg.buffer_size,
        cfg.batch_size,
        prioritized=cfg.prioritized,
        alpha=cfg.alpha,
        beta=cfg.beta,
        device=device,
    )
    loss_module, optimizer, update = make_learner(cfg, env, qnet)
    run = Run("dqn", cfg, cfg.total_frames)

    # the loop: collect, store, update, copy the target; evaluate now and then
    best_return, best_state, next_eval = -float("inf"), None, cfg.eval_interval
    for batch in collector:
        run.observe(batch)
        buffer.extend(transitions(batch))
        egreedy.step(batch.numel())
        if cfg.anneal_lr:
            set_lr(optimizer, cfg.lr * (1.0 - run.frames / cfg.total_frames))
        if run.frames >= cfg.init_random_frames:
            for _ in range(cfg.updates_per_batch):
                sample = buffer.sample()
                loss = update(sample)
                buffer.update_tensordict_priority(sample)
            run.log(loss=loss.item(), epsilon=egreedy.eps.item())
        if cfg.eval_interval and run.frames >= next_eval:
            next_eval += cfg.eval_interval
            returns = run.evaluate(cfg.env_id, qnet, cfg.eval_interval_episodes, 2000 + run.frames)
            mean_return = sum(returns) / len(returns)
            run.logger.log_scalar("eval/return", mean_return, run.frames)
            if mean_return >= best_return:  # ties: the later weights
                best_return, best_state = mean_return, copy.deepcopy(qnet.state_dict())
        run.step_bar(batch.numel())
    collector.shutdown()
    if cfg.keep_best and best_state is not None:
        returns = run.evaluate(cfg.env_id, qnet, cfg.eval_episodes, 3000)
        run.logger.log_scalar("eval/last_weights_return", sum(returns) / len(returns), run.frames)
        qnet.load_state_dict(best_state)
    return run.finish(cfg.env_id, qnet, qnet=qnet)


if __name__ == "__main__":
    main(cli(Config, PRESETS, "cartpole", __doc__))
