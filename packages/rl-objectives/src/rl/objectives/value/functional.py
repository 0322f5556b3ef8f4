"""Pure tensor functions of the value estimators (TD(0), TD(1), TD(lambda), GAE, V-trace).

Every function takes tensors shaped ``[*B, T, *F]`` (time at ``time_dim``, ``-2`` by
default) and returns tensors of the same shape. ``done`` marks the last step of a
trajectory in the batch (the recursion stops there); ``terminated`` marks the end of an
episode (the value of the next state is zero). A step that is done but not terminated
(a truncation, or the end of the collected batch) bootstraps from the next state's
value: value targets bootstrap through truncation, never through termination. The last
step of the time dimension always bootstraps from ``next_state_value``.

The ``vec_`` names are kept for TorchRL users: here both spellings run the same
vectorized code (a doubling scan in torch, or rl-cpp's compiled kernel on CPU tensors
that need no gradient), which accepts every ``lmbda`` in ``[0, 1]``.
"""

from __future__ import annotations

import torch

from rl.objectives.value._scan import cpp_kernels, reverse_linear_scan, use_cpp

__all__ = [
    "generalized_advantage_estimate",
    "reward2go",
    "td0_advantage_estimate",
    "td0_return_estimate",
    "td1_advantage_estimate",
    "td1_return_estimate",
    "td_lambda_advantage_estimate",
    "td_lambda_return_estimate",
    "vec_generalized_advantage_estimate",
    "vec_td1_advantage_estimate",
    "vec_td1_return_estimate",
    "vec_td_lambda_advantage_estimate",
    "vec_td_lambda_return_estimate",
    "vtrace_advantage_estimate",
]

Scalar = float | torch.Tensor


# --------------------------------------------------------------------------- helpers
def _check_shapes(fn: str, **tensors: torch.Tensor | None) -> None:
    given = {k: v for k, v in tensors.items() if v is not None}
    shapes = {tuple(v.shape) for v in given.values()}
    if len(shapes) > 1:
        desc = ", ".join(f"{k} has shape {tuple(v.shape)}" for k, v in given.items())
        raise ValueError(f"{fn}: all inputs must share one shape [*B, T, *F], but {desc}")


