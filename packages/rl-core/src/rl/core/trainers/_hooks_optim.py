"""Hooks around the optimization: optimizer, LR scheduler, target networks, weights, stopping,
the CUDA cache."""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from ._trainer import Trainer, TrainerHookBase

__all__ = [
    "ClearCudaCache",
    "EarlyStopping",
    "LRSchedulerHook",
    "OptimizerHook",
    "TargetNetUpdaterHook",
    "UpdateWeights",
]

_logger = logging.getLogger("rl.core.trainers")


def loss_terms(
    losses_td: TensorDictBase, loss_components: Sequence[str] | None, owner: str
) -> list[torch.Tensor]:
    """The loss entries to back-propagate: ``loss_components``, or every ``loss*`` entry.

    Raises:
        ValueError: a component is missing from the losses, or there is no entry to minimize.
    """
    if loss_components is None:
        terms = [v for k, v in losses_td.items() if str(k).startswith("loss")]
    else:
        missing = [k for k in loss_components if k not in losses_td.keys()]
        if missing:
            raise ValueError(
                f"{owner}: the losses have no entry {missing[0]!r}; they have "
                f"{sorted(map(str, losses_td.keys()))}"
            )
        terms = [losses_td.get(k) for k in loss_components]
    if not terms:
        raise ValueError(
            f"{owner}: no 'loss*' entry to minimize among {sorted(map(str, losses_td.keys()))}"
        )
    return terms


def clip_gradients(
    params: Sequence[torch.Tensor], clip_grad_norm: bool, clip_norm: float | None
) -> torch.Tensor:
    """Clips the gradients of ``params`` and returns their global norm before clipping.

    With ``clip_grad_norm`` the global norm is clipped to ``clip_norm``, otherwise each
    gradient value is clamped to ``[-clip_norm, clip_norm]``; ``clip_norm=None`` only
    measures the norm.
    """
    if clip_grad_norm and clip_norm is not None:
        return nn.utils.clip_grad_norm_(params, clip_norm).detach()
    grads = [p.grad.detach().pow(2).sum() for p in params if p.grad is not None]
    norm = torch.stack(grads).sum().sqrt() if grads else torch.zeros(())
    if clip_norm is not None:
        nn.utils.clip_grad_value_(params, clip_norm)
    return norm


def scaler_step(
    scaler: torch.amp.GradScaler,
    optimizer: torch.optim.Optimizer,
    grad_norm: torch.Tensor,
    owner: str,
    skipped: int,
) -> bool:
    """Steps ``optimizer`` through the float16 grad ``scaler`` (its gradients already
    unscaled) and updates the scale; logs at INFO when the scaler skipped the step.

    Args:
        scaler: the grad scaler that scaled the loss.
        optimizer: the optimizer to step.
        grad_norm: the (unscaled) gradient norm, for the log.
        owner: who steps, named in the log.
        skipped: the steps skipped before this one, for the log's running count.

    Returns:
        Whether the optimizer stepped: ``False`` when the scaled gradients overflowed.
    """
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    # the scaler lowers its scale exactly when it found inf/nan and skipped the step
    stepped = scaler.get_scale() >= scale
    if not stepped:
        _logger.info(
            "%s: the float16 grad scaler skipped the optimizer step (scaled gradients "
            "overflowed, gradient norm %s) and lowered its scale from %s to %s; %d skipped "
            "so far",
            owner,
            grad_norm.item(),
            scale,
            scaler.get_scale(),
            skipped + 1,
        )
    return stepped


