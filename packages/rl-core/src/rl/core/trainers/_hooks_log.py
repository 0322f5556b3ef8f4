"""Logging hooks: scalars from the batch, frame counts, periodic evaluation episodes, hook
timings, the update-to-data ratio."""

from __future__ import annotations

import random
import warnings
import weakref
from typing import Any, Literal

import numpy as np
import torch
from tensordict import NestedKey, TensorDictBase
from torch import nn

from .._exploration import ExplorationType, set_exploration_type
from ._progress import EpisodeReturns
from ._trainer import REWARD_KEY, MissingKeyError, Trainer, TrainerHookBase

__all__ = ["CountFramesLog", "LogScalar", "LogTiming", "LogValidationReward", "UTDRHook"]

_MASK = ("collector", "mask")


class LogScalar(TrainerHookBase):
    """Logs a reduction (mean, sum, min, max) of one entry of each collected batch
    (``pre_steps_log``), and its standard deviation; valid steps only when the batch is
    masked.

    Args:
        key: the entry (default ``("next", "reward")``).
        logname: the logged name (default: ``str(key)``).
        log_pbar: also show the value on the progress bar.
        include_std: also log ``<logname>_std``.
        reduction: ``"mean"``, ``"sum"``, ``"min"`` or ``"max"``.

    Without a batch (``None``: the collector writes into the replay buffer itself) there is
    nothing to log.

    Raises:
        ValueError: unknown ``reduction``.
        KeyError: the batch has no ``key``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({("next", "reward"): torch.tensor([[1.0], [3.0]])}, batch_size=[2])
        >>> out = LogScalar(logname="r_training")(td)
        >>> out["r_training"], round(out["r_training_std"], 4)
        (2.0, 1.4142)
    """

    def __init__(
        self,
        key: NestedKey = REWARD_KEY,
        logname: str | None = None,
        log_pbar: bool = False,
        include_std: bool = True,
        reduction: Literal["mean", "sum", "min", "max"] = "mean",
    ) -> None:
        if reduction not in ("mean", "sum", "min", "max"):
            raise ValueError(
                f"LogScalar reduction must be one of 'mean', 'sum', 'min', 'max', got {reduction!r}"
            )
        self.key = key
        self.logname = logname if logname is not None else str(key)
        self.log_pbar = log_pbar
        self.include_std = include_std
        self.reduction = reduction

    def __call__(self, batch: TensorDictBase | None) -> dict[str, Any] | None:
        if batch is None:
            return None
        value = batch.get(self.key, None)
        if value is None:
            raise MissingKeyError(
                f"LogScalar: the batch has no key {self.key!r}; it has "
                f"{sorted(map(str, batch.keys(True, True)))}"
            )
        mask = batch.get(_MASK, None)
        if mask is not None:
            value = value[mask]
        value = value.detach().float()
        out: dict[str, Any] = {
            self.logname: getattr(value, self.reduction)().item(),
            "log_pbar": self.log_pbar,
        }
        if self.include_std and value.numel() > 1:
            out[f"{self.logname}_std"] = value.std().item()
        return out

    def register(self, trainer: Trainer, name: str | None = None) -> None:
        trainer.register_op("pre_steps_log", self)
        trainer.register_module(name if name is not None else f"log_{self.logname}", self)


class CountFramesLog(TrainerHookBase):
    """Counts the frames collected (``frame_skip`` included) and logs them as ``n_frames``.

    Without a batch (``None``: the collector writes into the replay buffer itself) there is
    nothing to count.

    Args:
        frame_skip: frames per environment step (required, as TorchRL).
        log_pbar: also show the count on the progress bar.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> count = CountFramesLog(frame_skip=2)
        >>> count(TensorDict(batch_size=[3, 4]))["n_frames"]
        24
    """

    def __init__(self, frame_skip: int, log_pbar: bool = False) -> None:
        self.frame_skip = frame_skip
        self.log_pbar = log_pbar
        self.frame_count = 0

    def __call__(self, batch: TensorDictBase | None) -> dict[str, Any] | None:
        if batch is None:
            return None
        mask = batch.get(_MASK, None)
        steps = int(mask.sum()) if mask is not None else batch.numel()
        self.frame_count += steps * self.frame_skip
        return {"n_frames": self.frame_count, "log_pbar": self.log_pbar}

    def state_dict(self) -> dict[str, Any]:
        return {"frame_count": self.frame_count}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.frame_count = int(state_dict["frame_count"])

    def register(self, trainer: Trainer, name: str = "count_frames_log") -> None:
        trainer.register_op("pre_steps_log", self)
        trainer.register_module(name, self)


