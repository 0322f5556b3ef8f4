"""Roll out a policy in an environment and print the return of each episode.

The first thing to run on a fresh machine (``uv run examples/rollout.py``): it builds a
CartPole environment (gymnasium's, or the batched native torch one with ``--native``), adds
a step counter and an episode-return tracker as transforms, and rolls out a hand-written
TensorDict policy that pushes the cart toward the side the pole leans to. A random policy
(``--random``) is there for comparison: it averages about 20, the hand-written one about 200+.

    uv run examples/rollout.py --episodes 5
    uv run examples/rollout.py --native --num-envs 64 --random
    uv run examples/rollout.py --native --num-envs 64 --compile

``--compile`` compiles the policy (``torch.compile`` of the controller, through
``examples/_common.py``'s ``compile_policy``: once, at the first step); the random policy
has no network, so there is nothing to compile for it. ``--cudagraphs`` captures the
controller in a CUDA graph (with ``--device cuda``).

``--device cuda`` runs the policy on the GPU: the native CartPole itself lives there;
gymnasium's stays on the CPU, a ``DeviceCastTransform`` moving what it returns to the GPU
and the actions back.

    uv run examples/rollout.py --native --num-envs 64 --device cuda --cudagraphs
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch
from tensordict.nn import TensorDictModule
from torch import nn

from rl.core import seed_everything
from rl.envs import (
    CartPoleEnv,
    DeviceCastTransform,
    GymEnv,
    RewardSum,
    StepCounter,
    TransformedEnv,
)

sys.path.insert(0, str(Path(__file__).parent))
from _common import check_cudagraphs, compile_policy, resolve_device  # noqa: E402


@dataclasses.dataclass
class Config:
    episodes: int = 5
    """Episodes to roll out (per environment in the batch)."""
    max_steps: int = 500
    """Truncate every episode after this many steps (CartPole-v1's limit)."""
    native: bool = False
    """Use the native batched torch CartPole instead of gymnasium's."""
    num_envs: int = 1
    """Batch size of the native env (ignored for gymnasium)."""
    random: bool = False
    """Act uniformly at random instead of with the hand-written controller."""
    seed: int = 0
    """Seed of torch, numpy, python random and the environment."""
    compile: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "torch.compile the policy network (the hand-written controller; the "
            "random policy has none, so nothing is compiled with --random)"
        },
    )
    """torch.compile the policy (the controller), once."""
    cudagraphs: bool = dataclasses.field(
        default=False,
        metadata={"help": "capture the controller in a CUDA graph (needs --device cuda)"},
    )
    """Capture the controller in a CUDA graph (needs ``--device cuda``)."""
    device: str = dataclasses.field(
        default="cpu",
        metadata={
            "help": "where the policy runs: cpu, cuda, cuda:N or auto (CUDA where visible); "
            "the native env lives there, gymnasium's stays on the CPU"
        },
    )
    """Where the policy runs: ``cpu``, ``cuda``, ``cuda:N``, or ``auto`` (CUDA where
    visible). The native env lives there; gymnasium's stays on the CPU, a
    ``DeviceCastTransform`` moving what it returns there and the actions back."""


class PoleController(nn.Module):
    """Push right when the pole falls right (angle + angular velocity > 0), else left."""

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        lean = observation[..., 2] + 0.5 * observation[..., 3]
        return (lean > 0).long()


class _OneHot(nn.Module):
    def forward(self, action: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(action, 2).bool()


def parse_args() -> Config:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in dataclasses.fields(Config):
        flag = "--" + field.name.replace("_", "-")
        help_text = field.metadata.get("help", field.name)
        if field.type == "bool":
            parser.add_argument(flag, action="store_true", help=help_text)
        else:
            kind = int if field.type == "int" else str
            parser.add_argument(flag, type=kind, default=field.default, help=help_text)
    return Config(**vars(parser.parse_args()))


def make_env(cfg: Config):
    """CartPole with a step counter and an episode-return tracker; its outputs on
    ``cfg.device`` (the native env lives there, gymnasium's outputs are moved there)."""
    device = resolve_device(cfg.device)
    if cfg.native:
        base = CartPoleEnv(batch_size=[cfg.num_envs], device=device)
    else:
        base = GymEnv("CartPole-v1")
    env = TransformedEnv(base)
    if not cfg.native and device.type != "cpu":  # gymnasium's env lives on the CPU
        env.append_transform(DeviceCastTransform(device))
    env.append_transform(StepCounter(max_steps=cfg.max_steps))
    env.append_transform(RewardSum())
    env.set_seed(cfg.seed)
    return env


def make_policy(cfg: Config, env):
    """The hand-written controller reading ``"observation"`` and writing ``"action"`` (one-hot
    where ``env`` takes one-hot actions); it has no parameters and runs where its input is
    (``cfg.device``, see :func:`make_env`). Compiled or captured as ``cfg`` asks."""
    controller: nn.Module = PoleController()
    if env.action_spec.shape[-1:] == (2,):  # one-hot actions
        controller = nn.Sequential(controller, _OneHot())
    policy = TensorDictModule(controller, in_keys=["observation"], out_keys=["action"])
    return compile_policy(policy, compile=cfg.compile, cudagraphs=cfg.cudagraphs)


def main(cfg: Config) -> list[float]:
    resolve_device(cfg.device)  # a device this machine lacks stops the run here
    check_cudagraphs(cfg.cudagraphs)
    seed_everything(cfg.seed)
    env = make_env(cfg)
    policy = None if cfg.random else make_policy(cfg, env)
    returns: list[float] = []
    start = time.perf_counter()
    frames = 0
    for episode in range(cfg.episodes):
        # a batch of native envs runs until every env has ended an episode (each one
        # restarts on its own); a single env stops at its first episode end
        rollout = env.rollout(
            cfg.max_steps,
            policy=policy,
            break_when_any_done=env.batch_size.numel() == 1,
            break_when_all_done=True,
        )
        done = rollout["next", "done"].squeeze(-1)
        ep_return = rollout["next", "episode_reward"].squeeze(-1)
        # The return of an episode is the running sum at its last step.
        finished = ep_return[done]
        frames += rollout.numel()
        returns.extend(finished.tolist())
        shown = [round(r, 1) for r in finished.tolist()]
        if len(shown) > 8:
            shown = f"{len(shown)} episodes, mean {sum(shown) / len(shown):.1f}"
        print(f"rollout {episode}: {rollout.batch_size[-1]} steps, returns {shown}")
    elapsed = time.perf_counter() - start
    mean = sum(returns) / max(len(returns), 1)
    print(
        f"mean return over {len(returns)} episodes: {mean:.1f} ({frames} frames in {elapsed:.2f}s)"
    )
    env.close()
    return returns


if __name__ == "__main__":
    main(parse_args())
