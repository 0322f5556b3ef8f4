"""``GRPOTrainer``: the trainer's loop for LLM post-training (GRPO and the losses like it)."""

from __future__ import annotations

import contextlib
import math
import pathlib
import warnings
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from ._hooks_data import ReplayBufferTrainer
from ._hooks_log import LogScalar
from ._hooks_optim import (
    OptimizerHook,
    UpdateWeights,
    check_saved_grads,
    restore_grads,
    saved_grads,
    scaler_step,
)
from ._trainer import Trainer

__all__ = ["GRPOTrainer"]


class _AccumulatingOptimizerHook(OptimizerHook):
    """An :class:`OptimizerHook` that steps every ``accumulation`` calls (the gradients of
    the calls in between add up, each loss divided by ``accumulation``), back-propagates
    outside autocast, and scales the loss for float16 mixed precision.

    A non-finite loss is not back-propagated: the gradients accumulated in its cycle are
    dropped and the cycle restarts; a non-finite gradient norm (without a grad scaler, which
    skips those steps itself) skips the optimizer step. Each skip is counted in
    ``skipped_nonfinite_steps`` (the scaler's logged, the others warned) and reports no
    ``grad_norm_<i>``. Mid-cycle, the accumulated gradients are part of the state, so a
    checkpoint taken between two optimizer steps resumes exactly.
    """

    def __init__(self, optimizer, accumulation: int, scaler, device_type: str) -> None:
        super().__init__(optimizer)
        self.accumulation = accumulation
        self.scaler = scaler
        self.device_type = device_type
        self.calls = 0
        self.skipped_nonfinite_steps = 0

    def _skip(self, what: str, value: torch.Tensor) -> None:
        self.skipped_nonfinite_steps += 1
        warnings.warn(
            f"GRPOTrainer: optimizer step skipped, the {what} is non-finite ({value.item()}); "
            f"{self.skipped_nonfinite_steps} skipped so far",
            RuntimeWarning,
            stacklevel=4,
        )
        self.optimizer.zero_grad(set_to_none=True)

    def __call__(self, losses_td, clip_grad_norm=True, clip_norm=None, index=0):
        terms = [v for k, v in losses_td.items() if str(k).startswith("loss")]
        if not terms:
            raise ValueError(
                f"GRPOTrainer: no 'loss*' entry to minimize among {sorted(losses_td.keys())}"
            )
        loss = sum(terms) / self.accumulation
        if not torch.isfinite(loss.detach()).all():
            # one such loss would poison the whole cycle's gradients: drop them, restart it
            self._skip("loss", loss.detach().sum())
            self.calls = 0
            return losses_td
        with torch.autocast(self.device_type, enabled=False):
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        self.calls += 1
        if self.calls % self.accumulation:
            return losses_td
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        norm = self._grad_clip(clip_grad_norm, clip_norm)
        if self.scaler is not None:
            stepped = scaler_step(
                self.scaler, self.optimizer, norm, "GRPOTrainer", self.skipped_nonfinite_steps
            )
            if not stepped:
                self.skipped_nonfinite_steps += 1
        elif not torch.isfinite(norm):
            self._skip("gradient norm", norm)
            stepped = False
        else:
            self.optimizer.step()
            stepped = True
        if stepped:  # a skipped step reports no norm: neither inf nor a placeholder
            losses_td.set(f"grad_norm_{index}", norm)
        self.optimizer.zero_grad(set_to_none=True)
        return losses_td

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["calls"] = self.calls
        state["skipped_nonfinite_steps"] = self.skipped_nonfinite_steps
        if self.calls % self.accumulation:
            # mid-cycle: the gradients accumulated so far (None where a parameter has none)
            state["grads"] = saved_grads(self._params())
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        grads = state_dict.get("grads")
        params = self._params()
        check_saved_grads(params, grads)
        super().load_state_dict(state_dict)
        self.calls = int(state_dict.get("calls", 0))
        self.skipped_nonfinite_steps = int(state_dict.get("skipped_nonfinite_steps", 0))
        restore_grads(params, grads)
        if self.scaler is not None and "scaler" in state_dict:
            self.scaler.load_state_dict(state_dict["scaler"])