def _dump_videos(transform: Any, suffix: str | None) -> None:
    """Calls ``dump`` on the transform, or on each transform of a ``Compose``."""
    if transform is None:
        return
    dump = getattr(transform, "dump", None)
    if callable(dump):
        dump(suffix=suffix)
        return
    try:
        parts = list(transform)
    except TypeError:
        return
    for part in parts:
        _dump_videos(part, suffix)


class LogValidationReward(TrainerHookBase):
    """Runs evaluation episodes every ``record_interval`` batches and logs their rewards.

    The policy acts in ``exploration_type`` (``RANDOM`` by default, as TorchRL: it samples
    from its distribution; pass ``ExplorationType.DETERMINISTIC`` for its mode) with
    ``policy.eval()``; the rollout runs ``record_frames`` steps without
    stopping at episode ends. It logs ``r_evaluation`` (the mean reward per frame) and
    ``total_r_evaluation`` (the mean return of the episodes that ended, or of the partial
    episodes when none did). Transforms of the env with a ``dump`` method (``VideoRecorder``)
    write their video after each evaluation. The evaluation runs with forked RNG states, so
    it does not change the training run's random streams (nor, hence, an exact resume);
    its checkpointed state holds the evaluation env's own state (``env_state()``), so a
    resumed run evaluates on the same episodes as an uninterrupted one.

    Keyword Args:
        record_interval: batches between two evaluations.
        record_frames: steps of each evaluation rollout.
        frame_skip: frames per environment step (the per-frame reward is divided by it).
        policy_exploration: the policy.
        environment: the evaluation env (``rollout(max_steps, policy, ...)``).
        exploration_type: how the policy acts during evaluation. Defaults to
            ``ExplorationType.RANDOM``.
        log_keys: entries to log (default ``[("next", "reward")]``).
        out_keys: their logged names (default ``{("next", "reward"): "r_evaluation"}``).
        suffix: the video suffix passed to ``dump``.
        log_pbar: also show the values on the progress bar.

    Examples:
        >>> hook = LogValidationReward(record_interval=10, record_frames=1000,
        ...     policy_exploration=actor, environment=eval_env)  # doctest: +SKIP
        >>> hook.register(trainer)  # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        record_interval: int,
        record_frames: int,
        frame_skip: int = 1,
        policy_exploration: Any,
        environment: Any = None,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        log_keys: list[NestedKey] | None = None,
        out_keys: dict[NestedKey, str] | None = None,
        suffix: str | None = None,
        log_pbar: bool = False,
        recorder: Any = None,
    ) -> None:
        if environment is None:
            environment = recorder
        if environment is None:
            raise ValueError("LogValidationReward needs an evaluation environment")
        if record_interval < 1 or record_frames < 1:
            raise ValueError(
                f"LogValidationReward record_interval and record_frames must be >= 1, got "
                f"{record_interval} and {record_frames}"
            )
        self.policy_exploration = policy_exploration
        self.environment = environment
        self.record_interval = record_interval
        self.record_frames = record_frames
        self.frame_skip = frame_skip
        self.exploration_type = exploration_type
        self.log_keys = [REWARD_KEY] if log_keys is None else list(log_keys)
        self.out_keys = {REWARD_KEY: "r_evaluation", **(out_keys or {})}
        self.suffix = suffix
        self.log_pbar = log_pbar
        self._count = 0

    def _rollout(self) -> TensorDictBase:
        policy = self.policy_exploration
        was_training = policy.training if isinstance(policy, nn.Module) else None
        np_state, py_state = np.random.get_state(), random.getstate()
        devices = [torch.cuda.current_device()] if torch.cuda.is_initialized() else []
        try:
            with (
                torch.random.fork_rng(devices=devices),
                torch.no_grad(),
                set_exploration_type(self.exploration_type),
            ):
                if was_training is not None:
                    policy.eval()
                return self.environment.rollout(
                    self.record_frames, policy, auto_reset=True, break_when_any_done=False
                )
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)
            if was_training:
                policy.train()

    def __call__(self, batch: TensorDictBase | None = None) -> dict[str, Any] | None:
        self._count += 1
        if (self._count - 1) % self.record_interval:
            return None
        td = self._rollout()
        _dump_videos(getattr(self.environment, "transform", None), self.suffix)
        out: dict[str, Any] = {}
        for key in self.log_keys:
            name = self.out_keys.get(key, str(key))
            value = td.get(key).float()
            if key == REWARD_KEY:
                out[name] = value.mean().item() / self.frame_skip
                returns = EpisodeReturns(window=td.numel())
                returns.update(td)
                total = returns.mean
                if total is None:
                    total = value.reshape(*td.batch_size, -1).sum((td.batch_dims - 1, -1)).mean()
                out[f"total_{name}"] = float(total)
            else:
                out[name] = value.mean().item()
        out["log_pbar"] = self.log_pbar
        return out

    def state_dict(self) -> dict[str, Any]:
        """The evaluation count, the env's ``state_dict()`` (its transforms' statistics)
        and, for an env with ``env_state()`` (every ``rl.envs`` env), its runtime state
        (simulator, generators), so that a resumed run evaluates on the episodes an
        uninterrupted one would have."""
        state: dict[str, Any] = {"count": self._count}
        modules = getattr(self.environment, "state_dict", None)
        if callable(modules):
            state["environment"] = modules()
        runtime = getattr(self.environment, "env_state", None)
        if callable(runtime):
            state["env_state"] = runtime()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._count = int(state_dict["count"])
        if "environment" in state_dict and hasattr(self.environment, "load_state_dict"):
            self.environment.load_state_dict(state_dict["environment"])
        if "env_state" in state_dict and hasattr(self.environment, "load_env_state"):
            self.environment.load_env_state(state_dict["env_state"])

    def register(self, trainer: Trainer, name: str = "recorder") -> None:
        trainer.register_op("post_steps_log", self)
        trainer.register_module(name, self)


class LogTiming(TrainerHookBase):
    """Logs the wall time the trainer spent in each hook, as ``<prefix>/hook/<name>``.

    Once the hook is registered (with :meth:`register`, at ``post_steps_log``, or at any
    log point with ``trainer.register_op``), the trainer times every hook call; each call
    of this hook returns the timings so far, named by the hooks' registered names
    (``Trainer(log_timings=True)`` registers one).

    Args:
        prefix (str, optional): the first part of the logged names. Defaults to ``"time"``.
        percall (bool, optional): log the mean time per call (``True``) or the total time.
            Defaults to ``True``.
        erase (bool, optional): reset the timings after each call, so that each logged
            value covers the calls since the last one. Defaults to ``False``.

    Raises:
        RuntimeError: (when called) the hook is not registered with a trainer.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> trainer = Trainer(collector=[TensorDict(batch_size=[4])], total_frames=4,
        ...     frame_skip=1, optim_steps_per_batch=0, progress_bar=False,
        ...     loss_module=lambda td: td)
        >>> timing = LogTiming()
        >>> timing.register(trainer)
        >>> trainer.register_op("batch_process", lambda td: td)
        >>> trainer.train()
        >>> sorted(timing())
        ['time/hook/<lambda>', 'time/hook/log_timing']
    """

    def __init__(self, prefix: str = "time", percall: bool = True, erase: bool = False) -> None:
        self.prefix = prefix
        self.percall = percall
        self.erase = erase
        self._trainer_ref: weakref.ReferenceType[Trainer] | None = None

    def _bind(self, trainer: Trainer) -> None:
        self._trainer_ref = weakref.ref(trainer)
        trainer._time_hooks = True

    def __call__(self, batch: TensorDictBase | None = None) -> dict[str, float]:
        trainer = self._trainer_ref() if self._trainer_ref is not None else None
        if trainer is None:
            raise RuntimeError(
                "LogTiming reads the hook timings of the trainer it is registered with: call "
                "register(trainer) (or trainer.register_op(point, hook)) first"
            )
        timings = trainer._hook_timings(self.percall)
        if self.erase:
            trainer._reset_hook_timings()
        return {f"{self.prefix}/{name}": value for name, value in timings.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "percall": self.percall, "erase": self.erase}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.prefix = str(state_dict.get("prefix", "time"))
        self.percall = bool(state_dict.get("percall", True))
        self.erase = bool(state_dict.get("erase", False))

    def register(self, trainer: Trainer, name: str | None = None) -> None:
        trainer.register_module("log_timing" if name is None else name, self)
        trainer.register_op("post_steps_log", self)


class UTDRHook(TrainerHookBase):
    """Logs the update-to-data ratio: samples trained on per sample collected.

    ``utd_ratio = batch_size * optim_steps / write_count``, from the trainer's replay buffer
    (or the collector's, ``collector.replay_buffer``) and the trainer's optimization step
    count; it is meaningful when the collector fills the buffer in the background
    (``async_collection``). Logged at ``pre_steps_log`` with ``write_count`` and
    ``update_count``; nothing is logged before the buffer's first write. ``update_count``
    is the trainer's count of optimization steps taken (an attempt whose
    ``process_optim_batch`` found no sub-batch is not one).

    The hook holds the trainer weakly (the trainer holds the hook): the pair is freed as
    soon as the user drops the trainer; registering it with another trainer rebinds it.

    Args:
        trainer (Trainer): the trainer whose ratio is logged.

    Raises:
        RuntimeError: (when called) neither the trainer nor its collector has a replay
            buffer with a ``write_count``, or the trainer no longer exists.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> class Buffer:
        ...     write_count, batch_size = 100, 32
        >>> trainer = Trainer(collector=[], total_frames=1, frame_skip=1,
        ...     optim_steps_per_batch=1, progress_bar=False, loss_module=lambda td: td,
        ...     replay_buffer=Buffer())
        >>> trainer._optim_count = 5
        >>> UTDRHook(trainer)()["utd_ratio"]
        1.6
    """

    def __init__(self, trainer: Trainer) -> None:
        self._trainer_ref: weakref.ReferenceType[Trainer] = weakref.ref(trainer)

    def _bind(self, trainer: Trainer) -> None:
        self._trainer_ref = weakref.ref(trainer)

    @property
    def trainer(self) -> Trainer:
        """The trainer whose ratio is logged."""
        trainer = self._trainer_ref()
        if trainer is None:
            raise RuntimeError(
                "UTDRHook's trainer no longer exists (the hook holds it weakly): register the "
                "hook with a live trainer"
            )
        return trainer

    def _counts(self) -> tuple[Any, Any]:
        buffer = getattr(self.trainer, "replay_buffer", None)
        if buffer is None:
            buffer = getattr(self.trainer.collector, "replay_buffer", None)
        if buffer is None:
            getattr_rb = getattr(self.trainer.collector, "getattr_rb", None)
            if callable(getattr_rb):
                return getattr_rb("write_count"), getattr_rb("batch_size")
        if buffer is None or not hasattr(buffer, "write_count"):
            raise RuntimeError(
                "UTDRHook needs the replay buffer the collector writes into (with a "
                "write_count): pass replay_buffer= to the Trainer"
            )
        return buffer.write_count, getattr(buffer, "batch_size", None)

    def __call__(self, batch: TensorDictBase | None = None) -> dict[str, Any]:
        write_count, batch_size = self._counts()
        if callable(write_count):
            write_count = write_count()
        if not write_count:
            return {}
        if batch_size is None:
            warnings.warn(
                "UTDRHook: the replay buffer has no batch_size; the ratio counts one sample "
                "per optimization step",
                stacklevel=2,
            )
            batch_size = 1
        update_count = self.trainer._optim_count  # steps taken (StopIteration not counted)
        return {
            "utd_ratio": batch_size * update_count / write_count,
            "write_count": write_count,
            "update_count": update_count,
            "log_pbar": False,
        }

    def register(self, trainer: Trainer, name: str = "utdr_hook") -> None:
        trainer.register_op("pre_steps_log", self)
        trainer.register_module(name, self)
