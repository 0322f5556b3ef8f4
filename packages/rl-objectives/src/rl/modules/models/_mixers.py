"""Value mixers of cooperative multi-agent Q-learning: VDN and QMIX."""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["Mixer", "QMixer", "VDNMixer"]


class Mixer(nn.Module):
    """Base of the value mixers: ``[*B, n_agents, 1]`` (and a state) to ``[*B, 1]``.

    Subclasses implement :meth:`mix`.

    Args:
        n_agents (int): number of agents.
        needs_state (bool): whether :meth:`forward` takes a global state.
        state_shape (tuple of int): shape of the state's last dims.
        device (torch.device, optional): device of the parameters.
    """

    def __init__(
        self,
        n_agents: int,
        needs_state: bool,
        state_shape: tuple[int, ...] | torch.Size,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.n_agents = n_agents
        self.needs_state = needs_state
        self.state_shape = torch.Size(state_shape)
        self.device = device

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        name = type(self).__name__
        expected = 2 if self.needs_state else 1
        if len(inputs) != expected:
            # TorchRL's wording leads, for code matching it
            torchrl = (
                "Mixer that needs state was passed more than 2 inputs"
                if self.needs_state
                else "Mixer that doesn't need state was passed more than 1 input"
            )
            raise ValueError(
                f"{torchrl}: {name} takes {expected} input(s) (chosen_action_value"
                f"{', state' if self.needs_state else ''}), got {len(inputs)}"
            )
        chosen_action_value = inputs[0]
        state = inputs[1] if self.needs_state else None
        # the state first, as TorchRL checks them
        if state is not None and (
            state.shape[state.ndim - len(self.state_shape) :] != self.state_shape
        ):
            raise ValueError(
                f"{name} expects a state ending with shape {tuple(self.state_shape)}, "
                f"got {tuple(state.shape)} (Mixer network expected state with ending shape "
                f"{tuple(self.state_shape)})"
            )
        if chosen_action_value.shape[-2:] != (self.n_agents, 1):
            raise ValueError(
                f"{name} expects chosen_action_value of shape [*B, {self.n_agents}, 1], "
                f"got {tuple(chosen_action_value.shape)} (Mixer network expected "
                f"chosen_action_value with last 2 dimensions ({self.n_agents}, 1))"
            )
        return self.mix(chosen_action_value, state)

    def mix(self, chosen_action_value: torch.Tensor, state: torch.Tensor | None):
        raise NotImplementedError


class VDNMixer(Mixer):
    """Value decomposition: ``Q_tot = sum_i Q_i`` (Sunehag et al., 2017, https://arxiv.org/abs/1706.05296).

    Args:
        n_agents (int): number of agents.
        device (torch.device): the mixer's device (it has no parameters), required as
            in TorchRL.

    Examples:
        >>> import torch
        >>> from rl.modules import VDNMixer
        >>> VDNMixer(n_agents=3, device="cpu")(torch.ones(4, 3, 1))
        tensor([[3.],
                [3.],
                [3.],
                [3.]])
    """

    def __init__(self, n_agents: int, device: torch.device | str | None) -> None:
        super().__init__(n_agents=n_agents, needs_state=False, state_shape=(), device=device)

    def mix(self, chosen_action_value: torch.Tensor, state=None) -> torch.Tensor:
        return chosen_action_value.sum(dim=-2)


class QMixer(Mixer):
    """QMIX: a monotonic mixing network whose weights are produced from the state.

    Rashid et al., 2018, https://arxiv.org/abs/1803.11485. ``Q_tot = elu(q W1 + b1) W2 + V``
    with ``W1 = |hyper_w_1(s)|``, ``W2 = |hyper_w_final(s)|``, ``b1 = hyper_b_1(s)`` and
    ``V = MLP(s)``; the absolute values keep ``Q_tot`` non-decreasing in each ``Q_i``.

    Args:
        state_shape (tuple of int): shape of the global state.
        mixing_embed_dim (int): hidden size of the mixing network.
        n_agents (int): number of agents.
        device (torch.device): device of the parameters (required, as in TorchRL;
            ``None`` is torch's default device).

    Examples:
        >>> import torch
        >>> from rl.modules import QMixer
        >>> mixer = QMixer(state_shape=(5,), mixing_embed_dim=8, n_agents=3, device="cpu")
        >>> mixer(torch.zeros(4, 2, 3, 1), torch.zeros(4, 2, 5)).shape
        torch.Size([4, 2, 1])
    """

    def __init__(
        self,
        state_shape: tuple[int, ...] | torch.Size,
        mixing_embed_dim: int,
        n_agents: int,
        device: torch.device | str | None,
    ) -> None:
        super().__init__(
            n_agents=n_agents, needs_state=True, state_shape=state_shape, device=device
        )
        self.embed_dim = mixing_embed_dim
        self.state_dim = math.prod(self.state_shape)
        kw = {"device": device}
        self.hyper_w_1 = nn.Linear(self.state_dim, self.embed_dim * n_agents, **kw)
        self.hyper_w_final = nn.Linear(self.state_dim, self.embed_dim, **kw)
        self.hyper_b_1 = nn.Linear(self.state_dim, self.embed_dim, **kw)
        self.V = nn.Sequential(
            nn.Linear(self.state_dim, self.embed_dim, **kw),
            nn.ReLU(),
            nn.Linear(self.embed_dim, 1, **kw),
        )

    def mix(self, chosen_action_value: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        batch = chosen_action_value.shape[:-2]
        state = state.reshape(-1, self.state_dim)
        q = chosen_action_value.reshape(-1, 1, self.n_agents)
        w1 = self.hyper_w_1(state).abs().view(-1, self.n_agents, self.embed_dim)
        b1 = self.hyper_b_1(state).view(-1, 1, self.embed_dim)
        hidden = nn.functional.elu(torch.bmm(q, w1) + b1)
        w_final = self.hyper_w_final(state).abs().view(-1, self.embed_dim, 1)
        v = self.V(state).view(-1, 1, 1)
        return (torch.bmm(hidden, w_final) + v).view(*batch, 1)
