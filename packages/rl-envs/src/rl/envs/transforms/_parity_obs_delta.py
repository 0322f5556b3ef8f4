"""NextObservationDelta: next observations stored as low-precision deltas."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase

from ._base import Transform
from ._spec_utils import NestedKey, normalize_key

__all__ = ["NextObservationDelta"]


_EXCLUDED = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)


class NextObservationDelta(Transform):
    """Stores next observations as low-precision deltas, restored when the data is read.

    In an env, each step writes ``("next", "delta", key) = (next_obs - obs)`` in
    ``delta_dtype``; ``rollout`` and ``step_and_maybe_reset`` then drop the full
    ``("next", key)`` from the stored transition (it was carried to the next root
    first, so the policy reads full-precision observations), as TorchRL does; a plain
    ``step`` keeps it. The specs are unchanged (``fake_tensordict`` shows the delta in
    place of the next observation). On data (``forward``, e.g. a replay-buffer transform at sampling),
    ``("next", key)`` is rebuilt as ``obs + delta`` (in ``restore_dtype``, default the
    root entry's dtype) and the delta dropped (``drop_delta``).

    Args:
        in_keys: the observation keys (default: the floating entries of the parent's
            observation spec; required on data).
        delta_dtype: the floating dtype of the stored deltas (default ``float16``).
        restore_dtype: the dtype of the rebuilt entry, or ``"root"``.
        drop_delta: remove the delta once the observation is rebuilt.
        excluded_dtypes: dtypes never compressed (integers, booleans).

    Raises:
        ValueError: a non-floating ``delta_dtype`` or ``restore_dtype``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"obs": torch.tensor([1.0]), "next": {"delta": {"obs": torch.tensor([0.5])}}})
        >>> NextObservationDelta(in_keys=["obs"])(td)["next", "obs"]
        tensor([1.5000])
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> r = TransformedEnv(PendulumEnv(), NextObservationDelta()).rollout(3)
        >>> r["next", "delta", "observation"].dtype, ("next", "observation") in r.keys(True)
        (torch.float16, False)
    """

    def __init__(
        self,
        in_keys: Sequence[NestedKey] | None = None,
        *,
        delta_dtype: torch.dtype = torch.float16,
        restore_dtype: torch.dtype | str = "root",
        drop_delta: bool = True,
        excluded_dtypes: tuple[torch.dtype, ...] = _EXCLUDED,
    ):
        if not delta_dtype.is_floating_point:
            raise ValueError(f"delta_dtype must be a floating-point dtype, got {delta_dtype}.")
        if restore_dtype != "root" and not (
            isinstance(restore_dtype, torch.dtype) and restore_dtype.is_floating_point
        ):
            raise ValueError(
                f"restore_dtype must be a floating-point dtype or 'root', got {restore_dtype!r}."
            )
        super().__init__([] if in_keys is None else in_keys)
        self._auto_keys = in_keys is None
        self.delta_dtype = delta_dtype
        self.restore_dtype = restore_dtype
        self.drop_delta = drop_delta
        self.excluded_dtypes = tuple(excluded_dtypes)

    @property
    def has_step(self) -> bool:
        return True

    def _keys(self) -> list[NestedKey]:
        if not self._auto_keys:
            return self.in_keys
        parent = self.parent
        if parent is None:
            return []
        keys = []
        for key, spec in parent.observation_spec.items(True, True):
            dtype = spec.dtype
            if dtype is None or dtype in self.excluded_dtypes or not dtype.is_floating_point:
                continue
            keys.append(normalize_key(key))
        return keys

    @staticmethod
    def _tuple(key: NestedKey) -> tuple[str, ...]:
        return (key,) if isinstance(key, str) else tuple(key)

    def _step(self, tensordict, next_tensordict):
        for key in self._keys():
            obs = tensordict.get(key, None)
            nxt = next_tensordict.get(key, None)
            if obs is None or nxt is None:
                continue
            # subtract at full precision, cast once
            next_tensordict.set(("delta", *self._tuple(key)), (nxt - obs).to(self.delta_dtype))
        return next_tensordict

    def _post_step_mdp_hooks(self, tensordict, tensordict_):
        # the full ("next", key) lived until step_mdp carried it to the next root: the
        # stored transition keeps the delta only (as TorchRL)
        next_td = tensordict.get("next", None)
        if next_td is not None:
            for key in self._keys():
                k = self._tuple(key)
                if next_td.get(k, None) is not None:
                    next_td.pop(k)
        if tensordict_ is not None and tensordict_.get("delta", None) is not None:
            # the next root holds observations only (the delta is not in the specs); it
            # shares the "delta" sub-tensordict with the transition: exclude, not pop
            tensordict_ = tensordict_.exclude(*[("delta", *self._tuple(k)) for k in self._keys()])
            if tensordict_.get("delta").is_empty():
                tensordict_ = tensordict_.exclude("delta")
        return tensordict, tensordict_

    def transform_fake_tensordict(self, fake_tensordict):
        next_td = fake_tensordict.get("next", None)
        if next_td is not None:
            for key in self._keys():
                k = self._tuple(key)
                leaf = next_td.get(k, None)
                if leaf is not None:
                    next_td.set(("delta", *k), leaf.to(self.delta_dtype))
                    next_td.pop(k)
        return fake_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._auto_keys and self.parent is None:
            return tensordict
        for key in self._keys():
            k = self._tuple(key)
            delta_key = ("next", "delta", *k)
            obs = tensordict.get(k, None)
            delta = tensordict.get(delta_key, None)
            if obs is None or delta is None:
                continue
            dtype = obs.dtype if self.restore_dtype == "root" else self.restore_dtype
            tensordict.set(("next", *k), obs.to(dtype) + delta.to(dtype))
            if self.drop_delta:
                tensordict.pop(delta_key)
                sub = tensordict.get(("next", "delta"), None)
                if sub is not None and sub.is_empty():
                    tensordict.pop(("next", "delta"))
        return tensordict

    def _repr_args(self) -> str:
        keys = None if self._auto_keys else self.in_keys
        return f"in_keys={keys}, delta_dtype={self.delta_dtype}"
