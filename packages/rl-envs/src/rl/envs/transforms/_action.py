"""Action-side transforms: masking and discretisation."""

from __future__ import annotations

from typing import Literal

import torch

from rl.core import Bounded, Categorical, OneHot

from ._base import Transform, _missing_key_error
from ._spec_utils import NestedKey, normalize_key

__all__ = ["ActionMask", "ActionDiscretizer"]


class ActionMask(Transform):
    """Keeps a discrete action spec's mask in sync with the env's ``"action_mask"`` entry.

    After every reset and step, the mask read from the data is written into the env's
    action spec (``spec.update_mask``), so that ``env.rand_action()`` and random rollouts
    only draw allowed actions. On data (``transform(td)``), it checks that the actions of
    ``td`` are allowed by its masks.

    Args:
        action_key: the action entry.
        mask_key: the boolean mask entry (``[*B, n]``).

    Raises:
        ValueError: on data, an action that the mask forbids.
        TypeError: at spec time, the action spec has no mask (not Categorical / OneHot).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(action=torch.tensor(2), action_mask=torch.tensor([True, False, True]))
        >>> ActionMask()(td) is td  # action 2 is allowed
        True
    """

    _dynamic_action_spec = True

    def __init__(self, action_key: NestedKey = "action", mask_key: NestedKey = "action_mask"):
        super().__init__()
        self.action_key = normalize_key(action_key)
        self.mask_key = normalize_key(mask_key)

    @property
    def has_step(self) -> bool:
        return True

    def _update(self, tensordict):
        mask = tensordict.get(self.mask_key, None)
        if mask is None:
            raise _missing_key_error(self, self.mask_key, tensordict)
        env = self._top_env()
        if env is not None:
            env.full_action_spec[self.action_key].update_mask(mask.clone())
        return tensordict

    def _call(self, next_tensordict):
        return self._update(next_tensordict)

    def _reset(self, tensordict, tensordict_reset):
        return self._update(tensordict_reset)

    def forward(self, tensordict):
        mask = tensordict.get(self.mask_key, None)
        if mask is None:
            raise _missing_key_error(self, self.mask_key, tensordict)
        action = tensordict.get(self.action_key, None)
        if action is None:
            raise _missing_key_error(self, self.action_key, tensordict)
        if action.dtype == torch.bool or action.shape == mask.shape:
            allowed = (action.bool() & mask).any(-1)
        else:
            allowed = mask.gather(-1, action.long().reshape(*mask.shape[:-1], -1)).all(-1)
        if not bool(allowed.all()):
            raise ValueError(
                f"ActionMask: {self.action_key!r} holds actions that {self.mask_key!r} forbids "
                f"(actions {action.tolist()}, mask {mask.tolist()})"
            )
        return tensordict

    def transform_input_spec(self, input_spec):
        spec = input_spec["full_action_spec"][self.action_key]
        if not hasattr(spec, "update_mask"):
            raise TypeError(
                f"ActionMask needs a discrete action spec with a mask for {self.action_key!r}, "
                f"got {spec!r}"
            )
        return input_spec

    def _repr_args(self) -> str:
        return f"action_key={self.action_key!r}, mask_key={self.mask_key!r}"


