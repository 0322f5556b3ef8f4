"""DiffusionActor: a policy that denoises an action with a DDPM reverse chain.

Paper: Chi et al., "Diffusion Policy: Visuomotor Policy Learning via Action Diffusion",
RSS 2023, https://arxiv.org/abs/2303.04137.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict.nn import InteractionType, interaction_type
from tensordict.utils import NestedKey
from torch import nn

from rl.core import Composite, TensorSpec

from ._common import SafeModule

__all__ = ["DiffusionActor"]

# The score network reads the timestep as a float: past these counts two integer
# timesteps round to the same half-precision value.
_MAX_STEPS = {torch.bfloat16: 257, torch.float16: 2049}


class _DDPMModule(nn.Module):
    """A fixed linear-beta DDPM schedule around a noise-prediction (score) network.

    The schedule (``betas``, ``alphas``, ``alphas_cumprod``, each ``[num_steps]``) is
    kept in float32 whatever the dtype the module is cast to, so that half-precision
    models keep an accurate schedule; it is read from the buffers at each call.

    Args:
        score_network: maps ``cat([noisy_action, observation, t]) -> noise``
            (``[*B, action_dim + obs_dim + 1] -> [*B, action_dim]``).
        action_dim: the action size.
        num_steps: the number of diffusion steps.
        beta_start: the first beta of the linear schedule.
        beta_end: the last beta of the linear schedule.
    """

    def __init__(
        self,
        score_network: nn.Module,
        action_dim: int,
        num_steps: int = 100,
        beta_start: float = 1e-4,
        beta_end: float = 0.02,
    ) -> None:
        super().__init__()
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps}")
        self.score_network = score_network
        self.action_dim = action_dim
        self.num_steps = num_steps
        betas = torch.linspace(beta_start, beta_end, num_steps)
        alphas = 1.0 - betas
        self.register_buffer("betas", betas)
        self.register_buffer("alphas", alphas)
        self.register_buffer("alphas_cumprod", torch.cumprod(alphas, dim=0))

    def _apply(self, fn, recurse=True):
        # a dtype cast of the model leaves the schedule in float32 (device moves apply)
        kept = {name: getattr(self, name) for name in ("betas", "alphas", "alphas_cumprod")}
        super()._apply(fn, recurse=recurse)
        for name, value in kept.items():
            setattr(self, name, value.to(device=getattr(self, name).device))
        return self

    def _check_dtype(self, dtype: torch.dtype) -> None:
        limit = _MAX_STEPS.get(dtype)
        if limit is not None and self.num_steps > limit:
            raise ValueError(
                f"num_steps={self.num_steps} cannot be represented without duplicate "
                f"timesteps in {dtype}: use at most {limit} steps or a float32 model"
            )

    def _schedule_dtype(self, dtype: torch.dtype) -> torch.dtype:
        return torch.float32 if dtype in _MAX_STEPS else dtype

    def add_noise(
        self, clean_action: torch.Tensor, t: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward (noising) process at integer timesteps ``t``.

        Args:
            clean_action: ``[*B, action_dim]``.
            t: ``[*B]`` integer timesteps in ``[0, num_steps)``.

        Returns:
            ``(noisy_action, noise)``, both ``[*B, action_dim]``:
            ``noisy = sqrt(abar_t) * clean + sqrt(1 - abar_t) * noise``.
        """
        self._check_dtype(clean_action.dtype)
        work = self._schedule_dtype(clean_action.dtype)
        abar = self.alphas_cumprod.to(device=clean_action.device, dtype=work)[t]
        abar = abar.reshape(*abar.shape, *([1] * (clean_action.ndim - abar.ndim)))
        noise = torch.randn_like(clean_action)
        noisy = abar.sqrt() * clean_action.to(work) + (1.0 - abar).sqrt() * noise.to(work)
        return noisy.to(clean_action.dtype), noise

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """Run the reverse chain from ``x_T`` to ``x_0`` conditioned on ``observation``.

        ``x_T`` is standard normal, or zeros (with no noise injected along the chain)
        when the interaction type is ``DETERMINISTIC``.

        Args:
            observation: ``[*B, obs_dim]``.

        Returns:
            the action ``[*B, action_dim]``, in the observation's dtype.
        """
        dtype, device = observation.dtype, observation.device
        self._check_dtype(dtype)
        deterministic = interaction_type() == InteractionType.DETERMINISTIC
        work = self._schedule_dtype(dtype)
        betas = self.betas.to(device=device, dtype=work)
        alphas = self.alphas.to(device=device, dtype=work)
        abar = self.alphas_cumprod.to(device=device, dtype=work)
        # x_{t-1} = (x_t - beta_t / sqrt(1 - abar_t) * eps) / sqrt(alpha_t) + sqrt(beta_t) z
        eps_scale = betas / (1.0 - abar).sqrt()
        inv_sqrt_alpha = alphas.rsqrt()
        sigma = betas.sqrt()
        shape = (*observation.shape[:-1], self.action_dim)
        fill = torch.zeros if deterministic else torch.randn
        x = fill(shape, device=device, dtype=dtype)
        t_column = observation.new_empty((*observation.shape[:-1], 1))
        for t in range(self.num_steps - 1, -1, -1):
            eps = self.score_network(torch.cat([x, observation, t_column.fill_(t)], dim=-1))
            x = inv_sqrt_alpha[t] * (x.to(work) - eps_scale[t] * eps.to(work))
            if t > 0 and not deterministic:
                x = x + sigma[t] * torch.randn_like(x)
            x = x.to(dtype)
        return x