def _flags(
    done: torch.Tensor, terminated: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    done = done if done.dtype == torch.bool else done.bool()
    if terminated is None:
        return done, done
    terminated = terminated if terminated.dtype == torch.bool else terminated.bool()
    # a terminated step ends its trajectory even if `done` forgot to say so
    return done | terminated, terminated


class _TimeLayout:
    """Moves the time dimension to ``-2`` (and back) for every tensor of one call."""

    def __init__(self, fn: str, reference: torch.Tensor, time_dim: int) -> None:
        ndim = reference.ndim
        if not -ndim <= time_dim < ndim:
            raise ValueError(
                f"{fn}: time_dim={time_dim} is out of range for inputs of shape {tuple(reference.shape)}"
            )
        pos = time_dim % ndim
        self.unsqueeze = ndim == 1
        self.dim = None if (self.unsqueeze or pos == ndim - 2) else pos

    def __call__(self, t):
        if not isinstance(t, torch.Tensor) or t.ndim == 0:
            return t
        if self.unsqueeze:
            return t.unsqueeze(-1)
        return t if self.dim is None else t.transpose(self.dim, -2)

    def back(self, t: torch.Tensor) -> torch.Tensor:
        if self.unsqueeze:
            return t.squeeze(-1)
        return t if self.dim is None else t.transpose(self.dim, -2)


def _as_param(fn: str, name: str, value: Scalar, like: torch.Tensor, layout: _TimeLayout):
    """A python float, a 0-dim tensor or a tensor shaped like the inputs (time-sensitive)."""
    if not isinstance(value, torch.Tensor):
        return float(value)
    if value.numel() == 1 and tuple(value.shape) != tuple(like.shape):
        value = value.reshape(())  # a one-element tensor is a scalar, as in TorchRL
    if value.ndim and tuple(value.shape) != tuple(like.shape):
        raise ValueError(
            f"{fn}: {name} must be a scalar or shaped like the inputs {tuple(like.shape)}, "
            f"got shape {tuple(value.shape)}"
        )
    return layout(value.to(like.device))


def _scalar(value) -> float | None:
    """``value`` as a python float for rl-cpp's kernel, else ``None`` (no kernel runs
    under ``torch.compile``: no ``.item()`` to break its graph)."""
    if isinstance(value, float):
        return value
    if torch.compiler.is_compiling():
        return None
    if value.ndim == 0 and value.device.type == "cpu":
        return float(value)
    return None


def _is_time_sensitive(value) -> bool:
    """Whether a gamma or lmbda differs per step (a tensor of more than one element)."""
    return isinstance(value, torch.Tensor) and value.numel() > 1


def _refuse_vectorized_non_rolling(
    fn: str, gamma, lmbda, terminated: torch.Tensor, rolling_gamma: bool | None
) -> None:
    """The vectorized TD(lambda) runs ``rolling_gamma=False`` only when it changes nothing.

    With scalar ``gamma`` and ``lmbda`` both conventions give the same return. With
    time-sensitive ones, as in TorchRL, the vectorized functions refuse it and name
    the non-vectorized function that computes it.
    """
    if rolling_gamma is None or rolling_gamma:
        return
    if not (_is_time_sensitive(gamma) or _is_time_sensitive(lmbda)):
        return
    if not terminated[..., 1:, :][terminated[..., :-1, :]].all():
        raise NotImplementedError(
            f"{fn}: When using rolling_gamma=False and vectorized TD(lambda) with "
            "time-dependent gamma, make sure that consecutive trajectories are separated as "
            "different batch items (a step that follows a terminated one starts a new "
            "trajectory); or use the non-vectorized td_lambda_return_estimate"
        )
    raise NotImplementedError(
        f"{fn}: The vectorized version of TD(lambda) with rolling_gamma=False is not "
        "available; use td_lambda_return_estimate / td1_return_estimate, which compute it"
    )


def _non_rolling_return(
    fn: str,
    gamma: Scalar,
    lmbda: Scalar,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None,
    time_dim: int,
) -> torch.Tensor:
    """TD(lambda) return with ``rolling_gamma=False``: ``gamma[k]``, ``lmbda[k]`` rule from ``k`` on.

    The return from step ``k`` runs the TD(lambda) recursion over steps ``k..T-1`` with
    the constant ``gamma[k]`` and ``lmbda[k]`` (``r[k] + g[k] v[k+1] + g[k]**2 v[k+2]
    ...`` for TD(1)), restarting at done steps. All starts are computed at once on a
    ``[*B, T(start), T, *F]`` expansion (memory ``T`` times the inputs').
    """
    _check_shapes(
        fn, next_state_value=next_state_value, reward=reward, done=done, terminated=terminated
    )
    layout = _TimeLayout(fn, reward, time_dim)
    # gamma and lmbda are checked against the inputs' shape before time moves to -2
    gamma = _as_param(fn, "gamma", gamma, reward, layout)
    lmbda = _as_param(fn, "lmbda", lmbda, reward, layout)
    next_state_value, reward, done, terminated = map(
        layout, (next_state_value, reward, done, terminated)
    )
    done, terminated = _flags(done, terminated)

    def per_start(p):  # [*B, T, F] -> [*B, T(start), 1, F]; scalars broadcast as they are
        return p.unsqueeze(-2) if isinstance(p, torch.Tensor) and p.ndim else p

    g, lm = per_start(gamma), per_start(lmbda)
    last_done = _last_step_done(done).unsqueeze(-3)
    nv = (next_state_value * ~terminated).unsqueeze(-3)
    x = reward.unsqueeze(-3) + g * nv * torch.where(last_done, 1.0, 1.0 - lm)
    c = (g * lm) * ~last_done
    x, c = torch.broadcast_tensors(x, c.to(x.dtype))
    returns = reverse_linear_scan(x, c).diagonal(dim1=-3, dim2=-2)  # [*B, F, T]
    return layout.back(returns.movedim(-1, -2))


def _as3d(t: torch.Tensor) -> torch.Tensor:
    """``[*B, T, F]`` as the ``[N, T, F]`` view the compiled kernels read."""
    if t.ndim == 3:
        return t
    if t.ndim == 2:
        return t.unsqueeze(0)
    return t.reshape(-1, *t.shape[-2:])


def _last_step_done(done: torch.Tensor) -> torch.Tensor:
    """``done`` with the last time step set: the batch ends there, so it bootstraps."""
    out = done.clone()
    out[..., -1, :] = True
    return out


# --------------------------------------------------------------------------- TD(0)
def td0_return_estimate(
    gamma: Scalar,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    terminated: torch.Tensor | None = None,
    *,
    done: torch.Tensor | None = None,
) -> torch.Tensor:
    """TD(0) return: ``reward + gamma * (1 - terminated) * next_state_value``.

    Args:
        gamma (float or Tensor): discount (a scalar, or a tensor shaped like ``reward``).
        next_state_value (Tensor): ``V(s[t+1])``, ``[*B, T, *F]``.
        reward (Tensor): ``r[t]``, ``[*B, T, *F]``.
        terminated (Tensor, optional): episode ends, ``[*B, T, *F]`` bool; defaults to ``done``.

    Keyword Args:
        done (Tensor, optional): used as ``terminated`` when that is not given.

    Returns:
        The one-step return, ``[*B, T, *F]``.

    Examples:
        >>> r = torch.ones(3, 1); v = torch.full((3, 1), 2.0)
        >>> term = torch.tensor([[False], [False], [True]])
        >>> td0_return_estimate(0.5, v, r, term).squeeze(-1)
        tensor([2., 2., 1.])
    """
    if terminated is None:
        terminated = done if done is not None else torch.zeros_like(reward, dtype=torch.bool)
    _check_shapes(
        "td0_return_estimate",
        next_state_value=next_state_value,
        reward=reward,
        terminated=terminated,
    )
    not_terminated = ~terminated.bool()
    return reward + gamma * not_terminated * next_state_value


def td0_advantage_estimate(
    gamma: Scalar,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
) -> torch.Tensor:
    """TD(0) advantage: :func:`td0_return_estimate` minus ``state_value``.

    Args:
        gamma (float or Tensor): discount.
        state_value (Tensor): ``V(s[t])``, ``[*B, T, *F]``.
        next_state_value (Tensor): ``V(s[t+1])``, ``[*B, T, *F]``.
        reward (Tensor): ``[*B, T, *F]``.
        done (Tensor): trajectory ends, ``[*B, T, *F]`` bool.
        terminated (Tensor, optional): episode ends; defaults to ``done``.

    Returns:
        The advantage, ``[*B, T, *F]``.
    """
    _check_shapes(
        "td0_advantage_estimate",
        state_value=state_value,
        next_state_value=next_state_value,
        reward=reward,
        done=done,
        terminated=terminated,
    )
    _, terminated = _flags(done, terminated)
    return td0_return_estimate(gamma, next_state_value, reward, terminated) - state_value


# --------------------------------------------------------------------------- TD(lambda)
def vec_td_lambda_return_estimate(
    gamma: Scalar,
    lmbda: Scalar,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    rolling_gamma: bool | None = None,
    *,
    time_dim: int = -2,
) -> torch.Tensor:
    r"""TD(:math:`\lambda`) return (Sutton & Barto, 2018, ch. 12).

    ``G[t] = r[t] + gamma * ((1 - lmbda) * V(s[t+1]) + lmbda * G[t+1])``, where
    ``G[t+1]`` is replaced by ``V(s[t+1])`` at a done step (and at the last step) and
    ``V(s[t+1])`` by zero at a terminated step. ``lmbda=0`` is the TD(0) return and
    ``lmbda=1`` the TD(1) (Monte-Carlo, bootstrapped at truncation) return.

    Args:
        gamma (float or Tensor): discount; a scalar or a tensor shaped like ``reward``.
        lmbda (float or Tensor): trace decay in ``[0, 1]``; a scalar or shaped like ``reward``.
        next_state_value (Tensor): ``V(s[t+1])``, ``[*B, T, *F]``.
        reward (Tensor): ``[*B, T, *F]``.
        done (Tensor): trajectory ends, ``[*B, T, *F]`` bool.
        terminated (Tensor, optional): episode ends; defaults to ``done``.
        rolling_gamma (bool, optional): ``None``/``True``: each step's gamma applies to
            that step. ``False`` (each gamma discounts the whole trajectory after its
            step) is computed by :func:`td_lambda_return_estimate`; here it is refused
            with time-sensitive ``gamma``/``lmbda`` (``NotImplementedError``), as in
            TorchRL, and changes nothing with scalars.

    Keyword Args:
        time_dim (int): the time dimension. Defaults to ``-2``.

    Returns:
        The return ``G``, ``[*B, T, *F]``.

    Examples:
        >>> r = torch.ones(1, 3, 1); v = torch.zeros(1, 3, 1)
        >>> done = torch.zeros(1, 3, 1, dtype=torch.bool)
        >>> vec_td_lambda_return_estimate(0.5, 1.0, v, r, done).flatten()
        tensor([1.7500, 1.5000, 1.0000])
    """
    fn = "vec_td_lambda_return_estimate"
    _check_shapes(
        fn, next_state_value=next_state_value, reward=reward, done=done, terminated=terminated
    )
    layout = _TimeLayout(fn, reward, time_dim)
    # gamma and lmbda are checked against the inputs' shape before time moves to -2
    gamma = _as_param(fn, "gamma", gamma, reward, layout)
    lmbda = _as_param(fn, "lmbda", lmbda, reward, layout)
    next_state_value, reward, done, terminated = map(
        layout, (next_state_value, reward, done, terminated)
    )
    done, terminated = _flags(done, terminated)
    _refuse_vectorized_non_rolling(fn, gamma, lmbda, terminated, rolling_gamma)
    g, lm = _scalar(gamma), _scalar(lmbda)
    if g is not None and lm is not None and use_cpp(next_state_value, reward):
        out = torch.empty_like(reward, memory_format=torch.contiguous_format)
        cpp_kernels().td_lambda_return_estimate(
            g, lm, *map(_as3d, (next_state_value, reward, done, terminated, out))
        )
        return layout.back(out)
    last_done = _last_step_done(done)
    nv = next_state_value * ~terminated
    x = reward + gamma * nv * torch.where(last_done, 1.0, 1.0 - lmbda)
    c = (gamma * lmbda) * ~last_done
    return layout.back(reverse_linear_scan(x, c))


def vec_td_lambda_advantage_estimate(
    gamma: Scalar,
    lmbda: Scalar,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    rolling_gamma: bool | None = None,
    time_dim: int = -2,
) -> torch.Tensor:
    r"""TD(:math:`\lambda`) advantage: :func:`vec_td_lambda_return_estimate` minus ``state_value``.

    Args:
        gamma (float or Tensor): discount.
        lmbda (float or Tensor): trace decay in ``[0, 1]``.
        state_value (Tensor): ``V(s[t])``, ``[*B, T, *F]``.
        next_state_value (Tensor): ``V(s[t+1])``, ``[*B, T, *F]``.
        reward (Tensor): ``[*B, T, *F]``.
        done (Tensor): trajectory ends, bool.
        terminated (Tensor, optional): episode ends; defaults to ``done``.
        rolling_gamma (bool, optional): see :func:`vec_td_lambda_return_estimate`.

    Keyword Args:
        time_dim (int): the time dimension. Defaults to ``-2``.

    Returns:
        The advantage, ``[*B, T, *F]``.
    """
    _check_shapes(
        "vec_td_lambda_advantage_estimate",
        state_value=state_value,
        next_state_value=next_state_value,
        reward=reward,
        done=done,
        terminated=terminated,
    )
    ret = vec_td_lambda_return_estimate(
        gamma, lmbda, next_state_value, reward, done, terminated, rolling_gamma, time_dim=time_dim
    )
    return ret - state_value


def td_lambda_return_estimate(
    gamma: Scalar,
    lmbda: Scalar,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    rolling_gamma: bool | None = None,
    *,
    time_dim: int = -2,
) -> torch.Tensor:
    r"""TD(:math:`\lambda`) return; :func:`vec_td_lambda_return_estimate`, or ``rolling_gamma=False``.

    With ``rolling_gamma=False`` each step's ``gamma`` and ``lmbda`` discount the whole
    trajectory that follows it: the return from ``k`` is the TD(lambda) recursion over
    ``k..T-1`` with the constant ``gamma[k]`` and ``lmbda[k]`` (for TD(1),
    ``r[k] + g[k] r[k+1] + g[k]**2 r[k+2] + ...``).

    Raises:
        RuntimeError: ``rolling_gamma=False`` with a scalar ``gamma`` and ``lmbda`` (both
            conventions agree; TorchRL refuses it).
    """
    if rolling_gamma is None or rolling_gamma:
        return vec_td_lambda_return_estimate(
            gamma, lmbda, next_state_value, reward, done, terminated, time_dim=time_dim
        )
    if not (_is_time_sensitive(gamma) or _is_time_sensitive(lmbda)):
        raise RuntimeError(
            "td_lambda_return_estimate: rolling_gamma=False is expected only with "
            "time-sensitive gamma or lambda values, got scalars"
        )
    return _non_rolling_return(
        "td_lambda_return_estimate",
        gamma,
        lmbda,
        next_state_value,
        reward,
        done,
        terminated,
        time_dim,
    )


def td_lambda_advantage_estimate(
    gamma: Scalar,
    lmbda: Scalar,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    rolling_gamma: bool | None = None,
    time_dim: int = -2,
) -> torch.Tensor:
    r"""TD(:math:`\lambda`) advantage: :func:`td_lambda_return_estimate` minus ``state_value``."""
    _check_shapes(
        "td_lambda_advantage_estimate",
        state_value=state_value,
        next_state_value=next_state_value,
        reward=reward,
        done=done,
        terminated=terminated,
    )
    ret = td_lambda_return_estimate(
        gamma, lmbda, next_state_value, reward, done, terminated, rolling_gamma, time_dim=time_dim
    )
    return ret - state_value


# --------------------------------------------------------------------------- TD(1)
def vec_td1_return_estimate(
    gamma: Scalar,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    rolling_gamma: bool | None = None,
    time_dim: int = -2,
) -> torch.Tensor:
    """TD(1) return: the discounted sum of rewards to the trajectory end, bootstrapped there.

    At a terminated step the sum stops; at a truncated step (done, not terminated) and at
    the last step it adds ``gamma * next_state_value``.

    Args:
        gamma (float or Tensor): discount.
        next_state_value (Tensor): ``V(s[t+1])``, ``[*B, T, *F]``.
        reward (Tensor): ``[*B, T, *F]``.
        done (Tensor): trajectory ends, bool.
        terminated (Tensor, optional): episode ends; defaults to ``done``.
        rolling_gamma (bool, optional): see :func:`vec_td_lambda_return_estimate`.

    Keyword Args:
        time_dim (int): the time dimension. Defaults to ``-2``.

    Returns:
        The return, ``[*B, T, *F]``.
    """
    return vec_td_lambda_return_estimate(
        gamma, 1.0, next_state_value, reward, done, terminated, rolling_gamma, time_dim=time_dim
    )


def vec_td1_advantage_estimate(
    gamma: Scalar,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    rolling_gamma: bool | None = None,
    time_dim: int = -2,
) -> torch.Tensor:
    """TD(1) advantage: :func:`vec_td1_return_estimate` minus ``state_value``."""
    return vec_td_lambda_advantage_estimate(
        gamma,
        1.0,
        state_value,
        next_state_value,
        reward,
        done,
        terminated,
        rolling_gamma,
        time_dim=time_dim,
    )


def td1_return_estimate(
    gamma: Scalar,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    rolling_gamma: bool | None = None,
    *,
    time_dim: int = -2,
) -> torch.Tensor:
    """TD(1) return; :func:`vec_td1_return_estimate`, or ``rolling_gamma=False``.

    With ``rolling_gamma=False`` the return from ``k`` is ``r[k] + g[k] r[k+1] +
    g[k]**2 r[k+2] + ...`` (see :func:`td_lambda_return_estimate`).

    Raises:
        RuntimeError: ``rolling_gamma=False`` with a scalar ``gamma``.
    """
    if rolling_gamma is None or rolling_gamma:
        return vec_td1_return_estimate(
            gamma, next_state_value, reward, done, terminated, time_dim=time_dim
        )
    if not _is_time_sensitive(gamma):
        raise RuntimeError(
            "td1_return_estimate: rolling_gamma=False is expected only with time-sensitive "
            "gamma values, got a scalar"
        )
    return _non_rolling_return(
        "td1_return_estimate", gamma, 1.0, next_state_value, reward, done, terminated, time_dim
    )


def td1_advantage_estimate(
    gamma: Scalar,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    rolling_gamma: bool | None = None,
    time_dim: int = -2,
) -> torch.Tensor:
    """TD(1) advantage: :func:`td1_return_estimate` minus ``state_value``."""
    _check_shapes(
        "td1_advantage_estimate",
        state_value=state_value,
        next_state_value=next_state_value,
        reward=reward,
        done=done,
        terminated=terminated,
    )
    ret = td1_return_estimate(
        gamma, next_state_value, reward, done, terminated, rolling_gamma, time_dim=time_dim
    )
    return ret - state_value


# --------------------------------------------------------------------------- GAE
def vec_generalized_advantage_estimate(
    gamma: Scalar,
    lmbda: Scalar,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    *,
    time_dim: int = -2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimate (Schulman et al., 2016, https://arxiv.org/abs/1506.02438).

    ``delta[t] = r[t] + gamma * (1 - terminated[t]) * V(s[t+1]) - V(s[t])`` and
    ``A[t] = delta[t] + gamma * lmbda * (1 - done[t]) * A[t+1]``; the value target is
    ``A + V(s)``.

    Args:
        gamma (float or Tensor): discount; a scalar or a tensor shaped like ``reward``.
        lmbda (float or Tensor): GAE lambda in ``[0, 1]``; a scalar or shaped like ``reward``.
        state_value (Tensor): ``V(s[t])``, ``[*B, T, *F]``.
        next_state_value (Tensor): ``V(s[t+1])``, ``[*B, T, *F]``.
        reward (Tensor): ``[*B, T, *F]``.
        done (Tensor): trajectory ends, ``[*B, T, *F]`` bool.
        terminated (Tensor, optional): episode ends; defaults to ``done``.

    Keyword Args:
        time_dim (int): the time dimension. Defaults to ``-2``.

    Returns:
        ``(advantage, value_target)``, both ``[*B, T, *F]``.

    Raises:
        ValueError: if the inputs do not share one shape (the message lists each shape).

    Examples:
        >>> v = torch.zeros(2, 4, 1); r = torch.ones(2, 4, 1)
        >>> done = torch.zeros(2, 4, 1, dtype=torch.bool); done[:, 1] = True
        >>> adv, target = vec_generalized_advantage_estimate(0.5, 1.0, v, v, r, done)
        >>> adv[0].flatten()
        tensor([1.5000, 1.0000, 1.5000, 1.0000])
    """
    fn = "vec_generalized_advantage_estimate"
    _check_shapes(
        fn,
        state_value=state_value,
        next_state_value=next_state_value,
        reward=reward,
        done=done,
        terminated=terminated,
    )
    layout = _TimeLayout(fn, reward, time_dim)
    state_value, next_state_value, reward, done, terminated = map(
        layout, (state_value, next_state_value, reward, done, terminated)
    )
    gamma = _as_param(fn, "gamma", gamma, reward, layout)
    lmbda = _as_param(fn, "lmbda", lmbda, reward, layout)
    done, terminated = _flags(done, terminated)
    g, lm = _scalar(gamma), _scalar(lmbda)
    if g is not None and lm is not None and use_cpp(state_value, next_state_value, reward):
        advantage = torch.empty_like(reward, memory_format=torch.contiguous_format)
        value_target = torch.empty_like(reward, memory_format=torch.contiguous_format)
        args = (state_value, next_state_value, reward, done, terminated, advantage, value_target)
        cpp_kernels().generalized_advantage_estimate(g, lm, *map(_as3d, args))
        return layout.back(advantage), layout.back(value_target)
    delta = reward + gamma * next_state_value * ~terminated - state_value
    advantage = reverse_linear_scan(delta, (gamma * lmbda) * ~done)
    return layout.back(advantage), layout.back(advantage + state_value)


def generalized_advantage_estimate(
    gamma: Scalar,
    lmbda: Scalar,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    *,
    time_dim: int = -2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimate; the same computation as :func:`vec_generalized_advantage_estimate`."""
    return vec_generalized_advantage_estimate(
        gamma, lmbda, state_value, next_state_value, reward, done, terminated, time_dim=time_dim
    )


# --------------------------------------------------------------------------- V-trace
def vtrace_advantage_estimate(
    gamma: Scalar,
    log_pi: torch.Tensor,
    log_mu: torch.Tensor,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    rho_thresh: float | torch.Tensor = 1.0,
    c_thresh: float | torch.Tensor = 1.0,
    time_dim: int = -2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets and advantages (Espeholt et al., 2018, https://arxiv.org/abs/1802.01561).

    With ``rho = exp(log_pi - log_mu)``,
    ``v_s - V(s) = rho_bar * delta + gamma * (1 - done) * c_bar * (v_{s+1} - V(s+1))`` and
    the advantage is ``rho_bar * (r + gamma * (1 - terminated) * v_{s+1} - V(s))``, where
    ``v_{s+1}`` is ``V(s[t+1])`` at a done step and at the last step.

    Args:
        gamma (float or Tensor): discount.
        log_pi (Tensor): log-probability of the actions under the current (learned) policy,
            ``[*B, T, *F]``.
        log_mu (Tensor): log-probability of the actions under the behaviour policy that
            collected them.
        state_value (Tensor): ``V(s[t])``.
        next_state_value (Tensor): ``V(s[t+1])``.
        reward (Tensor): rewards.
        done (Tensor): trajectory ends, bool.
        terminated (Tensor, optional): episode ends; defaults to ``done``.
        rho_thresh (float or Tensor): clip of the importance weight in the TD errors.
        c_thresh (float or Tensor): clip of the trace coefficients.
        time_dim (int): the time dimension. Defaults to ``-2``.

    Returns:
        ``(advantage, value_target)``, both ``[*B, T, *F]``.
    """
    fn = "vtrace_advantage_estimate"
    _check_shapes(
        fn,
        log_pi=log_pi,
        log_mu=log_mu,
        state_value=state_value,
        next_state_value=next_state_value,
        reward=reward,
        done=done,
        terminated=terminated,
    )
    layout = _TimeLayout(fn, reward, time_dim)
    log_pi, log_mu, state_value, next_state_value, reward, done, terminated = map(
        layout, (log_pi, log_mu, state_value, next_state_value, reward, done, terminated)
    )
    gamma = _as_param(fn, "gamma", gamma, reward, layout)
    done, terminated = _flags(done, terminated)
    rho = (log_pi - log_mu).exp()
    clipped_rho = (
        rho.clamp_max(rho_thresh)
        if not isinstance(rho_thresh, torch.Tensor)
        else torch.minimum(rho, rho_thresh.to(rho))
    )
    clipped_c = (
        rho.clamp_max(c_thresh)
        if not isinstance(c_thresh, torch.Tensor)
        else torch.minimum(rho, c_thresh.to(rho))
    )
    bootstrap = gamma * ~terminated
    deltas = clipped_rho * (reward + bootstrap * next_state_value - state_value)
    vs = reverse_linear_scan(deltas, gamma * ~done * clipped_c) + state_value
    vs_next = torch.cat([vs[..., 1:, :], next_state_value[..., -1:, :]], -2)
    vs_next = torch.where(done, next_state_value, vs_next)
    advantage = clipped_rho * (reward + bootstrap * vs_next - state_value)
    return layout.back(advantage), layout.back(vs)


# --------------------------------------------------------------------------- reward-to-go
def reward2go(
    reward: torch.Tensor,
    done: torch.Tensor,
    gamma: Scalar = 1.0,
    *,
    time_dim: int = -2,
) -> torch.Tensor:
    """Discounted sum of the rewards to the end of each trajectory (no bootstrap).

    Args:
        reward (Tensor): rewards, ``[*B, T, *F]``.
        done (Tensor): trajectory ends, bool, shaped like ``reward``.
        gamma (float or Tensor): discount. Defaults to ``1.0``.

    Keyword Args:
        time_dim (int): the time dimension. Defaults to ``-2``.

    Returns:
        The reward-to-go, shaped like ``reward``.

    Examples:
        >>> reward = torch.ones(1, 5, 1)
        >>> done = torch.zeros(1, 5, 1, dtype=torch.bool); done[:, 1] = True
        >>> reward2go(reward, done, 0.5).flatten()
        tensor([1.5000, 1.0000, 1.7500, 1.5000, 1.0000])
    """
    fn = "reward2go"
    _check_shapes(fn, reward=reward, done=done)
    layout = _TimeLayout(fn, reward, time_dim)
    reward, done = layout(reward), layout(done)
    gamma = _as_param(fn, "gamma", gamma, reward, layout)
    done = done if done.dtype == torch.bool else done.bool()
    return layout.back(reverse_linear_scan(reward, gamma * ~done))