class ActionDiscretizer(Transform):
    """Exposes a continuous (``Bounded``) action as ``num_intervals`` discrete choices.

    The outer action spec becomes ``Categorical(num_intervals)`` with the inner action's
    shape (one choice per action dim), or ``OneHot`` with an extra trailing dim of size
    ``num_intervals`` when ``categorical=False``. Before reaching the env, choice ``i`` of a
    dim with bounds ``[low, high]`` becomes ``low + (high - low) * (i + c) / num_intervals``
    with ``c = 0.5`` (``"median"``), ``0`` (``"low"``), ``1`` (``"high"``) or a uniform
    draw (``"random"``).

    Args:
        num_intervals: number of choices per action dim (``>= 2``).
        action_key: the inner env's action key.
        out_action_key: the outer action key (default: ``action_key``).
        sampling: ``"median"``, ``"low"``, ``"high"`` or ``"random"`` (``None``: ``"median"``).
        categorical: index actions (else one-hot).
        low / high: bounds for use on data outside an env (read from the spec otherwise).

    Raises:
        ValueError: ``num_intervals < 2`` or unknown ``sampling``.
        TypeError: at spec time, the inner action spec is not ``Bounded``.

    Examples:
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> env = TransformedEnv(PendulumEnv(), ActionDiscretizer(5))
        >>> env.action_spec.n
        5
    """

    invertible = True
    _OFFSETS = {"median": 0.5, "low": 0.0, "high": 1.0}

    def __init__(
        self,
        num_intervals: int,
        action_key: NestedKey = "action",
        out_action_key: NestedKey | None = None,
        sampling: Literal["median", "low", "high", "random"] | None = None,
        categorical: bool = True,
        low: float | torch.Tensor | None = None,
        high: float | torch.Tensor | None = None,
    ):
        if not isinstance(num_intervals, int) or num_intervals < 2:
            raise ValueError(
                f"ActionDiscretizer num_intervals must be an int >= 2, got {num_intervals!r}"
            )
        if sampling is None:
            sampling = "median"
        if sampling not in ("median", "low", "high", "random"):
            raise ValueError(
                f"ActionDiscretizer sampling must be 'median', 'low', 'high' or 'random', got {sampling!r}"
            )
        action_key = normalize_key(action_key)
        out_action_key = action_key if out_action_key is None else normalize_key(out_action_key)
        super().__init__(in_keys_inv=[action_key], out_keys_inv=[out_action_key])
        self.num_intervals = num_intervals
        self.sampling = sampling
        self.categorical = categorical
        self.register_buffer(
            "low", None if low is None else torch.as_tensor(low, dtype=torch.float32)
        )
        self.register_buffer(
            "high", None if high is None else torch.as_tensor(high, dtype=torch.float32)
        )
        self.__dict__["_inner_dtype"] = torch.get_default_dtype()

    def _inv_apply_transform(self, action):
        if self.low is None:
            raise RuntimeError(
                "ActionDiscretizer has no action bounds: put it in a TransformedEnv over a "
                "Bounded action spec, or pass low= and high="
            )
        n = self.num_intervals
        idx = action.to(torch.int64).argmax(-1) if not self.categorical else action
        idx = idx.to(self.low.dtype)
        if self.sampling == "random":
            offset = torch.rand_like(idx)
        else:
            offset = self._OFFSETS[self.sampling]
        value = self.low + (self.high - self.low) * (idx + offset) / n
        return value.to(self.__dict__["_inner_dtype"])

    def transform_input_spec(self, input_spec):
        input_spec = input_spec.clone()
        actions = input_spec["full_action_spec"]
        ((in_key, out_key),) = self._io_pairs_inv
        if in_key not in actions.keys(True, True):
            raise KeyError(
                f"ActionDiscretizer action_key {in_key!r} is not in the action spec; keys "
                f"present: {sorted(map(str, actions.keys(True, True)))}"
            )
        spec = actions[in_key]
        if not isinstance(spec, Bounded):
            raise TypeError(
                f"ActionDiscretizer needs a Bounded action spec for {in_key!r}, got {spec!r}"
            )
        nb = len(actions.shape)
        self.low = spec.low.expand(spec.shape)[(0,) * nb].clone().float()
        self.high = spec.high.expand(spec.shape)[(0,) * nb].clone().float()
        self.__dict__["_inner_dtype"] = spec.dtype
        if self.categorical:
            new = Categorical(self.num_intervals, shape=spec.shape, device=spec.device)
        else:
            new = OneHot(
                self.num_intervals, shape=(*spec.shape, self.num_intervals), device=spec.device
            )
        if out_key != in_key:
            del actions[in_key]
        actions[out_key] = new
        return input_spec

    def _repr_args(self) -> str:
        return f"num_intervals={self.num_intervals}, sampling={self.sampling!r}, categorical={self.categorical}"