class _Sender:
    """What :class:`UpdateWeights` calls (``update_policy_weights_``), from a weight-sync
    sender's ``update_weights()`` or a collector's ``update_policy_weights_()``."""

    def __init__(self, sender: Any) -> None:
        push = getattr(sender, "update_weights", None) or getattr(
            sender, "update_policy_weights_", None
        )
        if not callable(push):
            raise TypeError(
                "weight_sync_sender must have an update_weights() method (or be a collector "
                f"with update_policy_weights_()), got {type(sender).__name__}"
            )
        self.update_policy_weights_ = push


class GRPOTrainer(Trainer):
    """The trainer of LLM post-training: GRPO (or DAPO, CISPO, SFT...) on collected answers.

    After each collected batch (a :class:`~rl.collectors.llm.LLMCollector`'s dialog
    turns), the batch goes into ``replay_buffer`` (unless the collector writes there
    itself), where a write transform such as :class:`~rl.objectives.llm.MCAdvantage`
    keeps the complete groups of answers and writes their advantages; the trainer then
    runs ``num_epochs`` passes over the buffer in batches of ``batch_size`` (or
    ``optim_steps_per_batch`` draws per epoch), stepping the optimizer every
    ``gradient_accumulation_steps`` batches; then it pushes the trained weights to the
    collector's model copy through ``weight_sync_sender`` and, with
    ``empty_replay_buffer_on_weight_update``, empties the buffer (on-policy GRPO). The
    mean and max reward of each batch and the loss's diagnostics (``ESS``,
    ``clip_fraction``, ``kl_approx``, ``kl_to_ref``...) are logged.

    A non-finite loss never reaches the weights: it is not back-propagated, the gradients
    of its accumulation cycle are dropped and the cycle restarts; a non-finite gradient
    norm skips the optimizer step (a float16 ``GradScaler`` skips those itself, and the
    skip is logged at INFO). Each skip is counted in :attr:`skipped_nonfinite_steps`, the
    non-finite loss and gradient skips warn (``RuntimeWarning``). A
    checkpoint (:meth:`state_dict`) taken between two optimizer steps of an accumulation
    cycle holds the gradients accumulated so far, so the resumed run steps as the
    uninterrupted one would.

    DeepSeekMath (GRPO): https://arxiv.org/abs/2402.03300

    Args:
        collector: yields the batches of answers (``None`` when it writes into
            ``replay_buffer`` itself).
        total_frames: dialog turns to collect.
        frame_skip: 1 for LLM tasks.
        optim_steps_per_batch: batches drawn per epoch; ``None`` (default) goes over the
            whole buffer once per epoch (one pass over the collected batch without a buffer).
        loss_module: the loss (a TensorDict of ``loss_*`` entries and diagnostics).
        optimizer: its optimizer (required).
        weight_sync_sender: pushes the trained weights to where answers are generated: an
            object with ``update_weights()``, or the collector itself (its
            ``update_policy_weights_()``); ``None``: the collector runs the trained model.
        weight_update_frequency: optimizer steps between two pushes with
            ``async_collection``; in sync mode weights are pushed once per batch.
        empty_replay_buffer_on_weight_update: empty the buffer after each batch's push.
        replay_buffer: where the batches go and optimization batches are drawn from.
        batch_size: optimization batch size (default: the buffer's own).
        device: where optimization batches are sent.
        mixed_precision: run the loss under ``torch.autocast`` (``autocast_dtype``; a
            ``GradScaler`` for float16).
        autocast_dtype: defaults to ``torch.bfloat16``.
        gradient_accumulation_steps: optimization batches per optimizer step.
        logger, clip_norm, progress_bar, seed, save_trainer_interval, log_interval,
            save_trainer_file: as :class:`Trainer` (``clip_norm`` defaults to 1.0, a norm).
        num_epochs: passes over each batch's data.
        async_collection: the collector fills the buffer in the background; each
            collected batch then triggers ``optim_steps_per_batch`` random draws.
        log_rewards: log ``reward_mean`` (with its std) and ``reward_max``.
        log_kl: kept for TorchRL's signature: the trainer logs every entry of the averaged
            losses, ``kl_to_ref`` / ``kl_to_inference`` among them.
        optimization_stepper: runs each whole optimization step instead of the trainer's
            gradient-accumulating optimizer hook (see :class:`Trainer`).
        checkpoint, checkpoint_rotation, checkpoint_metadata, log_timings,
            auto_log_optim_steps: as :class:`Trainer`.

    Raises:
        ValueError: no ``optimizer``; a non-positive ``num_epochs``,
            ``gradient_accumulation_steps`` or ``weight_update_frequency``.
        TypeError: a ``weight_sync_sender`` with neither ``update_weights`` nor
            ``update_policy_weights_``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core.trainers import GRPOTrainer
        >>> logit = torch.nn.Parameter(torch.zeros(2))
        >>> def loss(td):  # a one-token "policy" whose answer 1 is rewarded
        ...     logp = logit.log_softmax(-1)[td["action"]]
        ...     return TensorDict(loss_objective=-(td["advantage"] * logp).mean())
        >>> batches = [TensorDict(action=torch.tensor([0, 1]), advantage=torch.tensor([-1.0, 1.0]),
        ...                       batch_size=[2]) for _ in range(5)]
        >>> trainer = GRPOTrainer(collector=batches, total_frames=10, loss_module=loss,
        ...                       optimizer=torch.optim.SGD([logit], lr=1.0),
        ...                       progress_bar=False, log_rewards=False)
        >>> trainer.train()
        >>> bool(logit[1] > logit[0]), trainer._optim_count
        (True, 5)
    """

    def __init__(
        self,
        *,
        collector: Any,
        total_frames: int,
        frame_skip: int = 1,
        optim_steps_per_batch: int | None = None,
        loss_module: nn.Module | Callable[[TensorDictBase], TensorDictBase],
        optimizer: torch.optim.Optimizer | None = None,
        weight_sync_sender: Any | None = None,
        weight_update_frequency: int = 1,
        empty_replay_buffer_on_weight_update: bool = False,
        replay_buffer: Any | None = None,
        batch_size: int | None = None,
        device: torch.device | str | None = None,
        mixed_precision: bool = False,
        autocast_dtype: torch.dtype = torch.bfloat16,
        gradient_accumulation_steps: int = 1,
        logger: Any | None = None,
        clip_norm: float | None = 1.0,
        progress_bar: bool = True,
        seed: int | None = None,
        save_trainer_interval: int = 10000,
        log_interval: int = 10000,
        save_trainer_file: str | pathlib.Path | None = None,
        num_epochs: int = 1,
        async_collection: bool = False,
        log_rewards: bool = True,
        log_kl: bool = True,
        optimization_stepper: Any | None = None,
        checkpoint: Any | None = None,
        checkpoint_rotation: Any | None = None,
        checkpoint_metadata: Callable | None = None,
        log_timings: bool = False,
        auto_log_optim_steps: bool = True,
    ) -> None:
        if optimizer is None:
            raise ValueError("GRPOTrainer requires an optimizer")
        for name, value in (
            ("num_epochs", num_epochs),
            ("gradient_accumulation_steps", gradient_accumulation_steps),
            ("weight_update_frequency", weight_update_frequency),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GRPOTrainer {name} must be a positive int, got {value!r}")
        super().__init__(
            collector=collector,
            total_frames=total_frames,
            frame_skip=frame_skip,
            optim_steps_per_batch=optim_steps_per_batch or 1,
            loss_module=loss_module,
            optimizer=None,
            logger=logger,
            clip_grad_norm=True,
            clip_norm=clip_norm,
            progress_bar=progress_bar,
            seed=seed,
            save_trainer_interval=save_trainer_interval,
            log_interval=log_interval,
            save_trainer_file=save_trainer_file,
            optimization_stepper=optimization_stepper,
            replay_buffer=replay_buffer,
            batch_size=batch_size,
            checkpoint=checkpoint,
            checkpoint_rotation=checkpoint_rotation,
            checkpoint_metadata=checkpoint_metadata,
            num_epochs=num_epochs,
            log_timings=log_timings,
            auto_log_optim_steps=auto_log_optim_steps,
        )
        self.optimizer = optimizer
        self._steps_per_epoch = optim_steps_per_batch
        self.async_collection = async_collection
        self.mixed_precision = mixed_precision
        self.autocast_dtype = autocast_dtype
        # autocast and the grad scaler on the device the parameters live on
        params = [p for group in optimizer.param_groups for p in group["params"]]
        self._device_type = params[0].device.type if params else "cpu"
        scaler = None
        if mixed_precision and autocast_dtype == torch.float16:
            scaler = torch.amp.GradScaler(self._device_type)
        self._optimizer_hook = _AccumulatingOptimizerHook(
            optimizer, gradient_accumulation_steps, scaler, self._device_type
        )
        if optimization_stepper is None:  # a given stepper runs the whole step itself
            self._optimizer_hook.register(self)

        if async_collection and replay_buffer is not None:
            # rl's GRPOTrainer pulls the collector's batches itself; an asynchronous
            # collection into the buffer is not supported (TorchRL starts the collector in
            # the background): refused rather than left with an empty buffer
            raise ValueError(
                "GRPOTrainer(async_collection=True) with a replay_buffer is not supported: "
                "collect synchronously (async_collection=False) or pass no replay_buffer"
            )
        if replay_buffer is not None:
            self._rb_hook = ReplayBufferTrainer(replay_buffer, batch_size=batch_size, device=device)
            self.register_module("replay_buffer", self._rb_hook)
            if getattr(collector, "replay_buffer", None) is None:
                self.register_op("batch_process", self._rb_hook.extend)
            self.register_op("process_optim_batch", self._rb_hook.sample)
        if weight_sync_sender is not None:
            sender = _Sender(weight_sync_sender)
            if async_collection:
                hook = UpdateWeights(sender, weight_update_frequency, interval_unit="optim_steps")
            else:
                hook = UpdateWeights(sender)
            hook.register(self)
        if empty_replay_buffer_on_weight_update and replay_buffer is not None:
            self.register_op("post_steps", self._empty_replay_buffer)
        if log_rewards:
            # with a buffer, from the sampled sub-batches (a collector writing into the
            # buffer yields no batch), as TorchRL; else from each collected batch
            stage = "post_optim_log" if replay_buffer is not None else "pre_steps_log"
            for reduction in ("mean", "max"):
                self.register_op(
                    stage,
                    LogScalar(
                        logname=f"reward_{reduction}",
                        log_pbar=reduction == "mean",
                        include_std=reduction == "mean",
                        reduction=reduction,
                    ),
                )
        self.log_kl = log_kl

    @property
    def skipped_nonfinite_steps(self) -> int:
        """Optimizer steps skipped because a loss or the gradient norm was non-finite."""
        return self._optimizer_hook.skipped_nonfinite_steps

    def _empty_replay_buffer(self) -> None:
        self.replay_buffer.empty(empty_write_count=False)

    def _optim_count_for(self) -> int:
        """Optimization batches of one epoch on the batch just collected (the buffer's
        length over the batch size when not given); the trainer runs ``num_epochs``."""
        per_epoch = self._steps_per_epoch
        if per_epoch is None:
            if self.replay_buffer is None or self.async_collection:
                per_epoch = 1
            else:
                size = self.batch_size or getattr(self.replay_buffer, "batch_size", None)
                length = len(self.replay_buffer)
                per_epoch = math.ceil(length / size) if size else 1
                per_epoch = per_epoch if length else 0
        return per_epoch

    def optim_steps(self, batch: TensorDictBase) -> None:
        self.optim_steps_per_batch = self._optim_count_for()
        context = (
            torch.autocast(self._device_type, dtype=self.autocast_dtype)
            if self.mixed_precision
            else contextlib.nullcontext()
        )
        with context:
            super().optim_steps(batch)
