"""Macro actions: one high-level action expanded into a fixed-length low-level sequence.

A policy writes a *macro action* (a primitive id, a target, a duration) under the env's
action key; :class:`MacroPrimitiveTransform` turns it into the ``[*B, T, A]`` sequence of
low-level actions that moves linearly from a start to the target, which
:class:`~rl.envs.transforms.MultiAction` then executes in one outer step
(``execute=True``). Domain presets subclass the transform and override
:meth:`MacroPrimitiveTransform._resolve` (what a target means) and
:meth:`MacroPrimitiveTransform.current_action` (where the motion starts).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import torch
from tensordict import TensorClass, TensorDictBase
from tensordict.utils import NestedKey, unravel_key

from rl.core import Categorical, Composite, Unbounded

from ._base import Transform
from ._compose import Compose
from ._frames import MultiAction

__all__ = [
    "HumanoidMacroAction",
    "MacroAction",
    "MacroPrimitive",
    "MacroPrimitiveTransform",
    "TargetMacroAction",
]


class MacroPrimitive(IntEnum):
    """The generic primitives: hold the current action (``WAIT``) or move to a target (``MOVE``).

    Examples:
        >>> int(MacroPrimitive.MOVE), str(MacroPrimitive.WAIT)
        (1, 'wait')
    """

    WAIT = 0
    MOVE = 1

    def __str__(self) -> str:
        return self.name.lower()


def _durations(mode, steps: int, settle_steps: int, batch_size: torch.Size, device) -> dict:
    if steps <= 0:
        raise ValueError(f"steps must be strictly positive, got {steps}")
    if settle_steps < 0:
        raise ValueError(f"settle_steps must be non-negative, got {settle_steps}")
    return {
        name: torch.full((*batch_size, 1), int(value), dtype=torch.long, device=device)
        for name, value in (("mode", mode), ("steps", steps), ("settle_steps", settle_steps))
    }


class MacroAction(TensorClass["nocast"]):
    """A primitive id (``mode``) and its duration (``steps`` then ``settle_steps`` held),
    each ``[*B, 1]`` long."""

    mode: torch.Tensor
    steps: torch.Tensor
    settle_steps: torch.Tensor


class TargetMacroAction(MacroAction):
    """A macro action with one ``target`` ``[*B, A]``, read by the transform.

    Examples:
        >>> TargetMacroAction.move(torch.ones(1, 4), steps=2).target.shape
        torch.Size([1, 4])
    """

    target: torch.Tensor

    @classmethod
    def move(
        cls,
        target: torch.Tensor,
        *,
        steps: int = 16,
        settle_steps: int = 0,
        mode: int | IntEnum = MacroPrimitive.MOVE,
    ) -> TargetMacroAction:
        """Move to ``target`` (``[A]`` or ``[*B, A]``) over ``steps`` low-level actions.

        Raises:
            ValueError: a 0-dim target, ``steps <= 0`` or ``settle_steps < 0``.
        """
        if target.ndim == 0:
            raise ValueError("target must have a trailing action dim, got a 0-dim tensor")
        target = target.unsqueeze(0) if target.ndim == 1 else target
        batch_size = target.shape[:-1]
        fields = _durations(mode, steps, settle_steps, batch_size, target.device)
        return cls(target=target, batch_size=batch_size, **fields)

    @classmethod
    def wait(
        cls,
        *,
        action_dim: int,
        steps: int = 1,
        settle_steps: int = 0,
        batch_size: torch.Size | tuple[int, ...] | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | None = None,
    ) -> TargetMacroAction:
        """Hold the current low-level action for ``steps`` steps (a zero target, ``WAIT``).

        Raises:
            ValueError: ``action_dim <= 0``.
        """
        if action_dim <= 0:
            raise ValueError(f"action_dim must be strictly positive, got {action_dim}")
        batch_size = torch.Size([1] if batch_size is None else batch_size)
        target = torch.zeros(
            (*batch_size, action_dim), dtype=dtype or torch.get_default_dtype(), device=device
        )
        return cls.move(target, steps=steps, settle_steps=settle_steps, mode=MacroPrimitive.WAIT)


class HumanoidMacroAction(TargetMacroAction):
    """A macro action toward a low-level actuator-control target (TorchRL's humanoid preset).

    Examples:
        >>> HumanoidMacroAction.reach_control(torch.zeros(1, 4), steps=2).target.shape
        torch.Size([1, 4])
    """

    @classmethod
    def reach_control(
        cls, target: torch.Tensor, *, steps: int = 16, settle_steps: int = 0
    ) -> HumanoidMacroAction:
        """Move linearly to the actuator-control ``target``."""
        return cls.move(target, steps=steps, settle_steps=settle_steps)


def interpolate_sequence(
    start: torch.Tensor, target: torch.Tensor, steps: int, settle_steps: int
) -> torch.Tensor:
    """The ``[*B, steps + settle_steps, A]`` sequence from ``start`` to ``target`` ``[*B, A]``.

    Step ``i`` (from 1) is ``start + i / steps * (target - start)``; the target is then held
    ``settle_steps`` times.
    """
    alpha = torch.linspace(1.0 / steps, 1.0, steps, dtype=start.dtype, device=start.device)
    sequence = start.unsqueeze(-2) + alpha.unsqueeze(-1) * (target - start).unsqueeze(-2)
    if settle_steps:
        settle = target.unsqueeze(-2).expand(*target.shape[:-1], settle_steps, target.shape[-1])
        sequence = torch.cat([sequence, settle], dim=-2)
    return sequence


class MacroPrimitiveTransform(Transform):
    """Expands the macro action under ``action_key`` into a low-level action sequence.

    On the action path (``inv``) the macro action is resolved into a start, a target and
    a duration, and replaced by the ``[*B, steps + settle_steps, A]`` linear sequence
    between them. It accepts a :class:`TargetMacroAction` (or a TensorDict with its
    ``mode`` / ``target`` / ``steps`` / ``settle_steps`` entries; ``WAIT`` holds the start)
    or a raw tensor (a direct ``MOVE`` target). The motion starts from
    :meth:`current_action` (zeros here; presets read the robot's state). In an env the
    policy-facing action spec becomes ``{mode: Categorical, target: Unbounded}``.

    Args:
        action_key: the env's low-level action key, also where the macro action arrives.
        macro_steps: interpolated steps of a primitive that does not say (``> 0``).
        settle_steps: final action repeats of a primitive that does not say (``>= 0``).
        action_dim: the low-level action size (else read from the specs or the target).
        execute: return ``Compose(MultiAction(...), transform)``, so the sequence runs in
            one outer step of the env.
        multi_action_dim: the ``MultiAction`` ``dim`` (with ``execute``).
        stack_rewards: the ``MultiAction`` ``stack_rewards`` (with ``execute``).
        stack_observations: the ``MultiAction`` ``stack_observations`` (with ``execute``).

    Raises:
        ValueError: ``macro_steps <= 0``, ``settle_steps < 0`` or ``action_dim <= 0``.

    Examples:
        >>> from tensordict import TensorDict
        >>> t = MacroPrimitiveTransform(macro_steps=2, action_dim=3)
        >>> t.inv(TensorDict({"action": torch.ones(1, 3)}, [1]))["action"][0, :, 0]
        tensor([0.5000, 1.0000])
    """

    primitive_enum = MacroPrimitive

    def __new__(
        cls,
        *args: Any,
        execute: bool = False,
        multi_action_dim: int = 1,
        stack_rewards: bool = True,
        stack_observations: bool = False,
        **kwargs: Any,
    ):
        if execute:
            return Compose(
                MultiAction(
                    dim=multi_action_dim,
                    stack_rewards=stack_rewards,
                    stack_observations=stack_observations,
                ),
                cls(*args, execute=False, **kwargs),
            )
        return super().__new__(cls)

    def __init__(
        self,
        *,
        action_key: NestedKey = "action",
        macro_steps: int = 16,
        settle_steps: int = 0,
        action_dim: int | None = None,
        execute: bool = False,
        multi_action_dim: int = 1,
        stack_rewards: bool = True,
        stack_observations: bool = False,
    ) -> None:
        super().__init__()
        if macro_steps <= 0:
            raise ValueError(f"macro_steps must be strictly positive, got {macro_steps}")
        if settle_steps < 0:
            raise ValueError(f"settle_steps must be non-negative, got {settle_steps}")
        if action_dim is not None and action_dim <= 0:
            raise ValueError(f"action_dim must be strictly positive, got {action_dim}")
        self.action_key = unravel_key(action_key)
        self.macro_steps = int(macro_steps)
        self.settle_steps = int(settle_steps)
        self.action_dim = None if action_dim is None else int(action_dim)

    @property
    def has_inverse(self) -> bool:
        return True

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(self.action_key, None)
        start, target, steps, settle_steps = self._resolve(tensordict, action)
        return tensordict.set(
            self.action_key, interpolate_sequence(start, target, steps, settle_steps)
        )

    def _resolve(self, tensordict: TensorDictBase, action: Any) -> tuple:
        """``(start, target, steps, settle_steps)`` of the macro ``action`` (a hook).

        Raises:
            RuntimeError: no action, or a macro action without ``target``.
            TypeError: an action that is neither a tensor nor a TensorDict.
        """
        if action is None:
            raise RuntimeError(
                f"{type(self).__name__} found no action under {self.action_key!r} to expand; "
                f"keys present: {sorted(map(str, tensordict.keys(True, True)))}"
            )
        batch = tensordict.batch_size
        if isinstance(action, torch.Tensor):
            dtype = action.dtype if action.is_floating_point() else torch.get_default_dtype()
            target = action.to(dtype).reshape(*batch, action.shape[-1])
            return torch.zeros_like(target), target, self.macro_steps, self.settle_steps
        if not isinstance(action, (TensorDictBase, MacroAction)):
            raise TypeError(
                f"{type(self).__name__} cannot expand an action of type {type(action).__name__}; "
                "give a MacroAction, a TensorDict or a low-level action tensor"
            )
        keys = action.keys(True, True)
        if "target" not in keys:
            raise RuntimeError(
                f"{type(self).__name__} expected a macro action with a 'target' under "
                f"{self.action_key!r}, got keys {tuple(keys)}"
            )
        target = action.get("target")
        dtype = target.dtype if target.is_floating_point() else torch.get_default_dtype()
        target = target.to(dtype).reshape(*batch, target.shape[-1])
        start = self.current_action(tensordict, batch, target.device, dtype, target.shape[-1])
        if "mode" in keys:
            mode = action.get("mode").to(torch.long).reshape(*batch, 1)
            target = torch.where(mode == int(MacroPrimitive.WAIT), start, target)
        steps = self._field_int(action, "steps", self.macro_steps)
        settle = self._field_int(action, "settle_steps", self.settle_steps)
        return start, target, steps, settle

    def current_action(
        self,
        tensordict: TensorDictBase,
        batch_shape: torch.Size,
        device: torch.device,
        dtype: torch.dtype,
        action_dim: int,
    ) -> torch.Tensor:
        """The low-level action a macro starts from: zeros here (a hook for presets).

        ``action_key`` holds the incoming macro action on this path, so it is not read
        back as the start.
        """
        dim = self.action_dim if self.action_dim is not None else action_dim
        return torch.zeros((*batch_shape, dim), dtype=dtype, device=device)

    @staticmethod
    def _field_int(action, key: str, default: int) -> int:
        if key not in action.keys(True, True):
            return int(default)
        value = int(action.get(key).reshape(-1)[0])
        if value < 0 or (key == "steps" and value == 0):
            raise ValueError(f"the macro action's {key} must be positive, got {value}")
        return value

    def make_primitive(
        self,
        tensordict: TensorDictBase,
        mode: int | IntEnum = MacroPrimitive.MOVE,
        *,
        target: torch.Tensor | None = None,
        target_qpos: torch.Tensor | None = None,
        steps: int | None = None,
        settle_steps: int | None = None,
    ) -> TensorDictBase:
        """A copy of ``tensordict`` holding one :class:`TargetMacroAction` at ``action_key``.

        Raises:
            ValueError: no target.
        """
        target = target if target is not None else target_qpos
        if target is None:
            raise ValueError("make_primitive needs a target tensor")
        action = TargetMacroAction.move(
            target,
            steps=self.macro_steps if steps is None else steps,
            settle_steps=self.settle_steps if settle_steps is None else settle_steps,
            mode=mode,
        )
        out = tensordict.copy()
        out.set(self.action_key, action)
        return out

    def action_sequence(
        self,
        tensordict: TensorDictBase,
        mode: int | IntEnum | None = None,
        *,
        target: torch.Tensor | None = None,
        target_qpos: torch.Tensor | None = None,
        steps: int | None = None,
        settle_steps: int | None = None,
    ) -> torch.Tensor:
        """The low-level sequence of a macro action, without executing it."""
        if mode is not None or target is not None or target_qpos is not None:
            tensordict = self.make_primitive(
                tensordict,
                MacroPrimitive.MOVE if mode is None else mode,
                target=target,
                target_qpos=target_qpos,
                steps=steps,
                settle_steps=settle_steps,
            )
        return self.inv(tensordict).get(self.action_key)

    def transform_input_spec(self, input_spec):
        input_spec = input_spec.clone()
        actions = input_spec.get("full_action_spec", None)
        leaf = None
        if isinstance(actions, Composite) and self.action_key in actions.keys(True, True):
            leaf = actions[self.action_key]
        dim = self.action_dim
        if dim is None and leaf is not None and leaf.shape:
            dim = int(leaf.shape[-1])
        if dim is None:
            raise RuntimeError(
                f"{type(self).__name__} needs action_dim to build its action spec; pass "
                "action_dim=... (the env's action spec has none at "
                f"{self.action_key!r})"
            )
        dtype = leaf.dtype if leaf is not None else torch.get_default_dtype()
        bs, device = input_spec.shape, input_spec.device
        full = Composite(shape=bs, device=device)
        full[self.action_key] = self._macro_action_spec(bs, device, dtype, dim)
        input_spec["full_action_spec"] = full
        return input_spec

    def _macro_action_spec(self, batch_size, device, dtype, action_dim: int) -> Composite:
        """The policy-facing spec: ``mode`` over the primitives and a ``target``."""
        return Composite(
            mode=Categorical(
                n=len(self.primitive_enum), shape=(*batch_size, 1), dtype=torch.long, device=device
            ),
            target=Unbounded(shape=(*batch_size, action_dim), dtype=dtype, device=device),
            shape=batch_size,
            device=device,
        )

    def _find_parent_env_with(self, attr: str) -> Any | None:
        """The first env holding ``attr`` down the parent chain (``parent``, its
        ``base_env``, ...), or ``None``."""
        env, seen = self.parent, set()
        while env is not None and id(env) not in seen:
            seen.add(id(env))
            if hasattr(env, attr):
                return env
            env = getattr(env, "base_env", None)
        return None

    def _repr_args(self) -> str:
        return (
            f"macro_steps={self.macro_steps}, settle_steps={self.settle_steps}, "
            f"action_key={self.action_key!r}"
        )
