"""Trainer: the collect / optimize loop with hooks at named points and exact checkpoints."""

from __future__ import annotations

import logging
import os
import pathlib
import re
import warnings
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Literal

import torch
from tensordict import TensorDictBase
from torch import nn

from .._seed import seed_everything
from ._checkpoint import (
    CheckpointError,
    atomic_save,
    check_state_compatible,
    from_plain,
    get_rng_state,
    load_checkpoint,
    set_rng_state,
    to_plain,
)
from ._progress import ProgressBar

__all__ = ["HOOK_POINTS", "Trainer", "TrainerHookBase"]

_logger = logging.getLogger("rl.core.trainers")

HookPoint = Literal[
    "batch_process",
    "pre_optim_steps",
    "process_optim_batch",
    "post_loss",
    "optimizer",
    "post_steps",
    "post_optim",
    "pre_steps_log",
    "post_steps_log",
    "post_optim_log",
]
#: Where :meth:`Trainer.register_op` can put a hook, in the order the loop reaches them.
HOOK_POINTS: tuple[str, ...] = HookPoint.__args__

_FORMAT = "rl.trainer/1"


class TrainerHookBase:
    """Base of the trainer hooks: a hook knows its default point and may hold state.

    Subclasses implement :meth:`register` (``trainer.register_op(point, self)`` and
    ``trainer.register_module(name, self)``); hooks that hold state override
    :meth:`state_dict` / :meth:`load_state_dict` (tensors and plain containers only), which
    the trainer's checkpoints call.
    """

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None

    def register(self, trainer: Trainer, name: str | None = None) -> None:
        """Attaches the hook to ``trainer``; abstract: every hook class defines it."""
        raise NotImplementedError(f"{type(self).__name__} does not define register()")


