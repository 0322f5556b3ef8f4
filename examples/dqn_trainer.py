"""Double DQN on CartPole-v1 driven by ``rl.core.trainers.Trainer`` and its hooks.

The same algorithm as ``dqn.py`` (van Hasselt et al. 2016, https://arxiv.org/abs/1509.06461,
with RL-Zoo's tuned CartPole-v1 settings), but the loop is the library's ``Trainer``: each
piece of the update is a hook registered at a named point of the loop.

    batch_process        ReplayBufferTrainer.extend (store the batch)
    pre_steps_log        CountFramesLog, LogScalar (mean reward), EpisodeReturnLog
    process_optim_batch  ReplayBufferTrainer.sample
    optimizer            OptimizerHook (backward, clip, step)
    post_optim           TargetNetUpdaterHook (HardUpdate or SoftUpdate)
    post_steps           EGreedyModule.step (anneal epsilon), UpdateWeights
    post_steps_log       LogValidationReward (deterministic evaluation episodes)

With ``--compile``, the gradient step (the loss, backward, clipping, Adam and the target
update) is one compiled graph (``_common.UpdateStep``) that the trainer runs as its
``optimization_stepper`` in the place of the ``optimizer`` hook and of the target update's
``post_optim`` hook, and the collector's policy (the Q-network and the epsilon-greedy
choice) is compiled too; ``--cudagraphs`` captures both in CUDA graphs (with
``--device cuda``).

``--device`` places the Q-network, the loss, Adam, the update and the replay buffer (the
collector moves what the CPU environments return there). The validation rollouts run the
Q-network on the device from the CPU evaluation env (their inputs moved there, their
outputs back); the final evaluation runs a CPU copy.

The trainer saves a checkpoint every ``--save-interval`` frames (modules, optimizer, target
networks, replay buffer, collector and env state, hook state, RNG states). Running the
same command again resumes from it and ends where an uninterrupted run would have.

    uv run examples/dqn_trainer.py                        # CartPole-v1, about 50k frames
    uv run examples/dqn_trainer.py --target-update soft --tau 0.01
    uv run examples/dqn_trainer.py --total-frames 80000   # continue a finished run further
    uv run examples/dqn_trainer.py --compile              # one compiled graph per update
    uv run examples/dqn_trainer.py --device cuda --cudagraphs   # on a GPU

Writes CSV logs (or another logger), the checkpoint and a learning-curve PNG under
``runs/<exp_name>/``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Literal

import torch
import tyro
from torch import nn

from rl.collectors import Collector
from rl.core import seed_everything
from rl.core.loggers import get_logger
from rl.core.trainers import (
    CountFramesLog,
    LogScalar,
    LogValidationReward,
    OptimizerHook,
    ReplayBufferTrainer,
    SelectKeys,
    TargetNetUpdaterHook,
    Trainer,
    UpdateWeights,
    load_checkpoint,
)
from rl.data import LazyTensorStorage, TensorDictReplayBuffer
from rl.modules import MLP, QValueActor, TensorDictSequential
from rl.objectives import DQNLoss, HardUpdate, SoftUpdate

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    UpdateStep,
    collector_devices,
    compile_policy,
    evaluate,
    finish_run,
    make_base_env,
    resolve_device,
)
from _offpolicy import TRANSITION_KEYS, make_egreedy  # noqa: E402
from _stepper import UpdateStepper  # noqa: E402
from _trainer_hooks import EpisodeReturnLog, OnDevice  # noqa: E402


@dataclasses.dataclass
class Config:
    """DQN-with-Trainer hyperparameters (RL-Zoo's names in parentheses where they differ)."""

    env_id: str = "CartPole-v1"
    """Gymnasium (or probe) environment id with discrete actions."""
    num_envs: int = 1
    """Environments stepped together (a gymnasium vector env or a batched probe)."""
    total_frames: int = 50_000
    """Environment steps to train for (n_timesteps); a larger value continues a run."""
    init_random_frames: int = 1_000
    """Frames of uniformly random actions before learning starts (learning_starts)."""
    frames_per_batch: int = 256
    """Frames collected between two rounds of updates (train_freq)."""
    optim_steps_per_batch: int = 128
    """Gradient steps after each batch (gradient_steps)."""
    buffer_size: int = 100_000
    """Replay buffer capacity."""
    batch_size: int = 64
    """Transitions per gradient step."""
    lr: float = 2.3e-3
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor."""
    target_update: Literal["hard", "soft"] = "hard"
    """Target network update: a copy every interval (HardUpdate) or Polyak (SoftUpdate)."""
    target_update_interval: int = 128
    """HardUpdate: gradient steps between two copies of the online network."""
    tau: float = 0.005
    """SoftUpdate: how far the target moves towards the online network at each step."""
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
    eval_interval: int = 20
    """Batches between two validation rollouts (LogValidationReward)."""
    eval_frames: int = 1_000
    """Steps of each validation rollout (episodes restart inside it)."""
    eval_episodes: int = 10
    """Deterministic evaluation episodes at the end."""
    save_interval: int = 10_000
    """Frames between two checkpoints."""
    checkpoint: str | None = None
    """Checkpoint file (default: ``<log_dir>/<exp_name>/checkpoint.pt``)."""
    resume: bool = True
    """Resume from the checkpoint when it exists (rerunning a command continues it)."""
    log_interval: int = 0
    """Frames between two logger writes of one value (0: every batch)."""
    seed: int = 0
    """Seed of torch, numpy, python and the environments."""
    threads: int = 1
    """Torch CPU threads."""
    logger: Literal["csv", "tensorboard", "wandb", "mlflow"] = "csv"
    """Where the scalars go (CSV needs no extra package)."""
    log_dir: str = "runs"
    """Folder of the run's logs, checkpoint and curve."""
    exp_name: str | None = None
    """Name of the run (default: ``dqn_trainer-<env_id>-s<seed>``, stable so that the
    same command finds its checkpoint)."""
    progress: bool = True
    """Show a progress bar (only when attached to a terminal)."""
    compile: bool = False
    """torch.compile the collector's policy and the whole gradient step (loss, backward,
    clipping, Adam, target update), once; the trainer runs the step as its
    ``optimization_stepper``."""
    cudagraphs: bool = False
    """Capture the gradient step and the policy in CUDA graphs (needs ``--device cuda``)."""
    device: str = "cpu"
    """Where the Q-network, the loss, the update step and the replay buffer live: ``cpu``,
    ``cuda``, ``cuda:N``, or ``auto`` (CUDA where visible). The environments stay on the
    CPU: the collector moves what they return; the validation rollouts move their inputs
    to the device; the final evaluation runs a CPU copy of the Q-network."""


def make_env(cfg: Config, num_envs: int):
    # CartPole and the probes give float32 observations: no transform, so that the env
    # pickles into the checkpoints (exact resume)
    return make_base_env(cfg.env_id, num_envs)


def make_qnet(cfg: Config, env) -> QValueActor:
    n_actions = env.action_spec.shape[-1]
    net = MLP(out_features=n_actions, num_cells=[cfg.hidden] * 2, activation_class=nn.ReLU)
    qnet = QValueActor(net, in_keys=["observation"], spec=env.action_spec)
    with torch.no_grad():  # materialise the lazy first layer
        qnet(env.fake_tensordict())
    return qnet


def make_learner(cfg: Config, env, qnet):
    """The double-DQN loss, its target update (a copy every ``cfg.target_update_interval``
    steps, or Polyak's with ``tau``), Adam, and with ``cfg.compile`` or ``cfg.cudagraphs``
    the trainer's ``optimization_stepper``: the whole gradient step in one graph (else
    None: the trainer's ``optimizer`` and ``post_optim`` hooks step). The loss's own
    tensors and the optimizer's live on ``cfg.device``, with the Q-network. Returns
    ``(loss_module, target_update, optimizer, stepper)``."""
    with torch.device(resolve_device(cfg.device)):
        loss_module = DQNLoss(
            qnet,
            double_dqn=True,
            delay_value=True,
            loss_function="smooth_l1",
            gamma=cfg.gamma,
            action_space=env.action_spec,
        )
        if cfg.target_update == "hard":
            target_update = HardUpdate(
                loss_module, value_network_update_interval=cfg.target_update_interval
            )
        else:
            target_update = SoftUpdate(loss_module, tau=cfg.tau)
        optimizer = torch.optim.Adam(loss_module.parameters(), lr=cfg.lr)
        stepper = None
        if cfg.compile or cfg.cudagraphs:

            def dqn_loss(sample):
                losses = loss_module(sample)
                return losses["loss"], losses.select("loss")

            # one graph: the loss, its gradients, clipping, Adam and the target update
            update = UpdateStep(
                dqn_loss,
                optimizer,
                max_grad_norm=cfg.max_grad_norm,
                target_update=target_update,
                compile=cfg.compile,
                cudagraphs=cfg.cudagraphs,
            )
            stepper = UpdateStepper(update, optimizer)
    return loss_module, target_update, optimizer, stepper


def main(cfg: Config) -> dict:
    device = resolve_device(cfg.device)  # a device this machine lacks stops the run here
    seed_everything(cfg.seed)
    torch.set_num_threads(cfg.threads)
    env = make_env(cfg, cfg.num_envs)
    env.set_seed(cfg.seed)

    # the pieces: Q-network, epsilon-greedy policy, collector, buffer, loss, optimiser
    # (the Q-network built on the CPU, then moved)
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
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(cfg.buffer_size, device=device), batch_size=cfg.batch_size
    )
    loss_module, target_update, optimizer, stepper = make_learner(cfg, env, qnet)

    exp_name = cfg.exp_name or f"dqn_trainer-{cfg.env_id}-s{cfg.seed}"
    logger = get_logger(cfg.logger, logger_name=cfg.log_dir, experiment_name=exp_name)
    logger.log_hparams(dataclasses.asdict(cfg))
    checkpoint = Path(cfg.checkpoint or Path(cfg.log_dir) / exp_name / "checkpoint.pt")

    # the trainer and its hooks, in the order the loop reaches them
    trainer = Trainer(
        collector=collector,
        total_frames=cfg.total_frames,
        frame_skip=1,
        optim_steps_per_batch=cfg.optim_steps_per_batch,
        loss_module=loss_module,
        logger=logger,
        clip_grad_norm=True,
        clip_norm=cfg.max_grad_norm,
        progress_bar=cfg.progress,
        seed=cfg.seed,
        save_trainer_interval=cfg.save_interval,
        log_interval=cfg.log_interval,
        save_trainer_file=checkpoint,
        resume=cfg.resume,
        optimization_stepper=stepper,
    )
    SelectKeys(list(TRANSITION_KEYS)).register(trainer)
    ReplayBufferTrainer(buffer, flatten_tensordicts=True).register(trainer)
    if stepper is None:
        OptimizerHook(optimizer).register(trainer)
        TargetNetUpdaterHook(target_update).register(trainer)
    else:  # the stepper moves the target; the hook only keeps its state in checkpoints
        trainer.register_module("target_net_updater", TargetNetUpdaterHook(target_update))
    CountFramesLog(frame_skip=1).register(trainer)
    LogScalar(logname="train/reward", include_std=False).register(trainer)
    EpisodeReturnLog().register(trainer)
    trainer.register_op("post_steps", egreedy.step, frames=cfg.frames_per_batch)
    UpdateWeights(collector, update_weights_interval=1).register(trainer)
    eval_env = make_env(cfg, 1)
    eval_env.set_seed(cfg.seed + 1000)
    LogValidationReward(
        record_interval=cfg.eval_interval,
        record_frames=cfg.eval_frames,
        policy_exploration=qnet if device.type == "cpu" else OnDevice(qnet, device),
        environment=eval_env,
    ).register(trainer)

    resumed_from = 0
    if cfg.resume and checkpoint.exists():
        resumed_from = int(load_checkpoint(checkpoint)["state"]["collected_frames"])
        print(f"resuming from {checkpoint} at {resumed_from} frames")
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start

    final_env = make_env(cfg, 1)
    final_env.set_seed(cfg.seed + 2000)
    returns = evaluate(final_env, qnet, cfg.eval_episodes)
    summary = finish_run(logger, returns, trainer.collected_frames, seconds)
    # frames per second of this session (a resumed run trained only the frames after its start)
    summary["fps"] = (trainer.collected_frames - resumed_from) / max(seconds, 1e-9)
    return {
        **summary,
        "resumed_from": resumed_from,
        "checkpoint": checkpoint,
        "trainer": trainer,
        "qnet": qnet,
    }


if __name__ == "__main__":
    main(tyro.cli(Config, description=__doc__))
