"""TorchRL's convenience methods of ``EnvBase``: transforms, done handling, checks."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

__all__ = ["EnvHelpers"]


class EnvHelpers:
    """``append_transform``, ``any_done``, ``maybe_reset``, ``step_mdp``, ``check_env_specs``
    and the spec-lock switches; mixed into :class:`~rl.envs.EnvBase`."""

    def append_transform(self, transform) -> EnvHelpers:
        """Returns ``TransformedEnv(self, transform)`` (TorchRL's ``EnvBase.append_transform``).

        ``transform`` is a :class:`~rl.envs.transforms.Transform` or a callable taking and
        returning a tensordict (applied to the step and reset outputs; specs unchanged).
        A :class:`~rl.envs.TransformedEnv` appends to its own list instead (and returns
        itself).

        Raises:
            TypeError: ``transform`` is neither a Transform nor callable.
        """
        from ._callable_transform import CallableTransform
        from .transforms import Transform, TransformedEnv

        if not isinstance(transform, Transform):
            if not callable(transform):
                raise TypeError(
                    "append_transform expects a Transform or a callable, got "
                    f"{type(transform).__name__}: {transform!r}"
                )
            transform = CallableTransform(transform)
        return TransformedEnv(self, transform)

    def any_done(self, tensordict: TensorDictBase) -> torch.Tensor | bool:
        """Whether a done flag is set (0-d bool tensor, as TorchRL); writes ``"_reset"`` if so."""
        from ._td_utils import terminated_or_truncated

        return terminated_or_truncated(tensordict, full_done_spec=self.full_done_spec)

    def maybe_reset(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Resets the entries whose ``"_reset"`` mask is set (see :meth:`any_done`)."""
        if "_reset" in tensordict.keys():
            return self.reset(tensordict)
        return tensordict

    def step_mdp(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        """``step_mdp`` with this env's reward / done / action keys."""
        from ._utils import step_mdp

        return step_mdp(
            next_tensordict,
            reward_keys=self.reward_keys,
            done_keys=self.done_keys,
            action_keys=self.action_keys,
        )

    def check_env_specs(self, *args, **kwargs) -> None:
        """:func:`~rl.envs.check_env_specs` on this env."""
        from ._utils import check_env_specs

        check_env_specs(self, *args, **kwargs)

    def set_spec_lock_(self, mode: bool = True) -> EnvHelpers:
        """Locks (or unlocks) the env's specs, as TorchRL's method.

        Locked specs refuse direct changes (``env.observation_spec["x"] = spec`` raises a
        ``RuntimeError``); the env's spec setters (``env.observation_spec = spec``)
        still work. Envs are built locked unless given ``spec_locked=False``.

        Returns:
            the env.
        """
        mode = bool(mode)
        self.__dict__.pop("_keys_cache", None)
        for name in ("output_spec", "input_spec"):
            spec = getattr(self, name, None)
            if spec is None or not hasattr(spec, "lock_"):
                continue
            if mode:
                spec.lock_(recurse=True)
            elif spec.is_locked:
                spec.unlock_()
        self.__dict__["_is_spec_locked"] = mode
        return self

    def empty_cache(self) -> None:
        """Drops cached specs (nothing is cached by a plain env)."""
