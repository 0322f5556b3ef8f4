"""Trainer: the collect / optimize loop with hooks at named points and exact checkpoints."""

from __future__ import annotations

import itertools
import logging
import os
import pathlib
import re
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Mapping
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

__all__ = ["HOOK_POINTS", "REWARD_KEY", "Trainer", "TrainerHookBase"]

_logger = logging.getLogger("rl.core.trainers")

HookPoint = Literal[
    "batch_process",
    "pre_optim_steps",
    "pre_epoch",
    "process_optim_batch",
    "post_loss",
    "process_loss",
    "optimizer",
    "post_steps",
    "post_optim",
    "pre_steps_log",
    "post_steps_log",
    "post_optim_log",
    "pre_epoch_log",
    "post_epoch_log",
    "post_optim_complete_log",
    "post_epoch",
    "setup",
    "shutdown",
]
#: Where :meth:`Trainer.register_op` can put a hook (TorchRL's points; see :class:`Trainer`
#: for where the loop reaches each).
HOOK_POINTS: tuple[str, ...] = HookPoint.__args__

_FORMAT = "rl.trainer/1"

#: Where a collected batch holds the reward (TorchRL's ``torchrl.trainers.trainers.REWARD_KEY``):
#: the default key of :class:`LogScalar`, :class:`LogValidationReward`, :class:`RewardNormalizer`.
REWARD_KEY = ("next", "reward")


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

    def _bind(self, trainer: Trainer) -> None:
        """Called by :meth:`Trainer.register_op` with the trainer the hook is put in (a hook
        that reads the trainer's state keeps a reference); does nothing by default."""
        return None


