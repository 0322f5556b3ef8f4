"""GAE for per-agent values with team-shared (or per-agent) rewards and done flags."""

from __future__ import annotations

import torch

from rl.objectives.value._estimators import GAE

__all__ = ["MultiAgentGAE"]


class MultiAgentGAE(GAE):
    """GAE over per-agent values ``[*B, T, n_agents, 1]`` when the team shares rewards.

    In the cooperative layout (VMAS, PettingZoo with a shared reward) reward, done and
    terminated are ``[*B, T, 1]``, one per team, while the critic values each agent. Each
    of them that lacks the agent dimension is repeated along ``agent_dim`` of the value
    before the usual recursion; one that already has it (per-agent rewards, competitive
    settings) is used as is. Advantage and value target have the value's shape. With
    ``average_gae=True`` each agent's advantages are standardized on their own (over
    batch and time).

    Keyword Args:
        agent_dim (int): the agent dimension of the value tensor (negative counts from the
            end). Defaults to ``-2``, where :class:`~rl.modules.MultiAgentMLP` puts it.
        **kwargs: the arguments of :class:`~rl.objectives.value.GAE` (``gamma``,
            ``lmbda``, ``value_network``, ...).

    Raises:
        ValueError: when reward, done or terminated has neither the value's number of
            dimensions nor one fewer.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> flags = torch.zeros(2, 5, 1, dtype=torch.bool)
        >>> td = TensorDict({
        ...     "agents": {"state_value": torch.zeros(2, 5, 3, 1)},
        ...     "next": {"reward": torch.ones(2, 5, 1), "done": flags, "terminated": flags,
        ...              "agents": {"state_value": torch.zeros(2, 5, 3, 1)}},
        ... }, [2, 5])
        >>> gae = MultiAgentGAE(gamma=0.9, lmbda=0.95, value_network=None)
        >>> gae.set_keys(value=("agents", "state_value"))
        >>> gae(td)["advantage"].shape
        torch.Size([2, 5, 3, 1])
    """

    def __init__(self, *, agent_dim: int = -2, **kwargs) -> None:
        super().__init__(**kwargs)
        self.agent_dim = agent_dim

    @staticmethod
    def _broadcast_to_agents(
        tensor: torch.Tensor, target: torch.Tensor, agent_dim: int
    ) -> torch.Tensor:
        """``tensor`` repeated along ``agent_dim`` of ``target`` when it lacks that dimension."""
        if tensor.ndim == target.ndim:
            return tensor
        if tensor.ndim != target.ndim - 1:
            raise ValueError(
                "MultiAgentGAE expected the reward/done/terminated tensor to have the value's "
                "number of dimensions (per agent) or one fewer (shared by the team); got "
                f"shape {tuple(tensor.shape)} for a value of shape {tuple(target.shape)}"
            )
        dim = agent_dim % target.ndim
        shape = list(tensor.shape)
        shape.insert(dim, target.shape[dim])
        return tensor.unsqueeze(dim).expand(shape)

    def _prepare_signals(self, reward, done, terminated, value):
        return tuple(
            self._broadcast_to_agents(x, value, self.agent_dim) for x in (reward, done, terminated)
        )

    def _broadcast_optional(self, tensor, value):
        return self._broadcast_to_agents(tensor, value, self.agent_dim)

    def _kept_dims(self) -> tuple[int, ...]:
        """Standardized per agent: over batch and time, the agents kept apart."""
        return (self.agent_dim,)