class DiffusionActor(SafeModule):
    """A diffusion policy: the action is denoised from noise by a DDPM reverse chain.

    A score network predicts the noise of a noisy action given the observation and the
    timestep; acting runs the ``num_steps`` reverse steps of a fixed linear-beta DDPM
    schedule. Train it with :class:`~rl.objectives.DiffusionBCLoss`. Under
    ``ExplorationType.DETERMINISTIC`` the chain starts from zeros and adds no noise: the
    action is repeatable (it is not a sample of the model). Paper:
    https://arxiv.org/abs/2303.04137.

    Args:
        action_dim (int): the action size.
        obs_dim (int, optional): the observation size, used to size the default score
            network (``None``: its first layer is lazy).
        score_network (nn.Module, optional): ``cat([noisy_action, observation, t])
            -> noise`` (``[*B, action_dim + obs_dim + 1] -> [*B, action_dim]``).
            Defaults to an MLP with two hidden layers of 256 SiLU units.
        num_steps (int): the number of diffusion steps (at most 257 for a bfloat16
            model, 2049 for float16). Defaults to ``100``.
        beta_start (float): first beta of the linear schedule. Defaults to ``1e-4``.
        beta_end (float): last beta of the linear schedule. Defaults to ``0.02``.
        in_keys (list of NestedKey, optional): defaults to ``["observation"]``.
        out_keys (list of NestedKey, optional): defaults to ``["action"]``.

    Keyword Args:
        spec (TensorSpec, optional): the action spec (wrapped in a Composite under
            ``"action"`` when it is a leaf spec).
        **kwargs: passed to :class:`~rl.modules.SafeModule` (``safe``, ``inplace``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import DiffusionActor
        >>> actor = DiffusionActor(action_dim=2, obs_dim=3, num_steps=10)
        >>> td = actor(TensorDict(observation=torch.randn(4, 3), batch_size=[4]))
        >>> td["action"].shape
        torch.Size([4, 2])
    """

    def __init__(
        self,
        action_dim: int,
        obs_dim: int | None = None,
        score_network: nn.Module | None = None,
        num_steps: int = 100,
        beta_start: float = 1e-4,
        beta_end: float = 0.02,
        in_keys: Sequence[NestedKey] | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        *,
        spec: TensorSpec | None = None,
        **kwargs,
    ) -> None:
        in_keys = ["observation"] if in_keys is None else in_keys
        out_keys = ["action"] if out_keys is None else out_keys
        if spec is not None and "action" in out_keys and not isinstance(spec, Composite):
            spec = Composite(action=spec)
        if score_network is None:
            first = (
                nn.LazyLinear(256) if obs_dim is None else nn.Linear(action_dim + obs_dim + 1, 256)
            )
            score_network = nn.Sequential(
                first, nn.SiLU(), nn.Linear(256, 256), nn.SiLU(), nn.Linear(256, action_dim)
            )
        module = _DDPMModule(score_network, action_dim, num_steps, beta_start, beta_end)
        super().__init__(module, in_keys=in_keys, out_keys=out_keys, spec=spec, **kwargs)