class MissingKeyError(KeyError):
    """A ``KeyError`` whose message prints as written (``KeyError`` quotes and escapes it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _as_tensordict(losses: Any) -> Any:
    """A tensorclass of losses (the LLM losses') as a TensorDict: hooks add entries to it."""
    if not isinstance(losses, TensorDictBase) and hasattr(losses, "to_tensordict"):
        return losses.to_tensordict()
    return losses


class Trainer:
    """Collects batches, runs optimization steps on each, and calls hooks at named points.

    The loop, with the hook points it reaches (``register_op(point, op)``)::

        setup()
        for batch in collector:
            batch = batch_process(batch)           # e.g. ReplayBufferTrainer.extend
            pre_steps_log(batch)                   # e.g. LogScalar, CountFramesLog, UTDRHook
            pre_optim_steps()                      # e.g. ClearCudaCache
            for _ in range(num_epochs):
                pre_epoch_log(batch)
                epoch_batch = pre_epoch(batch)     # e.g. ValueEstimatorHook (GAE)
                for _ in range(optim_steps_per_batch):
                    sub_batch = process_optim_batch(epoch_batch)  # e.g. ReplayBufferTrainer
                    losses = loss_module(sub_batch)
                    post_loss(sub_batch)                     # e.g. priority updates
                    losses = process_loss(sub_batch, losses) # e.g. scale or weight losses
                    losses = optimizer(losses, ...)          # OptimizerHook: backward, step
                    post_optim()                             # e.g. TargetNetUpdaterHook
                    post_optim_log(sub_batch)
                post_epoch_log(batch)
                post_epoch()
            post_optim_complete_log(optim_steps, mean_losses)  # when a step ran
            post_steps()                           # e.g. UpdateWeights, LRSchedulerHook
            post_steps_log(batch)                  # e.g. LogValidationReward, LogTiming
            save every ``save_trainer_interval`` frames
        shutdown()                                 # then collector.shutdown()

    The ``*_log`` points' ops return a mapping of values to log (or ``None``); the
    ``batch_process``, ``pre_epoch``, ``process_optim_batch``, ``post_loss`` and
    ``process_loss`` ops may return a TensorDict that replaces their input.

    With an ``optimization_stepper``, ``stepper.step(trainer, sub_batch)`` replaces the
    ``loss_module`` / ``post_loss`` / ``process_loss`` / ``optimizer`` lines. When the
    collector writes into the replay buffer itself (it yields ``None``, or
    ``async_collection``), ``batch`` is ``None``: ``batch_process`` is skipped and the other
    points receive ``None``.

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
        total_frames: frames to collect (``frame_skip`` included); ``None``: no budget,
            the run ends when the collector runs out (or a hook calls
            :meth:`request_stop`); with ``async_collection``, the collector's
            ``total_frames`` bounds the replay buffer's writes.
        frame_skip: frames per environment step; ``None`` is 1.
        optim_steps_per_batch: optimization steps after each batch; ``None`` runs as many
            as ``process_optim_batch`` gives (until ``StopIteration`` or ``None``, e.g.
            :class:`ReplayBufferTrainer` with ``iterate=True``).
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
        optimization_stepper: an :class:`OptimizationStepper` (or any object whose
            ``step(trainer, sub_batch)`` runs one whole optimization step: loss, backward,
            optimizer, and returns the detached metrics to log), e.g.
            :class:`DefaultOptimizationStepper` or
            :class:`MixedPrecisionOptimizationStepper`; it replaces the ``loss_module`` /
            ``post_loss`` / ``process_loss`` / ``optimizer`` points (no
            :class:`OptimizerHook` is made for ``optimizer``) and is registered as
            ``"optimization_stepper"`` (its state goes into the checkpoints).
        replay_buffer: the buffer a collector yielding ``None`` writes into: the frames
            collected are counted from its ``write_count``.
        target_net_updater: a target-network updater (``SoftUpdate``...) whose state goes
            into the checkpoints (register a :class:`TargetNetUpdaterHook` to step it).
        batch_size: the learner's batch size; defaults to ``replay_buffer.batch_size``.
        learner_backend: where the optimization runs: only ``"local"`` exists here
            (``"ray"`` raises ``NotImplementedError``).
        learner_backend_options: options of a remote learner backend: must be empty.
        learner_poll_interval: the replay polling interval of a remote learner backend:
            only the default ``0.05`` is accepted.
        checkpoint: a TorchRL-style checkpoint object (``register(name, component)``,
            ``name in checkpoint``, ``save(path)``): the scheduled saves register the
            trainer's parts on it (``loss_module``, ``optimizer``, ``collector``,
            ``replay_buffer``, ``logger``, ``target_updater``, ``trainer_state``,
            ``trainer_module.<hook>``) and call ``checkpoint.save(save_trainer_file)``.
        checkpoint_rotation: saves the ``checkpoint`` with
            ``checkpoint_rotation.save(checkpoint, step=collected_frames, metadata=...)``
            instead; needs ``checkpoint``, exclusive with ``save_trainer_file``.
        checkpoint_metadata: called with the trainer before each rotated save; its mapping
            is added to the metadata (with ``collected_frames`` and ``optim_steps``).
        num_epochs: passes of ``optim_steps_per_batch`` steps over each batch.
        async_collection: the collector fills ``replay_buffer`` in the background
            (``collector.start()``): the trainer waits for its first write, then runs the
            optimization steps on samples until the buffer has taken ``total_frames``.
        log_timings: add a :class:`LogTiming` op at ``post_steps_log``, which logs the mean
            wall time per call of each hook as ``time/hook/<name>`` after each batch. It is
            an option of this trainer object, not part of the run: the op stays out of
            the checkpoints and no ``log_timings`` attribute is kept (as TorchRL's).
        auto_log_optim_steps: log ``optim_steps`` and the mean losses after each
            optimization loop. Defaults to ``True``.

    Keyword Args:
        resume: load ``save_trainer_file`` at the start of :meth:`train` when it exists.

    Raises:
        TypeError: ``total_frames``, ``frame_skip`` or ``save_trainer_interval`` is not an
            int (or ``None`` where allowed).
        ValueError: one of them is below 1, or another argument is out of range.

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
        total_frames: int | None,
        frame_skip: int | None,
        optim_steps_per_batch: int | None,
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
        optimization_stepper: Any | None = None,
        replay_buffer: Any | None = None,
        target_net_updater: Any | None = None,
        batch_size: int | None = None,
        learner_backend: Literal["local", "ray"] = "local",
        learner_backend_options: dict[str, Any] | None = None,
        learner_poll_interval: float = 0.05,
        checkpoint: Any | None = None,
        checkpoint_rotation: Any | None = None,
        checkpoint_metadata: Callable[[Trainer], Mapping[str, Any]] | None = None,
        num_epochs: int = 1,
        async_collection: bool = False,
        log_timings: bool = False,
        auto_log_optim_steps: bool = True,
        resume: bool = False,
    ) -> None:
        if learner_backend == "ray":
            raise NotImplementedError(
                "Trainer learner_backend='ray' (a remote learner) is not provided by rl; "
                "use learner_backend='local'"
            )
        if learner_backend != "local":
            raise ValueError(
                f"Trainer learner_backend must be 'local' or 'ray', got {learner_backend!r}"
            )
        if learner_backend_options:
            raise ValueError(
                "Trainer learner_backend_options configure a remote learner backend, which rl "
                f"does not provide; got {learner_backend_options!r} with learner_backend='local'"
            )
        if learner_poll_interval <= 0:
            raise ValueError(
                f"Trainer learner_poll_interval must be positive, got {learner_poll_interval!r}"
            )
        if learner_poll_interval != 0.05:
            raise ValueError(
                "Trainer learner_poll_interval is the replay polling interval of a remote "
                f"learner backend, which rl does not provide; got {learner_poll_interval!r}"
            )
        if checkpoint_rotation is not None and checkpoint is None:
            raise ValueError("Trainer checkpoint_rotation requires checkpoint")
        if checkpoint_rotation is not None and save_trainer_file is not None:
            raise ValueError("Trainer checkpoint_rotation and save_trainer_file cannot both be set")
        if checkpoint_metadata is not None and checkpoint_rotation is None:
            raise ValueError("Trainer checkpoint_metadata requires checkpoint_rotation")
        if checkpoint_metadata is not None and not callable(checkpoint_metadata):
            raise TypeError(
                f"Trainer checkpoint_metadata must be callable, got {type(checkpoint_metadata)}"
            )
        if isinstance(num_epochs, bool) or not isinstance(num_epochs, int) or num_epochs < 1:
            raise ValueError(f"Trainer num_epochs must be a positive int, got {num_epochs!r}")
        for name, value, optional in (
            ("total_frames", total_frames, True),
            ("frame_skip", frame_skip, True),
            ("save_trainer_interval", save_trainer_interval, False),
        ):
            if value is None and optional:
                continue
            expected = "a positive int or None" if optional else "a positive int"
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"Trainer {name} must be {expected}, got {value!r} ({type(value).__name__})"
                )
            if value < 1:
                raise ValueError(f"Trainer {name} must be {expected}, got {value!r}")
        if optim_steps_per_batch is not None and (
            isinstance(optim_steps_per_batch, bool) or not isinstance(optim_steps_per_batch, int)
        ):
            raise ValueError(
                "Trainer optim_steps_per_batch must be an int >= 0 or None, got "
                f"{optim_steps_per_batch!r}"
            )
        if optim_steps_per_batch is not None and optim_steps_per_batch < 0:
            raise ValueError(
                f"Trainer optim_steps_per_batch must be an int >= 0, got {optim_steps_per_batch}"
            )
        self.collector = collector
        # None: no frame budget, the run ends with the collector (or a hook's request_stop)
        self.total_frames = total_frames
        # None: one frame per environment step
        self.frame_skip = 1 if frame_skip is None else frame_skip
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

        self.replay_buffer = replay_buffer
        self.target_net_updater = target_net_updater
        self._batch_size = batch_size
        self.learner_backend = learner_backend
        self.learner_backend_options: dict[str, Any] = {}
        self.learner_poll_interval = float(learner_poll_interval)
        self.checkpoint = checkpoint
        self.checkpoint_rotation = checkpoint_rotation
        self.checkpoint_metadata = checkpoint_metadata
        self.num_epochs = num_epochs
        self.async_collection = async_collection
        self._collect_in_background = async_collection
        self.auto_log_optim_steps = auto_log_optim_steps
        # wall time and calls of each hook, recorded once a LogTiming hook reads them
        self._hook_times: dict[str, list[float]] = {}
        self._time_hooks = False

        self.seed = seed
        if seed is not None:
            self.set_seed()
        self.optimization_stepper = optimization_stepper
        if optimization_stepper is not None:
            register = getattr(optimization_stepper, "register", None)
            if callable(register):
                register(self, name="optimization_stepper")
            else:
                self.register_module("optimization_stepper", optimization_stepper)
        elif optimizer is not None:
            from ._hooks_optim import OptimizerHook

            OptimizerHook(optimizer).register(self)
        if log_timings:
            from ._hooks_log import LogTiming

            # an option of this trainer, not a hook of the run: it stays out of the
            # checkpoints, so a run resumes whether or not either side logs timings
            timing = LogTiming()
            timing._bind(self)
            self._ops["post_steps_log"].append((timing, {}))

    @property
    def batch_size(self) -> int | None:
        """The learner's batch size: the one given, else ``replay_buffer.batch_size``."""
        if self._batch_size is not None:
            return self._batch_size
        return getattr(self.replay_buffer, "batch_size", None)

    @batch_size.setter
    def batch_size(self, value: int | None) -> None:
        self._batch_size = value

    def compute_loss(self, sub_batch: TensorDictBase, method: str | None = None) -> Any:
        """``loss_module(sub_batch)`` (or its ``method``): what an optimization stepper calls."""
        if method is None:
            return self.loss_module(sub_batch)
        return getattr(self.loss_module, method)(sub_batch)

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
        if isinstance(owner, TrainerHookBase):
            owner._bind(self)
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

    def _hook_name(self, op: Callable) -> str:
        owner = getattr(op, "__self__", op)
        for name, module in self._modules.items():
            if module is owner:
                return name
        return getattr(op, "__name__", type(op).__name__)

    def _run(self, op: Callable, *args: Any, **kwargs: Any) -> Any:
        """``op(*args, **kwargs)``, its wall time recorded once a :class:`LogTiming` reads
        the timings."""
        if not self._time_hooks:
            return op(*args, **kwargs)
        start = time.perf_counter()
        try:
            return op(*args, **kwargs)
        finally:
            entry = self._hook_times.setdefault(self._hook_name(op), [0.0, 0])
            entry[0] += time.perf_counter() - start
            entry[1] += 1

    def _call_transform(self, dest: str, batch: Any) -> Any:
        for op, kwargs in self._ops[dest]:
            out = self._run(op, batch, **kwargs)
            if isinstance(out, TensorDictBase):
                batch = out
        return batch

    def _call_log(self, dest: str, *args: Any) -> None:
        for op, kwargs in self._ops[dest]:
            result = self._run(op, *args, **kwargs)
            if result:
                self._log(**result)

    def _call_plain(self, dest: str) -> None:
        for op, kwargs in self._ops[dest]:
            self._run(op, **kwargs)

    def _hook_timings(self, percall: bool) -> dict[str, float]:
        """The wall time of each hook (``hook/<name>``) since the timings were last reset:
        per call with ``percall``, else in total."""
        return {
            f"hook/{name}": total / n if percall else total
            for name, (total, n) in self._hook_times.items()
        }

    def _reset_hook_timings(self) -> None:
        self._hook_times.clear()

    def _frame_budget_reached(self) -> bool:
        return self.total_frames is not None and self.collected_frames >= self.total_frames

    def _async_write_budget(self) -> int:
        """How many writes into the replay buffer an ``async_collection`` run waits for:
        ``total_frames``, else the collector's own ``total_frames``."""
        if self.total_frames is not None:
            return self.total_frames
        budget = getattr(self.collector, "total_frames", None)
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise RuntimeError(
                "Trainer(async_collection=True, total_frames=None) takes its frame budget "
                "from the collector's total_frames, but the collector "
                f"({type(self.collector).__name__}) has total_frames={budget!r}: pass a "
                "positive total_frames to the Trainer or to the collector"
            )
        return budget

    def _batches(self):
        """The collector's batches; with ``async_collection``, ``None`` until the buffer the
        collector fills in the background has taken the frame budget."""
        if not self._collect_in_background:
            yield from self.collector
            return
        budget = self._async_write_budget()
        buffer = self.replay_buffer
        if buffer is None:
            buffer = getattr(self.collector, "replay_buffer", None)
            self.replay_buffer = buffer
        if getattr(buffer, "write_count", None) is None:
            raise RuntimeError(
                "Trainer(async_collection=True) needs the replay buffer the collector writes "
                "into (with a write_count): pass replay_buffer="
            )
        self.collector.start()
        while buffer.write_count == 0:
            time.sleep(0.1)
        while buffer.write_count < budget:
            yield None

    # -- seeding ------------------------------------------------------------------------------
    def set_seed(self) -> None:
        """Seeds torch, numpy, python and the collector with ``self.seed``."""
        seed_everything(self.seed)
        set_seed = getattr(self.collector, "set_seed", None)
        if callable(set_seed):
            set_seed(self.seed)

    # -- the loop ------------------------------------------------------------------------------
    def train(self) -> None:
        """Runs the loop until ``total_frames`` are collected (with ``total_frames=None``,
        until the collector runs out), or a hook asks to stop."""
        if self.resume and self.save_trainer_file is not None and self.save_trainer_file.exists():
            self.load_from_file(self.save_trainer_file)
            _logger.info(
                "resumed from %s at %d frames", self.save_trainer_file, self.collected_frames
            )
        if self._frame_budget_reached():
            return
        self._pbar = ProgressBar(self.progress_bar, self.total_frames, self.collected_frames)
        init_random_frames = getattr(self.collector, "init_random_frames", 0) or 0
        setup_done = False
        try:
            self._call_plain("setup")
            setup_done = True
            for batch in self._batches():
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
                self._call_log("pre_steps_log", batch)
                if self.collected_frames >= init_random_frames:
                    self.optim_steps(batch)
                self._call_plain("post_steps")
                self._call_log("post_steps_log", batch)
                self._pbar.update(current_frames)
                done = self._stop_training or self._frame_budget_reached()
                self.save_trainer(force_save=done)
                if done:
                    if self._stop_reason:
                        _logger.info("trainer stopping early: %s", self._stop_reason)
                    break
            else:  # the collector ran out before total_frames: the run ends here too
                self.save_trainer(force_save=True)
        finally:
            self._pbar.close()
            if setup_done:  # the shutdown ops release what the setup ops took, as TorchRL's
                self._call_plain("shutdown")
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
        for _epoch in range(self.num_epochs):
            self._call_log("pre_epoch_log", batch)
            # each epoch starts from the collected batch (e.g. advantages recomputed on it)
            epoch_batch = self._call_transform("pre_epoch", batch)
            # None: as many steps as process_optim_batch gives (an iterated replay buffer)
            n = self.optim_steps_per_batch
            for _ in itertools.count() if n is None else range(n):
                self._optim_count += 1  # before the hooks, as TorchRL
                try:
                    sub_batch = self._call_transform("process_optim_batch", epoch_batch)
                except StopIteration:  # an iterated replay buffer ran out: this epoch ends
                    sub_batch = None
                if sub_batch is None:  # nothing left to train on (TorchRL's stop)
                    # no step ran: the count stays the number of steps taken (TorchRL's
                    # counts this attempt too, and its UTD ratio with it)
                    self._optim_count -= 1
                    break
                if self.optimization_stepper is not None:
                    losses = _as_tensordict(
                        self._run(self.optimization_stepper.step, self, sub_batch)
                    )
                else:
                    losses = _as_tensordict(self.loss_module(sub_batch))
                    self._call_transform("post_loss", sub_batch)
                    for op, kwargs in self._ops["process_loss"]:
                        out = self._run(op, sub_batch, losses, **kwargs)
                        if isinstance(out, TensorDictBase):
                            losses = out
                    for i, (op, kwargs) in enumerate(self._ops["optimizer"]):
                        out = self._run(
                            op, losses, self.clip_grad_norm, self.clip_norm, i, **kwargs
                        )
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
            self._call_log("post_epoch_log", batch)
            self._call_plain("post_epoch")
        if counts:
            average = losses.empty()
            for key, total in sums.items():
                average.set(key, total / counts[key])
            self.last_losses = average
            total = sum(v for k, v in average.items() if str(k).startswith("loss"))
            if self._pbar is not None and isinstance(total, torch.Tensor):
                self._pbar.values["loss"] = float(total)
            self._call_log("post_optim_complete_log", self._optim_count, average)
            if self.auto_log_optim_steps:
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
        if self.save_trainer_file is None and self.checkpoint_rotation is None:
            return None
        if force_save or self.collected_frames - self._last_save >= self.save_trainer_interval:
            self._last_save = self.collected_frames
            if self.checkpoint is None:
                return atomic_save(self.state_dict(), self.save_trainer_file)
            checkpoint = self._register_checkpoint_components()
            if self.checkpoint_rotation is not None:
                metadata = {}
                if self.checkpoint_metadata is not None:
                    extra = self.checkpoint_metadata(self)
                    if not isinstance(extra, Mapping):
                        raise TypeError(
                            f"checkpoint_metadata must return a mapping, got {type(extra)}"
                        )
                    metadata.update(extra)
                metadata.update(
                    collected_frames=self.collected_frames, optim_steps=self._optim_count
                )
                self.checkpoint_rotation.save(
                    checkpoint, step=self.collected_frames, metadata=metadata
                )
                return None
            checkpoint.save(self.save_trainer_file)
            return pathlib.Path(self.save_trainer_file)
        return None

    def _register_checkpoint_components(self) -> Any:
        """Registers the trainer's parts, by TorchRL's names, on ``self.checkpoint``."""
        checkpoint = self.checkpoint

        def register(name: str, component: Any) -> None:
            if component is None or name in checkpoint:
                return
            if callable(getattr(component, "state_dict", None)) and callable(
                getattr(component, "load_state_dict", None)
            ):
                checkpoint.register(name, component)
            else:
                self._warn_once(
                    f"skipping the trainer's {name!r} ({type(component).__name__}): it has no "
                    "state_dict/load_state_dict to checkpoint"
                )

        register("loss_module", self.loss_module)
        register("optimizer", self.optimizer)
        register("collector", self.collector)
        register("replay_buffer", self.replay_buffer)
        register("logger", self.logger)
        register("target_updater", self.target_net_updater)
        register("trainer_state", _TrainerState(self))
        for name, module in self._modules.items():
            if name in ("optimizer", "replay_buffer") and name in checkpoint:
                continue
            register(f"trainer_module.{name}", module)
        return checkpoint

    def load_from_file(self, file: str | os.PathLike) -> Trainer:
        """Loads a checkpoint written by :meth:`save_trainer` (tensors and plain containers
        only: ``weights_only=True``); with a ``checkpoint`` object, its ``load(file)`` restores
        the components registered on it.

        Raises:
            FileNotFoundError: there is no file.
            CheckpointError: the file holds other objects, or comes from another
                configuration.
        """
        if self.checkpoint is not None:
            # a TorchRL-style checkpoint object reads its own format
            self._register_checkpoint_components().load(file)
            return self
        self.load_state_dict(load_checkpoint(file))
        return self

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(collector={type(self.collector).__name__}, "
            f"loss_module={type(self.loss_module).__name__}, frames={self.collected_frames}/"
            f"{self.total_frames}, optim_steps_per_batch={self.optim_steps_per_batch}, "
            f"hooks={sorted(self._modules)})"
        )


class _TrainerState:
    """The trainer's counters and RNG states, as a checkpoint component."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        t = self.trainer
        return {
            "collected_frames": t.collected_frames,
            "_optim_count": t._optim_count,
            "_last_log": dict(t._last_log),
            "_last_save": t._last_save,
            "rng": get_rng_state(),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        t = self.trainer
        t.collected_frames = int(state_dict["collected_frames"])
        t._optim_count = int(state_dict["_optim_count"])
        t._last_log = dict(state_dict["_last_log"])
        t._last_save = int(state_dict["_last_save"])
        if "rng" in state_dict:
            set_rng_state(state_dict["rng"])


def _restore(what: str, target: Any, state: Any) -> None:
    """``target.load_state_dict(state)``, a refusal reported as a :class:`CheckpointError`."""
    try:
        target.load_state_dict(from_plain(state))
    except (ValueError, TypeError, KeyError) as err:
        raise CheckpointError(
            f"the checkpoint's state of {what} cannot be restored: {err}"
        ) from err
