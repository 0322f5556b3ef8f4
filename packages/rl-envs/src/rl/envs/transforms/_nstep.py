"""MultiStepTransform: n-step returns computed as data is written into a replay buffer."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase

from rl.core import n_step_return

from ._base import Transform
from ._spec_utils import NestedKey, normalize_key

__all__ = ["MultiStepTransform"]

_DEFAULT_DONE_KEYS = ("done", "truncated", "terminated")


def _under_next(key: NestedKey) -> tuple[str, ...]:
    return ("next", *key) if isinstance(key, tuple) else ("next", key)


def _along_time(x: torch.Tensor, nb: int) -> torch.Tensor:
    """``x`` (``[*B, T]``) reshaped to broadcast against a leaf ``[*B, T, *F]`` of ``nb`` dims."""
    return x.reshape(*x.shape, *([1] * (nb - x.ndim)))


def multi_step_returns(
    data: TensorDictBase,
    *,
    n_steps: int,
    gamma: float,
    done_key: NestedKey,
    done_keys: Sequence[NestedKey],
    reward_keys: Sequence[NestedKey],
    mask_key: NestedKey | None,
) -> TensorDictBase:
    """n-step transitions of ``data`` (``[*B, T]``, time last), as TorchRL's ``MultiStep``.

    A trajectory ends at a step whose ``("next", done_key)`` is set, or at ``T - 1``. For a
    step ``t`` with ``r_t`` steps left in its trajectory (``t`` included),
    ``k_t = min(r_t, n_steps)``:

    - ``("next", reward)`` becomes ``sum_{j < k_t} gamma^j reward_{t+j}``
      (:func:`rl.core.n_step_return`); the one-step reward moves to
      ``("next", "original_reward")``;
    - the other ``"next"`` entries, except the done keys, are read at ``t + k_t - 1``;
    - ``"steps_to_next_obs"`` is ``k_t``, ``"gamma"`` is ``gamma ** k_t`` and
      ``"nonterminal"`` is ``k_t != 1`` (False where ``mask_key`` is False), all ``[*B, T]``.

    Returns:
        a shallow copy of ``data`` with these entries.
    """
    done = data.get(("next", *(done_key if isinstance(done_key, tuple) else (done_key,))), None)
    if done is None:
        raise KeyError(
            f"MultiStepTransform needs the done entry {_under_next(done_key)!r}; keys present: "
            f"{sorted(map(str, data.keys(True, True)))}"
        )
    shape = data.batch_size
    if done.shape != shape:
        if done.shape[:-1] == shape and done.shape[-1] == 1:
            done = done.squeeze(-1)
        else:
            raise RuntimeError(
                f"MultiStepTransform: the done entry has shape {tuple(done.shape)}, expected the "
                f"data batch size {tuple(shape)} (plus a trailing singleton dim)"
            )
    data = data.clone(False)
    nb = data.ndim
    next_td = data.get("next")
    flags = done.unsqueeze(-1)
    returns, steps = {}, None
    for key in reward_keys:
        returns[key], steps = n_step_return(next_td.get(key), flags, gamma, n_steps)
    if steps is None:  # no reward to sum, only the look-ahead of each step
        _, steps = n_step_return(
            torch.zeros(flags.shape, device=flags.device), flags, gamma, n_steps
        )
    time_to_obs = steps.squeeze(-1) - 1  # [*B, T]

    reward_set = {normalize_key(key) for key in reward_keys}
    excluded = reward_set | {normalize_key(key) for key in done_keys}
    gather_idx = torch.arange(shape[-1], device=done.device) + time_to_obs
    gathered = {}
    for key in next_td.keys(True, True):
        if key in excluded:
            continue
        value = next_td.get(key)
        idx = _along_time(gather_idx, value.ndim).expand(*shape, *value.shape[nb:])
        gathered[key] = torch.gather(value, nb - 1, idx)

    data.set("steps_to_next_obs", time_to_obs + 1)
    for key, total in returns.items():
        next_td.rename_key_(key, "original_reward")
        next_td.set(key, total)
    for key, value in gathered.items():
        next_td.set(key, value)
    data.set("gamma", gamma ** (time_to_obs + 1))
    nonterminal = time_to_obs != 0
    if mask_key is not None:
        mask = data.get(mask_key, None)
        if mask is not None:
            nonterminal = nonterminal & mask.reshape(shape).bool()
    data.set("nonterminal", nonterminal)
    return data


def _common_keys(a: TensorDictBase, b: TensorDictBase) -> list[TensorDictBase]:
    """``[a, b]`` restricted to their shared entries (a rollout started from the ``"next"``
    of another may carry a root reward the first one did not)."""
    keys_a = set(a.keys(True, True))
    keys_b = set(b.keys(True, True))
    if keys_a == keys_b:
        return [a, b]
    shared = [key for key in a.keys(True, True) if key in keys_b]
    return [a.select(*shared), b.select(*shared)]


class MultiStepTransform(Transform):
    """n-step returns computed as data is written into a replay buffer.

    The inverse transform (run by ``ReplayBuffer.extend``) keeps the last ``n_steps``
    time steps of each call in a local buffer and prepends them to the next call, so the
    look-ahead crosses the boundary between consecutive batches of a collector. Each call
    returns the n-step version (see :func:`multi_step_returns`) of the steps whose
    look-ahead is complete: the stored steps plus the new ones, minus the last
    ``n_steps``; it returns ``None`` while fewer than ``n_steps + 1`` steps have been seen.
    Data is ``[*B, T]`` with time last, as a rollout or a collector batch.

    Args:
        n_steps: the look-ahead, a positive int (can be changed between calls).
        gamma: the discount factor.

    Keyword Args:
        reward_keys: the reward entries under ``"next"`` to accumulate (default
            ``["reward"]``); the one-step reward is kept as ``("next", "original_reward")``.
        done_key: the entry under ``"next"`` that ends a trajectory (default ``"done"``).
        done_keys: the entries under ``"next"`` left as they are (default
            ``["done", "truncated", "terminated"]``).
        mask_key: a validity mask of the data (default ``"mask"``; ignored if absent).

    Raises:
        ValueError: ``n_steps`` is not a positive int, or the transform is put in an env.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = MultiStepTransform(n_steps=2, gamma=0.5)
        >>> def batch(start):
        ...     obs = torch.arange(start, start + 3.0).unsqueeze(-1)
        ...     return TensorDict({"observation": obs, "next": {"observation": obs + 1,
        ...         "reward": torch.ones(3, 1), "done": torch.zeros(3, 1, dtype=torch.bool)}}, [3])
        >>> t.inv(batch(0.0))["next", "observation"].squeeze(-1)
        tensor([2.])
        >>> out = t.inv(batch(3.0))
        >>> out["observation"].squeeze(-1), out["next", "reward"].squeeze(-1)
        (tensor([1., 2., 3.]), tensor([1.5000, 1.5000, 1.5000]))
    """

    ENV_ERR = (
        "The MultiStepTransform is only an inverse transform and can "
        "be applied exclusively to replay buffers."
    )

    def __init__(
        self,
        n_steps: int,
        gamma: float,
        *,
        reward_keys: list[NestedKey] | None = None,
        done_key: NestedKey | None = None,
        done_keys: list[NestedKey] | None = None,
        mask_key: NestedKey | None = None,
    ) -> None:
        super().__init__()
        self.n_steps = n_steps
        self.gamma = gamma
        self.reward_keys = reward_keys
        self.done_key = done_key
        self.done_keys = done_keys
        self.mask_key = mask_key
        self._buffer = None
        self._validated = False

    @property
    def n_steps(self) -> int:
        """The look-ahead; it may be changed between calls."""
        return self._n_steps

    @n_steps.setter
    def n_steps(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"The value of n_steps must be a strictly positive integer, got {value!r}"
            )
        self._n_steps = value

    @property
    def reward_keys(self) -> list[NestedKey]:
        return self._reward_keys

    @reward_keys.setter
    def reward_keys(self, value) -> None:
        self._reward_keys = ["reward"] if value is None else [normalize_key(k) for k in value]

    @property
    def done_key(self) -> NestedKey:
        return self._done_key

    @done_key.setter
    def done_key(self, value) -> None:
        self._done_key = "done" if value is None else normalize_key(value)

    @property
    def done_keys(self) -> list[NestedKey]:
        return self._done_keys

    @done_keys.setter
    def done_keys(self, value) -> None:
        keys = _DEFAULT_DONE_KEYS if value is None else value
        self._done_keys = [normalize_key(k) for k in keys]

    @property
    def mask_key(self) -> NestedKey:
        return self._mask_key

    @mask_key.setter
    def mask_key(self, value) -> None:
        self._mask_key = "mask" if value is None else normalize_key(value)

    @property
    def has_inverse(self) -> bool:
        return True

    def _validate(self) -> None:
        if self._parent_parts() is not None:
            raise ValueError(self.ENV_ERR)
        self._validated = True

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase | None:
        if not self._validated:
            self._validate()
        if tensordict.ndim < 1:
            raise ValueError(
                f"MultiStepTransform needs data with a time dimension (last batch dim), got "
                f"batch_size {tuple(tensordict.batch_size)}"
            )
        if self._buffer is None:
            total = tensordict
        else:
            total = torch.cat(_common_keys(self._buffer, tensordict), -1)
        self._buffer = total[..., -self.n_steps :].copy()
        if total.shape[-1] <= self.n_steps:
            return None
        out = multi_step_returns(
            total,
            n_steps=self.n_steps,
            gamma=self.gamma,
            done_key=self.done_key,
            done_keys=self.done_keys,
            reward_keys=self.reward_keys,
            mask_key=self.mask_key,
        )
        return out[..., : -self.n_steps]

    def _reset(self, tensordict, tensordict_reset):
        raise ValueError(self.ENV_ERR)

    def _step(self, tensordict, next_tensordict):
        raise ValueError(self.ENV_ERR)

    def _repr_args(self) -> str:
        return f"n_steps={self.n_steps}, gamma={self.gamma}"
