"""What every example script shares: evaluation episodes, the progress bar, the run's end.

Kept apart so that each script reads as the algorithm alone; nothing here is specific to
an algorithm, and all of it is thin glue over rl's pieces.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rl.core import ExplorationType, set_exploration_type
from rl.core.loggers import CSVLogger
from rl.core.trainers import EpisodeReturns, ProgressBar
from rl.envs import PROBES, GymEnv, VideoRecorder

__all__ = [
    "EpisodeReturns",
    "ProgressBar",
    "evaluate",
    "finish_run",
    "make_base_env",
    "record_video",
]


def make_base_env(
    env_id: str, num_envs: int = 1, from_pixels: bool = False, categorical: bool = False
):
    """A gymnasium env (a vector env when ``num_envs > 1``) or a probe env by name.

    Probe names are those of ``rl.envs.PROBES`` (``"ActionRewardProbe"``), with
    ``"-continuous"`` appended for the continuous version; probes are native batched envs.
    ``categorical=True`` gives a gym env's discrete actions as integers (TorchRL's
    ``categorical_action_encoding``) instead of one-hot vectors.
    """
    probes = {cls.__name__: cls for cls in PROBES}
    name, _, variant = env_id.partition("-")
    if name in probes:
        return probes[name](batch_size=[num_envs], continuous=variant == "continuous")
    kwargs = {"categorical_action_encoding": True} if categorical else {}
    if from_pixels:
        return GymEnv(env_id, from_pixels=True, pixels_only=False, **kwargs)
    if num_envs > 1:
        return GymEnv(env_id, num_envs=num_envs, **kwargs)
    return GymEnv(env_id, **kwargs)


@torch.no_grad()
def evaluate(env, policy, episodes: int, max_steps: int = 1000) -> list[float]:
    """Returns of ``episodes`` deterministic episodes of ``policy`` in the single env ``env``."""
    returns = []
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        for _ in range(episodes):
            rollout = env.rollout(max_steps, policy, break_when_any_done=True)
            returns.append(rollout["next", "reward"].sum().item())
    return returns


def record_video(env, policy, logger, max_steps: int = 1000):
    """Records one deterministic episode of ``policy`` in ``env`` (built with
    ``from_pixels=True``) through a ``VideoRecorder`` that hands it to ``logger``."""
    recorder = VideoRecorder(logger, tag="eval_video")
    env.append_transform(recorder)
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        env.rollout(max_steps, policy, break_when_any_done=True)
    return recorder.dump()


def finish_run(logger, returns: list[float], frames: int, seconds: float) -> dict:
    """Logs the evaluation, draws the learning curve (CSV logger) and prints a summary."""
    mean = sum(returns) / len(returns)
    logger.log_scalar("eval/return", mean, frames)
    curve = None
    if isinstance(logger, CSVLogger):
        from rl.core.plot import plot_runs

        run_dir = Path(logger.experiment)
        curve = run_dir / "learning_curve.png"
        plot_runs([run_dir], curve, keys=["train/episode_return"])
    summary = {
        "frames": frames,
        "seconds": seconds,
        "fps": frames / seconds,
        "eval_returns": returns,
        "eval_mean": mean,
        "curve": curve,
    }
    print(
        f"trained {frames} frames in {seconds:.1f} s ({frames / seconds:.0f} frames/s); "
        f"evaluation over {len(returns)} deterministic episodes: mean return {mean:.1f}"
    )
    if curve is not None:
        print(f"learning curve: {curve}")
    return summary
