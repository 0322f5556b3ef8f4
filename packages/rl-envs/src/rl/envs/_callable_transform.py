"""A plain callable used as a transform (``env.append_transform(lambda td: ...)``)."""

from __future__ import annotations

from collections.abc import Callable

from tensordict import TensorDictBase

from .transforms._base import Transform

__all__ = ["CallableTransform"]


class CallableTransform(Transform):
    """Applies ``fn(tensordict)`` to what the env returns at each step and reset.

    Built by :meth:`~rl.envs.EnvBase.append_transform` when it is given a callable that
    is not a :class:`~rl.envs.transforms.Transform` (TorchRL's ``_CallableTransform``).
    The specs are left unchanged: ``fn`` must keep the entries' shapes and dtypes.

    Args:
        fn: a callable taking a tensordict and returning it (or ``None``: updated in place).

    Examples:
        >>> from rl.envs import PendulumEnv
        >>> env = PendulumEnv().append_transform(lambda td: td.set("observation", td["observation"] * 0))
        >>> env.rollout(2)["next", "observation"].abs().sum()
        tensor(0.)
    """

    def __init__(self, fn: Callable[[TensorDictBase], TensorDictBase | None]) -> None:
        super().__init__()
        self.fn = fn

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        out = self.fn(next_tensordict)
        return next_tensordict if out is None else out

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def __repr__(self) -> str:
        return "_CallableTransform(keys=[])"
