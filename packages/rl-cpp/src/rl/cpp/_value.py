"""Compiled backward recurrences of the value estimators (GAE and the TD(lambda) return).

Inputs are ``[N, T, F]`` arrays (time in the middle), numpy arrays or CPU torch tensors
of any strides (transposed or expanded views are read in place), float32 or float64,
with bool ``done`` / ``terminated`` flags. Outputs are written into the arrays given, or
allocated with the caller's library. The kernels run on one thread with the GIL
released. ``rl.objectives.value.functional`` uses them when rl-cpp is installed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rl.cpp import _C

__all__ = ["generalized_advantage_estimate", "td_lambda_return_estimate"]

_FLOATS = ("float32", "float64")


def _dtype_name(x: Any) -> str:
    return str(x.dtype).rpartition(".")[2]


def _check(fn: str, floats: dict[str, Any], flags: dict[str, Any]) -> tuple[int, ...]:
    arrays = {**floats, **flags}
    for name, a in arrays.items():
        if not hasattr(a, "shape") or not hasattr(a, "dtype"):
            raise TypeError(
                f"{fn}: {name} must be a numpy array or a torch tensor, got {type(a).__name__}"
            )
        device = getattr(a, "device", "cpu")
        if str(device) != "cpu":
            raise ValueError(
                f"{fn}: {name} is on {device}; the compiled kernels run on CPU arrays only"
            )
    shape = tuple(next(iter(floats.values())).shape)
    if len(shape) != 3:
        raise ValueError(f"{fn}: arrays must be [N, T, F] (3 dimensions), got shape {shape}")
    bad = {k: tuple(a.shape) for k, a in arrays.items() if tuple(a.shape) != shape}
    if bad:
        desc = ", ".join(f"{k} has shape {s}" for k, s in bad.items())
        raise ValueError(f"{fn}: every array must have shape {shape}, but {desc}")
    dtype = _dtype_name(next(iter(floats.values())))
    for name, a in floats.items():
        if _dtype_name(a) not in _FLOATS or _dtype_name(a) != dtype:
            raise TypeError(
                f"{fn}: {name} has dtype {_dtype_name(a)}, expected {dtype} (float32 or float64)"
            )
    for name, a in flags.items():
        if _dtype_name(a) != "bool":
            raise TypeError(f"{fn}: {name} has dtype {_dtype_name(a)}, expected bool")
    return shape


def _empty_like(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return np.empty(x.shape, dtype=x.dtype)
    return x.new_empty(x.shape)  # torch: same dtype and device, contiguous


def generalized_advantage_estimate(
    gamma: float,
    lmbda: float,
    state_value: Any,
    next_state_value: Any,
    reward: Any,
    done: Any,
    terminated: Any,
    advantage: Any | None = None,
    value_target: Any | None = None,
) -> tuple[Any, Any]:
    """GAE over ``[N, T, F]`` arrays: ``A[t] = delta[t] + gamma * lmbda * (1 - done[t]) * A[t+1]``.

    ``delta[t] = reward[t] + gamma * (1 - terminated[t]) * next_state_value[t] - state_value[t]``
    and ``value_target = A + state_value``.

    Args:
        gamma (float): discount.
        lmbda (float): GAE lambda.
        state_value, next_state_value, reward: float32 or float64 ``[N, T, F]`` arrays.
        done, terminated: bool ``[N, T, F]`` arrays.
        advantage, value_target: optional outputs (same shape and dtype, writable, not
            aliasing an input); allocated with the input's library when ``None``.

    Returns:
        ``(advantage, value_target)``.

    Raises:
        TypeError: wrong dtype (floats must share one of float32/float64, flags must be bool).
        ValueError: arrays of different shapes, not 3-D, or not on the CPU.

    Examples:
        >>> import numpy as np
        >>> v = np.zeros((1, 3, 1), np.float32); r = np.ones((1, 3, 1), np.float32)
        >>> d = np.zeros((1, 3, 1), bool)
        >>> adv, _ = generalized_advantage_estimate(0.5, 1.0, v, v, r, d, d)
        >>> adv.ravel().tolist()
        [1.75, 1.5, 1.0]
    """
    fn = "generalized_advantage_estimate"
    advantage = _empty_like(reward) if advantage is None else advantage
    value_target = _empty_like(reward) if value_target is None else value_target
    _check(
        fn,
        {
            "state_value": state_value,
            "next_state_value": next_state_value,
            "reward": reward,
            "advantage": advantage,
            "value_target": value_target,
        },
        {"done": done, "terminated": terminated},
    )
    _C.gae(
        float(gamma),
        float(lmbda),
        state_value,
        next_state_value,
        reward,
        done,
        terminated,
        advantage,
        value_target,
    )
    return advantage, value_target


def td_lambda_return_estimate(
    gamma: float,
    lmbda: float,
    next_state_value: Any,
    reward: Any,
    done: Any,
    terminated: Any,
    out: Any | None = None,
) -> Any:
    """TD(lambda) return over ``[N, T, F]`` arrays, bootstrapped at done steps and at ``T - 1``.

    ``G[t] = reward[t] + gamma * ((1 - lmbda) * V[t] + lmbda * G[t+1])`` where ``V[t]`` is
    ``next_state_value[t]`` (zero when terminated) and ``G[t+1]`` is replaced by ``V[t]``
    at a done step and at the last step.

    Args:
        gamma (float): discount.
        lmbda (float): trace decay (``0`` gives TD(0), ``1`` gives TD(1)).
        next_state_value, reward: float32 or float64 ``[N, T, F]`` arrays.
        done, terminated: bool ``[N, T, F]`` arrays.
        out: optional output array; allocated with the input's library when ``None``.

    Returns:
        The return array.
    """
    fn = "td_lambda_return_estimate"
    out = _empty_like(reward) if out is None else out
    _check(
        fn,
        {"next_state_value": next_state_value, "reward": reward, "out": out},
        {"done": done, "terminated": terminated},
    )
    _C.td_lambda_return(float(gamma), float(lmbda), next_state_value, reward, done, terminated, out)
    return out