class MissingKeyError(KeyError):
    """A ``KeyError`` whose message prints as written (``KeyError`` quotes and escapes it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class Trainer:
    """Collects batches, runs optimization steps on each, and calls hooks at named points.

    The loop, with the hook points it reaches (``register_op(point, op)``)::

        for batch in collector:
            batch = batch_process(batch)           # e.g. ReplayBufferTrainer.extend
            pre_steps_log(batch)                   # e.g. LogScalar, CountFramesLog
            pre_optim_steps()
            for _ in range(optim_steps_per_batch):
                sub_batch = process_optim_batch(batch)   # e.g. ReplayBufferTrainer.sample
                losses = loss_module(sub_batch)
                post_loss(sub_batch)                     # e.g. priority updates
                losses = optimizer(losses, ...)          # OptimizerHook: backward, clip, step
                post_optim()                             # e.g. TargetNetUpdaterHook
                post_optim_log(sub_batch)
            post_steps()                           # e.g. UpdateWeights, LRSchedulerHook
            post_steps_log(batch)                  # e.g. LogValidationReward, EarlyStopping
            save every ``save_trainer_interval`` frames

    The trainer is duck-typed: the collector is any iterable of TensorDicts (with
    ``state_dict``/``load_state_dict``, ``set_seed`` and ``shutdown`` when it has them), the
    loss any module returning a TensorDict of ``loss_*`` entries.

    Checkpoints (``save_trainer_file``) hold everything the run depends on: the loss module
    (with its target networks), the collector's state, every registered hook's state (the
    optimizers, LR schedulers, replay buffers...), the logger's counters and the torch /
    numpy / python RNG states. They are written atomically and read with
    ``weights_only=True``; with ``resume=True`` a run started again with the same command
    continues from the last one and ends with the parameters an uninterrupted run would have.

    Args:
        collector: an iterable of TensorDict batches ``[*B, T]``.
        total_frames: frames to collect (``frame_skip`` included).
        frame_skip: frames per environment step.
        optim_steps_per_batch: optimization steps after each batch.
        loss_module: maps a batch to a TensorDict whose ``loss*`` entries are summed.
        optimizer: registered as an :class:`OptimizerHook` when given.
        logger: an ``rl.core.loggers`` logger (``log_scalar(name, value, step)``).
        clip_grad_norm: clip the global gradient norm (``True``) or each gradient value.
        clip_norm: the clipping threshold; ``None`` disables clipping.
        progress_bar: show a tqdm bar (frames, recent episode return, loss) when attached
            to a terminal.
        seed: seeds torch, numpy, python and the collector (``collector.set_seed``).
        save_trainer_interval: frames between two checkpoints.
        log_interval: frames between two logger writes of one value.
        save_trainer_file: the checkpoint file (``None``: no checkpoint).

    Keyword Args:
        resume: load ``save_trainer_file`` at the start of :meth:`train` when it exists.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core.trainers import Trainer
        >>> net = torch.nn.Linear(3, 1)
        >>> def loss(td):
        ...     return TensorDict(loss_mse=(net(td["obs"]) - td["target"]).pow(2).mean())
        >>> batches = [TensorDict(obs=torch.randn(8, 3), target=torch.randn(8, 1), batch_size=[8])
        ...            for _ in range(4)]
        >>> trainer = Trainer(collector=batches, total_frames=32, frame_skip=1,
        ...                   optim_steps_per_batch=2, loss_module=loss,
        ...                   optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
        ...                   progress_bar=False)
        >>> trainer.train()
        >>> trainer.collected_frames, trainer._optim_count
        (32, 8)
    """

    def __init__(
        self,
        *,
        collector: Any,
        total_frames: int,
        frame_skip: int,
        optim_steps_per_batch: int,
        loss_module: nn.Module | Callable[[TensorDictBase], TensorDictBase],
        optimizer: torch.optim.Optimizer | None = None,
        logger: Any | None = None,
        clip_grad_norm: bool = True,
        clip_norm: float | None = None,
        progress_bar: bool = True,
        seed: int | None = None,
        save_trainer_interval: int = 10000,
        log_interval: int = 10000,
        save_trainer_file: str | pathlib.Path | None = None,
        resume: bool = False,
    ) -> None:
        for name, value in (
            ("total_frames", total_frames),
            ("frame_skip", frame_skip),
            ("save_trainer_interval", save_trainer_interval),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Trainer {name} must be a positive int, got {value!r}")
        if isinstance(optim_steps_per_batch, bool) or not isinstance(optim_steps_per_batch, int):
            raise ValueError(
                f"Trainer optim_steps_per_batch must be an int >= 0, got {optim_steps_per_batch!r}"
            )
        if optim_steps_per_batch < 0:
            raise ValueError(
                f"Trainer optim_steps_per_batch must be an int >= 0, got {optim_steps_per_batch}"
            )
        self.collector = collector
        self.total_frames = total_frames
        self.frame_skip = frame_skip
        self.optim_steps_per_batch = optim_steps_per_batch
        self.loss_module = loss_module
        self.optimizer = optimizer
        self.logger = logger
        self.clip_grad_norm = clip_grad_norm
        self.clip_norm = clip_norm
        self.progress_bar = progress_bar
        self.save_trainer_interval = save_trainer_interval
        self._log_interval = log_interval
        self.save_trainer_file = (
            pathlib.Path(save_trainer_file) if save_trainer_file is not None else None
        )
        self.resume = resume

        self.collected_frames = 0
        self._optim_count = 0
        self._seen_write_count = 0  # the replay buffer's write_count at the last batch
        self._last_log: dict[str, int] = {}
        self._last_save = 0
        self._log_dict: dict[str, list] = defaultdict(list)
        self._stop_training = False
        self._stop_reason: str | None = None
        self._ops: dict[str, list[tuple[Callable, dict]]] = {p: [] for p in HOOK_POINTS}
        self._modules: dict[str, Any] = {}
        self._warned: set[str] = set()
        self._pbar: ProgressBar | None = None
        self.last_losses: TensorDictBase | None = None

        self.seed = seed
        if seed is not None:
            self.set_seed()
        if optimizer is not None:
            from ._hooks_optim import OptimizerHook

            OptimizerHook(optimizer).register(self)

    # -- hooks -------------------------------------------------------------------------------
    def register_op(self, dest: HookPoint, op: Callable, **kwargs) -> None:
        """Calls ``op`` at the point ``dest`` of the loop (see the class docstring).

        A hook object's state is saved in the checkpoints: a :class:`TrainerHookBase`, or a
        bound method of one, not yet registered with :meth:`register_module` is registered
        under its snake-cased class name.

        Raises:
            ValueError: ``dest`` is not one of :data:`HOOK_POINTS`.
            TypeError: ``op`` is not callable.
        """
        if dest not in self._ops:
            raise ValueError(
                f"unknown hook point {dest!r}; valid points are: {', '.join(HOOK_POINTS)}"
            )
        if not callable(op):
            raise TypeError(f"register_op expects a callable op, got {type(op).__name__}")
        owner = getattr(op, "__self__", op)
        if isinstance(owner, TrainerHookBase) and not any(
            m is owner for m in self._modules.values()
        ):
            base = _snake(type(owner).__name__)
            name, i = base, 1
            while name in self._modules:
                i += 1
                name = f"{base}_{i}"
            self._modules[name] = owner
        self._ops[dest].append((op, kwargs))

    register_hook = register_op

    def register_module(self, module_name: str, module: Any) -> None:
        """Names an object whose ``state_dict`` goes into the checkpoints.

        Raises:
            RuntimeError: ``module_name`` is already taken by another object.
        """
        current = self._modules.get(module_name)
        if current is module:
            return
        if current is not None:
            raise RuntimeError(
                f"{module_name!r} is already registered with the trainer, choose a different name"
            )
        # a hook first auto-registered by register_op moves to its explicit name
        for name, m in list(self._modules.items()):
            if m is module:
                del self._modules[name]
        self._modules[module_name] = module

    def request_stop(self, reason: str | None = None) -> None:
        """Ends :meth:`train` after the current batch (a checkpoint is saved first)."""
        self._stop_training = True
        self._stop_reason = reason

    def _call_transform(self, dest: str, batch: Any) -> Any:
        for op, kwargs in self._ops[dest]:
            out = op(batch, **kwargs)
            if isinstance(out, TensorDictBase):
                batch = out
        return batch

    def _call_log(self, dest: str, batch: Any) -> None:
        for op, kwargs in self._ops[dest]:
            result = op(batch, **kwargs)
            if result:
                self._log(**result)

    def _call_plain(self, dest: str) -> None:
        for op, kwargs in self._ops[dest]:
            op(**kwargs)

    # -- seeding ------------------------------------------------------------------------------
    def set_seed(self) -> None:
        """Seeds torch, numpy, python and the collector with ``self.seed``."""
        seed_everything(self.seed)
        set_seed = getattr(self.collector, "set_seed", None)
        if callable(set_seed):
            set_seed(self.seed)

    # -- the loop ------------------------------------------------------------------------------
    def train(self) -> None:
        """Runs the loop until ``total_frames`` are collected or a hook asks to stop."""
        if self.resume and self.save_trainer_file is not None and self.save_trainer_file.exists():
            self.load_from_file(self.save_trainer_file)
            _logger.info(
                "resumed from %s at %d frames", self.save_trainer_file, self.collected_frames
            )
        if self.collected_frames >= self.total_frames:
            return
        self._pbar = ProgressBar(self.progress_bar, self.total_frames, self.collected_frames)
        init_random_frames = getattr(self.collector, "init_random_frames", 0) or 0
        try:
            for batch in self.collector:
                if batch is None:
                    # the collector writes into the trainer's replay buffer itself: the
                    # frames are what the buffer took in; no batch for the batch hooks
                    current_frames = self._frames_written() * self.frame_skip
                else:
                    self._pbar.observe(batch)
                    batch = self._call_transform("batch_process", batch)
                    mask = batch.get(("collector", "mask"), None)
                    steps = int(mask.sum()) if mask is not None else batch.numel()
                    current_frames = steps * self.frame_skip
                self.collected_frames += current_frames
                if batch is not None:
                    self._call_log("pre_steps_log", batch)
                if self.collected_frames >= init_random_frames:
                    self.optim_steps(batch)
                self._call_plain("post_steps")
                if batch is not None:
                    self._call_log("post_steps_log", batch)
                self._pbar.update(current_frames)
                done = self._stop_training or self.collected_frames >= self.total_frames
                self.save_trainer(force_save=done)
                if done:
                    if self._stop_reason:
                        _logger.info("trainer stopping early: %s", self._stop_reason)
                    break
            else:  # the collector ran out before total_frames: the run ends here too
                self.save_trainer(force_save=True)
        finally:
            self._pbar.close()
        self.shutdown()

    def _frames_written(self) -> int:
        """Frames the replay buffer took in since the last call (a collector that yields
        ``None`` writes into it itself)."""
        buffer = getattr(self, "replay_buffer", None)
        count = getattr(buffer, "write_count", None)
        if count is None:
            raise RuntimeError(
                "the collector yielded None (it writes into a replay buffer itself), but the "
                "trainer has no replay_buffer with a write_count to count the frames from: "
                "pass the collector's replay buffer to the trainer"
            )
        frames, self._seen_write_count = count - self._seen_write_count, count
        return frames

    def optim_steps(self, batch: TensorDictBase | None) -> None:
        """Runs ``optim_steps_per_batch`` optimization steps on ``batch``."""
        self._call_plain("pre_optim_steps")
        sums: dict = {}
        counts: dict = {}
        for _ in range(self.optim_steps_per_batch):
            self._optim_count += 1
            try:
                sub_batch = self._call_transform("process_optim_batch", batch)
            except StopIteration:  # an iterated replay buffer ran out: no more steps
                break
            losses = self.loss_module(sub_batch)
            if not isinstance(losses, TensorDictBase) and hasattr(losses, "to_tensordict"):
                # a tensorclass output (the LLM losses'): hooks add entries (grad_norm_0)
                losses = losses.to_tensordict()
            self._call_transform("post_loss", sub_batch)
            for i, (op, kwargs) in enumerate(self._ops["optimizer"]):
                out = op(losses, self.clip_grad_norm, self.clip_norm, i, **kwargs)
                if isinstance(out, TensorDictBase):
                    losses = out
            losses = losses.detach()
            self._call_plain("post_optim")
            self._call_log("post_optim_log", sub_batch)
            # each entry averaged over the steps that wrote it (an optimizer hook that
            # accumulates gradients writes its grad norm only on the steps it steps)
            for key, value in losses.items(include_nested=True, leaves_only=True):
                count = counts.get(key, 0)
                sums[key] = value if count == 0 else sums[key] + value
                counts[key] = count + 1
        if counts:
            average = losses.empty()
            for key, total in sums.items():
                average.set(key, total / counts[key])
            self.last_losses = average
            total = sum(v for k, v in average.items() if str(k).startswith("loss"))
            if self._pbar is not None and isinstance(total, torch.Tensor):
                self._pbar.values["loss"] = float(total)
            self._log(optim_steps=self._optim_count, **dict(average.items()))

    def _log(self, log_pbar: bool = False, **kwargs) -> None:
        frames = self.collected_frames
        for key, item in kwargs.items():
            self._log_dict[key].append(item)
            if frames - self._last_log.get(key, 0) > self._log_interval or frames == 0:
                self._last_log[key] = frames
                if self.logger is not None and not (
                    isinstance(item, torch.Tensor) and item.numel() != 1
                ):
                    self.logger.log_scalar(key, item, step=frames)
            if log_pbar and self._pbar is not None:
                self._pbar.values[key] = (
                    float(item) if isinstance(item, torch.Tensor | float) else item
                )

    def shutdown(self) -> None:
        """Shuts the collector down (when it has ``shutdown``)."""
        shutdown = getattr(self.collector, "shutdown", None)
        if callable(shutdown):
            shutdown()

    # -- checkpoints ------------------------------------------------------------------------
    def _warn_once(self, reason: str) -> None:
        if reason not in self._warned:
            self._warned.add(reason)
            warnings.warn(reason, stacklevel=3)

    def state_dict(self) -> dict[str, Any]:
        """Everything the run depends on, as tensors and plain containers."""
        rng = get_rng_state()
        state: dict[str, Any] = {
            "format": _FORMAT,
            "state": {
                "collected_frames": self.collected_frames,
                "_optim_count": self._optim_count,
                "_last_log": dict(self._last_log),
                "_last_save": self._last_save,
                "_seen_write_count": self._seen_write_count,
            },
            "rng": rng,
            "hooks": {name: to_plain(m.state_dict()) for name, m in self._modules.items()},
        }
        if isinstance(self.loss_module, nn.Module):
            state["loss_module"] = self.loss_module.state_dict()
        collector_state = getattr(self.collector, "state_dict", None)
        if callable(collector_state):
            cstate = collector_state()
            if isinstance(cstate, dict) and cstate.get("root") is not None:
                if "env_state" not in cstate:
                    self._warn_once(
                        "the collector's state has no env_state (its environment's state "
                        "is not saved): a run resumed from this checkpoint continues from it "
                        "but will not be bit-identical to an uninterrupted run"
                    )
            workers = cstate.get("workers") if isinstance(cstate, dict) else None
            if workers is not None and (
                cstate.get("exact") is False
                or any(isinstance(w, dict) and "env_state" not in w for w in workers)
            ):
                self._warn_once(
                    f"the collector ({type(self.collector).__name__}) runs in worker "
                    "processes whose batches or environments cannot be replayed exactly: a "
                    "run resumed from this checkpoint continues from it but will not be "
                    "bit-identical to an uninterrupted run"
                )
            state["collector"] = to_plain(cstate)
        else:
            self._warn_once(
                f"the collector ({type(self.collector).__name__}) has no state_dict(): a run "
                "resumed from this checkpoint restarts collection and is not exact"
            )
        logger_state = getattr(self.logger, "state_dict", None)
        if callable(logger_state):
            state["logger"] = to_plain(logger_state())
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`.

        Raises:
            CheckpointError: the checkpoint comes from another configuration (naming the first
                parameter or hook that differs).
        """
        if state_dict.get("format") != _FORMAT:
            raise CheckpointError(
                f"not a trainer checkpoint: format {state_dict.get('format')!r}, "
                f"expected {_FORMAT!r}"
            )
        if isinstance(self.loss_module, nn.Module):
            if "loss_module" not in state_dict:
                raise CheckpointError(
                    "checkpoint does not match this configuration: it has no loss_module state"
                )
            check_state_compatible(
                state_dict["loss_module"], self.loss_module.state_dict(), "loss_module"
            )
        hooks = state_dict.get("hooks", {})
        for name in self._modules:
            if name not in hooks:
                raise CheckpointError(
                    f"checkpoint does not match this configuration: hook {name!r} is registered "
                    f"here but not in the checkpoint (it has {sorted(hooks)})"
                )
        for name in hooks:
            if name not in self._modules:
                raise CheckpointError(
                    f"checkpoint does not match this configuration: the checkpoint has hook "
                    f"{name!r}, which is not registered here (registered: {sorted(self._modules)})"
                )
        for name, module in self._modules.items():
            if isinstance(module, nn.Module):
                check_state_compatible(hooks[name], module.state_dict(), f"hooks[{name!r}]")
        if isinstance(self.loss_module, nn.Module):
            self.loss_module.load_state_dict(state_dict["loss_module"])
        for name, module in self._modules.items():
            _restore(f"hook {name!r}", module, hooks[name])
        if "collector" in state_dict and hasattr(self.collector, "load_state_dict"):
            _restore("the collector", self.collector, state_dict["collector"])
        if "logger" in state_dict and hasattr(self.logger, "load_state_dict"):
            _restore("the logger", self.logger, state_dict["logger"])
        inner = state_dict["state"]
        self.collected_frames = int(inner["collected_frames"])
        self._optim_count = int(inner["_optim_count"])
        self._last_log = dict(inner["_last_log"])
        self._last_save = int(inner["_last_save"])
        # absent from checkpoints written before collectors could yield None
        self._seen_write_count = int(inner.get("_seen_write_count", 0))
        set_rng_state(state_dict["rng"])

    def save_trainer(self, force_save: bool = False) -> pathlib.Path | None:
        """Saves a checkpoint when ``save_trainer_interval`` frames passed since the last one
        (or when ``force_save``); returns its path, ``None`` when nothing was saved."""
        if self.save_trainer_file is None:
            return None
        if force_save or self.collected_frames - self._last_save >= self.save_trainer_interval:
            self._last_save = self.collected_frames
            return atomic_save(self.state_dict(), self.save_trainer_file)
        return None

    def load_from_file(self, file: str | os.PathLike) -> Trainer:
        """Loads a checkpoint written by :meth:`save_trainer` (tensors and plain containers
        only: ``weights_only=True``).

        Raises:
            FileNotFoundError: there is no file.
            CheckpointError: the file holds other objects, or comes from another
                configuration.
        """
        self.load_state_dict(load_checkpoint(file))
        return self

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(collector={type(self.collector).__name__}, "
            f"loss_module={type(self.loss_module).__name__}, frames={self.collected_frames}/"
            f"{self.total_frames}, optim_steps_per_batch={self.optim_steps_per_batch}, "
            f"hooks={sorted(self._modules)})"
        )


def _restore(what: str, target: Any, state: Any) -> None:
    """``target.load_state_dict(state)``, a refusal reported as a :class:`CheckpointError`."""
    try:
        target.load_state_dict(from_plain(state))
    except (ValueError, TypeError, KeyError) as err:
        raise CheckpointError(
            f"the checkpoint's state of {what} cannot be restored: {err}"
        ) from err