def saved_grads(params: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
    """Copies of the gradients accumulated so far (``None`` where a parameter has none), to
    checkpoint a gradient-accumulation window between two optimizer steps."""
    return [None if p.grad is None else p.grad.detach().clone() for p in params]


def check_saved_grads(params: Sequence[torch.Tensor], grads: Sequence | None) -> None:
    """Raises ``ValueError`` unless ``grads`` (from :func:`saved_grads`, or ``None``) has one
    entry per parameter; called before any state is restored."""
    if grads is not None and len(grads) != len(params):
        raise ValueError(
            f"the checkpoint holds the gradients of {len(grads)} parameters, the "
            f"optimizer has {len(params)}"
        )


def restore_grads(params: Sequence[torch.Tensor], grads: Sequence | None) -> None:
    """Puts back :func:`saved_grads` (``None``: no gradient anywhere), on each parameter's
    device and dtype."""
    for p, g in zip(params, grads or [None] * len(params), strict=True):
        p.grad = None if g is None else g.to(device=p.device, dtype=p.dtype).clone()


class OptimizerHook(TrainerHookBase):
    """Back-propagates the sum of some loss entries, clips the gradients and steps an optimizer.

    Called at the ``optimizer`` point with the trainer's ``clip_grad_norm`` / ``clip_norm``;
    several hooks (one per optimizer, each on its own loss entries) can be registered. The
    gradient norm before clipping is written to the losses as ``grad_norm_<index>``. The
    optimizer's state goes into the trainer's checkpoints.

    Args:
        optimizer: the optimizer.
        loss_components: the loss entries it minimizes (default: every ``loss*`` entry).

    Raises:
        ValueError: ``loss_components`` is empty, or names an entry the losses do not have.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> w = torch.nn.Parameter(torch.ones(1))
        >>> hook = OptimizerHook(torch.optim.SGD([w], lr=0.5))
        >>> out = hook(TensorDict(loss_a=(w ** 2).sum()), True, None, 0)
        >>> w.data, out["grad_norm_0"]
        (tensor([0.]), tensor(2.))
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        loss_components: Sequence[str] | None = None,
    ) -> None:
        if loss_components is not None and not loss_components:
            raise ValueError(
                "OptimizerHook loss_components cannot be empty; pass None to use every "
                "'loss*' entry"
            )
        self.optimizer = optimizer
        self.loss_components = None if loss_components is None else list(loss_components)

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _grad_clip(self, clip_grad_norm: bool, clip_norm: float | None) -> torch.Tensor:
        return clip_gradients(self._params(), clip_grad_norm, clip_norm)

    def __call__(
        self,
        losses_td: TensorDictBase,
        clip_grad_norm: bool = True,
        clip_norm: float | None = None,
        index: int = 0,
    ) -> TensorDictBase:
        sum(loss_terms(losses_td, self.loss_components, "OptimizerHook")).backward()
        losses_td.set(f"grad_norm_{index}", self._grad_clip(clip_grad_norm, clip_norm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return losses_td

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict["optimizer"])

    def register(self, trainer: Trainer, name: str = "optimizer") -> None:
        trainer.register_op("optimizer", self)
        trainer.register_module(name, self)


class LRSchedulerHook(TrainerHookBase):
    """Steps a learning-rate scheduler once per collected batch or after every optimization step.

    The scheduler is stepped only when an optimization step ran since its last call (so the
    learning rate does not decay during ``init_random_frames``); its state goes into the
    trainer's checkpoints.

    Args:
        scheduler: a ``torch.optim.lr_scheduler`` scheduler.
        interval: ``"batch"`` (``post_steps``) or ``"optim"`` (``post_optim``).

    Raises:
        ValueError: ``interval`` is neither ``"batch"`` nor ``"optim"``.

    Examples:
        >>> import torch
        >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
        >>> hook = LRSchedulerHook(torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5))
        >>> for _ in range(2):
        ...     opt.step()
        ...     hook()
        >>> opt.param_groups[0]["lr"]
        0.25
    """

    def __init__(
        self,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        interval: Literal["batch", "optim"] = "batch",
    ) -> None:
        if interval not in ("batch", "optim"):
            raise ValueError(
                f"LRSchedulerHook interval must be 'batch' or 'optim', got {interval!r}"
            )
        self.scheduler = scheduler
        self.interval = interval
        self._trainer_ref: weakref.ReferenceType[Trainer] | None = None
        self._last_optim_count = 0

    def __call__(self, batch: TensorDictBase | None = None) -> TensorDictBase | None:
        trainer = self._trainer_ref() if self._trainer_ref is not None else None
        if trainer is not None:
            if trainer._optim_count == self._last_optim_count:
                return batch
            self._last_optim_count = trainer._optim_count
        self.scheduler.step()
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {
            "scheduler": self.scheduler.state_dict(),
            "last_optim_count": self._last_optim_count,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict["scheduler"])
        self._last_optim_count = int(state_dict["last_optim_count"])

    def register(self, trainer: Trainer, name: str = "lr_scheduler") -> None:
        self._trainer_ref = weakref.ref(trainer)
        trainer.register_op("post_optim" if self.interval == "optim" else "post_steps", self)
        trainer.register_module(name, self)


class TargetNetUpdaterHook(TrainerHookBase):
    """Calls ``target_params_updater.step()`` (``SoftUpdate`` / ``HardUpdate``) after each
    optimization step (``post_optim``). The target parameters live in the loss module, whose
    state the checkpoints hold; the updater's own state (a ``HardUpdate`` counter) is saved
    here when it has a ``state_dict``.

    Args:
        target_params_updater: an object with ``step()``.

    Raises:
        TypeError: the updater has no ``step()`` method.

    Examples:
        >>> class Counter:
        ...     n = 0
        ...     def step(self):
        ...         self.n += 1
        >>> hook = TargetNetUpdaterHook(Counter())
        >>> hook(); hook.target_params_updater.n
        1
    """

    def __init__(self, target_params_updater: Any) -> None:
        if not callable(getattr(target_params_updater, "step", None)):
            raise TypeError(
                "TargetNetUpdaterHook expects a target network updater with a step() method "
                f"(SoftUpdate, HardUpdate), got {type(target_params_updater).__name__}"
            )
        self.target_params_updater = target_params_updater

    def __call__(self, tensordict: TensorDictBase | None = None) -> TensorDictBase | None:
        self.target_params_updater.step()
        return tensordict

    def state_dict(self) -> dict[str, Any]:
        sd = getattr(self.target_params_updater, "state_dict", None)
        if callable(sd) and not isinstance(self.target_params_updater, nn.Module):
            return {"updater": sd()}
        counter = getattr(self.target_params_updater, "_counter", None)
        return {} if counter is None else {"counter": int(counter)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "updater" in state_dict:
            self.target_params_updater.load_state_dict(state_dict["updater"])
        elif "counter" in state_dict:
            self.target_params_updater._counter = int(state_dict["counter"])

    def register(self, trainer: Trainer, name: str = "target_net_updater") -> None:
        trainer.register_op("post_optim", self)
        trainer.register_module(name, self)


def _resolve_path(root: Any, path: str) -> Any:
    """``root.a.b`` for ``path="a.b"``, naming the part that is missing."""
    obj = root
    for attr in path.split("."):
        if not hasattr(obj, attr):
            raise AttributeError(
                f"weight_update_map source {path!r}: {type(obj).__name__} has no attribute {attr!r}"
            )
        obj = getattr(obj, attr)
    return obj


class UpdateWeights(TrainerHookBase):
    """Pushes the trained policy weights to the collector every ``update_weights_interval``
    batches (``collector.update_policy_weights_()``), or optimization steps with
    ``interval_unit="optim_steps"``.

    Args:
        collector: the collector whose policy copy is refreshed; not needed when a
            ``sender`` is given. Defaults to ``None``.
        update_weights_interval: how many batches (or optimization steps) between two pushes.
        policy_weights_getter (Callable, optional): called with no argument at each push;
            its result (unless ``None``) is what ``collector.update_policy_weights_(weights)``
            receives. Defaults to ``None`` (the collector reads its policy's own weights).
        weight_update_map (dict[str, str], optional): ``{destination: source_path}``: each
            source is an attribute path on the trainer (``"loss_module.actor_network"``),
            whose module's parameters (``TensorDict.from_module``) are sent to the collector
            in one call, ``collector.update_policy_weights_(weights_dict={destination:
            weights})``. Takes precedence over ``policy_weights_getter``; needs ``trainer``.
        trainer (Trainer, optional): the trainer the ``weight_update_map`` paths start
            from; :meth:`register` sets it when it is not given.

    Keyword Args:
        sender: an object with an ``update_weights()`` method (a weight-sync scheme's
            sender); when given, each push calls it instead of the collector.
        interval_unit: ``"batches"`` (``post_steps``) or ``"optim_steps"`` (``post_optim``).

    Raises:
        ValueError: the interval is not a positive int, the unit is unknown, neither a
            collector nor a sender is given, a sender is combined with
            ``policy_weights_getter``/``weight_update_map``, or ``weight_update_map`` comes
            without a ``trainer``.

    Examples:
        >>> class Collector:
        ...     pushes = 0
        ...     def update_policy_weights_(self, weights=None):
        ...         self.pushes += 1
        >>> hook = UpdateWeights(Collector(), 2)
        >>> for _ in range(5):
        ...     hook()
        >>> hook.collector.pushes
        2
    """

    def __init__(
        self,
        collector: Any = None,
        update_weights_interval: int = 1,
        policy_weights_getter: Callable[[], Any] | None = None,
        weight_update_map: dict[str, str] | None = None,
        trainer: Trainer | None = None,
        *,
        sender: Any = None,
        interval_unit: Literal["batches", "optim_steps"] = "batches",
    ) -> None:
        if isinstance(update_weights_interval, bool) or not isinstance(
            update_weights_interval, int
        ):
            raise ValueError(
                f"UpdateWeights update_weights_interval must be a positive int, got "
                f"{update_weights_interval!r}"
            )
        if update_weights_interval < 1:
            raise ValueError(
                f"UpdateWeights update_weights_interval must be a positive int, got "
                f"{update_weights_interval}"
            )
        if interval_unit not in ("batches", "optim_steps"):
            raise ValueError(
                f"UpdateWeights interval_unit must be 'batches' or 'optim_steps', got "
                f"{interval_unit!r}"
            )
        if collector is None and sender is None:
            raise ValueError("UpdateWeights needs a collector or a sender, got neither")
        if sender is not None and (
            policy_weights_getter is not None or weight_update_map is not None
        ):
            raise ValueError(
                "UpdateWeights sender is exclusive with policy_weights_getter and "
                "weight_update_map (the sender reads the weights itself)"
            )
        if weight_update_map is not None and trainer is None:
            raise ValueError(
                "UpdateWeights weight_update_map needs the trainer its source paths start from"
            )
        if sender is not None and not callable(getattr(sender, "update_weights", None)):
            raise TypeError(
                f"UpdateWeights sender must have an update_weights() method, got "
                f"{type(sender).__name__}"
            )
        self.collector = collector
        self.update_weights_interval = update_weights_interval
        self.policy_weights_getter = policy_weights_getter
        self.weight_update_map = weight_update_map
        self.trainer = trainer
        self.sender = sender
        self.interval_unit = interval_unit
        self.counter = 0

    def __call__(self, *args: Any) -> None:
        self.counter += 1
        if self.counter % self.update_weights_interval != 0:
            return
        if self.sender is not None:
            self.sender.update_weights()
        elif self.weight_update_map is not None:
            weights = {
                dest: TensorDict.from_module(_resolve_path(self.trainer, path))
                for dest, path in self.weight_update_map.items()
            }
            self.collector.update_policy_weights_(weights_dict=weights)
        else:
            getter = self.policy_weights_getter
            weights = getter() if getter is not None else None
            if weights is None:
                self.collector.update_policy_weights_()
            else:
                self.collector.update_policy_weights_(weights)

    def state_dict(self) -> dict[str, Any]:
        return {"counter": self.counter}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.counter = int(state_dict["counter"])

    def register(self, trainer: Trainer, name: str = "update_weights") -> None:
        if self.trainer is None:
            self.trainer = trainer
        trainer.register_op(
            "post_optim" if self.interval_unit == "optim_steps" else "post_steps", self
        )
        trainer.register_module(name, self)


class EarlyStopping(TrainerHookBase):
    """Stops training when a logged metric stops improving (``post_steps_log``).

    Reads the last value the trainer logged under ``monitor`` (e.g. ``"r_evaluation"`` from
    :class:`LogValidationReward`, ``"r_training"`` from :class:`LogScalar`).

    Keyword Args:
        monitor: the logged metric.
        mode: ``"max"`` (larger is better) or ``"min"``.
        min_delta: the smallest change that counts as an improvement.
        patience: frames without improvement before stopping.
        wait_for: frames before the criterion is checked.
        check_finite: stop as soon as the metric is NaN or infinite.

    Raises:
        ValueError: bad ``mode``, ``patience`` or ``wait_for``.

    Examples:
        >>> stop = EarlyStopping(monitor="r_training", patience=100, wait_for=0)
        >>> stop.register(trainer)  # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        monitor: str = "r_evaluation",
        mode: Literal["min", "max"] = "max",
        min_delta: float = 0.0,
        patience: int = 100_000,
        wait_for: int = 1_000_000,
        check_finite: bool = True,
    ) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"EarlyStopping mode must be 'min' or 'max', got {mode!r}")
        if patience < 0:
            raise ValueError(f"EarlyStopping patience must be >= 0, got {patience}")
        if wait_for < 0:
            raise ValueError(f"EarlyStopping wait_for must be >= 0, got {wait_for}")
        self.monitor = monitor
        self.mode = mode
        self.min_delta = float(min_delta)
        self.patience = int(patience)
        self.wait_for = int(wait_for)
        self.check_finite = check_finite
        self.best_score: float | None = None
        self.stop_reason: str | None = None
        self._last_improvement_frame: int | None = None
        self._trainer_ref: weakref.ReferenceType[Trainer] | None = None

    def _metric(self, trainer: Trainer) -> float | None:
        values = trainer._log_dict.get(self.monitor)
        if not values:
            return None
        value = values[-1]
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise RuntimeError(
                    f"EarlyStopping expects a scalar {self.monitor!r}, got shape "
                    f"{tuple(value.shape)}"
                )
            value = value.item()
        return float(value)

    def _stop(self, trainer: Trainer, reason: str) -> None:
        self.stop_reason = reason
        trainer.request_stop(reason)

    def __call__(self, batch: TensorDictBase | None = None) -> None:
        trainer = self._trainer_ref() if self._trainer_ref is not None else None
        if trainer is None:
            raise RuntimeError("EarlyStopping is not registered with a trainer: call register()")
        score = self._metric(trainer)
        frame = trainer.collected_frames
        if score is None or frame < self.wait_for:
            return
        if self.check_finite and not math.isfinite(score):
            self._stop(trainer, f"the monitored metric {self.monitor!r} became {score}")
            return
        if self.best_score is None or (
            score > self.best_score + self.min_delta
            if self.mode == "max"
            else score < self.best_score - self.min_delta
        ):
            self.best_score = score
            self._last_improvement_frame = frame
        elif frame - self._last_improvement_frame >= self.patience:
            self._stop(
                trainer,
                f"the monitored metric {self.monitor!r} did not improve for "
                f"{frame - self._last_improvement_frame} frames (best {self.best_score:.6g})",
            )

    def state_dict(self) -> dict[str, Any]:
        return {
            "best_score": self.best_score,
            "stop_reason": self.stop_reason,
            "last_improvement_frame": self._last_improvement_frame,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best_score = state_dict["best_score"]
        self.stop_reason = state_dict["stop_reason"]
        self._last_improvement_frame = state_dict["last_improvement_frame"]

    def register(self, trainer: Trainer, name: str = "early_stopping") -> None:
        self._trainer_ref = weakref.ref(trainer)
        trainer.register_op("post_steps_log", self)
        trainer.register_module(name, self)


class ClearCudaCache(TrainerHookBase):
    """Empties the CUDA caching allocator (``torch.cuda.empty_cache()``) every ``interval``
    calls; registered at ``pre_optim_steps``, so ``interval`` counts collected batches.

    Without CUDA (or before CUDA is initialized) emptying the cache does nothing; the calls
    are still counted. The count goes into the trainer's checkpoints.

    Args:
        interval (int): calls between two cache clearings, positive.

    Raises:
        ValueError: ``interval`` is not a positive int.

    Examples:
        >>> clear = ClearCudaCache(2)
        >>> for _ in range(3):
        ...     clear()
        >>> clear.count
        3
    """

    def __init__(self, interval: int) -> None:
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(f"ClearCudaCache interval must be a positive int, got {interval!r}")
        self.interval = interval
        self.count = 0

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.count += 1
        if self.count % self.interval == 0:
            torch.cuda.empty_cache()

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.count = int(state_dict["count"])

    def register(self, trainer: Trainer, name: str = "clear_cuda_cache") -> None:
        trainer.register_module(name, self)
        trainer.register_op("pre_optim_steps", self)
