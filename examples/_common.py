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
    "check_cudagraphs",
    "compile_policy",
    "compile_update",
    "evaluate",
    "zero_grad",
    "finish_run",
    "prime_soft_update",
    "set_lr",
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


def check_cudagraphs(cudagraphs: bool) -> None:
    """Raises a clear error when ``--cudagraphs`` is asked for without a CUDA device."""
    if cudagraphs and not torch.cuda.is_available():
        raise RuntimeError(
            "--cudagraphs needs a CUDA device, and torch.cuda.is_available() is False on this "
            "machine (no CUDA GPU, or a CPU-only torch build); run without --cudagraphs "
            "(--compile alone works on CPU)"
        )


def compile_update(fn, *, compile: bool, cudagraphs: bool = False, warmup: int = 10):
    """``fn`` (one whole update step: loss, backward, clipping, optimizer step, target
    update) compiled once with ``torch.compile``, and/or captured in a CUDA graph.

    As LeanRL: ``torch.compile`` with the default mode (``fullgraph`` is not forced: an
    optimizer step may be traced in parts, but none of it runs eagerly), and
    ``tensordict.nn.CudaGraphModule`` for the CUDA graph, replayed after ``warmup`` eager
    calls. The returned callable takes the same arguments as ``fn``; with CUDA graphs
    those must keep their shapes (a fixed batch size).
    """
    check_cudagraphs(cudagraphs)
    if compile:
        fn = torch.compile(fn)
    if cudagraphs:
        from tensordict.nn import CudaGraphModule

        fn = CudaGraphModule(fn, in_keys=[], out_keys=[], warmup=warmup)
    return fn


def zero_grad(*optimizers) -> None:
    """``optimizer.zero_grad()`` (gradients set to ``None``) written so that
    ``torch.compile`` traces it (dynamo does not trace ``Optimizer.zero_grad`` itself)."""
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.grad = None


def prime_soft_update(updater) -> None:
    """Runs one ``SoftUpdate.step()`` before the first compiled update, while the targets
    still equal the online networks (a no-op on the values: ``lerp(x, x, w) == x``):
    the updater builds its cache of parameter lists on its first step, and a compiled
    step traced before that cache exists would be recompiled at the second call."""
    updater.step()


def set_lr(optimizer, lr: float) -> None:
    """Sets the learning rate of every group of ``optimizer``, in place where it is a
    tensor (compiled updates keep it a tensor: a float would be a constant of the
    compiled optimizer step, recompiled at every change)."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


def compile_policy(policy, *, compile: bool, cudagraphs: bool = False, warmup: int = 10):
    """The policy a collector runs, compiled (``torch.compile``) and/or captured in a CUDA
    graph (``tensordict.nn.CudaGraphModule``); the policy itself is left as it is (the
    evaluation and the losses keep using it)."""
    check_cudagraphs(cudagraphs)
    if not (compile or cudagraphs):
        return policy
    in_keys = list(getattr(policy, "in_keys", ()))
    if compile:
        policy = torch.compile(policy)
    if cudagraphs:
        from tensordict.nn import CudaGraphModule

        policy = CudaGraphModule(policy, warmup=warmup)

    # a function, not the wrapper module: ``env.rollout`` takes a module that is no
    # TensorDictModule for a plain module on tensors (and wraps it), and rl's eager
    # tensor twin of the wrapped policy would bypass the compiled code. The policy sees
    # its in_keys only, contiguous: the same inputs at every call (the rollout's root
    # holds strided views of its buffers), so no guard fails and it compiles once.
    def act(tensordict):
        if not in_keys:
            return policy(tensordict)
        return tensordict.update(policy(tensordict.select(*in_keys).contiguous()))

    return act


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
