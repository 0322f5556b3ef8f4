"""gSDENoise: the primer of the state-dependent exploration noise of gSDE policies."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rl.core import Unbounded

from ._episode import TensorDictPrimer

__all__ = ["gSDENoise"]


class gSDENoise(TensorDictPrimer):  # noqa: N801 (TorchRL's name)
    """Draws the gSDE noise matrix ``"_eps_gSDE"`` at each reset.

    A generalised state-dependent exploration policy
    (:class:`~rl.modules.gSDEModule`) perturbs its action with ``eps @ features``,
    where ``eps`` (``[*shape, action_dim, state_dim]``) is redrawn from a standard
    normal at the start of each episode and kept for the whole episode. This primer
    writes it: random when both dims are given; a zero placeholder ``[*shape, 1]``
    otherwise (the module then draws its own noise on the first step). Paper:
    https://arxiv.org/abs/2005.05719.

    Args:
        state_dim (int, optional): the feature size the noise multiplies.
        action_dim (int, optional): the action size.
        shape (sequence of int, optional): the leading (batch) dims of the noise.
            Defaults to ``()``.
        **kwargs: passed to :class:`~rl.envs.TensorDictPrimer` (``expand_specs``,
            ``reset_key``, ...).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> t = gSDENoise(state_dim=3, action_dim=1)
        >>> t(TensorDict())["_eps_gSDE"].shape
        torch.Size([1, 3])
    """

    def __init__(
        self,
        state_dim: int | None = None,
        action_dim: int | None = None,
        shape: Sequence[int] | None = None,
        **kwargs,
    ) -> None:
        self.state_dim = state_dim
        self.action_dim = action_dim
        shape = () if shape is None else tuple(shape)
        random = state_dim is not None and action_dim is not None
        tail = (action_dim, state_dim) if random else (1,)
        spec = Unbounded(shape=torch.Size((*shape, *tail)))
        super().__init__(primers={"_eps_gSDE": spec}, random=random, **kwargs)
