"""PPO on CartPole and SAC on Pendulum as Trainer runs, for the kill / resume tests.

Built from the workspace's real pieces (rl.envs, rl.collectors, rl.data, rl.modules,
rl.objectives), small enough to run in seconds. As a script
(``python _rl_core_trainer_real.py ALGO ENV_KIND CKPT OUT``), it trains with a checkpoint
after every batch, prints ``batch <frames>`` after each one and saves the final parameters
to OUT.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

TOTAL = {"ppo": 192, "sac": 160}
PER_BATCH = {"ppo": 32, "sac": 16}


def _env(env_id: str, kind: str):
    from rl.envs import GymEnv, SerialEnv

    if kind == "serial":
        return SerialEnv(2, lambda: GymEnv(env_id))
    return GymEnv(env_id)


def make_ppo(ckpt, kind: str = "single", total_frames: int = TOTAL["ppo"]):
    from rl.collectors import Collector
    from rl.core.trainers import BatchSubSampler, LogScalar, Trainer
    from rl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator
    from rl.objectives import ClipPPOLoss
    from rl.objectives.value import GAE

    torch.manual_seed(0)
    env = _env("CartPole-v1", kind)
    actor = ProbabilisticActor(
        TensorDictModule(
            MLP(in_features=4, out_features=2, num_cells=[16]),
            in_keys=["observation"],
            out_keys=["logits"],
        ),
        in_keys=["logits"],
        spec=env.action_spec,
        distribution_class=OneHotCategorical,
        return_log_prob=True,
    )
    critic = ValueOperator(
        MLP(in_features=4, out_features=1, num_cells=[16]), in_keys=["observation"]
    )
    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    loss = ClipPPOLoss(actor, critic, entropy_coeff=0.01)
    collector = Collector(env, actor, frames_per_batch=PER_BATCH["ppo"], total_frames=total_frames)
    trainer = Trainer(
        collector=collector,
        total_frames=total_frames,
        frame_skip=1,
        optim_steps_per_batch=4,
        loss_module=loss,
        optimizer=torch.optim.Adam(loss.parameters(), lr=1e-3),
        clip_norm=0.5,
        progress_bar=False,
        seed=7,
        save_trainer_interval=PER_BATCH["ppo"],
        log_interval=0,
        save_trainer_file=ckpt,
        resume=True,
    )

    def compute_advantage(batch):
        with torch.no_grad():
            advantage(batch)
        return batch.reshape(-1)

    trainer.register_op("batch_process", compute_advantage)
    BatchSubSampler(batch_size=16).register(trainer)
    LogScalar(logname="r_training").register(trainer)
    return trainer


def make_sac(ckpt, kind: str = "single", total_frames: int = TOTAL["sac"]):
    from rl.collectors import Collector
    from rl.core.trainers import (
        ReplayBufferTrainer,
        SelectKeys,
        TargetNetUpdaterHook,
        Trainer,
    )
    from rl.data import LazyTensorStorage, TensorDictReplayBuffer
    from rl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
    from rl.objectives import SACLoss, SoftUpdate

    torch.manual_seed(0)
    env = _env("Pendulum-v1", kind)
    spec = env.action_spec
    actor = ProbabilisticActor(
        TensorDictModule(
            nn.Sequential(
                MLP(in_features=3, out_features=2, num_cells=[16]), NormalParamExtractor()
            ),
            in_keys=["observation"],
            out_keys=["loc", "scale"],
        ),
        in_keys=["loc", "scale"],
        spec=spec,
        distribution_class=TanhNormal,
        # Pendulum's bounds, shaped for one env (a SerialEnv's spec is batched)
        distribution_kwargs={"low": torch.tensor([-2.0]), "high": torch.tensor([2.0])},
    )
    qvalue = ValueOperator(
        MLP(in_features=4, out_features=1, num_cells=[16]), in_keys=["observation", "action"]
    )
    loss = SACLoss(actor, qvalue, num_qvalue_nets=2, action_spec=spec, gamma=0.99)
    collector = Collector(
        env,
        actor,
        frames_per_batch=PER_BATCH["sac"],
        total_frames=total_frames,
        init_random_frames=32,
    )
    trainer = Trainer(
        collector=collector,
        total_frames=total_frames,
        frame_skip=1,
        optim_steps_per_batch=4,
        loss_module=loss,
        optimizer=torch.optim.Adam(loss.parameters(), lr=3e-3),
        progress_bar=False,
        seed=7,
        save_trainer_interval=PER_BATCH["sac"],
        log_interval=0,
        save_trainer_file=ckpt,
        resume=True,
    )
    keys = ["observation", "action", ("next", "observation"), ("next", "reward")]
    SelectKeys([*keys, ("next", "done"), ("next", "terminated")]).register(trainer)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), batch_size=32)
    ReplayBufferTrainer(buffer, flatten_tensordicts=True).register(trainer)
    TargetNetUpdaterHook(SoftUpdate(loss, tau=0.05)).register(trainer)
    return trainer


MAKE = {"ppo": make_ppo, "sac": make_sac}


def final_state(trainer) -> dict[str, Any]:
    return {
        "loss": trainer.loss_module.state_dict(),
        "optim": trainer.optimizer.state_dict()["state"],
        "frames": trainer.collected_frames,
        "optim_count": trainer._optim_count,
        "torch_rng": torch.get_rng_state(),
    }


def main(argv: list[str]) -> None:
    algo, kind, ckpt, out = argv
    torch.set_num_threads(1)
    trainer = MAKE[algo](ckpt, kind)
    trainer.register_op(
        "post_steps_log", lambda b: print("batch", trainer.collected_frames, flush=True)
    )
    if trainer.save_trainer_file.exists():
        print("resuming", flush=True)
    trainer.train()
    torch.save(final_state(trainer), out)
    print("done", trainer.collected_frames, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
