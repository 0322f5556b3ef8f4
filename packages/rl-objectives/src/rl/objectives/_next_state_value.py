"""``next_state_value``: the one-step (or n-step) bootstrapped target of a value loss."""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule

__all__ = ["next_state_value"]


def _next_state(tensordict: TensorDictBase, in_keys) -> TensorDictBase:
    """The inputs ``in_keys`` of the next state: entries under ``"next"`` first, then the
    root's, without the action and the reward (what ``step_mdp`` would keep)."""
    nxt = tensordict.get("next")
    out = TensorDict(batch_size=tensordict.batch_size, device=tensordict.device)
    for key in in_keys:
        value = None if key == "reward" else nxt.get(key, None)
        if value is None and key not in ("action", "reward"):
            value = tensordict.get(key, None)
        if value is None:
            raise KeyError(
                f"next_state_value: the operator reads {key!r}, found neither under 'next' "
                f"nor at the root (next keys: {sorted(map(str, nxt.keys(True, True)))})"
            )
        out.set(key, value)
    return out


@torch.no_grad()
def next_state_value(
    tensordict: TensorDictBase,
    operator: TensorDictModule | None = None,
    next_val_key: str = "state_action_value",
    gamma: float = 0.99,
    pred_next_val: torch.Tensor | None = None,
    **kwargs,
) -> torch.Tensor:
    """The bootstrapped target ``r + gamma ** n * (1 - done) * V(s')``, without gradient.

    ``n`` is the entry ``"steps_to_next_obs"`` ``[*B, 1]`` when the batch holds it
    (n-step rewards), 1 otherwise. ``V(s')`` is ``pred_next_val`` when given; otherwise
    ``operator`` is run on the next state (its ``in_keys`` read under ``"next"``, the
    root's entries filling the others, as after ``step_mdp``) and its output
    ``next_val_key`` is used. As TorchRL's function it stops at ``("next", "done")`` (a
    truncated step is not bootstrapped; the value estimators of ``rl.objectives.value``
    bootstrap through truncation) and, when every step is done or ``gamma == 0``, returns
    the rewards unchanged (in their dtype).

    Args:
        tensordict: a batch ``[*B]`` with ``("next", "reward")`` and ``("next", "done")``
            (``[*B, 1]``).
        operator: the value network (a TensorDict module); not needed with
            ``pred_next_val``.
        next_val_key: where ``operator`` writes the value (default
            ``"state_action_value"``).
        gamma: the discount (default 0.99).
        pred_next_val: the next state's value ``[*B, 1]`` or ``[*B]``, if already known.
        **kwargs: passed to ``operator``.

    Returns:
        the target ``[*B]`` (the trailing singleton dimension dropped).

    Raises:
        ValueError: neither ``operator`` nor ``pred_next_val`` is given.
        KeyError: an input of ``operator`` is in neither the next state nor the root.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.objectives import next_state_value
        >>> td = TensorDict(
        ...     {"next": {"reward": torch.ones(2, 1), "done": torch.tensor([[False], [True]])}},
        ...     [2],
        ... )
        >>> next_state_value(td, gamma=0.5, pred_next_val=torch.full((2, 1), 4.0))
        tensor([3., 1.])
    """
    if operator is None and pred_next_val is None:
        raise ValueError("next_state_value needs an operator or pred_next_val, got neither")
    steps = tensordict.get("steps_to_next_obs", None)
    steps = 1 if steps is None else steps.squeeze(-1)
    rewards = tensordict.get(("next", "reward")).squeeze(-1)
    done = tensordict.get(("next", "done")).squeeze(-1)
    if done.all() or gamma == 0:
        return rewards
    if pred_next_val is None:
        next_td = _next_state(tensordict, operator.in_keys)
        operator(next_td, **kwargs)
        pred_next_val = next_td.get(next_val_key)
    next_value = (1 - done.to(torch.float)) * pred_next_val.squeeze(-1)
    return rewards.to(torch.float) + gamma**steps * next_value
