"""Schedulers of a sampler's parameters (``alpha``, ``beta`` of prioritized replay)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import torch

from rl.data.replay_buffers.samplers._sampler import Sampler


class ParameterScheduler(ABC):
    """Changes one attribute of a sampler at every :meth:`step` (as ``torch.optim`` schedulers).

    Args:
        obj: a replay buffer (its sampler is scheduled) or a sampler.
        param_name: the attribute to change, e.g. ``"beta"``.
        min_value: the lowest value the attribute takes (no bound by default).
        max_value: the highest value the attribute takes (no bound by default).

    Raises:
        TypeError: ``obj`` is neither a replay buffer nor a sampler.
        ValueError: the sampler has no attribute ``param_name``.
    """

    def __init__(
        self,
        obj: Any,
        param_name: str,
        min_value: float | None = None,
        max_value: float | None = None,
    ) -> None:
        sampler = obj if isinstance(obj, Sampler) else getattr(obj, "sampler", None)
        if not isinstance(sampler, Sampler):
            raise TypeError(
                f"a scheduler needs a ReplayBuffer or a Sampler, got {type(obj).__name__}"
            )
        if not hasattr(sampler, param_name):
            raise ValueError(
                f"{type(sampler).__name__} has no attribute {param_name!r} to schedule"
            )
        self.sampler = sampler
        self.param_name = param_name
        self._min_val = -float("inf") if min_value is None else min_value
        self._max_val = float("inf") if max_value is None else max_value
        initial = getattr(sampler, param_name)
        if isinstance(initial, torch.Tensor):
            initial = initial.clone()
            self.backend = torch
        else:
            self.backend = np
        self.initial_val = initial
        self._step_cnt = 0

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state: every attribute but the sampler and the backend."""
        state = dict(self.__dict__)
        del state["sampler"], state["backend"]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)

    def step(self) -> None:
        """Advances one step and writes the new (clipped) value into the sampler."""
        self._step_cnt += 1
        value = self.backend.clip(self._step(), self._min_val, self._max_val)
        if isinstance(value, np.generic):
            value = value.item()
        setattr(self.sampler, self.param_name, value)

    @abstractmethod
    def _step(self) -> Any:
        """The unclipped value after ``self._step_cnt`` steps."""


class LambdaScheduler(ParameterScheduler):
    """Sets the parameter to its initial value times ``lambda_fn(step_count)``.

    Args:
        obj, param_name, min_value, max_value: as in :class:`ParameterScheduler`.
        lambda_fn: the multiplicative factor of a step count.
    """

    def __init__(
        self,
        obj: Any,
        param_name: str,
        lambda_fn: Callable[[int], float],
        min_value: float | None = None,
        max_value: float | None = None,
    ) -> None:
        super().__init__(obj, param_name, min_value, max_value)
        self.lambda_fn = lambda_fn

    def _step(self) -> Any:
        return self.initial_val * self.lambda_fn(self._step_cnt)


class LinearScheduler(ParameterScheduler):
    """Moves the parameter linearly from its initial value to ``final_value`` in ``num_steps``.

    Args:
        obj: a replay buffer or a sampler.
        param_name: the attribute to change.
        final_value: the value reached after ``num_steps`` steps, and kept.
        num_steps: the number of steps of the ramp.

    Examples:
        >>> from rl.data import PrioritizedSampler
        >>> from rl.data.replay_buffers.scheduler import LinearScheduler
        >>> sampler = PrioritizedSampler(10, alpha=0.7, beta=0.6)
        >>> scheduler = LinearScheduler(sampler, param_name="beta", final_value=1.0, num_steps=4)
        >>> betas = []
        >>> for _ in range(5):
        ...     scheduler.step()
        ...     betas.append(round(sampler.beta, 3))
        >>> betas
        [0.7, 0.8, 0.9, 1.0, 1.0]
    """

    def __init__(self, obj: Any, param_name: str, final_value: float, num_steps: int) -> None:
        super().__init__(obj, param_name)
        if isinstance(self.initial_val, torch.Tensor):
            final_value = torch.tensor(final_value).to(self.initial_val)
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps <= 0:
            raise ValueError(f"num_steps must be a positive int, got {num_steps!r}")
        self.final_val = final_value
        self.num_steps = num_steps
        self._delta = (self.final_val - self.initial_val) / self.num_steps

    def _step(self) -> Any:
        if self._step_cnt < self.num_steps:
            return self.initial_val + self._delta * self._step_cnt
        return self.final_val


class StepScheduler(ParameterScheduler):
    """Multiplies (or increments) the parameter by ``gamma`` every ``n_steps`` steps.

    Args:
        obj: a replay buffer or a sampler.
        param_name: the attribute to change.
        gamma: the factor (``mode="multiplicative"``) or increment (``mode="additive"``).
        n_steps: how many steps between two changes.
        mode: ``"multiplicative"`` or ``"additive"``.
        min_value, max_value: bounds of the parameter.

    Examples:
        >>> from rl.data import PrioritizedSampler
        >>> from rl.data.replay_buffers.scheduler import StepScheduler
        >>> sampler = PrioritizedSampler(10, alpha=0.7, beta=0.6)
        >>> scheduler = StepScheduler(
        ...     sampler, "beta", gamma=0.1, n_steps=2, mode="additive", max_value=0.8
        ... )
        >>> betas = []
        >>> for _ in range(6):
        ...     scheduler.step()
        ...     betas.append(round(sampler.beta, 3))
        >>> betas
        [0.6, 0.7, 0.7, 0.8, 0.8, 0.8]
    """

    def __init__(
        self,
        obj: Any,
        param_name: str,
        gamma: float = 0.9,
        n_steps: int = 1,
        mode: Literal["multiplicative", "additive"] = "multiplicative",
        min_value: float | None = None,
        max_value: float | None = None,
    ) -> None:
        super().__init__(obj, param_name, min_value, max_value)
        if mode == "additive":
            self.operator = self.backend.add
        elif mode == "multiplicative":
            self.operator = self.backend.multiply
        else:
            raise ValueError(f"mode must be 'multiplicative' or 'additive', got {mode!r}")
        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps <= 0:
            raise ValueError(f"n_steps must be a positive int, got {n_steps!r}")
        self.gamma = gamma
        self.n_steps = n_steps
        self.mode = mode

    def _step(self) -> Any:
        current = getattr(self.sampler, self.param_name)
        if self._step_cnt % self.n_steps == 0:
            return self.operator(current, self.gamma)
        return current


class SchedulerList:
    """Steps several schedulers together.

    Args:
        schedulers: a scheduler or a list of them.
    """

    def __init__(self, schedulers: ParameterScheduler | list[ParameterScheduler]) -> None:
        if isinstance(schedulers, ParameterScheduler):
            schedulers = [schedulers]
        self.schedulers = list(schedulers)

    def append(self, scheduler: ParameterScheduler) -> None:
        self.schedulers.append(scheduler)

    def step(self) -> None:
        for scheduler in self.schedulers:
            scheduler.step()

    def state_dict(self) -> list[dict[str, Any]]:
        return [s.state_dict() for s in self.schedulers]

    def load_state_dict(self, state_dict: list[dict[str, Any]]) -> None:
        for scheduler, state in zip(self.schedulers, state_dict, strict=True):
            scheduler.load_state_dict(state)
